"""The history file: the SQLite store `--history` appends each run to, and that
`pytest-ondevice report` and `pytest-ondevice bisect --history` read (what a session's
reports become is records/recorder.py's).

Several runs may append to one file at once (nightlies per board, a fleet's workers'
controllers): WAL mode, a long busy timeout, and one BEGIN IMMEDIATE transaction per run,
written at the end so a run that dies halfway leaves nothing half-recorded.

Schema version 2 added what a case's reruns were (a pass after a rerun is no clean pass);
version 3 the build each bench record was measured on (its variant: "plain", or "gcov" and
the like for an instrumented build, whose figures are not latency). An older file is
migrated by the first run that appends to it, and read as it is (its records plain).
A value a reader cannot decode (a damaged JSON column) is skipped and named, never fatal."""

from __future__ import annotations

import gc
import json
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

SCHEMA_VERSION = 3
BUSY_TIMEOUT = 60.0  # seconds another run may hold the write lock before we give up
OUTCOMES = ("passed", "failed", "error", "skipped")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (schema_version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started TEXT NOT NULL,
    finished TEXT NOT NULL,
    git_rev TEXT,
    git_dirty INTEGER,
    host TEXT,
    args TEXT,
    exitstatus INTEGER,
    passed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    error INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS results (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    case_name TEXT NOT NULL,
    board TEXT,
    device TEXT,
    binary_sha256 TEXT,
    outcome TEXT NOT NULL,
    duration REAL,
    message TEXT,
    retried_after TEXT,
    reruns TEXT,
    flaky TEXT
);
CREATE TABLE IF NOT EXISTS benches (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    case_name TEXT NOT NULL,
    board TEXT,
    device TEXT,
    binary_sha256 TEXT,
    name TEXT NOT NULL,
    unit TEXT,
    median REAL,
    min REAL,
    max REAL,
    us REAL,
    deterministic INTEGER,
    record TEXT,
    variant TEXT NOT NULL DEFAULT 'plain'
);
CREATE TABLE IF NOT EXISTS coverage (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    board TEXT,
    file TEXT,
    line_covered INTEGER,
    line_total INTEGER,
    function_covered INTEGER,
    function_total INTEGER,
    branch_covered INTEGER,
    branch_total INTEGER
);
CREATE TABLE IF NOT EXISTS bisections (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    board TEXT,
    metric TEXT,
    good_rev TEXT,
    bad_rev TEXT,
    first_bad TEXT,
    subject TEXT,
    steps INTEGER,
    status TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS results_run ON results(run_id);
CREATE INDEX IF NOT EXISTS coverage_run ON coverage(run_id);
CREATE INDEX IF NOT EXISTS benches_run ON benches(run_id);
"""
# (the coverage and bisections tables came later without a new version: added tables older readers ignore)
# what each version added, to bring an older file up to SCHEMA_VERSION
MIGRATIONS = {
    2: (
        "ALTER TABLE results ADD COLUMN reruns TEXT",  # JSON list of "device: cause", one per extra attempt
        "ALTER TABLE results ADD COLUMN flaky TEXT",  # why the pass may be the binary's luck
    ),
    3: ("ALTER TABLE benches ADD COLUMN variant TEXT NOT NULL DEFAULT 'plain'",),  # the records before: plain
}


class HistoryError(Exception):
    """The history file cannot be used: said in one line, naming the file."""


@dataclass
class Run:
    started: str  # UTC, ISO 8601
    finished: str
    git_rev: str | None = None
    git_dirty: bool | None = None
    host: str | None = None
    args: list[str] = field(default_factory=list)
    exitstatus: int | None = None
    counts: dict[str, int] = field(default_factory=dict)  # outcome -> results (filled by append and load)
    id: int | None = None


@dataclass
class Result:
    nodeid: str
    case_name: str
    outcome: str  # passed, failed, error (setup or teardown: the device, not the code), skipped
    board: str | None = None  # None: a plain Python test
    device: str | None = None
    binary_sha256: str | None = None
    duration: float = 0.0
    message: str | None = None
    retried_after: str | None = None  # "device: error; ..." of devices that failed before this one ran it
    run_id: int | None = None
    reruns: list[str] = field(default_factory=list)  # "device: cause" per extra attempt of its binary
    flaky: str | None = None  # the run's own word that this verdict came after an attempt the binary may have caused

    @property
    def clean(self) -> bool:
        """A verdict from one attempt: no rerun, nothing said to be flaky."""
        return not self.reruns and not self.flaky


@dataclass
class Bench:
    nodeid: str
    case_name: str
    name: str
    unit: str
    median: float
    min: float
    max: float
    board: str | None = None
    device: str | None = None
    binary_sha256: str | None = None
    us: float | None = None
    deterministic: bool = False
    record: dict | None = None  # the record as the report carried it
    run_id: int | None = None
    variant: str = "plain"  # the build: "plain" (latency), or what instrumented it ("gcov", ...): never mixed


@dataclass
class Coverage:
    """--ondevice-coverage's figures of a run: a board's (None: all boards together), of the
    whole report (file None) or of one source file (its path under the rootdir)."""

    board: str | None
    file: str | None
    line_covered: int = 0
    line_total: int = 0
    function_covered: int = 0
    function_total: int = 0
    branch_covered: int = 0
    branch_total: int = 0
    run_id: int | None = None

    @property
    def line_percent(self) -> float | None:
        return 100.0 * self.line_covered / self.line_total if self.line_total else None


@dataclass
class Bisection:
    """`pytest-ondevice bisect --history`'s answer for one new failure (metric None) or
    latency regression of a run: the first bad commit, or why there is none."""

    run_id: int
    nodeid: str
    board: str | None
    metric: str | None
    good_rev: str
    bad_rev: str
    first_bad: str | None
    subject: str | None
    steps: int
    status: str  # found, ambiguous (skipped revisions leave several), not bisected
    detail: str = ""


@dataclass
class History:
    """The runs of a history file, oldest first, with their results and latency records."""

    runs: list[Run]
    results: list[Result]
    benches: list[Bench]
    total_runs: int  # in the file; runs holds the last N when load() was asked for fewer
    damaged: list[str] = field(default_factory=list)  # values that could not be read, and what was done instead
    coverage: list[Coverage] = field(default_factory=list)
    bisections: list[Bisection] = field(default_factory=list)


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if need be) a history file for appending; HistoryError if it is not one."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    except (OSError, sqlite3.Error) as e:
        raise HistoryError(f"{path}: cannot open the history file ({e})") from None
    try:
        _prepare(db, path)
    except sqlite3.Error as e:
        db.close()
        if "locked" in str(e):  # a usable file that another run held for the whole busy timeout
            raise HistoryError(
                f"{path}: another process held the history locked for the whole busy timeout "
                f"({BUSY_TIMEOUT:g} s): is a run stuck? Try again once it has ended ({e})"
            ) from None
        raise HistoryError(f"{path}: not a usable pytest-ondevice history file ({e})") from None
    except BaseException:
        db.close()
        raise
    return db


def _prepare(db: sqlite3.Connection, path: Path) -> None:
    """Checked before anything is written (a foreign file is left as it was), then WAL (readers
    never block the writer), then the tables, made once by whichever run comes first."""
    _check(db, path)
    _wal(db)
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in SCHEMA.split(";"):  # not executescript: it would commit
            if statement.strip():
                db.execute(statement)
        row = db.execute("SELECT schema_version FROM meta").fetchone()
        if row is None:
            db.execute("INSERT INTO meta (schema_version) VALUES (?)", (SCHEMA_VERSION,))
        else:  # read again under the write lock: two runs must not both migrate
            _migrate(db, row[0])
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.rollback()


def _migrate(db: sqlite3.Connection, version: int) -> None:
    """An older file brought up to SCHEMA_VERSION, inside the caller's transaction."""
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS.get(step, ()):
            db.execute(statement)
    if version < SCHEMA_VERSION:
        db.execute("UPDATE meta SET schema_version = ?", (SCHEMA_VERSION,))


def _wal(db: sqlite3.Connection) -> None:
    """SQLite answers "database is locked" at once, without its busy handler, when the
    journal mode changes while another run creates the file: wait as the handler would."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _check(db: sqlite3.Connection, path: Path) -> bool:
    """False for an empty database; HistoryError for someone else's, or another schema version's."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return False
    if "meta" not in tables:
        found = ", ".join(sorted(tables))
        raise HistoryError(f"{path}: a SQLite database, but not a pytest-ondevice history (tables: {found})")
    row = db.execute("SELECT schema_version FROM meta").fetchone()
    if row is not None and not (isinstance(row[0], int) and 1 <= row[0] <= SCHEMA_VERSION):
        raise HistoryError(
            f"{path}: history schema version {row[0]}, this pytest-ondevice reads version {SCHEMA_VERSION} "
            "(written by another version: use a new file, or that version)"
        )
    return True


_COUNTED = ("_covered", "_total")
COVERAGE_FIELDS = [f.name for f in fields(Coverage) if f.name != "run_id"]


def append_run(
    db: sqlite3.Connection, run: Run, results: list[Result], benches: list[Bench], coverage: Sequence[Coverage] = ()
) -> int:
    """One run with its results and records, in one transaction; returns the run's id."""
    counts = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    run.counts = counts
    db.execute("BEGIN IMMEDIATE")  # the write lock now: waits up to BUSY_TIMEOUT for another run's append
    try:
        cur = db.execute(
            "INSERT INTO runs (started, finished, git_rev, git_dirty, host, args, exitstatus, passed, failed, error, "
            "skipped) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.started,
                run.finished,
                run.git_rev,
                None if run.git_dirty is None else int(run.git_dirty),
                run.host,
                json.dumps(run.args),
                run.exitstatus,
                *(counts[o] for o in OUTCOMES),
            ),
        )
        run_id = cur.lastrowid
        assert run_id is not None  # set by the INSERT just made
        db.executemany(
            "INSERT INTO results (run_id, nodeid, case_name, board, device, binary_sha256, outcome, duration, "
            "message, retried_after, reruns, flaky) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    run_id,
                    r.nodeid,
                    r.case_name,
                    r.board,
                    r.device,
                    r.binary_sha256,
                    r.outcome,
                    r.duration,
                    r.message,
                    r.retried_after,
                    json.dumps(r.reruns) if r.reruns else None,
                    r.flaky,
                )
                for r in results
            ],
        )
        db.executemany(
            "INSERT INTO benches (run_id, nodeid, case_name, board, device, binary_sha256, name, unit, median, min, "
            "max, us, deterministic, record, variant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    run_id,
                    b.nodeid,
                    b.case_name,
                    b.board,
                    b.device,
                    b.binary_sha256,
                    b.name,
                    b.unit,
                    b.median,
                    b.min,
                    b.max,
                    b.us,
                    int(b.deterministic),
                    json.dumps(b.record) if b.record is not None else None,
                    b.variant or "plain",
                )
                for b in benches
            ],
        )
        db.executemany(
            f"INSERT INTO coverage (run_id, {', '.join(COVERAGE_FIELDS)}) VALUES (?{', ?' * len(COVERAGE_FIELDS)})",
            [(run_id, *(getattr(c, name) for name in COVERAGE_FIELDS)) for c in coverage],
        )
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.rollback()
    run.id = run_id
    return run_id


