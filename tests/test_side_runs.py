"""A local board's binaries run in a forked process beside pytest's (run/sideprocess.py, run/ways.py): results
in item order, errors and log records handed back, and nothing lost or left running
when it dies, is stopped, or the whole process group is signalled."""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ondevice.compiling import store
from pytest_ondevice.run import sideprocess
from pytest_ondevice.run.messages import Building, Go, Say

SPECS = [SimpleNamespace(rel=f"t{i}_test.c", key=("host", f"t{i}")) for i in range(4)]


def _start(
    run,
    specs=SPECS,
    on_stop=lambda: None,
    counters=lambda: (0,),
    on_counts=lambda delta: None,
    end=lambda: None,
    on_end=lambda handover: None,
    prepare=lambda tell: None,
    on_said=lambda line: None,
):
    child = SimpleNamespace(
        after_fork=lambda: None, prepare=prepare, run=run, counters=counters, stop=on_stop, handover=end
    )
    parent = SimpleNamespace(counted=on_counts, ended=on_end, said=on_said)
    side = sideprocess.start(specs, child, parent)
    assert side is not None, "another thread lives in the test process"
    return side


def _outcomes(side, specs=SPECS) -> list:
    return [side.outcome(spec.key)[0] for spec in specs]


def test_results_come_back_in_order_with_what_each_run_counted_and_the_end():
    ran = []
    counts = []
    ended = []
    late = []  # counted after the last result (a build of a binary never run)

    def run(spec):
        ran.append(spec.rel)
        return {"rel": spec.rel, "pid": os.getpid()}

    side = _start(
        run,
        counters=lambda: (len(ran) + len(late),),
        on_counts=counts.append,
        end=lambda: late.append(1) or len(ran),
        on_end=ended.append,
    )
    got = _outcomes(side)
    side.stop()
    assert [r["rel"] for r in got] == [s.rel for s in SPECS]
    assert {r["pid"] for r in got} == {side.pid} != {os.getpid()}  # run in the child
    assert counts == [(1,)] * len(SPECS) + [(1,)]  # each result brings what its run added; the end the rest
    assert ended == [len(SPECS)]  # the child's last word, read before stop() returns
    assert side.note() is None


def test_what_prepare_tells_reaches_the_parent_before_the_results():
    def prepare(tell):  # in the child, before its first run
        tell(Building((0, 2, "a")))
        tell(Say("waiting for a device"))  # for the person watching: said as it arrives
        threading.Thread(target=lambda: tell(Go((2, 2, "b")))).start()  # from any thread

    told, said = [], []
    side = _start(lambda spec: spec.rel, prepare=prepare, on_said=said.append)
    side.wait_prepared(lambda t: told.append(t) or isinstance(t, Go))
    assert told == [Building((0, 2, "a")), Go((2, 2, "b"))]
    assert said == ["waiting for a device"]
    assert _outcomes(side) == [s.rel for s in SPECS]
    side.stop()
    side.wait_prepared(lambda t: pytest.fail(f"told again: {t}"))  # the child has ended: returns at once


def test_stop_reads_a_long_last_word_while_the_child_writes_it():
    """The end carries every build key of the session: far more than a pipe holds. Waiting
    for the child without reading left it blocked, killed after 5 s, its end lost."""
    ended = []
    words = [f"{i:064d}" for i in range(20_000)]  # distinct: pickle writes a repeated one once
    side = _start(lambda spec: spec.rel, end=lambda: words, on_end=ended.append)
    _outcomes(side)
    started = time.monotonic()
    side.stop()
    assert time.monotonic() - started < 2.0
    assert ended == [words]
    assert side.note() is None


