"""Rust crates: targets and cases from the sources, and Debian's cargo building the test
binaries for the host and for aarch64 (statically linked, run under qemu-aarch64)."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from pytest_ondevice.compiling import cargo, elf
from pytest_ondevice.compiling.cargo import (
    DEBIAN_CARGO,
    CargoError,
    RustCase,
    build,
    build_env,
    debian_arch,
    find_targets,
    missing_std_hint,
    toolchain,
)
from pytest_ondevice.config.schema import ConfigError
from pytest_ondevice.formats.libtest import Libtest
from pytest_ondevice.formats.lines import LineSplitter
from pytest_ondevice.formats.rustsrc import scan
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

RUST = Path(__file__).resolve().parent.parent / "examples" / "rust"
KERNELS, CDOT = RUST / "kernels", RUST / "cdot-sys"
A64 = "aarch64-unknown-linux-gnu"

needs_cargo = pytest.mark.skipif(not DEBIAN_CARGO.exists(), reason="Debian's cargo is not installed (setup.sh --rust)")
_A64_MISSING = [
    what
    for what, there in [
        ("Rust's std for arm64 (libstd-rust-dev:arm64; setup.sh --rust)", Path(f"/usr/lib/rustlib/{A64}/lib").is_dir()),
        ("qemu-aarch64 (qemu-user; setup.sh)", shutil.which("qemu-aarch64")),
    ]
    if not there
]
needs_a64 = pytest.mark.skipif(bool(_A64_MISSING), reason=f"not installed: {' and '.join(_A64_MISSING)}")
needs_pkg_config_crate = pytest.mark.skipif(
    not list(Path("/usr/share/cargo/registry").glob("pkg-config-*")),
    reason="Debian's pkg-config crate is not installed (librust-pkg-config-dev; setup.sh --rust)",
)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def by_kind(targets):
    return {(t.kind, t.name): t for t in targets}


# -- collection ------------------------------------------------------------------
def test_find_targets_of_the_kernels_example():
    targets = by_kind(find_targets(KERNELS))
    assert set(targets) == {("lib", "ondevice-kernels"), ("test", "gemm")}
    lib = targets["lib", "ondevice-kernels"]
    names = {c.name: c for c in lib.cases}
    assert "tests::dot_product" in names and "activation::tests::softmax_sums_to_one" in names
    assert names["activation::tests::softmax_sums_to_one"].file == KERNELS / "src" / "activation.rs"
    assert names["tests::gemm_large_matches_float"].ignored
    assert not names["tests::dot_product"].ignored
    assert [c.name for c in targets["test", "gemm"].cases] == ["gemm_matches_float_reference", "gemm_then_requantize"]
    assert targets["test", "gemm"].root == KERNELS / "tests" / "gemm.rs"


def test_find_targets_of_the_sys_example():
    targets = by_kind(find_targets(CDOT))
    assert set(targets) == {("lib", "ondevice-cdot-sys"), ("test", "ffi")}
    assert {c.name for c in targets["lib", "ondevice-cdot-sys"].cases} == {
        "tests::links_the_c_library",
        "tests::c_dot_matches_reference",
        "tests::c_dot_extremes",
    }


def test_find_targets_follows_the_module_tree(tmp_path):
    crate = write(
        tmp_path,
        {
            "Cargo.toml": """
                [package]
                name = "tree"
                version = "0.1.0"
                [lib]
                name = "tree_lib"
                [[test]]
                name = "custom"
                harness = false
                [[test]]
                name = "elsewhere"
                path = "checks/elsewhere.rs"
            """,
            "src/lib.rs": """
                //! #[test] fn doc() {}
                mod a;
                mod c;
                mod e { pub mod f; }
                #[path = "weird/place.rs"]
                mod g;
                #[cfg(test)]
                mod tests;
                mod missing;  // a file that is not there (generated, another platform): no cases
                const S: &str = "#[test] fn quoted() {}";
                /* #[test] fn commented() {} */
            """,
            "src/a.rs": "mod b;\n#[test]\nfn in_a() {}\n",
            "src/a/b.rs": "#[test] #[ignore] fn in_b() {}\n",
            "src/c/mod.rs": "mod d;\n",
            "src/c/d.rs": "#[test] fn in_d() {}\n",
            "src/e/f.rs": "#[test] fn in_f() {}\n",
            "src/weird/place.rs": "mod near;\n#[test] fn in_g() {}\n",
            "src/weird/near.rs": "#[test] fn near_g() {}\n",
            "src/tests.rs": '#[test]\n#[ignore = "slow"]\nfn out_of_line() {}\n',
            "src/main.rs": "fn main() {}\n#[test] fn in_main() {}\n",
            "tests/common/mod.rs": "#[test] fn shared() {}\n",
            "tests/it.rs": "mod common;\n#[test] fn integration() {}\n",
            "tests/custom.rs": "fn main() {}\n",
            "checks/elsewhere.rs": "#[test] fn far() {}\n",
        },
    )
    targets = by_kind(find_targets(crate))
    assert set(targets) == {("lib", "tree_lib"), ("bin", "tree"), ("test", "it"), ("test", "elsewhere")}
    cases = {c.name: c for c in targets["lib", "tree_lib"].cases}
    assert set(cases) == {
        "a::in_a",
        "a::b::in_b",
        "c::d::in_d",
        "e::f::in_f",
        "g::in_g",
        "g::near::near_g",
        "tests::out_of_line",
    }
    assert cases["a::b::in_b"] == RustCase("a::b::in_b", crate / "src/a/b.rs", 1, True)
    assert cases["tests::out_of_line"].ignored and cases["a::in_a"].line == 3
    assert [c.name for c in targets["bin", "tree"].cases] == ["in_main"]
    assert {c.name for c in targets["test", "it"].cases} == {"integration", "common::shared"}
    assert [c.name for c in targets["test", "elsewhere"].cases] == ["far"]


# itoa 1.0.1's tests/test.rs, shortened: every #[test] is in a macro_rules! body
MACRO_MADE = """
    macro_rules! test {
        ($($name:ident($value:expr, $expected:expr))*) => {
            $(
                #[test]
                fn $name() {
                    assert_eq!($value.to_string(), $expected);
                }
            )*
        }
    }

    test! {
        test_u64_0(0u64, "0")
        test_i16_min(i16::MIN, "-32768")
    }
