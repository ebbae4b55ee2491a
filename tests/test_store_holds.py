"""What a live session uses stays in the cache: another run's trim and `cache clean` leave
it (holds are seen across processes), and an entry removed anyway is built again, never
a failing test nor a strike on a device."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import QUIET
from test_build_cache import value_test

from pytest_ondevice.compiling import store

REPO = Path(__file__).resolve().parent.parent

HOLDER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from pytest_ondevice.compiling import store
cache = store.Store(Path(sys.argv[2]))
assert cache.get(sys.argv[3]) is not None
print("holding", flush=True)
sys.stdin.read()  # until the test says so, or kills it
"""


def _entry(cache: store.Store, key: str, age: float) -> None:
    staged = cache.staging()
    (staged / "a.elf").write_bytes(os.urandom(1000))
    entry = cache.commit(staged, "a.elf", key)
    then = time.time() - age
    os.utime(entry.path.parent, (then, then))


def _left(root: Path, keys: list[str]) -> list[str]:
    return [k for k in keys if (root / store.LAYOUT / "entries" / k[:2] / k).exists()]


def oldest_first(root: Path, n: int) -> list[str]:
    """The keys of n entries stored by a session that has ended, keys[0] the least recently used."""
    keys = [f"{i:x}" * 64 for i in range(n)]
    first = store.Store(root)
    for i, key in enumerate(keys):
        _entry(first, key, 100 * (n - i))
    first.close()
    return keys


def test_another_processs_trim_leaves_what_a_live_session_holds_and_a_dead_one_holds_nothing(tmp_path):
    keys = oldest_first(tmp_path, 4)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(REPO), str(tmp_path), keys[0]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "holding\n"
        store.Store(tmp_path).trim(1)  # everything it may
        assert _left(tmp_path, keys) == [keys[0]]
    finally:
        holder.kill()  # SIGKILL: its hold file stays behind, its flock does not
        holder.wait()
    assert list((tmp_path / store.LAYOUT / "holds").iterdir())
    store.Store(tmp_path).trim(1)
    assert _left(tmp_path, keys) == []
    assert not list((tmp_path / store.LAYOUT / "holds").iterdir())  # the dead session's file is gone too


def test_a_trim_removes_the_least_recently_used_until_90_percent_and_clean_keeps_what_is_held(tmp_path):
    keys = oldest_first(tmp_path, 6)
    count, size = store.Store(tmp_path).usage()
    each = size // 6
    assert count == 6 and size == 6 * each and each > 1000  # the binary and its meta.json
    other = store.Store(tmp_path)
    assert other.get(keys[0]) is not None and other.get(keys[4]) is not None
    for key in (keys[0], keys[4]):  # a long session's holds: used long ago, the oldest still
        os.utime(tmp_path / store.LAYOUT / "entries" / key[:2] / key, (1, 1))
    assert other.trim(max_size=4 * each) == 3  # down to 90 % of 4 entries: 3.6, so 3 left
    assert _left(tmp_path, keys) == [keys[0], keys[4], keys[5]]
    assert store.Store(tmp_path).trim(max_size=3 * each) == 0  # at the limit: nothing to do
    assert store.Store(tmp_path).clear() == (1, each, 2)  # keys[5] removed; two held by `other`
    assert _left(tmp_path, keys) == [keys[0], keys[4]]


def test_every_live_sessions_holds_count_and_a_stray_file_there_stops_nothing(tmp_path):
    keys = [f"{i:x}" * 64 for i in range(3)]
    first = store.Store(tmp_path)
    for key in keys:
        _entry(first, key, 0)
    first.close()
    holds = tmp_path / store.LAYOUT / "holds"
    (holds / "0-dangling").symlink_to(tmp_path / "nowhere")
    one, two = store.Store(tmp_path), store.Store(tmp_path)
    one.get(keys[0])
    two.get(keys[1])
    assert store.Store(tmp_path).held() >= {keys[0], keys[1]}
    assert store.Store(tmp_path).clear()[0] == 1
    assert _left(tmp_path, keys) == keys[:2]


PAUSE = """
import os, time
from pathlib import Path
paused = []
def pytest_runtest_setup(item):
    if not paused:  # every binary is built and held by now: wait while another run trims
        paused.append(item)
        Path(os.environ["ONDEVICE_TEST_PAUSED"]).touch()
        while not Path(os.environ["ONDEVICE_TEST_GO"]).exists():
            time.sleep(0.05)
"""

PASSING = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Works) {{ TF_LITE_MICRO_EXPECT_EQ({value}, {value}); }}
    TF_LITE_MICRO_TESTS_END