def test_it_runs_only_a_few_binaries_beyond_the_one_pytest_has_reached(tmp_path):
    specs = [SimpleNamespace(rel=f"t{i}_test.c", key=("host", f"t{i}")) for i in range(sideprocess.AHEAD + 10)]
    ran = tmp_path / "ran"

    def run(spec):
        with ran.open("a") as f:
            f.write(spec.rel + "\n")
        return spec.rel

    side = _start(run, specs=specs)
    time.sleep(0.5)
    assert len(ran.read_text().split()) == sideprocess.AHEAD  # none reached yet: the first AHEAD
    side.reach(specs[5].key)
    time.sleep(0.5)
    assert len(ran.read_text().split()) == 6 + sideprocess.AHEAD
    side.stop()
    assert len(ran.read_text().split()) == 6 + sideprocess.AHEAD  # stopped: nothing more


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
    assert side.outcome(SPECS[0].key)[0] == "t0_test.c"
    with pytest.raises(ValueError, match="a plain error") as raised:
        side.outcome(SPECS[1].key)
    assert "in run\n" in "".join(raised.value.__notes__)  # where, in the child
    with pytest.raises(sideprocess.SideRunError, match=r"(?s)Traceback.*Unpicklable: held a socket"):
        side.outcome(SPECS[2].key)
    assert side.outcome(SPECS[3].key)[0] == "t3_test.c"
    side.stop()


def test_what_a_run_logs_comes_back_with_its_result_once():
    def run(spec):
        logging.getLogger("paramiko.transport").warning("rekeying %s", spec.rel)
        return spec.rel

    side = _start(run)
    records = [[r.getMessage() for r in side.outcome(s.key)[1]] for s in SPECS]
    again = [side.outcome(s.key)[1] for s in SPECS]
    side.stop()
    assert records == [[f"rekeying {s.rel}"] for s in SPECS]
    assert again == [[]] * len(SPECS)  # the first reader logs them, once


def test_a_side_process_that_dies_leaves_its_runs_to_pytests_process_and_says_so():
    def run(spec):
        if spec.rel == "t2_test.c":
            os.kill(os.getpid(), signal.SIGKILL)
        return spec.rel

    side = _start(run)
    assert _outcomes(side) == ["t0_test.c", "t1_test.c", sideprocess.RUN_HERE, sideprocess.RUN_HERE]
    assert side.lost(SPECS[2].key) and not side.lost(SPECS[3].key)  # it died running t2
    note = side.note()
    assert note is not None and "killed by SIGKILL" in note and "from the 3rd of 4 on" in note, note
    side.stop()


def test_a_change_to_the_environment_sends_the_rest_to_pytests_process(monkeypatch):
    side = _start(lambda spec: spec.rel)
    assert side.outcome(SPECS[0].key)[0] == "t0_test.c"
    monkeypatch.setenv("KERNEL_DATA", "/data")  # as a conftest's hook could, after the fork
    assert [side.outcome(s.key)[0] for s in SPECS[1:]] == [sideprocess.RUN_HERE] * 3
    note = side.note()
    assert note is not None and "the environment changed (KERNEL_DATA)" in note and "2nd of 4" in note, note
    side.stop()


def test_if_reading_the_results_fails_nothing_waits_for_good(monkeypatch):
    def broken(self):
        raise MemoryError("no room")

    monkeypatch.setattr(sideprocess.SideRuns, "_file_frames", broken)
    side = _start(lambda spec: spec.rel)
    assert _outcomes(side) == [sideprocess.RUN_HERE] * 4
    assert "reading its results failed: MemoryError('no room')" in (side.note() or "")
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
    assert side.note() is None  # a stop is not a death


def test_no_fork_while_another_thread_lives():
    gate = threading.Event()
    other = threading.Thread(target=gate.wait)
    other.start()
    try:
        assert sideprocess.start(SPECS, SimpleNamespace(), SimpleNamespace()) is None
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


def test_a_single_binary_runs_in_pytests_process(project):
    """Nothing to run beside pytest while it reports: a fork would only cost (12 ms a run)."""
    project.write("p0_test.c", PARENT)
    project.write("conftest.py", PYTEST_PID)
    project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert _started_by(project, "p0_test") == int((project.path / "pytest.pid").read_text())