"""


def test_tests_made_by_a_macro_mark_their_target(tmp_path):
    """Nothing to name, yet the binary runs tests: its target says so (one item then runs
    it); a target with no #[test] at all, or with named ones, does not."""
    assert scan(textwrap.dedent(MACRO_MADE)).unnamed == 1
    assert scan("// #[test] fn $x() {}\n#[test]\nfn named() {}\n").unnamed == 0
    crate = write(
        tmp_path,
        {
            "Cargo.toml": '[package]\nname = "gen"\nversion = "0.1.0"\n',
            "src/lib.rs": "pub fn f() {}\n",
            "tests/test.rs": MACRO_MADE,
            "tests/mixed.rs": MACRO_MADE + "#[test]\nfn named() {}\n",
            "tests/common.rs": "pub fn helper() {}\n",
            "tests/deep/main.rs": "mod made;\n",
            "tests/deep/made.rs": MACRO_MADE,
        },
    )
    targets = by_kind(find_targets(crate))
    assert targets["test", "test"].cases == () and targets["test", "test"].all_unnamed
    assert targets["test", "deep"].all_unnamed, "a macro in a module of the target"
    assert [c.name for c in targets["test", "mixed"].cases] == ["named"] and not targets["test", "mixed"].all_unnamed
    assert not targets["lib", "gen"].all_unnamed and not targets["test", "common"].all_unnamed


