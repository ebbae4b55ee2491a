"""What a history says, for the morning report and `pytest-ondevice bisect --history`: the
figures compared (plain builds; a memory figure only from a run where its case passed), each
kernel's series over the runs, what the latest run got wrong (new failures, slower kernels,
exact figures that moved, files whose coverage fell), and what bisect found of it."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter

from ..formats.benchline import MEMORY_UNIT
from .history import Bench, Coverage, History, Result


@dataclass
class Series:
    """One kernel on one board over the runs: its median per run."""

    board: str
    name: str
    unit: str
    deterministic: bool
    points: list[tuple[int, float]]  # (index of the run in the window, median)

    @property
    def reference(self) -> float | None:
        """The median of the earlier runs' medians: what the latest run is held against."""
        earlier = [m for _, m in self.points[:-1]]
        return statistics.median(earlier) if earlier else None

    @property
    def latest(self) -> float:
        return self.points[-1][1]

    def change(self) -> float | None:
        """The latest run against the reference, in %."""
        ref = self.reference
        return (self.latest - ref) / ref * 100 if ref else None


def plain(b: Bench) -> bool:
    """A record of a plain build: not of one instrumented for coverage (variant "gcov"), whose
    figures are the instrumentation's too. Records from before variants were kept are plain."""
    return (getattr(b, "variant", None) or "plain") == "plain"


@dataclass
class LeftOut:
    """The records the analysis does not use, counted for the page to say so."""

    instrumented: int = 0  # latency records of coverage-instrumented builds
    instrumented_memory: int = 0  # memory figures of such builds
    not_passed: int = 0  # memory figures of runs where their case did not pass


def usable(history: History) -> tuple[list[Bench], LeftOut]:
    """The records the trends compare, and what was left out: only plain builds' records
    (an instrumented build is slower and deeper, not the code as shipped), and a memory
    figure (stack high-water, peak RSS) only from a run where its case passed: a failing
    case's stack is its failure path's (printing its message), not its code's."""
    left = LeftOut()
    # the cases that did not pass, by run: a handful against a farm's hundreds of thousands of passes
    not_passed = {(r.run_id, r.nodeid) for r in history.results if r.outcome != "passed"}
    kept = []
    for b in history.benches:
        memory = b.unit == MEMORY_UNIT
        if not plain(b):
            if memory:
                left.instrumented_memory += 1
            else:
                left.instrumented += 1
        elif memory and (b.run_id, b.nodeid) in not_passed:
            left.not_passed += 1
        else:
            kept.append(b)
    return kept, left


def series(history: History, benches: list[Bench] | None = None) -> list[Series]:
    """Every (board, kernel) measured in the window (of benches; by default the records
    `usable` keeps); a run that measured one twice counts its median."""
    index = {run.id: i for i, run in enumerate(history.runs)}
    grouped: dict[tuple[str, str, str], list[Bench]] = defaultdict(list)
    for b in usable(history)[0] if benches is None else benches:
        grouped[(b.board or "-", b.name, b.unit)].append(b)
    found = []
    for (board, name, unit), measured_by in sorted(grouped.items()):
        measured = sorted((index[b.run_id], b.median) for b in measured_by)  # by run: nearly always once each
        points = [(i, _median([m for _, m in run])) for i, run in groupby(measured, key=itemgetter(0))]
        deterministic = all(b.deterministic for b in measured_by)
        found.append(Series(board, name, unit, deterministic, points))
    return found


def _median(values: list[float]) -> float:
    return values[0] if len(values) == 1 else statistics.median(values)


def _results_by_run(history: History) -> dict[int, list[Result]]:
    by_run: dict[int, list[Result]] = defaultdict(list)
    for r in history.results:
        by_run[r.run_id].append(r)
    return by_run


def _latest_run_of_board(history: History, boards: dict[int, set[str | None]], board: str | None) -> int | None:
    """The index of the last run in the window with results on this board (runs of other
    boards may have finished after it: nightlies per board append to one file)."""
    for i in range(len(history.runs) - 1, -1, -1):
        if board in boards[history.runs[i].id]:
            return i
    return None


def _boards_by_run(history: History) -> dict[int, set[str | None]]:
    boards: dict[int, set[str | None]] = defaultdict(set)
    for r in history.results:
        boards[r.run_id].add(r.board)
    return boards


@dataclass
class NewFailure:
    result: Result
    before: str  # the previous run's outcome on that board, or "not run"