CHECKED_BY = """
    import os
    from pytest_ondevice.compiling import builder

    _binary = builder.Builder.binary

    def binary(self, *args, **kwargs):
        with open("checked-by", "a") as f:
            f.write(f"{os.getpid()}\\n")
        return _binary(self, *args, **kwargs)

    builder.Builder.binary = binary
"""


def test_the_side_process_checks_and_builds_its_binaries_and_an_edit_is_built(project):
    """pytest's process goes on to the items while the side process checks a warm cache;
    the one binary whose source changed is compiled there, and run as it is now."""
    for i in range(3):
        project.write(f"p{i}_test.c", PARENT)
    project.write("conftest.py", PYTEST_PID)
    project.write("checkedby.py", CHECKED_BY)

    def run():
        return project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider", "-p", "checkedby")

    run().assert_outcomes(passed=3)  # cold
    (project.path / "checked-by").unlink()
    project.write("p2_test.c", PARENT.replace("started by", "edited, started by"))
    result = run()
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["ondevice build: 1 compiled, * reused; 1 linked, 2 reused; 3 binaries run*"])
    pytest_pid = int((project.path / "pytest.pid").read_text())
    checked_by = set((project.path / "checked-by").read_text().split())
    assert len(checked_by) == 1 and str(pytest_pid) not in checked_by, (pytest_pid, checked_by)
    assert "edited, started by" in (project.path / "_build/host/logs/p2_test.c.log").read_text()


TRIVIAL = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Trivial) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TESTS_END
"""
SLOW_FOR_AN_EDIT = """#!/bin/sh
# a compiler that takes 1.5 s for a source marked EDITED, and notes when it is done
for a in "$@"; do
  case "$a" in *.c) if grep -q EDITED "$a" 2>/dev/null; then sleep 1.5; date +%s.%N > compiled-at; fi;; esac
done
exec cc "$@"
"""
FIRST_CASE = """
    import os, time
    def pytest_runtest_logstart(nodeid, location):
        if not os.path.exists("first-case-at"):
            open("first-case-at", "w").write(repr(time.time()))
"""


def _with_compiler(project, monkeypatch, script: str, binaries: int) -> tuple[str, ...]:
    """A compiler wrapper as CC and that many trivial test files; a run's arguments (JUnit XML)."""
    wrapper = project.write("cc-wrapper", script)
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    for i in range(binaries):
        project.write(f"p{i:02d}_test.c", TRIVIAL)
    return ("--board=host", "-p", "no:cacheprovider", "--junitxml=j.xml")


def _case_times(project) -> dict[str, float]:
    import xml.etree.ElementTree as ET

    return {c.get("classname"): float(c.get("time")) for c in ET.parse(project.path / "j.xml").iter("testcase")}


def test_a_binary_built_while_pytest_reports_is_waited_for_between_two_items_never_in_one(project, monkeypatch):
    """A warm cache lets pytest go on to the items at once; the one binary whose source
    changed is compiled meanwhile, and pytest waits for it before that binary's first
    case, so the compile is no part of the case's time."""
    # the edited one last: the first is checked long before its compile starts
    args = _with_compiler(project, monkeypatch, SLOW_FOR_AN_EDIT, 20)
    project.write("firstcase.py", FIRST_CASE)

    def run():
        return project.pytester.runpytest_subprocess(*args, "-p", "firstcase")

    run().assert_outcomes(passed=20)
    (project.path / "first-case-at").unlink()
    project.write("p19_test.c", "/* EDITED */\n" + TRIVIAL)
    result = run()
    result.assert_outcomes(passed=20)
    result.stdout.fnmatch_lines(["ondevice build: 1 compiled, * reused; 1 linked, 19 reused; 20 binaries run*"])
    first_case = float((project.path / "first-case-at").read_text())
    compiled = float((project.path / "compiled-at").read_text())
    assert first_case < compiled - 0.5, "pytest waited for the compile before the first case"
    times = _case_times(project)
    assert max(times.values()) < 1.0, times  # the 1.5 s compile went to no case


