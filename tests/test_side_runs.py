"""A local board's binaries run in a forked process beside pytest's (sideruns.py): results
in item order, errors and log records handed back, and nothing lost or left running
when it dies, is stopped, or the whole process group is signalled."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ondevice import sideruns

SPECS = [SimpleNamespace(rel=f"t{i}_test.c") for i in range(4)]


def _start(run, specs=SPECS, on_stop=lambda: None, counters=lambda: (0,), on_counts=lambda delta: None):
    side = sideruns.start(specs, run, counters, on_stop, lambda: None, on_counts)
    assert side is not None, "another thread lives in the test process"
    return side


def _results(side, timeout: float = 30.0) -> list:
    return [f.result(timeout) for f in side.futures]


def test_results_come_back_in_order_with_what_each_run_counted():
    ran = []
    counts = []

    def run(spec):
        ran.append(spec.rel)
        return {"rel": spec.rel, "pid": os.getpid()}

    side = _start(run, counters=lambda: (len(ran),), on_counts=counts.append)
    got = _results(side)
    side.stop()
    assert [r["rel"] for r in got] == [s.rel for s in SPECS]
    assert {r["pid"] for r in got} == {side.pid} != {os.getpid()}  # run in the child
    assert counts == [(1,)] * len(SPECS)  # each result brings what its run added
    assert side.ended_early() is None


def test_an_error_in_a_run_reaches_the_item_that_reads_it():
    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("no")

    def run(spec):
        if spec.rel == "t1_test.c":
            raise ValueError("a plain error")
        if spec.rel == "t2_test.c":
            raise Unpicklable("held a socket")
        return spec.rel

    side = _start(run)
    futures = side.futures
    assert futures[0].result(30) == "t0_test.c"
    with pytest.raises(ValueError, match="a plain error"):
        futures[1].result(30)
    with pytest.raises(sideruns.SideRunError, match=r"(?s)Traceback.*Unpicklable: held a socket"):
        futures[2].result(30)
    assert futures[3].result(30) == "t3_test.c"
    side.stop()


def test_what_a_run_logs_comes_back_with_its_result():
    def run(spec):
        logging.getLogger("paramiko.transport").warning("rekeying %s", spec.rel)
        return spec.rel

    side = _start(run)
    _results(side)
    side.stop()
    records = [[r.getMessage() for r in f.records] for f in side.futures]
    assert records == [[f"rekeying {s.rel}"] for s in SPECS]
    assert side.futures[0].records[0].name == "paramiko.transport"


def test_a_side_process_that_dies_leaves_its_runs_to_pytests_process_and_says_so():
    def run(spec):
        if spec.rel == "t2_test.c":
            os.kill(os.getpid(), signal.SIGKILL)
        return spec.rel

    side = _start(run)
    got = _results(side)
    assert got[:2] == ["t0_test.c", "t1_test.c"]
    assert got[2:] == [sideruns.RUN_HERE, sideruns.RUN_HERE]
    note = side.ended_early()
    assert note is not None and "killed by SIGKILL" in note and "2 binaries were run in pytest's own process" in note
    side.stop()


def test_stop_ends_the_run_in_progress_and_the_child(tmp_path):
    stopped = tmp_path / "stopped"
    hold = threading.Event()

    def on_stop():  # in the child: what the session's stop does there (kills the binary)
        stopped.write_text("yes")
        hold.set()

    def run(spec):
        hold.wait(60)
        return spec.rel

    side = _start(run, on_stop=on_stop)
    time.sleep(0.2)
    started = time.monotonic()
    side.stop()
    assert time.monotonic() - started < 3
    assert stopped.read_text() == "yes"
    with pytest.raises(ChildProcessError):  # reaped: no zombie left
        os.waitpid(side.pid, os.WNOHANG)
    assert side.ended_early() is None  # a stop is not a death


def test_no_fork_while_another_thread_lives():
    gate = threading.Event()
    other = threading.Thread(target=gate.wait)
    other.start()
    try:
        assert sideruns.start(SPECS, lambda spec: spec.rel, lambda: (0,), lambda: None, lambda: None, print) is None
    finally:
        gate.set()
        other.join()


PARENT = """
    #include <stdio.h>
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Parent) {
      printf("started by %d\\n", (int)getppid());
      usleep(300 * 1000);  /* the side process is still at work when p1's case starts */
    }
    TF_LITE_MICRO_TESTS_END
"""
PYTEST_PID = """
    import os
    def pytest_configure(config):
        open("pytest.pid", "w").write(str(os.getpid()))
"""


def _started_by(project, name: str) -> int:
    log = (project.path / "_build" / "host" / "logs" / name).with_suffix(".c.log")
    return int(log.read_text().split("started by ")[1].split()[0])


@pytest.mark.parametrize("side", [True, False])
def test_the_binaries_run_beside_pytest_unless_the_ini_says_not_to(project, side):
    for i in range(3):
        project.write(f"p{i}_test.c", PARENT)
    project.write("conftest.py", PYTEST_PID)
    args = [] if side else ["-o", "ondevice_side_process=false"]
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=3)
    pytest_pid = int((project.path / "pytest.pid").read_text())
    parents = {_started_by(project, f"p{i}_test") for i in range(3)}
    if side:
        assert len(parents) == 1 and pytest_pid not in parents, (pytest_pid, parents)
    else:
        assert parents == {pytest_pid}


KILL_THE_SIDE = PYTEST_PID + """
    import signal
    from pathlib import Path

    def pytest_runtest_setup(item):
        if item.path.name == "p1_test.c":  # the side process is pytest's only child then
            me = str(os.getpid())
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if fields[1] == me and fields[0] != "Z":
                        os.kill(int(entry.name), signal.SIGKILL)
"""


def test_every_case_still_runs_when_the_side_process_is_killed(project):
    for i in range(4):
        project.write(f"p{i}_test.c", PARENT)
    project.write("conftest.py", KILL_THE_SIDE)
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*ended early (killed by SIGKILL): 3 binaries were run in pytest's own process*"])
    pytest_pid = int((project.path / "pytest.pid").read_text())
    assert _started_by(project, "p0_test") != pytest_pid
    assert [_started_by(project, f"p{i}_test") for i in (1, 2, 3)] == [pytest_pid] * 3


def test_own_dirs_never_hide_the_tree(tmp_path: Path):
    from pytest_ondevice.hooks import own_dirs

    root = tmp_path / "proj"
    (root / "_build").mkdir(parents=True)
    assert own_dirs(root, [root / "_build", None]) == {root / "_build"}
    assert own_dirs(root, [root, tmp_path]) == frozenset()  # the tree itself, or above it


def test_the_build_dir_and_cache_inside_the_tree_are_not_collected(project):
    """They hold copies and build outputs, never tests: pytest walking them found a copied
    test source twice, and spent seconds on a large suite's 50,000 built files."""
    project.write("a_test.c", PARENT)
    for where in ("_build", "_cache"):  # the project's ini puts both inside the tree
        project.write(f"{where}/copy/a_test.c", PARENT)
    result = project.run("--collect-only", "-q")
    listed = [line for line in result.outlines if "::" in line]
    assert listed == ["a_test.c::Parent[host]"], result.stdout.str()
