"""Resolving a board's toolchain: done once, however many build threads ask at once."""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor

from pytest_ondevice.build import toolchain
from pytest_ondevice.config.board import BoardRegistry


def test_build_threads_asking_at_once_probe_the_compiler_once(monkeypatch):
    probes = []

    def slow_identity(cc):  # `cc --version`: long enough for every thread to arrive meanwhile
        probes.append(cc)
        time.sleep(0.05)
        return "identity"

    monkeypatch.setattr(toolchain, "_identity", slow_identity)
    monkeypatch.setattr(toolchain, "_resolve", functools.cache(toolchain._resolve.__wrapped__))
    board = BoardRegistry().get("rpi")
    with ThreadPoolExecutor(max_workers=8) as pool:
        resolved = list(pool.map(lambda _: toolchain.resolve(board), range(8)))
    assert probes == [("aarch64-linux-gnu-gcc",)]
    assert all(r is resolved[0] for r in resolved)


def _fake_compiler(directory, banner: str, calls):
    """A `cc` that prints banner for --version and notes each time it is run."""
    directory.mkdir()
    cc = directory / "cc"
    cc.write_text(f'#!/bin/sh\necho run >> "{calls}"\necho "{banner}"\n')
    cc.chmod(0o755)
    return cc


def _fresh(monkeypatch):
    monkeypatch.setattr(toolchain, "_identity", functools.cache(toolchain._identity.__wrapped__))
    monkeypatch.setattr(toolchain, "_resolve", functools.cache(toolchain._resolve.__wrapped__))
    monkeypatch.delenv("CC", raising=False)


def test_the_compiler_asked_early_is_asked_once_and_its_answer_is_the_identity(tmp_path, monkeypatch):
    """Asked while pytest collects, read by the first build: one `--version`, the same
    identity as asking then."""
    _fresh(monkeypatch)
    calls = tmp_path / "calls"
    _fake_compiler(tmp_path / "bin", "cc 1.0", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    board = BoardRegistry().get("host")
    toolchain.ask_early(board)
    early = toolchain.resolve(board).identity
    assert calls.read_text().split() == ["run"]
    _fresh(monkeypatch)
    assert toolchain.resolve(board).identity == early  # asked the usual way


def test_an_early_answer_from_a_compiler_path_no_longer_finds_is_not_its_identity(tmp_path, monkeypatch):
    """PATH changed between the early question and the build (a conftest put another
    compiler first): the identity is the compiler the build runs, never the other one's."""
    _fresh(monkeypatch)
    _fake_compiler(tmp_path / "old", "cc 1.0", tmp_path / "old-calls")
    _fake_compiler(tmp_path / "new", "cc 2.0", tmp_path / "new-calls")
    board = BoardRegistry().get("host")
    monkeypatch.setenv("PATH", f"{tmp_path / 'new'}:/usr/bin:/bin")
    direct = toolchain.resolve(board).identity
    _fresh(monkeypatch)
    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}:/usr/bin:/bin")
    toolchain.ask_early(board)
    monkeypatch.setenv("PATH", f"{tmp_path / 'new'}:/usr/bin:/bin")
    assert toolchain.resolve(board).identity == direct
    assert not toolchain._EARLY  # the old answer read and reaped all the same


def test_an_early_question_nobody_read_is_reaped(tmp_path, monkeypatch):
    _fresh(monkeypatch)
    _fake_compiler(tmp_path / "bin", "cc 1.0", tmp_path / "calls")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    toolchain.ask_early(BoardRegistry().get("host"))
    (proc,) = [p for _, p in toolchain._EARLY.values()]
    toolchain.forget_early()
    assert proc.returncode == 0 and not toolchain._EARLY
