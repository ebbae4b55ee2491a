"""--history: what a run appends (outcomes as a user sees them, board, device, binary hash,
latency), appends from runs at once, and a file that is not a history."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys

import pytest
from conftest import QUIET

from pytest_ondevice.records.history import Bench, Result, Run, append_run, connect, load
from pytest_ondevice.records.recorder import case_name, git_state

MIXED = """
    #include <stdint.h>
    #include "micro_test.h"
    static volatile int32_t acc;
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(AddsUp) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
    TF_LITE_MICRO_TEST(OffByOne) {
      int got = 41;
      TF_LITE_MICRO_EXPECT_EQ(got, 42);
    }
    TF_LITE_MICRO_TEST(NeedsFpu) { TF_LITE_MICRO_SKIP("no FPU on this board"); }
    TF_LITE_MICRO_TEST(SumsFast) {
      ONDEVICE_BENCH("sum_100", 100, 5) {  /* runs as often as the clock needs: the same result each time */
        acc = 0;
        for (int i = 0; i < 100; i++) acc += i;
      }
      TF_LITE_MICRO_EXPECT(acc > 0);
    }
    TF_LITE_MICRO_TESTS_END
"""

PYTHON_TESTS = """
    import pytest

    @pytest.fixture
    def rig():
        raise RuntimeError("rig is unplugged")

    def test_plain():
        pass

    def test_needs_rig(rig):
        pass