def append(path: Path, run: Run, results: list[Result], benches: list[Bench], coverage: Sequence[Coverage] = ()) -> int:
    """One run appended to the history file at path (made if need be); returns the run's id."""
    db = connect(path)
    try:
        return append_run(db, run, results, benches, coverage)
    finally:
        db.close()


def append_bisection(path: Path, found: Bisection) -> None:
    """One bisection's answer, kept beside the run it explains."""
    db = connect(path)
    try:
        names = _fields(Bisection)
        with db:
            db.execute(
                f"INSERT INTO bisections ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                tuple(getattr(found, n) for n in names),
            )
    except sqlite3.Error as e:
        raise HistoryError(f"{path}: cannot record the bisection ({e})") from None
    finally:
        db.close()


def load(path: Path, last: int | None = None, records: bool = True) -> History:
    """The history in a file (its last `last` runs); HistoryError if there is none to read.
    records=False leaves each Bench.record None, unread (the report has no use for them: a
    farm's history holds hundreds of thousands); a damaged one is still named."""
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file")
    try:
        db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT)
    except sqlite3.Error as e:
        raise HistoryError(f"{path}: cannot open the history file ({e})") from None
    collecting = gc.isenabled()
    # a farm's window is hundreds of thousands of objects in no cycle: the collector would walk them over and over
    gc.disable()
    try:
        return _read(db, path, last, records)
    except sqlite3.Error as e:
        raise HistoryError(f"{path}: not a pytest-ondevice history file ({e})") from None
    finally:
        db.close()
        if collecting:
            gc.enable()


