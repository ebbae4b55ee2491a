"""--history at its edges: which runs a report window holds, what each phase's outcome makes
of a case, reruns and the flaky word as they are written and read back, damaged or foreign
files, and a run that cannot be recorded at its end. Found missing by mutation testing."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from test_history import V1_SCHEMA, _rows

from pytest_ondevice.records import history
from pytest_ondevice.records.failmessage import MESSAGE_MAX
from pytest_ondevice.records.history import Bench, HistoryError, Result, Run, append_run, connect, load
from pytest_ondevice.records.recorder import case_name, now

LOST = "pi-1: connection lost after 2.1 s (ssh: EOF)"


def _run(day: int, **kw) -> Run:
    return Run(started=f"2026-11-{day:02d}T02:00:00+00:00", finished=f"2026-11-{day:02d}T02:10:00+00:00", **kw)


def test_a_run_and_its_results_read_back_as_they_were_written(tmp_path):
    db = connect(tmp_path / "h.db")
    run = _run(1, git_rev="f" * 40, git_dirty=False, host="ci-1", args=["--board=rpi"], exitstatus=1)
    results = [
        Result(
            "a_test.c::A[rpi]",
            "A",
            "passed",
            board="rpi",
            device="pi-2",
            binary_sha256="ab" * 32,
            duration=0.5,
            retried_after=LOST,
            reruns=[LOST, LOST],
            flaky="the first attempt crashed",
        ),
        Result("a_test.c::B[rpi]", "B", "failed", board="rpi", device="pi-2", message="1 != 2"),
        Result("a_test.c::C[rpi]", "C", "error", board="rpi"),
        Result("a_test.c::D[rpi]", "D", "skipped", board="rpi"),
        Result("a_test.c::E[rpi]", "E", "passed", board="rpi"),
    ]
    bench = Bench(
        "a_test.c::A[rpi]",
        "A",
        "sum",
        "ns",
        2.0,
        1.0,
        3.0,
        board="rpi",
        us=0.002,
        deterministic=True,
        record={"name": "sum", "work": 100},
    )
    assert append_run(db, run, results, [bench]) == 1 == run.id
    assert run.counts == {"passed": 2, "failed": 1, "error": 1, "skipped": 1}
    assert append_run(db, _run(2, git_dirty=True), [], [Bench("t::B", "B", "x", "ns", 1, 1, 1)]) == 2
    db.close()
    history = load(tmp_path / "h.db")
    first, second = history.runs
    assert (first.git_rev, first.git_dirty, first.host, first.args, first.exitstatus) == (
        "f" * 40,
        False,
        "ci-1",
        ["--board=rpi"],
        1,
    )
    assert first.counts == run.counts and (second.git_dirty, second.args, second.counts["passed"]) == (True, [], 0)
    assert [(r.nodeid, r.run_id) for r in history.results] == [(r.nodeid, 1) for r in results]
    a = history.results[0]
    assert (a.reruns, a.flaky, a.retried_after, a.duration, a.clean) == (
        [LOST, LOST],
        "the first attempt crashed",
        LOST,
        0.5,
        False,
    )
    assert history.results[4].reruns == [] and history.results[4].flaky is None and history.results[4].clean
    assert _rows(tmp_path / "h.db", "SELECT reruns FROM results WHERE case_name = 'E'") == [(None,)]
    assert (history.benches[0].record, history.benches[0].deterministic, history.benches[0].us) == (
        {"name": "sum", "work": 100},
        True,
        0.002,
    )
    assert (history.benches[1].record, history.benches[1].deterministic, history.damaged) == (None, False, [])


def test_what_a_run_did_not_say_reads_back_as_unknown(tmp_path):
    """A plain Python test names no board, device or binary: the report must not take "" for one."""
    db = connect(tmp_path / "h.db")
    append_run(
        db, _run(1), [Result("t.py::test_x", "test_x", "passed")], [Bench("t.py::test_x", "test_x", "b", "ns", 1, 1, 1)]
    )
    db.close()
    history = load(tmp_path / "h.db")
    (run,), (result,), (bench,) = history.runs, history.results, history.benches
    assert (run.git_rev, run.git_dirty, run.host, run.exitstatus, run.args) == (None, None, None, None, [])
    fields = ("board", "device", "binary_sha256", "message", "retried_after", "flaky")
    assert [getattr(result, f) for f in fields] == [None] * 6
    assert (result.duration, result.reruns, result.clean) == (0.0, [], True)
    assert (bench.board, bench.device, bench.binary_sha256, bench.us, bench.record, bench.deterministic) == (
        None,
        None,
        None,
        None,
        None,
        False,
    )
    assert history.damaged == []


def test_the_window_is_the_last_runs_started_whatever_order_they_were_appended_in(tmp_path):
    """Nightlies per board append to one file: the one started first may finish last."""
    db = connect(tmp_path / "h.db")
    for day in (3, 1, 4, 2):
        append_run(db, _run(day, host=f"night-{day}"), [Result(f"t::C{day}", f"C{day}", "passed")], [])
    db.close()
    history = load(tmp_path / "h.db", last=2)
    assert [r.host for r in history.runs] == ["night-3", "night-4"] and history.total_runs == 4
    assert sorted(r.case_name for r in history.results) == ["C3", "C4"]
    assert [r.host for r in load(tmp_path / "h.db").runs] == ["night-1", "night-2", "night-3", "night-4"]


def test_a_damaged_value_is_named_shortened_and_replaced(tmp_path):
    db = connect(tmp_path / "h.db")
    append_run(db, _run(1), [Result("t::A", "A", "passed")], [Bench("t::A", "A", "x", "ns", 1, 1, 1, record={})])
    db.close()
    with sqlite3.connect(tmp_path / "h.db") as raw:
        raw.execute("UPDATE runs SET args = ?", ('{"board": "rpi"}',))
        raw.execute("UPDATE results SET reruns = ?", ('"' + "y" * 100 + '"',))
        raw.execute("UPDATE benches SET record = '[1]'")
    history = load(tmp_path / "h.db")
    path, cut = tmp_path / "h.db", repr('"' + "y" * 59)  # the first 60 characters
    assert history.damaged == [
        f'{path}: runs row id=1, column args is not a list of strings (\'{{"board": "rpi"}}\'); read as no arguments',
        f"{path}: results rowid=1 (t::A, run 1), column reruns is not a list of strings ({cut}); "
        "its reruns are not shown",
        f"{path}: benches rowid=1 (x, run 1), column record is not a JSON object ('[1]'); its median, min and max "
        "are still used",
    ]
    assert (history.runs[0].args, history.results[0].reruns, history.benches[0].record) == ([], [], None)


@pytest.mark.parametrize(("version", "says"), [(0, "0"), (4, "4"), ("'2'", "2")])
def test_a_history_of_a_schema_version_we_cannot_read_is_refused_naming_it(tmp_path, version, says):
    path = tmp_path / "h.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(f"CREATE TABLE meta (schema_version); INSERT INTO meta VALUES ({version});")
    for use in (connect, load):
        with pytest.raises(HistoryError) as e:
            use(path)
        assert str(e.value) == (
            f"{path}: history schema version {says}, this pytest-ondevice reads version 3 (written by another "
            "version: use a new file, or that version)"
        )


def test_a_database_of_something_else_is_refused_naming_its_tables(tmp_path):
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as raw:
        raw.executescript("CREATE TABLE todo (x); CREATE TABLE notes (x);")
    with pytest.raises(HistoryError) as e:
        load(path)
    assert str(e.value) == f"{path}: a SQLite database, but not a pytest-ondevice history (tables: notes, todo)"
    path.write_bytes(b"not sqlite at all\n" * 100)
    with pytest.raises(HistoryError) as e:
        load(path)
    assert str(e.value) == f"{path}: not a pytest-ondevice history file (file is not a database)"


def test_a_version_1_history_is_migrated_once_and_then_holds_reruns(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(V1_SCHEMA)
    for _ in range(2):  # the second connect finds version 3: nothing to add again
        db = connect(path)
        append_run(db, _run(2), [Result("t::A", "A", "passed", reruns=[LOST], flaky="lucky")], [])
        db.close()
    assert _rows(path, "SELECT schema_version FROM meta") == [(3,)]
    history = load(path)
    assert [(r.reruns, r.flaky) for r in history.results] == [([], None), ([LOST], "lucky"), ([LOST], "lucky")]


def test_a_run_opening_an_old_history_while_another_run_writes_it_waits_for_it(tmp_path):
    """SQLite refuses the switch to WAL at once, without waiting, while another connection holds
    the write lock (another nightly migrating a version-1 file): the run waits as for any lock."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(V1_SCHEMA)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, other.execute, ["COMMIT"]).start()
    started = time.monotonic()
    db = connect(path)
    assert 0.3 <= time.monotonic() - started < 1.0  # tried again every 50 ms
    assert append_run(db, _run(2), [], []) == 2
    db.close()
    other.close()