"""


def _rows(db_path, sql: str) -> list[tuple]:
    with sqlite3.connect(db_path) as db:
        return db.execute(sql).fetchall()


def test_a_run_records_each_outcome_as_the_user_saw_it_with_board_device_hash_and_latency(project):
    project.write("mixed_test.c", MIXED)
    project.write("test_plain.py", PYTHON_TESTS)
    project.write("broken/cfg_test.c", MIXED)
    project.write("broken/ondevice.toml", "timeout = 0\n")  # a configuration error: its items are errors
    result = project.run("--history=out/h.db")
    result.assert_outcomes(passed=3, failed=1, skipped=1, errors=5)
    result.stdout.fnmatch_lines(["ondevice history: run 1 appended to *h.db"])

    history = load(project.path / "out" / "h.db")
    assert len(history.runs) == history.total_runs == 1
    run = history.runs[0]
    assert run.counts == {"passed": 3, "failed": 1, "error": 5, "skipped": 1}
    assert run.exitstatus == 1 and run.args[:2] == ["--board=host", "-p"] and "--history=out/h.db" in run.args
    assert run.git_rev is None and run.git_dirty is None  # pytester's directory is no git checkout
    assert run.started <= run.finished and run.host

    got = {r.nodeid: r for r in history.results}
    assert {n: r.outcome for n, r in got.items()} == {
        "mixed_test.c::AddsUp[host]": "passed",
        "mixed_test.c::OffByOne[host]": "failed",
        "mixed_test.c::NeedsFpu[host]": "skipped",
        "mixed_test.c::SumsFast[host]": "passed",
        "broken/cfg_test.c::AddsUp[host]": "error",
        "broken/cfg_test.c::OffByOne[host]": "error",
        "broken/cfg_test.c::NeedsFpu[host]": "error",
        "broken/cfg_test.c::SumsFast[host]": "error",
        "test_plain.py::test_plain": "passed",
        "test_plain.py::test_needs_rig": "error",
    }
    failed = got["mixed_test.c::OffByOne[host]"]
    assert (failed.case_name, failed.board, failed.device) == ("OffByOne", "host", "host")
    assert len(failed.binary_sha256) == 64
    assert {r.binary_sha256 for n, r in got.items() if n.startswith("mixed")} == {failed.binary_sha256}
    assert "got == 42 failed at mixed_test.c:9 (41 vs 42)" in failed.message
    assert got["mixed_test.c::NeedsFpu[host]"].message == "Skipped: no FPU on this board"
    assert got["mixed_test.c::AddsUp[host]"].message is None
    assert got["mixed_test.c::AddsUp[host]"].duration > 0
    assert "timeout" in got["broken/cfg_test.c::AddsUp[host]"].message
    plain = got["test_plain.py::test_needs_rig"]
    assert (plain.board, plain.device, plain.binary_sha256, plain.case_name) == (None, None, None, "test_needs_rig")
    assert "rig is unplugged" in plain.message

    (bench,) = latency(history.benches)
    assert {b.name for b in history.benches if b.unit == "bytes"} >= {"stack:AddsUp", "stack:SumsFast"}
    assert (bench.name, bench.case_name, bench.board, bench.device, bench.unit) == (
        "sum_100",
        "SumsFast",
        "host",
        "host",
        "ns",
    )
    assert bench.binary_sha256 == failed.binary_sha256 and bench.min <= bench.median <= bench.max
    assert bench.deterministic is False and bench.record["work"] == 100

    project.run("--history=out/h.db", "mixed_test.c")  # a second run appends
    again = load(project.path / "out" / "h.db")
    assert [r.id for r in again.runs] == [1, 2] and len(again.results) == 14 and len(latency(again.benches)) == 2
    assert [r.id for r in load(project.path / "out" / "h.db", last=1).runs] == [2]


def latency(benches: list) -> list:
    """The latency records (each case also has its stack high-water, unit bytes: test_stack.py)."""
    return [b for b in benches if b.unit != "bytes"]


def test_under_xdist_the_controller_records_every_case_once(project):
    project.write("mixed_test.c", MIXED)
    project.write("other_test.c", MIXED)
    project.run("-n", "2", "--history=h.db").assert_outcomes(passed=4, failed=2, skipped=2)
    history = load(project.path / "h.db")
    assert len(history.results) == 8 and len(latency(history.benches)) == 2
    assert all(r.device == "host" and r.binary_sha256 for r in history.results)


def test_two_pytest_runs_appending_at_once_are_both_complete(project):
    project.write("mixed_test.c", MIXED)
    runs = []
    for i in range(2):  # each its own build dir: two nightlies of different checkouts
        cmd = [sys.executable, "-m", "pytest", "--board=host", "-p", "no:cacheprovider", *QUIET, "--history=h.db"]
        cmd += [f"-o=ondevice_build_dir={project.path / f'_build{i}'}", "mixed_test.c"]
        runs.append(subprocess.Popen(cmd, cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for proc in runs:
        out = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == 1, out  # OffByOne fails
        assert "ondevice history: run" in out, out
    history = load(project.path / "h.db")
    assert len(history.runs) == 2
    for run in history.runs:
        assert run.counts == {"passed": 2, "failed": 1, "error": 0, "skipped": 1}
        assert len([r for r in history.results if r.run_id == run.id]) == 4
        assert len([b for b in latency(history.benches) if b.run_id == run.id]) == 1


WRITERS, ROWS = 4, 400


def _append_together(path, barrier, n: int) -> None:
    db = connect(path)
    run = Run(started=f"2026-11-2{n}T01:00:00+00:00", finished=f"2026-11-2{n}T01:10:00+00:00", host=f"w{n}")
    results = [Result(f"t_test.c::C{i}[b{n}]", f"C{i}", "passed", board=f"b{n}") for i in range(ROWS)]
    barrier.wait()  # every writer asks for the lock at the same moment
    append_run(db, run, results, [])
    db.close()


def test_writers_appending_at_the_same_moment_all_land(tmp_path):
    path = tmp_path / "h.db"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_append_together, args=(path, barrier, n)) for n in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    history = load(path)
    assert sorted(r.host for r in history.runs) == [f"w{n}" for n in range(WRITERS)]
    assert all(r.counts["passed"] == ROWS for r in history.runs)
    assert _rows(path, "SELECT run_id, COUNT(*) FROM results GROUP BY run_id") == [(i, ROWS) for i in range(1, 5)]
    assert _rows(path, "PRAGMA journal_mode") == [("wal",)]


@pytest.mark.parametrize(
    "content, says",
    [
        (b"this is not a database, it is a note\n" * 50, "not a usable pytest-ondevice history file"),
        ("sql:CREATE TABLE notes (x)", "a SQLite database, but not a pytest-ondevice history (tables: notes)"),
        ("sql:CREATE TABLE meta (schema_version); INSERT INTO meta VALUES (99)", "history schema version 99"),
    ],
)
def test_a_file_that_is_not_our_history_is_a_usage_error_naming_it(project, content, says):
    project.write("mixed_test.c", MIXED)
    path = project.path / "h.db"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        with sqlite3.connect(path) as db:
            db.executescript(content.removeprefix("sql:"))
    before = path.read_bytes()
    result = project.run("--history=h.db")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --history: {path}: *{says}*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not list((project.path / "_build").glob("*/*")), "nothing is built for a run that cannot be recorded"
    assert path.read_bytes() == before  # never "repaired" by writing over someone's file


def test_case_names_lose_only_our_board_suffix():
    assert case_name("a/x_test.c::Gemm.Int8[bluepill-qemu]", "bluepill-qemu") == "Gemm.Int8"
    assert case_name("test_p.py::test_x[bluepill-qemu]", None) == "test_x[bluepill-qemu]"
    assert case_name("test_p.py::Class::test_y[1-2]", None) == "test_y[1-2]"


def test_the_revision_is_heads_with_a_dirty_flag_and_none_outside_a_checkout(tmp_path):
    assert git_state(tmp_path) == (None, None)
    git = ["git", "-c", "user.name=n", "-c", "user.email=n@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.c").write_text("int a;\n")
    subprocess.run([*git, "add", "a.c"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "a"], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert git_state(tmp_path) == (head, False)
    (tmp_path / "a.c").write_text("int b;\n")
    assert git_state(tmp_path) == (head, True)


RERUN_CONFTEST = """
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_setup(item):  # as the run side says it: after the item's own setup
        if getattr(item, "case", None) == "AddsUp":
            item.user_properties.append(("rerun", "host: connection lost (ssh: EOF)"))
            item.user_properties.append(("rerun", "host: connection lost (ssh: EOF)"))
            item.user_properties.append(("rerun", "pi-2: device unreachable"))
            item.user_properties.append(("flaky", "the first attempt crashed before the connection dropped"))