DIED = "the local binaries stopped running beside pytest: the process running them ended"
KILLS_THE_SIDE_AT_ITS_FIRST_COMPILER = """#!/bin/sh
# the first compile kills the process that ran it (the side process); later, each compile
# takes a second (--version is asked by pytest's process, while it collects)
case "$*" in *" -o "*) ;; *) exec cc "$@";; esac
if mkdir killed-once 2>/dev/null; then kill -9 $PPID; exit 1; fi
sleep 1
exec cc "$@"
"""


def test_a_side_process_that_dies_in_a_cold_build_leaves_the_builds_to_pytest_before_any_case(
    project, monkeypatch
):
    args = _with_compiler(project, monkeypatch, KILLS_THE_SIDE_AT_ITS_FIRST_COMPILER, 3)
    result = project.pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"*{DIED}*"])
    times = _case_times(project)
    assert max(times.values()) < 0.5, times  # the builds of a second each went to no case


KILLS_THE_SIDE_AT_AN_EDIT = """#!/bin/sh
# compiling a source marked EDITED: the first time it kills the process that ran it (the
# side process, pytest having gone on to the items), later it takes 1.5 s
for a in "$@"; do
  case "$a" in *.c) if grep -q EDITED "$a" 2>/dev/null; then
    if mkdir killed-once 2>/dev/null; then kill -9 $PPID; exit 1; fi
    sleep 1.5
  fi;; esac
done
exec cc "$@"
"""


def test_a_side_process_that_dies_after_pytest_went_on_leaves_a_build_to_pytest_before_its_case(
    project, monkeypatch
):
    args = _with_compiler(project, monkeypatch, KILLS_THE_SIDE_AT_AN_EDIT, 20)
    project.pytester.runpytest_subprocess(*args).assert_outcomes(passed=20)
    project.write("p19_test.c", "/* EDITED */\n" + TRIVIAL)
    result = project.pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=20)
    result.stdout.fnmatch_lines([f"*{DIED}*"])
    times = _case_times(project)
    assert max(times.values()) < 1.0, times  # the 1.5 s compile went to no case


KILLS_THE_SIDE_LATE_AT_AN_EDIT = KILLS_THE_SIDE_AT_AN_EDIT.replace(
    "kill -9 $PPID", "sleep 1; kill -9 $PPID"  # by then it waits for this build to run the binary
).replace("sleep 1.5\n", "")


def test_a_binary_the_side_process_died_building_is_a_rerun_that_says_building_not_running(project, monkeypatch):
    args = _with_compiler(project, monkeypatch, KILLS_THE_SIDE_LATE_AT_AN_EDIT, 2)
    project.pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    project.write("p01_test.c", "/* EDITED */\n" + TRIVIAL)
    result = project.pytester.runpytest_subprocess(*args)
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("rerun")) == (2, 1), outcomes
    result.stdout.fnmatch_lines(
        [
            "p01_test.c on host: tried 2 times; its cases' reports: passed",
            "  cut short on host: *(killed by SIGKILL), while it was building this binary beside pytest",
        ]
    )
    out = result.stdout.str()
    assert "while it was running" not in out and "flaky" not in out, out  # its binary had not started
    junit = (project.path / "j.xml").read_text()
    assert 'name="rerun"' in junit and 'name="flaky"' not in junit, junit


def test_the_cache_entries_the_side_process_held_and_its_staging_dirs_are_left_tidy(project):
    project.write("p0_test.c", TRIVIAL)
    project.write("p1_test.c", TRIVIAL.replace("EXPECT_EQ(1, 1);", "EXPECT_EQ(1, 1) syntax error"))
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    v2 = next((project.path / "_cache").rglob("holds")).parent
    assert not list((v2 / "tmp").iterdir()), "a failed build's staging dir was left"
    assert not list((v2 / "holds").iterdir()), "a hold file was left"