def _read(db: sqlite3.Connection, path: Path, last: int | None, records: bool = True) -> History:
    if not _check(db, path):
        return History([], [], [], 0)
    total = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    chosen = "SELECT id FROM runs ORDER BY started DESC, id DESC LIMIT ?"
    limit = last if last is not None else -1
    damaged: list[str] = []
    runs = []
    for row in _select(db, "runs", [f for f in _fields(Run) if f != "counts"] + list(OUTCOMES), chosen, limit):
        counts = {outcome: row.pop(outcome) for outcome in OUTCOMES}
        row["git_dirty"] = None if row["git_dirty"] is None else bool(row["git_dirty"])
        where = f"{path}: runs row id={row['id']}, column args"
        row["args"] = _json(row["args"], list, [], where, "read as no arguments", damaged)
        runs.append(Run(**row, counts=counts))
    runs.sort(key=lambda run: (run.started, run.id))
    # results and benches: a farm's window holds hundreds of thousands, built from tuples by
    # position (the columns in field order, rowid last), a JSON column decoded only when set
    results = []
    result_columns = _fields(Result)
    reruns_at = result_columns.index("reruns")  # the column's JSON text, in the row as read
    for row in _tuples(db, "results", result_columns, chosen, limit):
        r = Result(*row[:-1])
        if r.duration is None:
            r.duration = 0.0
        if row[reruns_at] is None:
            r.reruns = []
        else:
            where = f"{path}: results rowid={row[-1]} ({r.nodeid}, run {r.run_id}), column reruns"
            r.reruns = _json(row[reruns_at], list, [], where, "its reruns are not shown", damaged)
        results.append(r)
    benches = []
    columns = _fields(Bench) if records else [f if f != "record" else "NULL AS record" for f in _fields(Bench)]
    record_at = _fields(Bench).index("record")  # the column's JSON text, in the row as read
    for row in _tuples(db, "benches", columns, chosen, limit):
        b = Bench(*row[:-1])
        b.deterministic = bool(b.deterministic)
        if b.variant is None:  # a file of an older schema: its records were taken as latency
            b.variant = "plain"
        if row[record_at] is not None:
            where = _bench_where(path, row[-1], b.name, b.run_id)
            b.record = _json(row[record_at], dict, None, where, _KEPT, damaged)
        benches.append(b)
    if not records:
        damaged += _damaged_records(db, path, chosen, limit)
    coverage = []
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'coverage'").fetchone():
        for row in _select(db, "coverage", _fields(Coverage), chosen, limit):
            counts = {k: v if isinstance(v, int) and v >= 0 else 0 for k, v in row.items() if k.endswith(_COUNTED)}
            coverage.append(Coverage(**{**row, **counts}))
    bisections = []
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'bisections'").fetchone():
        bisections = [Bisection(**row) for row in _select(db, "bisections", _fields(Bisection), chosen, limit)]
    return History(runs, results, benches, total, damaged, coverage, bisections)