"""


def test_reruns_of_a_binary_are_recorded_once_per_extra_attempt_with_device_and_cause(project):
    project.write("mixed_test.c", MIXED)
    project.write("conftest.py", RERUN_CONFTEST)
    project.run("--history=h.db").assert_outcomes(passed=2, failed=1, skipped=1)
    got = {r.case_name: r for r in load(project.path / "h.db").results}
    adds_up = got["AddsUp"]
    assert adds_up.outcome == "passed"
    assert adds_up.reruns == [  # setup, call and teardown each carry them: still three, one per attempt
        "host: connection lost (ssh: EOF)",
        "host: connection lost (ssh: EOF)",
        "pi-2: device unreachable",
    ]
    assert adds_up.flaky == "the first attempt crashed before the connection dropped"
    assert not adds_up.clean
    assert got["SumsFast"].reruns == [] and got["SumsFast"].flaky is None and got["SumsFast"].clean


V1_SCHEMA = """
CREATE TABLE meta (schema_version INTEGER NOT NULL);
INSERT INTO meta VALUES (1);
CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT NOT NULL, finished TEXT NOT NULL, git_rev TEXT,
    git_dirty INTEGER, host TEXT, args TEXT, exitstatus INTEGER, passed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0, error INTEGER NOT NULL DEFAULT 0, skipped INTEGER NOT NULL DEFAULT 0);
CREATE TABLE results (run_id INTEGER NOT NULL REFERENCES runs(id), nodeid TEXT NOT NULL, case_name TEXT NOT NULL,
    board TEXT, device TEXT, binary_sha256 TEXT, outcome TEXT NOT NULL, duration REAL, message TEXT,
    retried_after TEXT);
CREATE TABLE benches (run_id INTEGER NOT NULL REFERENCES runs(id), nodeid TEXT NOT NULL, case_name TEXT NOT NULL,
    board TEXT, device TEXT, binary_sha256 TEXT, name TEXT NOT NULL, unit TEXT, median REAL, min REAL, max REAL,
    us REAL, deterministic INTEGER, record TEXT);
INSERT INTO runs VALUES (1, '2026-11-01T02:00:00+00:00', '2026-11-01T02:10:00+00:00', NULL, NULL, 'h', '[]', 0,
    1, 0, 0, 0);
INSERT INTO results VALUES (1, 'a_test.c::A[host]', 'A', 'host', 'host', 'ab', 'passed', 0.1, NULL, NULL);
"""


def test_a_version_1_history_is_read_as_it_is_and_migrated_by_the_next_run_that_appends(project):
    path = project.path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(V1_SCHEMA)
    (old,) = load(path).results  # read-only: nothing written
    assert (old.nodeid, old.outcome, old.reruns, old.flaky) == ("a_test.c::A[host]", "passed", [], None)
    assert _rows(path, "SELECT schema_version FROM meta") == [(1,)]

    project.write("mixed_test.c", MIXED)
    project.write("conftest.py", RERUN_CONFTEST)
    result = project.run("--history=old.db")
    result.stdout.fnmatch_lines(["ondevice history: run 2 appended to *old.db"])
    assert _rows(path, "SELECT schema_version FROM meta") == [(3,)]
    history = load(path)
    assert [r.id for r in history.runs] == [1, 2] and len(history.results) == 5
    by_run = {(r.run_id, r.case_name): r for r in history.results}
    assert by_run[(1, "A")].reruns == [] and by_run[(2, "AddsUp")].reruns[-1] == "pi-2: device unreachable"


V2_SCHEMA = (
    V1_SCHEMA.replace("INSERT INTO meta VALUES (1);", "INSERT INTO meta VALUES (2);")
    + """