def test_a_virtual_workspace_is_refused_clearly(tmp_path):
    write(tmp_path, {"Cargo.toml": '[workspace]\nmembers = ["a"]\n'})
    with pytest.raises(CargoError, match="virtual workspace manifest: point at one of its member crates"):
        find_targets(tmp_path)
    with pytest.raises(CargoError, match="no such file"):
        find_targets(tmp_path / "nothing")


# -- the toolchain and its environment ---------------------------------------------------
def test_debian_arch_and_the_missing_std_hint():
    assert debian_arch(A64) == "arm64"
    assert debian_arch("armv7-unknown-linux-gnueabihf") == "armhf"
    assert debian_arch("x86_64-unknown-linux-gnu") == "amd64"
    assert debian_arch("riscv32imac-unknown-none-elf") is None
    assert "libstd-rust-dev:armhf" in missing_std_hint("armv7-unknown-linux-gnueabihf")
    assert "rustup target add" in missing_std_hint("thumbv7em-none-eabihf")
    assert "rustup target add" in missing_std_hint(A64, "/root/.cargo/bin/cargo")
    debian = missing_std_hint(A64)
    assert "rustup" not in debian and "scripts/setup.sh --rust" in debian and "libstd-rust-dev:arm64" in debian


def test_build_env_links_linux_gnu_targets_statically(monkeypatch):
    monkeypatch.delenv("RUSTFLAGS", raising=False)
    env = build_env(A64, "aarch64-linux-gnu-gcc", {}, "/usr/bin/rustc")
    assert env["CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"] == "aarch64-linux-gnu-gcc"
    assert env["CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS"] == "-C target-feature=+crt-static"
    assert env["RUSTC"] == "/usr/bin/rustc"
    # RUSTFLAGS wins over the per-target flags in cargo: ours join it there
    env = build_env(A64, None, {"RUSTFLAGS": "-g", "RUSTC": "/my/rustc"}, "/usr/bin/rustc")
    assert env["RUSTFLAGS"] == "-g -C target-feature=+crt-static" and env["RUSTC"] == "/my/rustc"
    host = build_env(None, None, {}, None)
    assert not any(k.startswith("CARGO_TARGET_") for k in host if k not in os.environ), "the host: no --target"


def test_toolchain_prefers_debian_and_names_the_fix_when_missing(monkeypatch):
    monkeypatch.delenv("ONDEVICE_CARGO", raising=False)
    if DEBIAN_CARGO.exists():
        assert toolchain() == (str(DEBIAN_CARGO), "/usr/bin/rustc")
    with pytest.raises(CargoError, match=r"setup\.sh --rust"):
        toolchain({"ONDEVICE_CARGO": "/nonexistent/cargo"})
    with pytest.raises(CargoError, match=r"setup\.sh --rust") as e:
        build(KERNELS, None, None, Path("/nonexistent"), env={"ONDEVICE_CARGO": "/nonexistent/cargo"})
    assert isinstance(e.value, ConfigError), "a missing toolchain part: the tests error, they do not fail"


# -- building and running ------------------------------------------------------------------
@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cargo-target")