def test_the_sessions_own_trim_keeps_what_the_side_process_built_and_used(project):
    """The side process compiles (a miss, so the session trims at its end) and ends first:
    pytest's process holds what it used before that trim, which would otherwise evict
    everything down to ondevice_cache_size."""
    for i in range(3):
        project.write(f"p{i}_test.c", TRIVIAL.replace("EXPECT_EQ(1, 1)", f"EXPECT_EQ({i}, {i})"))
    ini = project.path / "tox.ini"
    ini.write_text(ini.read_text().rstrip("\n") + "\nondevice_cache_size = 1K\n")
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    entries = project.path / "_cache" / store.LAYOUT / "entries"
    kept = sorted(p.name for p in entries.rglob("*_test.c.elf"))
    assert kept == [f"p{i}_test.c.elf" for i in range(3)], kept


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


def test_every_case_still_runs_when_the_side_process_is_killed_and_the_rerun_is_shown(project):
    for i in range(4):
        project.write(f"p{i}_test.c", PARENT)
    project.write("conftest.py", PYTEST_PID)
    project.write("killside.py", KILL_THE_SIDE)  # a plugin: a conftest hooked around tests keeps binaries in step
    result = project.pytester.runpytest_subprocess(
        "--board=host", "-p", "no:cacheprovider", "-p", "killside", "--junitxml=j.xml"
    )
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("rerun")) == (4, 1), outcomes
    junit = (project.path / "j.xml").read_text()
    assert junit.count('name="rerun"') == 1 and "while it was running this binary beside pytest" in junit, junit
    result.stdout.fnmatch_lines(
        ["*the local binaries stopped running beside pytest: the process running them ended (killed by SIGKILL)*"]
    )
    pytest_pid = int((project.path / "pytest.pid").read_text())
    assert _started_by(project, "p0_test") != pytest_pid
    assert [_started_by(project, f"p{i}_test") for i in (1, 2, 3)] == [pytest_pid] * 3


def test_what_the_plugin_made_inside_the_tree_is_not_collected(project):
    """Its build dir and cache hold copies and build outputs, never tests: pytest walking
    them found a copied test source twice, and spent seconds on a large suite's 50,000
    built files. The dirs themselves may be set to a dir of tests: those are collected."""
    project.write("a_test.c", PARENT)
    for where in ("_build/host", "_cache/v2", "_build/coverage-data"):  # the project's ini puts both inside
        project.write(f"{where}/copy/a_test.c", PARENT)
    project.write("_build/mine_test.c", PARENT)  # the user's own, in a dir they named
    result = project.run("--collect-only", "-q")
    listed = sorted(line for line in result.outlines if "::" in line)
    assert listed == ["_build/mine_test.c::Parent[host]", "a_test.c::Parent[host]"], result.stdout.str()


def test_own_dirs_never_hide_the_tree(tmp_path: Path):
    from pytest_ondevice.config.settings import Settings
    from pytest_ondevice.session.activate import own_dirs

    root = tmp_path / "proj"
    root.mkdir()
    settings = Settings(rootdir=root, build_root=root / "_build", jobs=1, cache_dir=tmp_path / "cache")
    found = own_dirs(root, settings, ["host", "rpi"])
    assert {root / "_build" / "host", root / "_build" / "rpi", tmp_path / "cache" / "v2"} <= found
    assert root / "_build" not in found and tmp_path / "cache" not in found
    above = Settings(rootdir=root, build_root=tmp_path, jobs=1)
    assert root not in own_dirs(root, above, ["proj"])  # a board's dir that is the tree itself


