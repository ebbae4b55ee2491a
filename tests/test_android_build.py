"""Building for Android: the NDK's clang when one is set, else a static aarch64 executable."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from conftest import assert_built

PASSING = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Adds) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
    TF_LITE_MICRO_TESTS_END
"""

pytestmark = pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None, reason="needs gcc-aarch64-linux-gnu")


def elf_kind(path: Path) -> tuple[str, bool]:
    """(e_type, has an interpreter): EXEC+no for a static executable, DYN+yes for a PIE."""
    data = path.read_bytes()
    e_type = struct.unpack_from("<H", data, 16)[0]
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    interp = any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))
    return {2: "EXEC", 3: "DYN"}[e_type], interp


def fake_ndk(root: Path) -> Path:
    """An NDK layout whose clang is the GNU cross compiler: what matters here is which
    compiler is chosen and how it links (there is no real NDK on our machines)."""
    bin_dir = root / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin"
    bin_dir.mkdir(parents=True)
    for name, real in (
        ("aarch64-linux-android24-clang", "aarch64-linux-gnu-gcc"),
        ("aarch64-linux-android24-clang++", "aarch64-linux-gnu-g++"),
        ("llvm-ar", "aarch64-linux-gnu-ar"),
    ):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
        tool.chmod(0o755)
    return root


def test_without_an_ndk_android_gets_a_static_executable(project, monkeypatch):
    for var in ("ANDROID_NDK_HOME", "ANDROID_NDK_ROOT"):
        monkeypatch.delenv(var, raising=False)
    project.write("a_test.c", PASSING)
    assert_built(project.run("--build-only", board="android-arm64"), 1)
    assert elf_kind(project.path / "_build/android-arm64/bin/a_test.c.elf") == ("EXEC", False)


def test_with_an_ndk_android_gets_a_pie_from_its_clang(project, monkeypatch, tmp_path):
    ndk = fake_ndk(tmp_path / "ndk")
    monkeypatch.setenv("ANDROID_NDK_HOME", str(ndk))
    project.write("a_test.c", PASSING)
    assert_built(project.run("--build-only", "-v", board="android-arm64"), 1)
    assert elf_kind(project.path / "_build/android-arm64/bin/a_test.c.elf") == ("DYN", True)
    from pytest_ondevice.compiling.toolchain import resolve
    from pytest_ondevice.config.board import BoardRegistry

    tc = resolve(BoardRegistry().get("android-arm64"))
    assert tc.kind == "ndk" and tc.cc[0].endswith("aarch64-linux-android24-clang")
    assert "-static" not in tc.ldflags and "-pie" in tc.ldflags
