"""A missing part of the Rust toolchain (cargo, the board's std) or a board without a Rust
target is not the crate's fault: its tests are errors naming the fix that applies to the
cargo in use (Debian's package or scripts/setup.sh; `rustup target add` only for rustup's
cargo), never failures."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/cargo").exists(), reason="needs Debian's cargo: scripts/setup.sh --rust"
)

ARMHF = "armv7-unknown-linux-gnueabihf"


def demo(project) -> None:
    project.write("demo/Cargo.toml", '[package]\nname = "demo"\nversion = "0.1.0"\nedition = "2021"\n')
    project.write("demo/src/lib.rs", "#[test]\nfn works() {}\n#[test]\nfn also() {}\n")


def assert_errors_saying(result, *says: str) -> str:
    result.assert_outcomes(errors=2)
    text = result.stdout.str()
    for words in says:
        assert words in text, words
    assert "rustup" not in text, "rustup's advice does not apply to Debian's cargo"
    return text


@pytest.mark.skipif(Path(f"/usr/lib/rustlib/{ARMHF}").exists(), reason="Rust's armhf std is installed here")
def test_a_board_whose_std_is_not_installed_is_an_error_naming_the_package(project):
    demo(project)
    result = project.run("-rE", "--device=qemu", board="rpi-armhf")
    assert_errors_saying(
        result,
        f"rpi-armhf: Rust's standard library for {ARMHF} is not installed for /usr/bin/cargo",
        "dpkg --add-architecture armhf && apt-get update && apt-get install libstd-rust-dev:armhf",
    )


def test_arm64_without_its_std_names_the_setup_script(project, monkeypatch, tmp_path):
    """What a machine without libstd-rust-dev:arm64 sees: here rustc is pointed at an
    empty sysroot, so it finds no std for aarch64."""
    monkeypatch.setenv("RUSTFLAGS", f"--sysroot={tmp_path}")
    demo(project)
    result = project.run("-rE", "--device=qemu", board="rpi")
    assert_errors_saying(
        result,
        "rpi: Rust's standard library for aarch64-unknown-linux-gnu is not installed",
        "run scripts/setup.sh --rust, or dpkg --add-architecture arm64",
        "apt-get install libstd-rust-dev:arm64",
    )


def test_no_cargo_is_an_error_naming_the_setup_script(project, monkeypatch):
    monkeypatch.setenv("ONDEVICE_CARGO", "/nonexistent/cargo")
    demo(project)
    result = project.run("-rE")
    assert_errors_saying(result, "host: cargo not found at /nonexistent/cargo: run scripts/setup.sh --rust")


def test_a_board_without_a_rust_target_is_an_error_naming_the_key(project):
    demo(project)
    project.write("boards/norust.toml", 'extends = "linux-aarch64"\n[toolchain]\nrust_target = ""\n')
    result = project.run("-rE", "--build-only", board="norust")
    assert_errors_saying(result, "board norust names no Rust target: add rust_target")