ALTER TABLE results ADD COLUMN reruns TEXT;
ALTER TABLE results ADD COLUMN flaky TEXT;
INSERT INTO benches VALUES (1, 'a_test.c::A[host]', 'A', 'host', 'host', 'ab', 'k', 'ns', 110.0, 100.0, 130.0,
    0.11, 0, '{"name": "k"}');
"""
)


def test_a_version_2_history_reads_its_benches_as_plain_and_keeps_them_plain_when_migrated(tmp_path):
    """Schema 3 added each bench record's build (variant): an older file's records were taken
    as latency, and read as plain, before and after the next run migrates the file."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(V2_SCHEMA)
    (old,) = load(path).benches  # read-only: nothing written
    assert (old.name, old.median, old.variant, old.record) == ("k", 110.0, "plain", {"name": "k"})
    assert _rows(path, "SELECT schema_version FROM meta") == [(2,)]
    db = connect(path)
    gcov = Bench("a_test.c::A[host]", "A", "k", "ns", 150.0, 140.0, 160.0, run_id=None, variant="gcov")
    append_run(db, Run(started="2026-11-02T02:00:00+00:00", finished="2026-11-02T02:10:00+00:00"), [], [gcov])
    db.close()
    assert _rows(path, "SELECT schema_version FROM meta") == [(3,)]
    assert _rows(path, "SELECT run_id, variant FROM benches ORDER BY run_id") == [(1, "plain"), (2, "gcov")]
    assert [(b.run_id, b.variant) for b in load(path, records=False).benches] == [(1, "plain"), (2, "gcov")]


COVERED_KERNEL = """
    #include <stdint.h>
    __attribute__((noinline)) static int32_t dot(const int8_t *a, const int8_t *b, int n) {
      int32_t acc = 0;
      for (int k = 0; k < n; k++) acc += a[k] * b[k];
      return acc;
    }
    int32_t sum_dots(const int8_t *a, const int8_t *b, int n) {
      int32_t total = 0;
      for (int i = 0; i < n; i++) total += dot(a + i, b, n);
      return total;
    }
"""
COVERED_TEST = """
    #include <stdint.h>
    #include "micro_test.h"
    int32_t sum_dots(const int8_t *a, const int8_t *b, int n);
    static int8_t a[64], b[32];
    static volatile int32_t out;
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Dots) {
      ONDEVICE_BENCH("sum_dots", 32 * 32, 5) { out = sum_dots(a, b, 32); }
      TF_LITE_MICRO_EXPECT_EQ(out, 0);
    }
    TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.slow
def test_a_coverage_runs_benches_are_stored_as_the_gcov_build_and_a_plain_runs_as_plain(project):
    """Issue 50, 3: a coverage night's figures (the instrumented build's) were stored as latency."""
    project.write("dots.c", COVERED_KERNEL)
    project.write("dots_test.c", COVERED_TEST)
    project.write("ondevice.toml", 'sources = ["dots.c"]\n')
    project.run("--history=h.db", board="bluepill-qemu").assert_outcomes(passed=1)
    project.run("--history=h.db", "--ondevice-coverage", board="bluepill-qemu").assert_outcomes(passed=1)
    rows = _rows(project.path / "h.db", "SELECT run_id, name, variant, median FROM benches ORDER BY run_id, name")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (1, "stack:Dots", "plain"),
        (1, "sum_dots", "plain"),
        (2, "stack:Dots", "gcov"),
        (2, "sum_dots", "gcov"),
    ]
    assert rows[3][3] > rows[1][3]  # the instrumentation counted: kept apart from the plain figure
    latency = [b for b in load(project.path / "h.db").benches if b.name == "sum_dots"]
    assert [(b.variant, b.record["variant"]) for b in latency] == [("plain", "plain"), ("gcov", "gcov")]