def run_libtest(argv: list[str], names: list[str], env: dict[str, str] | None = None):
    proc = subprocess.run(
        [*argv, *Libtest.run_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, env=env
    )
    parser = Libtest().parser(tuple(sorted(names)))
    splitter = LineSplitter()
    for line in [*splitter.feed(proc.stdout), *splitter.close()]:
        parser.feed_line(line)
    return parser.verdicts(names, RunEnd(exit_code=proc.returncode)), proc


@needs_cargo
def test_build_for_the_host_and_run(target_dir):
    binaries = build(KERNELS, None, None, target_dir)
    assert set(binaries) == {("lib", "ondevice-kernels"), ("test", "gemm")}
    targets = by_kind(find_targets(KERNELS))
    for key, binary in binaries.items():
        names = [c.name for c in targets[key].cases]
        result, _ = run_libtest([str(binary)], names)
        assert result.unknown == {} and result.problems == []
        for name, verdict in result.cases.items():
            ignored = name == "tests::gemm_large_matches_float"
            assert verdict.outcome is (Outcome.SKIPPED if ignored else Outcome.PASSED), (name, verdict)


@needs_cargo
@needs_a64
def test_build_for_aarch64_static_under_qemu(target_dir):
    binaries = build(KERNELS, A64, "aarch64-linux-gnu-gcc", target_dir)
    binary = binaries["lib", "ondevice-kernels"]
    info = elf.read(binary)
    assert info.arch == "aarch64" and info.section(".interp") is None, "statically linked: no loader"
    names = [c.name for c in by_kind(find_targets(KERNELS))["lib", "ondevice-kernels"].cases]
    result, _ = run_libtest(["qemu-aarch64", str(binary)], names)
    assert result.cases["tests::dot_product"].outcome is Outcome.PASSED
    assert result.cases["tests::dot_rejects_mismatched_lengths"].outcome is Outcome.PASSED
    assert result.cases["tests::gemm_large_matches_float"].outcome is Outcome.SKIPPED
    assert result.problems == []


def cdot_library(root: Path, cc: str) -> dict[str, str]:
    """The C library built by hand as the plugin will (static, .pc file in a sysroot)."""
    lib = root / "usr" / "lib"
    (lib / "pkgconfig").mkdir(parents=True)
    obj = root / "cdot.o"
    subprocess.run([cc, "-O2", "-c", str(CDOT / "c" / "cdot.c"), "-I", str(CDOT / "c"), "-o", str(obj)], check=True)
    subprocess.run(["ar", "rcs", str(lib / "libondevice_cdot.a"), str(obj)], check=True)
    (lib / "pkgconfig" / "ondevice-cdot.pc").write_text(
        "prefix=/usr\nlibdir=${prefix}/lib\nName: ondevice-cdot\nDescription: int8 dot\nVersion: 1\n"
        "Libs: -L${libdir} -londevice_cdot\n"
    )
    return {
        "PKG_CONFIG_LIBDIR": str(lib / "pkgconfig"),
        "PKG_CONFIG_SYSROOT_DIR": str(root),
        "PKG_CONFIG_ALLOW_CROSS": "1",
    }


@needs_cargo
@needs_pkg_config_crate
@pytest.mark.parametrize("rust_target", [None, pytest.param(A64, marks=needs_a64)])
def test_sys_crate_links_the_c_library_found_by_pkg_config(tmp_path, target_dir, rust_target):
    env = cdot_library(tmp_path, "aarch64-linux-gnu-gcc" if rust_target else "cc")
    binaries = build(CDOT, rust_target, "aarch64-linux-gnu-gcc" if rust_target else None, target_dir, env=env)
    targets = by_kind(find_targets(CDOT))
    for key, binary in binaries.items():
        names = [c.name for c in targets[key].cases]
        result, proc = run_libtest([*(["qemu-aarch64"] if rust_target else []), str(binary)], names)
        assert proc.returncode == 0, proc.stdout.decode(errors="replace")
        assert {v.outcome for v in result.cases.values()} == {Outcome.PASSED}


@needs_cargo
def test_a_failing_crate_end_to_end(tmp_path, target_dir):
    """The transcripts' crate built by build() and run as the plugin runs it: a failed
    assertion, a panic, ignored tests, should_panic both ways, then an abort mid-test."""
    crate = tmp_path / "crate"
    shutil.copytree(Path(__file__).resolve().parent / "support" / "libtest" / "crate", crate)
    (target,) = find_targets(crate)
    binary = build(crate, None, None, target_dir)[target.kind, target.name]  # the names agree
    names = [c.name for c in target.cases]
    env = {**os.environ, "CRASH": "abort", "RUST_BACKTRACE": "1"}
    # one stream, as the transports read it: the panics (stderr) land between a test's start and verdict
    proc = subprocess.run(
        [str(binary), *Libtest.run_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, env=env
    )
    assert proc.returncode == -6
    parser = Libtest().parser(tuple(sorted(names)))
    splitter = LineSplitter()
    for line in [*splitter.feed(proc.stdout), *splitter.close()]:
        parser.feed_line(line)
    cases = parser.verdicts(names, RunEnd(signal="SIGABRT")).cases
    outcomes = {n: v.outcome.value for n, v in cases.items()}
    assert outcomes == {
        "tests::passes": "passed",
        "tests::fails_assert": "failed",
        "tests::panics": "failed",
        "tests::ignored_plain": "skipped",
        "tests::ignored_reason": "skipped",
        "tests::should_panic_ok": "passed",
        "tests::should_panic_fails": "failed",
        "tests::zz_crash": "failed",
        "tests::zz_last": "failed",
    }
    assert cases["tests::zz_crash"].message == "crashed: killed by SIGABRT while this case was running"


@needs_cargo
def test_a_compile_error_is_a_cargo_error_in_rustcs_words(tmp_path, target_dir):
    crate = write(
        tmp_path,
        {
            "Cargo.toml": '[package]\nname = "broken"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": '#[test]\nfn t() {\n    let x: u32 = "text";\n}\n',
        },
    )
    with pytest.raises(CargoError) as e:
        build(crate, None, None, target_dir)
    message = str(e.value)
    assert "error[E0308]: mismatched types" in message and "src/lib.rs:3" in message
    assert message.count("error[E0308]") == 1, "the lib and its test build say it twice: once is enough"


@needs_cargo
@pytest.mark.parametrize(
    "rust_target, says",
    [
        ("riscv32imac-unknown-none-elf", "Debian ships no Rust standard library for riscv32imac-unknown-none-elf"),
        ("bogus-none-triple", "rustc knows no target 'bogus-none-triple'"),
    ],
)
def test_a_target_without_std_names_the_fix(rust_target, says, target_dir):
    with pytest.raises(CargoError, match="cargo test --no-run failed") as e:
        build(KERNELS, rust_target, None, target_dir)
    assert says in str(e.value)


@needs_cargo
def test_a_missing_std_is_a_setup_error_with_debians_fix_not_rustups(tmp_path):
    """arm64's std hidden from rustc (an empty sysroot): the error a machine without
    libstd-rust-dev:arm64 gets. rustc's own advice (`rustup target add`) is not repeated."""
    with pytest.raises(CargoError) as e:
        build(KERNELS, A64, "aarch64-linux-gnu-gcc", tmp_path / "target", env={"RUSTFLAGS": f"--sysroot={tmp_path}"})
    assert isinstance(e.value, ConfigError), "not the crate's fault: an error, not a failure"
    message = str(e.value)
    assert message.startswith(f"Rust's standard library for {A64} is not installed for {DEBIAN_CARGO}")
    assert "run scripts/setup.sh --rust, or" in message and "apt-get install libstd-rust-dev:arm64" in message
    assert "rustup" not in message
    assert "error[E0463]: can't find crate for `std`" in message and message.count("\n") == 1


@needs_cargo
def test_rustups_cargo_is_told_rustups_way(tmp_path):
    proxy = tmp_path / ".cargo" / "bin" / "cargo"  # where rustup puts its proxies
    proxy.parent.mkdir(parents=True)
    proxy.symlink_to(DEBIAN_CARGO)
    env = {"ONDEVICE_CARGO": str(proxy), "RUSTFLAGS": f"--sysroot={tmp_path}"}
    with pytest.raises(CargoError, match=rf"(?m)not installed for {proxy}: rustup target add {A64}$") as e:
        build(KERNELS, A64, "aarch64-linux-gnu-gcc", tmp_path / "target", env=env)
    assert isinstance(e.value, ConfigError)


def test_a_cargo_toml_that_is_not_utf8_is_an_error_naming_the_place(tmp_path):
    (tmp_path / "Cargo.toml").write_bytes(b'[package]\nname = "x" # caf\xe9\nversion = "0.1.0"\n')
    with pytest.raises(cargo.CargoError, match=r"Cargo.toml:2: not UTF-8: byte 0xe9"):
        cargo._manifest(tmp_path)
