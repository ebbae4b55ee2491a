#!/usr/bin/env bash
# Installs what pytest-ondevice and its tests need, and nothing that is already there:
# Debian packages (cross compilers, QEMU, sshd) and a Python virtualenv (.venv) holding
# the plugin in editable mode. Safe to run again; it only fills in what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# --rust: also Rust (Debian's rustc/cargo, the arm64 std, offline crates).
# --arm64-libs: GoogleTest's and CppUTest's libraries for arm64 boards (multiarch).
# Both are optional, as they add the arm64 architecture to dpkg: a change to the machine
# nobody else asked for. scripts/test.sh asks for both (the suite tests them).
# --cuda: NVIDIA's CUDA 13 toolkit wheels (nvcc, the x86_64 runtime) into the venv, and the
# aarch64 runtime wheel unpacked under it, for *.cu tests on host-cuda and jetson-cuda.
RUST=0
ARM64_LIBS=0
# --aot: TensorFlow (its tfcompile compiles models ahead of time: examples/aot) into the venv.
CUDA=0
AOT=0
for arg in "$@"; do
  case "$arg" in
    --rust) RUST=1 ;;
    --arm64-libs) ARM64_LIBS=1 ;;
    --cuda) CUDA=1 ;;
    --aot) AOT=1 ;;
    *) echo "usage: $0 [--rust] [--arm64-libs] [--cuda] [--aot]" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(
  build-essential                       # host board: cc, c++, ar
  git                                   # the tests of bisect, history and what .gitignore hides
  clang llvm                            # the clang fallback of every board (clang --target=...)
  python3-venv
  qemu-system-arm qemu-user             # bare-metal Cortex-M boards; Linux ARM boards locally
  gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf qemu-system-misc  # riscv32-qemu (rv32imac on virt)
  gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross
  gcc-arm-linux-gnueabihf g++-arm-linux-gnueabihf libc6-dev-armhf-cross
  openssh-server openssh-client         # the SSH transport's tests run a real sshd
  fish                                  # a device account whose login shell is fish (the SSH tests)
  adb                                   # the ADB transport's tests run the real adb server
  pkgconf                               # pkg_config in ondevice.toml, per board
  cmake ninja-build                     # ondevice_cmake: a CMake project configured and built per board
  libgtest-dev libcpputest-dev          # GoogleTest and CppUTest sources on the host board
  catch2                                # Catch2 2.13, header-only: every board's compiler finds it
  doctest-dev                           # doctest 2.4.9, header-only (Architecture: all)
  libboost-test-dev                     # Boost.Test 1.74: its headers; compiled into each binary (no arm64 package)
  chromium                              # the report test renders the page in headless Chromium
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

RUST_PACKAGES=()
if ((RUST)); then
  # Rust test binaries for the ARM Linux boards: cargo test --target aarch64-unknown-linux-gnu
  # links against Debian's std for arm64 (multiarch), found by /usr/bin/cargo, not rustup's.
  RUST_PACKAGES+=(rustc cargo libstd-rust-dev:arm64
                  librust-pkg-config-dev  # build.rs of examples/rust/cdot-sys, from /usr/share/cargo/registry
                  librust-itoa-dev)  # a real crate whose tests a macro makes (tests/test_rust_macros.py)
fi
if ((ARM64_LIBS)); then
  RUST_PACKAGES+=(libgtest-dev:arm64 libcpputest-dev:arm64)  # found by the arm64 boards' pkg-config
fi
if ((${#RUST_PACKAGES[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding the arm64 architecture to dpkg (Rust's std, test libraries for aarch64 boards)"
    $SUDO dpkg --add-architecture arm64  # apt-get update below (libstd-rust-dev:arm64 is missing then)
  fi
  missing=()
  for pkg in "${RUST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "setup: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
      # multiarch packages must have equal versions: an amd64 liblzma5 from the security
      # archive and an older arm64 one (or the reverse) make libstd-rust-dev:arm64 uninstallable
      echo "setup: installing ${missing[*]} failed. If apt named liblzma5 (or another library" >&2
      echo "setup: present for two architectures), pin both to one version, e.g." >&2
      echo "setup:   apt-get install liblzma5=V liblzma5:arm64=V ${missing[*]}" >&2
      echo "setup: with V from: apt-cache policy liblzma5 liblzma5:arm64" >&2
      exit 1
    fi
  fi
fi

VENV="${ONDEVICE_VENV:-.venv}"
if [ -n "${VIRTUAL_ENV:-}" ]; then
  VENV="$VIRTUAL_ENV"
elif [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  python3 -m venv "$VENV"
fi
# Runs a step once per change of pyproject.toml (a stamp file says it is done), its output
# in a log that is shown when it fails: once STAMP LOG WHAT COMMAND...
once() {
  local stamp="$1" log="$2" what="$3"
  shift 3
  if [ -f "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then
    return 0
  fi
  echo "setup: installing $what"
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log"
    echo "setup: installing $what failed; full log in $log" >&2
    exit 1
  fi
  touch "$stamp"
}

extra() {  # the requirements of an extra of pyproject.toml, one a line
  "$VENV/bin/python" -c 'import sys, tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"][sys.argv[1]]))' "$1"
}

install_dev() {
  "$VENV/bin/python" -m pip install --upgrade pip && "$VENV/bin/python" -m pip install -e ".[dev]"
}
once "$VENV/.ondevice-installed" "$VENV/pip-install.log" \
  "pytest-ondevice (editable) and its dev dependencies into $VENV" install_dev

install_cuda() {
  local targets="$VENV/share/pytest-ondevice/cuda/aarch64-linux" wheels status=0
  wheels="$(mktemp -d)"
  # the aarch64 runtime (a Jetson's libcudart): pip cannot install another platform's wheel
  # into this venv, so it is downloaded for that platform and unpacked where the plugin looks
  # shellcheck disable=SC2046  # one requirement a word
  { "$VENV/bin/python" -m pip install $(extra cuda) &&
    "$VENV/bin/python" -m pip download --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
      -d "$wheels" "$(extra cuda | grep '^nvidia-cuda-runtime')" &&
    rm -rf "$targets" && mkdir -p "$targets" &&
    "$VENV/bin/python" -m zipfile -e "$wheels"/nvidia_cuda_runtime-*.whl "$targets" &&
    rm -rf "$targets"/*.dist-info; } || status=$?
  rm -rf "$wheels"
  return "$status"
}
if ((CUDA)); then
  once "$VENV/.ondevice-cuda-installed" "$VENV/pip-install-cuda.log" \
    "the CUDA 13 toolkit wheels into $VENV (about 100 MB)" install_cuda
fi

if ((AOT)); then
  once "$VENV/.ondevice-aot-installed" "$VENV/pip-install-aot.log" \
    "TensorFlow (tfcompile) into $VENV (a 274 MB download, 1.6 GB installed)" \
    "$VENV/bin/python" -m pip install -e ".[aot]"
fi

# labgrid (the farm tests' coordinator, exporter and client) lives in a venv of its own
# that sees the main one's packages: every pytest that can import labgrid loads its pytest
# plugin, and the main venv's runs must show what a user without the extra sees.
LG_VENV="${ONDEVICE_LABGRID_VENV:-.venv-labgrid}"
install_labgrid() {
  local main_site lg_site
  [ -x "$LG_VENV/bin/python" ] || python3 -m venv "$LG_VENV"
  main_site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  lg_site="$("$LG_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # a site dir after labgrid's own: the main venv's .pth files (the editable plugin) count
  echo "import site; site.addsitedir('$main_site')" >"$lg_site/ondevice-main-venv.pth"
  "$LG_VENV/bin/python" -m pip install "$(extra labgrid | head -n 1)"
}
mkdir -p "$LG_VENV"  # its log lives there from the start
once "$LG_VENV/.ondevice-installed" "$LG_VENV/pip-install.log" "labgrid into $LG_VENV" install_labgrid
echo "setup: ready ($VENV, $LG_VENV)"
