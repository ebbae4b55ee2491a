#!/usr/bin/env bash
# Re-records the libtest transcripts test_libtest.py parses: the crate in crate/ built by
# Debian's rustc 1.63 (host and aarch64, static, run under qemu-aarch64) and, when rustup's
# newer toolchain is on PATH, by that one (its panic message has another shape).
set -euo pipefail
cd "$(dirname "$0")"
out=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r crate "$tmp/crate"
cd "$tmp/crate"

bin() { # cargo rustc [target]: the unit-test binary's path
  local json
  json=$(RUSTC=$2 "$1" test --no-run --message-format=json --target-dir "$tmp/t-$(basename "$(dirname "$1")")" ${3:+--target "$3"} 2>/dev/null)
  grep -o '"executable":"[^"]*"' <<<"$json" | head -n1 | cut -d'"' -f4
}
record() { # name command...: output (stdout and stderr, as the transports merge them)
  local name=$1; shift
  set +e; "$@" >"$out/$name.txt" 2>&1; echo "$?" >"$out/$name.rc"; set -e
}

export RUST_BACKTRACE=0
B=$(bin /usr/bin/cargo /usr/bin/rustc)
record rust163_capture env CRASH=none "$B" --test-threads=1
record rust163_nocapture env CRASH=none "$B" --test-threads=1 --nocapture
record rust163_abort env CRASH=abort "$B" --test-threads=1
record rust163_nocapture_segv env CRASH=segv "$B" --test-threads=1 --nocapture
record rust163_backtrace env CRASH=none RUST_BACKTRACE=1 "$B" --test-threads=1
record rust163_nocapture_backtrace_abort env CRASH=abort RUST_BACKTRACE=1 "$B" --test-threads=1 --nocapture

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
A=$(bin /usr/bin/cargo /usr/bin/rustc aarch64-unknown-linux-gnu)
record qemu_aarch64_segv env CRASH=segv qemu-aarch64 "$A" --test-threads=1

if [ -x "$HOME/.cargo/bin/cargo" ]; then
  N=$(bin "$HOME/.cargo/bin/cargo" "$HOME/.cargo/bin/rustc")
  record rustnew_capture env CRASH=none "$N" --test-threads=1
  record rustnew_nocapture env CRASH=none "$N" --test-threads=1 --nocapture
  record rustnew_nocapture_abort env CRASH=abort "$N" --test-threads=1 --nocapture
  "$HOME/.cargo/bin/rustc" --version >"$out/rustnew.version"
fi