def _json(text: str | None, kind: type[list] | type[dict], empty, where: str, instead: str, damaged: list[str]):
    """A JSON column's value, or `empty` (noted in damaged) when it is not JSON of that kind."""
    if not text:
        return empty
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as e:
        damaged.append(f"{where} is not JSON ({e}); {instead}")
        return empty
    if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
        what = "a list of strings" if kind is list else "a JSON object"
        damaged.append(f"{where} is not {what} ({text[:60]!r}); {instead}")
        return empty
    return value


def _fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _select(db: sqlite3.Connection, table: str, columns: list[str], chosen: str, limit: int) -> list[dict]:
    """The rows of the chosen runs, each a dict by column name (the dataclasses' field names);
    a column an older schema version lacks reads as NULL."""
    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    wanted = [c if c in have else f"NULL AS {c}" for c in columns]
    run = "id" if table == "runs" else "run_id"
    cursor = db.execute(f"SELECT {', '.join(wanted)} FROM {table} WHERE {run} IN ({chosen})", (limit,))
    return [dict(zip(columns, row, strict=True)) for row in cursor]


def _tuples(db: sqlite3.Connection, table: str, columns: list[str], chosen: str, limit: int) -> sqlite3.Cursor:
    """The rows of the chosen runs as tuples: those columns (SQL expressions too) in that order,
    then the rowid; a column an older schema version lacks reads as NULL."""
    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    wanted = [c if c in have or " " in c else f"NULL AS {c}" for c in columns]
    return db.execute(f"SELECT {', '.join(wanted)}, rowid FROM {table} WHERE run_id IN ({chosen})", (limit,))