"""


def _pytest(cwd: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--board=host", "-p", "no:cacheprovider", *QUIET, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _other_checkout(project, tmp_path: Path, name: str, ini: str = "") -> Path:
    other = tmp_path / name
    other.mkdir()
    (other / "pytest.ini").write_text(
        f"[pytest]\nondevice_build_dir = _build\nondevice_cache_dir = {project.path / '_cache'}\n{ini}"
    )
    return other


def test_another_runs_trim_never_removes_the_binaries_this_run_is_about_to_run(project, tmp_path):
    for n in range(4):
        project.write(f"t{n}_test.c", PASSING.format(value=n))
    project.write("conftest.py", PAUSE)
    old = _other_checkout(project, tmp_path, "old")
    (old / "old_test.c").write_text(textwrap.dedent(PASSING.format(value=9)))
    assert "1 passed" in _pytest(old).communicate(timeout=120)[0]  # nobody holds these after
    paused, go = tmp_path / "paused", tmp_path / "go"
    run = _pytest(project.path, "-s", env={"ONDEVICE_TEST_PAUSED": str(paused), "ONDEVICE_TEST_GO": str(go)})
    try:
        deadline = time.monotonic() + 120
        while not paused.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0]
            time.sleep(0.05)
        other = _other_checkout(project, tmp_path, "other", "ondevice_cache_size = 1K\n")
        (other / "other_test.c").write_text(textwrap.dedent(PASSING.format(value=7)))
        out = _pytest(other).communicate(timeout=120)[0]  # stores, then trims all it may
        assert "1 passed" in out, out
    finally:
        go.touch()
    out = run.communicate(timeout=120)[0]
    assert "4 passed" in out and "error" not in out and "quarantine" not in out, out
    assert not list((project.path / "_cache").rglob("old_test.c.elf"))  # held by nobody: trimmed


CLEANING_CC = """#!/bin/sh
case " $* " in *lib/second.c*) {python} -m pytest_ondevice.commands.cli cache clean --cache-dir {cache} >> {log} ;; esac
exec cc "$@"
"""

REMOVING_CC = """#!/bin/sh
case " $* " in *lib/second.c*) [ -e {log} ] || {{ echo removed > {log}; rm -rf {cache}/v2/entries/*; }} ;; esac
exec cc "$@"
"""


def _two_source_library(project, monkeypatch, wrapper: str) -> Path:
    project.write("lib/first.c", "int first(void) { return 1; }\n")
    project.write("lib/second.c", "int second(void) { return 0; }\n")
    project.write("ondevice.toml", 'sources = ["lib/first.c", "lib/second.c"]\n')
    project.write("cfg.h", "int first(void);\nint second(void);\n#define VALUE (first() + second())\n")
    value_test(project)
    log = project.path / "cc.log"
    cc = project.write("cc-wrapper", wrapper.format(python=sys.executable, cache=project.path / "_cache", log=log))
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return log


def test_cache_clean_during_a_run_removes_nothing_the_run_holds(project, monkeypatch):
    log = _two_source_library(project, monkeypatch, CLEANING_CC)
    result = project.run("--build-jobs=1")  # first.c (and the runtime) built and held before second.c
    result.assert_outcomes(passed=1)
    assert "Traceback" not in result.stdout.str()
    assert "kept" in log.read_text() and "held by running sessions" in log.read_text(), log.read_text()


def test_an_entry_removed_by_hand_during_a_build_is_built_again(project, monkeypatch):
    """rm -rf of the cache while a run builds (no hold stops that): the objects it had are
    compiled again, never a link failure or a traceback."""
    log = _two_source_library(project, monkeypatch, REMOVING_CC)
    result = project.run("--build-jobs=1")
    assert log.read_text() == "removed\n"
    result.assert_outcomes(passed=1)
    assert "Traceback" not in result.stdout.str()


REMOVE_BEFORE_RUN = """
import shutil
from pathlib import Path
def pytest_runtest_setup(item):
    for elf in list(Path({cache!r}).rglob("value_test.c.elf")):  # built and held: removed by hand
        shutil.rmtree(elf.parent)
"""


def test_a_binary_removed_by_hand_before_its_run_is_built_again_never_a_device_strike(project):
    """Needs the runner to ask Builder.intact() before a deploy (see the report)."""
    project.write("cfg.h", "#define VALUE 1\n")
    value_test(project)
    project.write("conftest.py", REMOVE_BEFORE_RUN.format(cache=str(project.path / "_cache")))
    result = project.run("-s")  # each binary runs when its item does, after the conftest hook
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "quarantine" not in text and "Traceback" not in text, text


REMOVE_WHILE_WAITING = """
import shutil
from pathlib import Path
from pytest_ondevice.farm.devices import Devices
_lease = Devices.lease
def lease(self, candidates):
    granted = _lease(self, candidates)  # what a wait for a busy device gives a user time to do
    for elf in list(Path({cache!r}).rglob("value_test.c.elf")):
        shutil.rmtree(elf.parent)
    return granted
Devices.lease = lease
"""


def test_a_binary_removed_by_hand_while_it_waits_for_a_device_is_built_again(project):
    """Checked once more after the lease: what the device gets is the binary as built, never a
    missing file (a traceback, or a strike on the device)."""
    project.write("cfg.h", "#define VALUE 1\n")
    value_test(project)
    project.write("conftest.py", REMOVE_WHILE_WAITING.format(cache=str(project.path / "_cache")))
    result = project.run("-s")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "quarantine" not in text and "Traceback" not in text and "INTERNALERROR" not in text, text