def new_failures(history: History) -> list[NewFailure] | None:
    """Failures and errors of the latest run that passed (or did not run) in the previous run
    of the same board; None when there is no earlier run to compare with."""
    if len(history.runs) < 2:
        return None
    by_run = _results_by_run(history)
    outcomes = {run_id: {r.nodeid: r.outcome for r in rs} for run_id, rs in by_run.items()}
    outcomes.update({run.id: {} for run in history.runs if run.id not in outcomes})
    boards = _boards_by_run(history)
    latest = history.runs[-1]
    found = []
    for r in sorted(by_run[latest.id], key=lambda r: r.nodeid):
        if r.outcome not in ("failed", "error"):
            continue
        previous = next((run for run in reversed(history.runs[:-1]) if r.board in boards[run.id]), None)
        if previous is None:
            continue  # this board's first run: nothing to be new against
        before = outcomes[previous.id].get(r.nodeid, "not run")
        if before in ("passed", "not run"):
            found.append(NewFailure(r, before))
    return found


def changed_exact(all_series: list[Series], slow: list[Series], history: History) -> list[Series]:
    """Exact figures (a virtual clock: instructions under QEMU's icount) that moved since the
    run before, under the threshold too: on such a clock any change is the code's."""
    flagged = {(s.board, s.name) for s in slow}
    found = []
    for s in _in_latest_runs(all_series, history):
        moved = len(s.points) > 1 and s.points[-1][1] != s.points[-2][1]
        if s.deterministic and moved and (s.board, s.name) not in flagged:
            found.append(s)
    return sorted(found, key=lambda s: -abs(s.points[-1][1] - s.points[-2][1]) / (abs(s.points[-2][1]) or 1))


def _in_latest_runs(all_series: list[Series], history: History) -> list[Series]:
    """The series measured in their board's latest run (a kernel not run then is not news)."""
    latest_of_board = {}
    boards = _boards_by_run(history)
    found = []
    for s in all_series:
        if s.board not in latest_of_board:
            latest_of_board[s.board] = _latest_run_of_board(history, boards, s.board)
        if s.points[-1][0] == latest_of_board[s.board]:
            found.append(s)
    return found


def slow_kernels(all_series: list[Series], history: History, threshold: float) -> list[Series]:
    """Kernels whose latest median (in their board's latest run) is over reference * (1 + threshold %)."""
    found = [s for s in _in_latest_runs(all_series, history) if (s.change() or 0) > threshold]
    return sorted(found, key=lambda s: -(s.change() or 0))


def coverage_by_run(history: History) -> dict[str | None, list[tuple[int, Coverage]]]:
    """Each board's whole-report figures (None: all boards), by index of the run in the window."""
    index = {run.id: i for i, run in enumerate(history.runs)}
    found: dict[str | None, list[tuple[int, Coverage]]] = defaultdict(list)
    for c in history.coverage:
        if c.file is None and c.run_id in index:
            found[c.board].append((index[c.run_id], c))
    return {board: sorted(points, key=lambda p: p[0]) for board, points in found.items()}


def coverage_fell(history: History) -> list[tuple[str, str | None, Coverage, Coverage]]:
    """Files whose line coverage fell between the last two runs that measured their board."""
    by_board = coverage_by_run(history)
    fell = []
    for board, points in by_board.items():
        if len(points) < 2:
            continue
        (latest, _), (before, _) = points[-1], points[-2]
        runs = {history.runs[latest].id: "now", history.runs[before].id: "then"}
        files: dict[str, dict[str, Coverage]] = defaultdict(dict)
        for c in history.coverage:
            if c.board == board and c.file is not None and c.run_id in runs:
                files[c.file][runs[c.run_id]] = c
        for file, pair in sorted(files.items()):
            then, now = pair.get("then"), pair.get("now")
            if then and now and (now.line_percent or 0) < (then.line_percent or 0):
                fell.append((file, board, then, now))
    return fell


def first_bad(history: History) -> dict[tuple[str, str | None, str | None], str]:
    """(nodeid, board, metric) -> what `pytest-ondevice bisect --history` found for the last
    run: "first bad: <commit> <subject>", or why it found none."""
    if not history.runs:
        return {}
    last = history.runs[-1].id
    found = {}
    for b in history.bisections:
        if b.run_id == last:
            text = f"{b.first_bad[:12]} {b.subject or ''}".strip() if b.first_bad else f"{b.status}: {b.detail}"
            found[(b.nodeid, b.board, b.metric)] = text
    return found