_KEPT = "its median, min and max are still used"


def _bench_where(path: Path, rowid: int, name: str, run_id: int | None) -> str:
    return f"{path}: benches rowid={rowid} ({name}, run {run_id}), column record"


def _damaged_records(db: sqlite3.Connection, path: Path, chosen: str, limit: int) -> list[str]:
    """The bench records of the chosen runs that are not JSON objects, named as load() names
    them, found by SQLite's JSON functions (the rest are never decoded)."""
    not_object = "CASE WHEN json_valid(record) THEN json_type(record) != 'object' ELSE 1 END"
    query = f"SELECT rowid, name, run_id, record FROM benches WHERE run_id IN ({chosen}) AND record != ''"
    try:
        rows = db.execute(f"{query} AND {not_object}", (limit,)).fetchall()
    except sqlite3.OperationalError:  # an SQLite built without its JSON functions: each one decoded here
        rows = db.execute(query, (limit,)).fetchall()
    damaged: list[str] = []
    for rowid, name, run_id, text in rows:
        _json(text, dict, None, _bench_where(path, rowid, name, run_id), _KEPT, damaged)
    return damaged


def add_coverage(source: Path, target: Path) -> tuple[int, int, int]:
    """The coverage figures of source's last run added to the run of target that it
    accompanied: the last one from the same host and git revision, started no later.
    For a nightly whose coverage comes from a run of its own (a gcov build, whose figures are
    not latency) while the night's verdicts and latency are the plain run's: the report then
    shows both under one night. Returns (source run, target run, rows added)."""
    found = load(source, last=1)
    if not found.runs:
        raise HistoryError(f"{source}: no run to take coverage figures from")
    night = found.runs[-1]
    db = connect(target)
    try:
        db.execute("BEGIN IMMEDIATE")  # one transaction: the figures land whole or not at all
        run_id = _accompanied(db, target, night)
        db.executemany(
            f"INSERT INTO coverage (run_id, {', '.join(COVERAGE_FIELDS)}) VALUES (?{', ?' * len(COVERAGE_FIELDS)})",
            [(run_id, *(getattr(c, name) for name in COVERAGE_FIELDS)) for c in found.coverage],
        )
        db.execute("COMMIT")
    except sqlite3.Error as e:
        raise HistoryError(f"{target}: cannot add the coverage figures ({e})") from None
    finally:
        if db.in_transaction:
            db.rollback()
        db.close()
    return night.id or 0, run_id, len(found.coverage)


def _accompanied(db: sqlite3.Connection, target: Path, night: Run) -> int:
    """The run of target that a run of the same night came after (same host and revision)."""
    row = db.execute(
        "SELECT id FROM runs WHERE host IS ? AND git_rev IS ? AND started <= ? ORDER BY started DESC, id DESC",
        (night.host, night.git_rev, night.started),
    ).fetchone()
    if row is None:
        raise HistoryError(
            f"{target}: no run from host {night.host} at revision {night.git_rev} started by {night.started} "
            f"to add the coverage figures of run {night.id} to"
        )
    if db.execute("SELECT 1 FROM coverage WHERE run_id = ?", (row[0],)).fetchone():
        raise HistoryError(f"{target}: run {row[0]} already has coverage figures")
    return row[0]


def main(argv: list[str] | None = None) -> int:
    """`python -m pytest_ondevice.records.history add-coverage FROM TO` (examples/nightly/run.sh)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pytest_ondevice.records.history")
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add-coverage", help="add the coverage figures of FROM's last run to TO's run of that night")
    add.add_argument("source", metavar="FROM", type=Path)
    add.add_argument("target", metavar="TO", type=Path)
    args = parser.parse_args(argv)
    try:
        source_run, target_run, rows = add_coverage(args.source, args.target)
    except HistoryError as e:
        print(f"ondevice history: {e}", file=sys.stderr)
        return 1
    print(
        f"ondevice history: {rows} coverage figures of run {source_run} of {args.source} added to run {target_run} "
        f"of {args.target}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