def test_a_run_that_never_gets_the_lock_gives_up_at_the_busy_timeout_naming_the_file(tmp_path, monkeypatch):
    """The wait for the switch to WAL ends with the busy timeout (60 s; 0.3 s here), as SQLite's
    own wait does: a history held forever by another process stops the run, it does not hang it."""
    monkeypatch.setattr(history, "BUSY_TIMEOUT", 0.3)
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as raw:
        raw.executescript(V1_SCHEMA)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    said: list[str] = []

    def open_it() -> None:
        try:
            connect(path).close()
        except HistoryError as e:
            said.append(str(e))

    attempt = threading.Thread(target=open_it, daemon=True)
    started = time.monotonic()
    attempt.start()
    attempt.join(5)
    waited = time.monotonic() - started
    other.close()  # lets a run that would wait forever go
    assert not attempt.is_alive() and 0.3 <= waited < 2.0
    (message,) = said
    assert message.startswith(f"{path}: ") and message.endswith("(database is locked)")
    assert "held the history locked for the whole busy timeout (0.3 s)" in message and "not a usable" not in message
    assert _rows(path, "SELECT schema_version FROM meta") == [(1,)]  # not migrated by the run that gave up


def test_an_empty_file_is_an_empty_history_and_a_missing_parent_is_made(tmp_path):
    (tmp_path / "empty.db").write_bytes(b"")
    history = load(tmp_path / "empty.db")
    assert (history.runs, history.results, history.benches, history.total_runs, history.damaged) == ([], [], [], 0, [])
    connect(tmp_path / "new" / "dir" / "h.db").close()
    assert load(tmp_path / "new" / "dir" / "h.db").total_runs == 0