WRITES = """
    #include <stdio.h>
    #include <stdlib.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Fails) {
      FILE *f = fopen("%s", "a");
      fprintf(f, "%s\\n");
      fclose(f);
      TF_LITE_MICRO_EXPECT_EQ(1, 2);
    }
    TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.parametrize("stop", ["-x", "--maxfail=2"])
def test_with_x_no_binary_runs_after_the_failure_that_stops_the_session(project, stop):
    ran = project.path / "ran.txt"
    for i in range(8):
        project.write(f"t{i}_test.c", WRITES % (ran, f"t{i}"))
    project.run("--build-only")
    ran.unlink(missing_ok=True)
    result = project.run(stop)
    count = int(re.search(r"(\d+) binar(?:y|ies) run", result.stdout.str()).group(1))
    lines = ran.read_text().split()
    # none runs ahead of its cases when a failure may stop the session: what stopped it ran last
    failures = 1 if stop == "-x" else 2
    assert lines == [f"t{i}" for i in range(failures)] and count == failures, (count, lines)


HANGS_IF_RUN = """
    #include <stdio.h>
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Slow) { fopen("%s", "w"); sleep(20); }
    TF_LITE_MICRO_TESTS_END
"""
SKIPIF_A = """
    import pytest
    def pytest_collection_modifyitems(items):
        for item in items:
            if item.path.name == "a_test.c":
                item.add_marker(pytest.mark.skipif(True, reason="needs the lab"))
"""


def test_a_binary_whose_cases_are_skipped_by_skipif_never_runs(project):
    started = project.path / "started"
    project.write("a_test.c", HANGS_IF_RUN % started)
    project.write("b_test.c", PARENT)
    project.write("conftest.py", SKIPIF_A)
    began = time.monotonic()
    result = project.run()
    result.assert_outcomes(passed=1, skipped=1)
    assert not started.exists() and time.monotonic() - began < 15


NEEDS_ENV = """
    #include <stdlib.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(SeesIt) { TF_LITE_MICRO_EXPECT(getenv("KERNEL_DATA") != NULL); }
    TF_LITE_MICRO_TESTS_END
"""
SETS_ENV = """
    import os
    def pytest_runtest_setup(item):
        if item.path.name == "b_test.c":
            os.environ["KERNEL_DATA"] = "/data"
"""


def test_a_binary_sees_the_environment_its_case_set_up(project, monkeypatch):
    monkeypatch.delenv("KERNEL_DATA", raising=False)
    project.write("a_test.c", PARENT)
    project.write("b_test.c", NEEDS_ENV)
    project.write("c_test.c", PARENT)
    project.write("setsenv.py", SETS_ENV)  # a plugin's hook (a conftest's keeps every binary in step)
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider", "-p", "setsenv")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*the environment changed (KERNEL_DATA); from the 2nd of 3 on*"])


SCRIPTED = """
    def test_echo(device):
        assert device.run(["echo", "hi"]).stdout == "hi\\n"
"""
SLOW = """
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Slow) { usleep(1000 * 1000); }
    TF_LITE_MICRO_TESTS_END
"""


def test_a_scripted_test_gets_the_host_between_binaries(project):
    """With a device test among them, no binary runs ahead of it: it would wait for the
    whole queue of binaries, then time out on its lease."""
    for i in range(4):
        project.write(f"b{i}_test.c", SLOW)
    project.write("a_device_test.py", SCRIPTED)
    result = project.run("--lease-timeout=1", "-rE")
    result.assert_outcomes(passed=5)


SLEEPS = """
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Sleeps) { sleep(30); }
    TF_LITE_MICRO_TESTS_END
"""
KILL_AT_A = KILL_THE_SIDE.replace('item.path.name == "p1_test.c"', 'item.path.name == "a_test.c"').replace(
    "def pytest_runtest_setup(item):", "def pytest_runtest_setup(item):\n        import time; time.sleep(0.5)"
)


def test_a_binary_the_dead_side_process_was_running_does_not_outlive_it(project):
    project.write("a_test.c", SLEEPS)
    project.write("b_test.c", TRIVIAL)  # a single binary runs in pytest's process
    project.write("killside.py", KILL_AT_A)
    result = project.pytester.runpytest_subprocess(
        "--board=host", "-p", "no:cacheprovider", "-p", "killside", "-o", "ondevice_timeout=2"
    )
    result.stdout.fnmatch_lines(["*while it was running this binary beside pytest*"])
    left = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "a_test.c.elf" in cmdline and str(project.path) in cmdline:
            left.append(entry.name)
    assert not left, f"still running: {left}"


READS_DATA = """
    #include <stdio.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(ReadsIt) { TF_LITE_MICRO_EXPECT(fopen("%s", "r") != NULL); }
    TF_LITE_MICRO_TESTS_END
