"""What a history says, for the morning report and `pytest-ondevice bisect --history`: the
figures compared (plain builds; a memory figure only from a run where its case passed), each
kernel's series over the runs, what the latest run got wrong (new failures, slower kernels,
exact figures that moved, files whose coverage fell), and what bisect found of it.

What a new failure is and what a slower figure is are said once, here (FailureRule,
SlowerRule; docs/farm.md, docs/bisect.md): the report and bisect each pass the rule they
apply, bisect's narrower than the report's where a bisection needs it to be."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter

from ..formats.benchline import MEMORY_UNIT
from .history import Bench, Coverage, History, Result, Run


@dataclass
class Series:
    """One kernel on one board over the runs: its median per run."""

    board: str
    name: str
    unit: str
    deterministic: bool
    points: list[tuple[int, float]]  # (index of the run in the window, median)
    nodeid: str = ""  # the case that measured it in its latest run (the first by node id, if several did)

    @property
    def reference(self) -> float | None:
        """The median of the earlier runs' medians: what the latest run is held against."""
        earlier = [m for _, m in self.points[:-1]]
        return statistics.median(earlier) if earlier else None

    @property
    def latest(self) -> float:
        return self.points[-1][1]

    def at(self, run: int) -> float | None:
        """Its median in the run of that index in the window (None: not measured there)."""
        return next((m for i, m in self.points if i == run), None)

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
        nodeid = min(b.nodeid for b in measured_by if index[b.run_id] == points[-1][0])
        found.append(Series(board, name, unit, deterministic, points, nodeid))
    return found


def _median(values: list[float]) -> float:
    return values[0] if len(values) == 1 else statistics.median(values)


def _boards_by_run(history: History) -> dict[int | None, set[str | None]]:
    boards: dict[int | None, set[str | None]] = defaultdict(set)
    for r in history.results:
        boards[r.run_id].add(r.board)
    return boards


def board_runs(history: History) -> dict[str | None, tuple[int, int | None]]:
    """Each board's latest run in the window and its previous run: the last earlier one with
    results on that board (indexes in history.runs; None: none). Nightlies per board may
    append to one file, so a board's runs are those that ran it, not the runs in between."""
    boards = _boards_by_run(history)
    found: dict[str | None, tuple[int, int | None]] = {}
    for i in range(len(history.runs) - 1, -1, -1):
        for board in boards.get(history.runs[i].id, ()):
            if board not in found:
                found[board] = (i, None)
            elif found[board][1] is None:
                found[board] = (found[board][0], i)
    return found


# -- what a new failure is ------------------------------------------------------------------

NOT_RUN = "not run"  # a case's verdict in a run that did not run it


@dataclass(frozen=True)
class FailureRule:
    """A new failure: a case of the last run whose verdict there is one of `now`, and whose
    verdict in its board's previous run was one of `before` (NOT_RUN: that run did not run
    it). A board's first run in the window has no new failures: nothing to be new against."""

    now: tuple[str, ...]
    before: tuple[str, ...]


# The report's: a failure or an error (a device that could not be used is news too), of a
# case that passed in the board's previous run or did not run there (a new case).
REPORT_FAILURES = FailureRule(now=("failed", "error"), before=("passed", NOT_RUN))
# bisect's, narrower: a failure of a case that passed in the board's previous run. An error
# is the device's, and a step skips it, so no revision can be judged by it; a case the
# previous run did not run gives no good end to search from.
BISECT_FAILURES = FailureRule(now=("failed",), before=("passed",))


@dataclass
class NewFailure:
    result: Result
    before: str  # the case's verdict in its board's previous run, or NOT_RUN
    previous: Run | None = None  # that run
    then: Result | None = None  # the case's result there (None: not run)