def test_a_history_file_whose_directory_cannot_be_made_names_it(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(HistoryError) as e:
        connect(tmp_path / "file" / "h.db")
    assert str(e.value).startswith(f"{tmp_path}/file/h.db: cannot open the history file ([Errno 17] File exists")


def test_a_parameter_id_of_none_is_part_of_the_case_name():
    assert case_name("t.py::test_x[None]", None) == "test_x[None]"


def test_now_is_utc_to_the_second():
    stamp = now()
    assert len(stamp) == len("2026-11-01T02:00:00+00:00") and stamp.endswith("+00:00")


# -- the recorder: what each phase's outcome makes of a case ---------------------------------

PHASES = """
    import json, time
    import pytest

    @pytest.fixture
    def breaks_after():
        yield
        raise RuntimeError("the rig did not power down")

    def test_teardown_breaks(breaks_after):
        pass

    def test_both_break(breaks_after):
        assert 1 == 2

    def test_says_a_lot():
        assert "x" * 2000 == "y"

    def test_skips():
        pytest.skip("no FPU on this board")

    def test_loses_its_device(record_property):  # as a scripted test's device fixture says it
        from pytest_ondevice.config.keys import INFRASTRUCTURE_PROPERTY

        record_property(INFRASTRUCTURE_PROPERTY, "pi-1: the link went")
        raise ConnectionError("the link went")

    def test_rerun_then_passes(record_property):
        record_property("rerun", "pi-1: connection lost after 2.1 s (ssh: EOF)")
        record_property("flaky", "the attempt on pi-1 ended in a crash of the binary")
        record_property("retried_after", "pi-1: connection lost after 2.1 s (ssh: EOF)")
        record_property("device", "pi-2")

    def test_takes_a_while(record_property):
        time.sleep(0.3)
        record_property("device", "pi-2")
        bench = {"name": "sum", "unit": "ns", "median": 2.0, "min": 1.0, "max": 3.0, "us": 0.002}
        record_property("ondevice_bench", json.dumps({**bench, "device_name": "pi-3", "deterministic": True}))
        record_property("ondevice_bench", json.dumps({**bench, "name": "sum2"}))
"""


def test_each_phase_decides_the_recorded_outcome_and_a_message_is_kept_short(project):
    project.write("test_phases.py", PHASES)
    project.run("--history=h.db")
    got = {r.case_name: r for r in load(project.path / "h.db").results}
    assert {n: r.outcome for n, r in got.items()} == {
        "test_teardown_breaks": "error",
        "test_both_break": "failed",  # the code's verdict comes first
        "test_says_a_lot": "failed",
        "test_skips": "skipped",
        "test_loses_its_device": "error",  # the device failed the call, not the code
        "test_rerun_then_passes": "passed",
        "test_takes_a_while": "passed",
    }
    assert "the rig did not power down" in got["test_teardown_breaks"].message
    assert got["test_both_break"].message.startswith("assert 1 == 2")  # the exception first, then the traceback
    assert "ConnectionError: the link went" in got["test_loses_its_device"].message
    says = got["test_says_a_lot"].message
    assert len(says) <= MESSAGE_MAX and says.startswith("AssertionError: assert 'xxx")
    assert got["test_skips"].message == "Skipped: no FPU on this board"
    rerun = got["test_rerun_then_passes"]
    assert (rerun.reruns, rerun.flaky, rerun.message) == (
        [LOST],
        "the attempt on pi-1 ended in a crash of the binary",
        None,
    )
    assert rerun.retried_after == LOST and rerun.device == "pi-2"
    assert got["test_takes_a_while"].duration >= 0.3  # setup, call and teardown together
    assert all(0 < r.duration < 1.0 for n, r in got.items() if n != "test_takes_a_while")
    benches = {b.name: b for b in load(project.path / "h.db").benches}
    assert (benches["sum"].device, benches["sum"].us, benches["sum"].deterministic) == ("pi-3", 0.002, True)
    assert (benches["sum2"].device, benches["sum2"].deterministic) == ("pi-2", False)  # the item's device


def test_a_source_that_cannot_be_collected_is_an_error_of_its_own(project):
    project.write("test_fine.py", "def test_fine():\n    pass\n")
    project.write("test_broken.py", "def test_broken(:\n")
    project.run("--history=h.db", "--continue-on-collection-errors")
    got = {r.nodeid: r for r in load(project.path / "h.db").results}
    assert {n: r.outcome for n, r in got.items()} == {"test_broken.py": "error", "test_fine.py::test_fine": "passed"}
    assert got["test_broken.py"].message and got["test_broken.py"].duration < 1.0  # its traceback, cut short


SPOIL_AT_THE_END = """
    import pytest
    from pathlib import Path

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(session):  # something else writes over the file meanwhile
        Path("h.db").write_bytes(b"not a database, a note " * 100)
"""


def test_a_run_that_cannot_be_recorded_at_its_end_says_so_in_its_summary(project):
    project.write("test_one.py", "def test_one():\n    pass\n")
    project.write("conftest.py", SPOIL_AT_THE_END)
    result = project.run("--history=h.db")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ondevice history: this run was NOT recorded: *h.db: not a usable *history file*"])
    assert "appended" not in result.stdout.str()


def test_a_coverage_runs_figures_are_added_to_the_plain_run_of_its_night_once(tmp_path, capsys):
    """examples/nightly/run.sh: the night's verdicts and latency come from a plain build, its
    coverage from a gcov build run after it; the report shows one night with both."""
    main, covered = tmp_path / "history.db", tmp_path / "coverage-history.db"
    for day in (1, 2):
        db = connect(main)
        append_run(db, _run(day, host="farm", git_rev=f"rev{day}"), [Result("t::A", "A", "passed")], [])
        db.close()
    db = connect(covered)
    figures = [history.Coverage(None, None, 8, 10), history.Coverage("rpi", "k.c", 4, 5)]
    run = Run(started="2026-11-02T02:20:00+00:00", finished="2026-11-02T02:30:00+00:00", host="farm", git_rev="rev2")
    append_run(db, run, [Result("t::A", "A", "passed")], [], figures)
    db.close()
    assert history.main(["add-coverage", str(covered), str(main)]) == 0
    assert (
        capsys.readouterr().out
        == f"ondevice history: 2 coverage figures of run 1 of {covered} added to run 2 of {main}\n"
    )
    assert [(c.run_id, c.board, c.line_covered) for c in load(main).coverage] == [(2, None, 8), (2, "rpi", 4)]
    assert history.main(["add-coverage", str(covered), str(main)]) == 1  # never twice
    assert capsys.readouterr().err == f"ondevice history: {main}: run 2 already has coverage figures\n"
    with pytest.raises(HistoryError, match=r"no run from host farm at revision rev2 started by 2026-11-02T02:20"):
        history.add_coverage(covered, tmp_path / "elsewhere.db")