"""
PREPARES = """
    import time
    def pytest_runtest_setup(item):
        if item.path.name == "b_test.c":
            open("%s", "w").write("weights")
        time.sleep(0.3)  # time enough for a binary run ahead to have run
"""


def test_a_binary_runs_after_a_conftest_prepared_its_case(project):
    data = project.path / "data.txt"
    project.write("a_test.c", PARENT)
    project.write("b_test.c", READS_DATA % data)
    project.write("conftest.py", PREPARES % data)
    result = project.run()
    result.assert_outcomes(passed=2)


CHECKS = """
    import os, time
    from pytest_ondevice.run import life

    _build = life.build

    def _timed(engine, spec):
        started = time.monotonic()
        try:
            return _build(engine, spec)
        finally:
            with open("checks", "a") as f:
                f.write(f"{os.getpid()} {spec.source.name} {started} {time.monotonic()}\\n")

    life.build = _timed
"""


def test_a_warm_cache_is_checked_one_binary_at_a_time_and_edits_are_compiled_at_once(project, monkeypatch):
    """A warm check is the interpreter's work: several at once only take turns with the
    runs, and pytest waited for its second binary. Once a check runs a compiler (sources
    changed), the others are built at once, as a cold build is: the edited ones compile
    together, not one after the other."""
    args = _with_compiler(project, monkeypatch, SLOW_FOR_AN_EDIT, 12)
    project.write("checks.py", CHECKS)
    project.pytester.runpytest_subprocess(*args).assert_outcomes(passed=12)
    project.write("conftest.py", PYTEST_PID)

    def side_checks() -> dict[str, tuple[float, float]]:
        pytest_pid = (project.path / "pytest.pid").read_text()
        lines = [line.split() for line in (project.path / "checks").read_text().splitlines()]
        (project.path / "checks").unlink()
        return {name: (float(a), float(b)) for pid, name, a, b in lines if pid != pytest_pid}

    project.pytester.runpytest_subprocess(*args, "-p", "checks").assert_outcomes(passed=12)
    spans = sorted(side_checks().values())
    assert len(spans) == 12
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans)), spans
    edited = ["p03_test.c", "p04_test.c", "p05_test.c"]
    for name in edited:
        project.write(name, "/* EDITED */\n" + TRIVIAL)
    result = project.pytester.runpytest_subprocess(*args, "-p", "checks")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["ondevice build: 3 compiled, *"])
    spans = side_checks()
    assert max(spans[n][0] for n in edited) < min(spans[n][1] for n in edited), spans  # all three at once


ASKED_BY = """#!/bin/sh
# notes which process asked the compiler its version (an xdist worker says which)
case "$*" in *--version*) echo "${PYTEST_XDIST_WORKER:-controller}" >> asked-by;; esac
exec cc "$@"
"""


@pytest.mark.parametrize("distribute", [["-n", "2"], ["--tx", "2*popen", "--dist", "load"]])
def test_only_the_processes_that_build_ask_the_compiler(project, monkeypatch, distribute):
    """An xdist controller builds nothing: its workers ask the compiler, it does not."""
    args = _with_compiler(project, monkeypatch, ASKED_BY, 4)
    project.pytester.runpytest_subprocess(*args, *distribute).assert_outcomes(passed=4)
    asked = (project.path / "asked-by").read_text().split()
    assert asked and "controller" not in asked, asked