def new_failures(history: History, rule: FailureRule = REPORT_FAILURES) -> list[NewFailure] | None:
    """The last run's new failures by the rule, by node id; None when the window holds no
    earlier run to compare with."""
    if len(history.runs) < 2:
        return None
    last = len(history.runs) - 1
    previous = {
        board: history.runs[before]
        for board, (latest, before) in board_runs(history).items()
        if latest == last and before is not None
    }
    # only the previous runs' results are looked up: a farm's window holds hundreds of thousands
    wanted = {run.id for run in previous.values()}
    earlier = {(r.run_id, r.nodeid): r for r in history.results if r.run_id in wanted}  # the last of each wins
    latest_id = history.runs[last].id
    found = []
    for r in sorted((r for r in history.results if r.run_id == latest_id), key=lambda r: r.nodeid):
        run = previous.get(r.board) if r.outcome in rule.now else None
        if run is None:
            continue  # not a failure the rule counts, or this board's first run
        then = earlier.get((run.id, r.nodeid))
        before = then.outcome if then is not None else NOT_RUN
        if before in rule.before:
            found.append(NewFailure(r, before, run, then))
    return found


# -- what a slower figure is ----------------------------------------------------------------

MEDIAN_OF_EARLIER = "median of earlier runs"  # the median of the series' earlier medians in the window
PREVIOUS_RUN = "previous run"  # the series' median in its board's previous run


@dataclass(frozen=True)
class SlowerRule:
    """A slower figure: one measured in its board's latest run whose median there is over its
    reference by more than the threshold % (at the threshold is not over). The reference is
    `against`: MEDIAN_OF_EARLIER, or PREVIOUS_RUN (not measured there: not slower). With
    `exact_rises`, an exact figure (a virtual clock, the same run to run) that rose at all is
    slower too."""

    against: str
    exact_rises: bool = False


# The report's: against the median of the earlier runs in view, which one noisy night does
# not move. Exact figures that moved under the threshold are listed apart (changed_exact).
REPORT_SLOWER = SlowerRule(MEDIAN_OF_EARLIER)
# bisect's: against the board's previous run, whose revision is the good end of the search;
# an exact figure's every rise is the code's.
BISECT_SLOWER = SlowerRule(PREVIOUS_RUN, exact_rises=True)


@dataclass
class Slower:
    series: Series
    reference: float  # what its latest median is held against
    change: float  # its latest median against the reference, in %
    reference_run: int | None = None  # PREVIOUS_RUN's: that run's index in the window


def slower(all_series: list[Series], history: History, threshold: float, rule: SlowerRule) -> list[Slower]:
    """The series slower by the rule (threshold in %), the slowest first."""
    runs = board_runs(history)
    found = []
    for s in all_series:
        latest, before = runs.get(s.board, (None, None))
        if s.points[-1][0] != latest:
            continue  # not measured in its board's latest run: not news
        if rule.against == PREVIOUS_RUN:
            reference, where = (s.at(before) if before is not None else None), before
        else:
            reference, where = s.reference, None
        if not reference:
            continue  # nothing earlier to compare with
        change = (s.latest - reference) / reference * 100
        if change > threshold or (rule.exact_rises and s.deterministic and change > 0):
            found.append(Slower(s, reference, change, where))
    return sorted(found, key=lambda f: -f.change)


def slow_kernels(all_series: list[Series], history: History, threshold: float) -> list[Series]:
    """The report's newly slow series (REPORT_SLOWER), the slowest first."""
    return [found.series for found in slower(all_series, history, threshold, REPORT_SLOWER)]


def changed_exact(all_series: list[Series], slow: list[Series], history: History) -> list[Series]:
    """Exact figures (a virtual clock: instructions under QEMU's icount) measured in their
    board's latest run that moved, up or down, since the run before that measured them, and
    are not in slow: under the threshold too, on such a clock any change is the code's."""
    flagged = {(s.board, s.name) for s in slow}
    runs = board_runs(history)
    found = []
    for s in all_series:
        latest = runs.get(s.board, (None, None))[0]
        moved = len(s.points) > 1 and s.points[-1][1] != s.points[-2][1]
        if s.points[-1][0] == latest and s.deterministic and moved and (s.board, s.name) not in flagged:
            found.append(s)
    return sorted(found, key=lambda s: -abs(s.points[-1][1] - s.points[-2][1]) / (abs(s.points[-2][1]) or 1))


# -- the rest of the page's news ------------------------------------------------------------


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
