"""Resolving a board's toolchain: done once, however many build threads ask at once."""

from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_ondevice.compiling import toolchain
from pytest_ondevice.config.board import BoardRegistry


def test_build_threads_asking_at_once_probe_the_compiler_once(monkeypatch):
    probes = []

    def slow_identity(cc, path):  # `cc --version`: long enough for every thread to arrive meanwhile
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
    cc.write_text(f'#!/bin/sh\necho run >> "{calls}"\necho "{banner}$ONDEVICE_WRAPPER_READS"\n')
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


def _two_gccs_behind_a_launcher(tmp_path, monkeypatch):
    """gcc 1.0 in old/, gcc 2.0 in new/, CC = `env gcc`; the host board."""
    _fresh(monkeypatch)
    _fake_compiler(tmp_path / "old", "gcc 1.0", tmp_path / "old-calls").rename(tmp_path / "old" / "gcc")
    _fake_compiler(tmp_path / "new", "gcc 2.0", tmp_path / "new-calls").rename(tmp_path / "new" / "gcc")
    monkeypatch.setenv("CC", "env gcc")
    return BoardRegistry().get("host")


def test_an_early_answer_under_another_environment_is_not_its_identity(tmp_path, monkeypatch):
    """CC is a launcher (`ccache gcc`, here `env gcc`): its own path stays the same when a
    conftest puts another gcc first on PATH, or sets what a wrapper reads. The identity is
    the compiler the build runs, asked then."""
    board = _two_gccs_behind_a_launcher(tmp_path, monkeypatch)
    monkeypatch.setenv("PATH", f"{tmp_path / 'new'}:/usr/bin:/bin")
    direct = toolchain.resolve(board).identity
    _fresh(monkeypatch)
    monkeypatch.setenv("CC", "env gcc")
    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}:/usr/bin:/bin")
    toolchain.ask_early(board)
    monkeypatch.setenv("PATH", f"{tmp_path / 'new'}:/usr/bin:/bin")
    assert toolchain.resolve(board).identity == direct
    _fresh(monkeypatch)
    monkeypatch.setenv("CC", "env gcc")
    monkeypatch.setenv("ONDEVICE_WRAPPER_READS", " (configured)")
    direct = toolchain.resolve(board).identity
    _fresh(monkeypatch)
    monkeypatch.setenv("CC", "env gcc")
    monkeypatch.delenv("ONDEVICE_WRAPPER_READS", raising=False)
    toolchain.ask_early(board)  # the same PATH; then a variable the compiler reads is set
    monkeypatch.setenv("ONDEVICE_WRAPPER_READS", " (configured)")
    assert toolchain.resolve(board).identity == direct


def test_a_compiler_replaced_in_place_is_asked_again(tmp_path, monkeypatch):
    """The same path, the same environment, another program (a conftest installs it)."""
    _fresh(monkeypatch)
    cc = _fake_compiler(tmp_path / "bin", "cc 2.0", tmp_path / "calls")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    board = BoardRegistry().get("host")
    direct = toolchain.resolve(board).identity
    _fresh(monkeypatch)
    cc.write_text(cc.read_text().replace("cc 2.0", "cc 1.0"))
    toolchain.ask_early(board)
    (early,) = toolchain._EARLY.values()
    early.proc.wait()  # its answer is in: the old compiler's
    replacement = tmp_path / "bin" / "cc.new"
    replacement.write_text(cc.read_text().replace("cc 1.0", "cc 2.0"))
    replacement.chmod(0o755)
    replacement.rename(cc)
    assert toolchain.resolve(board).identity == direct


def test_xdist_workers_use_the_early_answer_though_a_test_is_under_way(tmp_path, monkeypatch):
    """A worker resolves its compiler in its first test's setup, when pytest has set
    PYTEST_CURRENT_TEST: no compiler reads that, so the early answer still holds."""
    _fresh(monkeypatch)
    _fake_compiler(tmp_path / "bin", "cc 1.0", tmp_path / "calls")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    board = BoardRegistry().get("host")
    toolchain.ask_early(board)
    (early,) = toolchain._EARLY.values()
    early.proc.wait()  # it has run: a second run would be a second line
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "x_test.c::Case (setup)")
    toolchain.resolve(board)
    assert (tmp_path / "calls").read_text().split() == ["run"]


def test_the_identity_follows_path_within_one_process(tmp_path, monkeypatch):
    """Two sessions in one process (pytester's in-process runs): a launcher's identity is
    asked again when PATH changed, never the first session's."""
    board = _two_gccs_behind_a_launcher(tmp_path, monkeypatch)
    monkeypatch.setenv("PATH", f"{tmp_path / 'old'}:/usr/bin:/bin")
    first = toolchain.resolve(board).identity
    monkeypatch.setenv("PATH", f"{tmp_path / 'new'}:/usr/bin:/bin")
    assert toolchain.resolve(board).identity != first


def _hanging_wrapper(directory):
    """A `cc` script whose --version never ends, in a child that holds its output too."""
    directory.mkdir()
    hangs = directory / "cc"
    hangs.write_text("#!/bin/sh\nsleep 1000\necho never\n")
    hangs.chmod(0o755)


def _group_gone(pgid: int) -> bool:
    for _ in range(100):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_an_early_question_nobody_read_is_ended_not_waited_for(tmp_path, monkeypatch):
    """A compiler that hangs on --version does not hold the end of a session that built
    nothing, nor does what a wrapper script started."""
    _fresh(monkeypatch)
    _hanging_wrapper(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    toolchain.ask_early(BoardRegistry().get("host"))
    (early,) = toolchain._EARLY.values()
    started = time.monotonic()
    toolchain.forget_early()
    assert time.monotonic() - started < 5
    assert early.proc.returncode is not None and early.proc.stdout.closed and not toolchain._EARLY
    assert _group_gone(early.proc.pid)  # the wrapper's sleep too


def test_an_early_answer_that_never_comes_gives_up_at_the_timeout(tmp_path, monkeypatch):
    _fresh(monkeypatch)
    _hanging_wrapper(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT", 0.5)
    toolchain.ask_early(BoardRegistry().get("host"))
    (early,) = toolchain._EARLY.values()
    started = time.monotonic()
    toolchain.resolve(BoardRegistry().get("host"))
    assert time.monotonic() - started < 5
    assert early.proc.returncode is not None and early.proc.stdout.closed
    assert _group_gone(early.proc.pid)


def test_cc_set_but_empty_is_unset_and_blanks_name_the_package(monkeypatch):
    _fresh(monkeypatch)
    board = BoardRegistry().get("host")
    monkeypatch.setenv("CC", "")
    toolchain.ask_early(board)
    assert toolchain.resolve(board).cc == ("cc",)
    toolchain.forget_early()
    monkeypatch.setenv("CC", "  ")
    toolchain.ask_early(board)  # nothing to ask
    with pytest.raises(toolchain.ToolchainError, match="apt-get install build-essential"):
        toolchain.resolve(board)
