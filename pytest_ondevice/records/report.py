"""`pytest-ondevice report`: a history file as one static HTML page to read in the morning.

The page needs no server, no network and no script to be read: charts are PNGs drawn by
matplotlib and embedded as data URLs (its one inline script only lets a headless browser
say that every chart decoded). matplotlib is imported when a report is drawn, never by the
plugin."""

from __future__ import annotations

import base64
import html
import io
import re
import shlex
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path

from ..formats.benchline import MEMORY_UNIT
from .failmessage import headline, is_traceback
from .history import Bench, Coverage, History, Result, Run

DEFAULT_LAST = 30  # runs in the window the charts and tables look at
MAX_PANELS = 24  # latency panels drawn at most; the newly slow ones first
INSTALL_HINT = "pip install 'pytest-ondevice[report]'"
MAX_DAMAGED = 20  # damaged values named on the page; the rest counted
MAX_COVERAGE_FILES = 40  # files whose line coverage fell, named on the page; the rest counted
MAX_ROWS = 50  # rows of each table on the page (a farm's night may bring hundreds); the rest counted


class MatplotlibMissing(Exception):
    """The report extra is not installed."""


# -- what the history says ---------------------------------------------------------------


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


@dataclass
class Flaky:
    nodeid: str
    case_name: str
    board: str | None
    binary_sha256: str  # "" when the results named no binary
    passed: int
    failed: int
    last: str
    after_rerun: int = 0  # passes that came only after a rerun (or that the run called flaky)
    reruns: tuple[str, ...] = ()  # what those reruns were: "device: cause", latest first, each once


def flaky(history: History) -> list[Flaky]:
    """Cases whose verdict is not the code's alone: on the very same binary both passed and
    failed (the code did not change, the verdict did), or passed only after a rerun (an
    attempt cut short and run again: never a clean pass, even if every run passed)."""
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    order = {run.id: i for i, run in enumerate(history.runs)}
    # only the cases that failed on a known binary or passed after a rerun can be flaky: a farm's
    # window holds hundreds of thousands of clean passes, not looked at one by one
    failed = {r.nodeid for r in history.results if r.outcome == "failed" and r.binary_sha256}
    unclean = {r.nodeid for r in history.results if r.outcome == "passed" and (r.reruns or r.flaky)}
    maybe = failed | unclean
    for r in history.results:
        if r.nodeid in maybe and r.outcome in ("passed", "failed") and (r.binary_sha256 or not r.clean):
            groups[(r.nodeid, r.binary_sha256 or "")].append(r)
    found = []
    for (nodeid, sha), rs in groups.items():
        rs.sort(key=lambda r: order[r.run_id])
        outcomes = [r.outcome for r in rs]
        unclean = [r for r in rs if r.outcome == "passed" and not r.clean]
        flipped = bool(sha) and "passed" in outcomes and "failed" in outcomes
        if flipped or unclean:
            why = [*(r.flaky for r in unclean if r.flaky), *(c for r in unclean for c in r.reruns)]
            causes = tuple(dict.fromkeys(reversed(why)))  # latest first, each once
            passed, failed = outcomes.count("passed"), outcomes.count("failed")
            case = Flaky(nodeid, rs[0].case_name, rs[0].board, sha, passed, failed, outcomes[-1], len(unclean), causes)
            found.append(case)
    return sorted(found, key=lambda f: (-f.failed, -f.after_rerun, f.nodeid))


@dataclass
class DeviceStats:
    device: str
    board: str | None
    passed: int = 0
    failed: int = 0
    errors: int = 0  # results that were infrastructure errors on this device
    retried_away: int = 0  # binaries that had to move to another device after an error here
    cut_short: int = 0  # attempts here that were cut short and run again (here or elsewhere): reruns naming it
    last_error: str = ""
    last_error_run: int = -1  # index in the window
    test_errors: int = 0  # errors of a test's own code here (a Python traceback: a fixture's, a teardown's)

    @property
    def pass_rate(self) -> float | None:
        """The tests' verdicts here: which tests the device drew, not how healthy it is."""
        ran = self.passed + self.failed
        return self.passed / ran * 100 if ran else None

    @property
    def attempts(self) -> int:
        """Case attempts this device got: each verdict or error here, and each attempt that
        ended in trouble here and went on elsewhere or ran again."""
        return self.passed + self.failed + self.errors + self.test_errors + self.retried_away + self.cut_short

    @property
    def trouble(self) -> int:
        """Attempts the device or its link spoiled: errors, binaries moved away, attempts cut short."""
        return self.errors + self.retried_away + self.cut_short

    @property
    def trouble_rate(self) -> float | None:
        """The device's health: its trouble, in % of the attempts it got (None: it got none)."""
        return self.trouble / self.attempts * 100 if self.attempts else None


_RETRIED = re.compile(r"(?:^|; )(\S+): ")


def _retried_devices(text: str, known: set[str]) -> list[str]:
    """The devices in a "dev: error; dev2: error" note. Errors may hold "; word: " too, so
    after the first (a device by construction) only names seen as devices count."""
    names = _RETRIED.findall(text)
    return [n for i, n in enumerate(names) if n in known or (i == 0 and text.startswith(f"{n}: "))]


def devices(history: History) -> list[DeviceStats]:
    """Per device, over the window: verdicts, infrastructure errors, binaries moved elsewhere."""
    stats: dict[str, DeviceStats] = {}
    order = {run.id: i for i, run in enumerate(history.runs)}
    known = {r.device for r in history.results if r.device}
    boards_with_devices = {r.board for r in history.results if r.device and r.device != r.board}
    for r in sorted(history.results, key=lambda r: order[r.run_id]):
        if r.board is None:
            continue  # a plain Python test
        if r.device is None and r.board in boards_with_devices:
            continue  # never reached a device of the fleet: not a device's pass rate (the failures list it)
        name = r.device or r.board
        s = stats.setdefault(name, DeviceStats(name, r.board))
        if r.outcome == "passed":
            s.passed += 1
        elif r.outcome == "failed":
            s.failed += 1
        elif r.outcome == "error" and is_traceback(r.message or ""):
            s.test_errors += 1  # a fixture's or teardown's own exception: the test's code, not the device
        elif r.outcome == "error":
            s.errors += 1
            s.last_error, s.last_error_run = (r.message or "").strip(), order[r.run_id]
        for other in _retried_devices(r.retried_after or "", known):
            o = stats.setdefault(other, DeviceStats(other, r.board))
            o.retried_away += 1
            o.last_error, o.last_error_run = r.retried_after or "", order[r.run_id]
        for cause in r.reruns:  # "device: cause"
            where = cause.split(": ", 1)[0]
            o = stats.setdefault(where, DeviceStats(where, r.board))
            o.cut_short += 1
            o.last_error, o.last_error_run = cause, order[r.run_id]
    return sorted(stats.values(), key=lambda s: (s.board or "", s.device))


# -- charts --------------------------------------------------------------------------------


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MatplotlibMissing(f"the report draws its charts with matplotlib: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    fig.clf()
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _fmt(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ") if abs(value) >= 100 else f"{value:.3g}"


def trend_chart(plt, s: Series, runs: list[Run], threshold: float) -> tuple[str, str]:
    """(PNG as base64, alt text) of one kernel on one board."""
    from matplotlib.ticker import EngFormatter

    fig, ax = plt.subplots(figsize=(3.7, 1.85))
    xs, ys = zip(*s.points, strict=True)
    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color="#1f5fa8")
    ref, change = s.reference, s.change()
    alt = f"{s.name} on {s.board}: latest median {_fmt(s.latest)} {s.unit} over {len(xs)} runs"
    if ref is not None:
        limit = ref * (1 + threshold / 100)
        ax.axhline(ref, color="#888888", linewidth=0.8, linestyle=":")
        ax.axhline(limit, color="#c0392b", linewidth=1.0, linestyle="--")
        slow = change is not None and change > threshold
        ax.plot([xs[-1]], [ys[-1]], marker="o", markersize=6, color="#c0392b" if slow else "#1f5fa8")
        alt += f"; reference {_fmt(ref)}, {change:+.1f} % ({'over' if slow else 'within'} the {threshold:g} % limit)"
        low, high = min(*ys, ref), max(*ys, limit)
    else:
        low, high = min(ys), max(ys)
        alt += "; no earlier run to compare with"
    pad = (high - low) * 0.15 or abs(high) * 0.05 or 1
    ax.set_ylim(low - pad, high + pad)
    title = f"{s.name} · {s.board} · {s.unit}"
    wrap = len(title) > 46  # wider than the panel: the unit goes on a second line
    ax.set_title(f"{s.name} · {s.board}\n{s.unit}" if wrap else title, fontsize=8.5)
    ax.yaxis.set_major_formatter(EngFormatter(sep=""))  # 130k, not 130000
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(True, axis="y", linewidth=0.3)
    fig.subplots_adjust(left=0.14, right=0.97, top=0.80 if wrap else 0.87)
    _run_axis(fig, ax, xs, lambda ticks: run_labels(runs, ticks), 6)
    png = _png(fig)
    plt.close(fig)
    return png, alt


def run_labels(runs: list[Run], ticks: list[int]) -> list[str]:
    """A label per labelled run that tells the runs apart: the day, or the time when runs
    share a day, and the revision below it."""
    days = [runs[i].started[5:10] for i in ticks]
    same_day = len(set(days)) < len(days)
    labels = []
    for i, day in zip(ticks, days, strict=True):
        when = runs[i].started[11:16] if same_day and len(set(days)) == 1 else day
        when = f"{day} {runs[i].started[11:16]}" if same_day and len(set(days)) > 1 else when
        labels.append(f"{when}\n{(runs[i].git_rev or '')[:7]}".rstrip())
    return labels


def _run_axis(fig, ax, xs, labels_of, fontsize: float, gap: float = 6.0) -> list[int]:
    """The runs on ax's x axis labelled so that every label shows whole, within the figure
    and apart from its neighbours: the runs `_ticks` picks, labelled by labels_of(ticks);
    the x limits widened so the first and the latest labels fit inside the figure; a middle
    label that would touch a neighbour left out (never the first or the latest); the bottom
    margin as tall as the labels. Measured with the renderer's font metrics, nothing drawn
    (tight_layout would cost a third of a chart's drawing time). The labelled runs."""
    ticks = _ticks(tuple(xs))
    labels = labels_of(ticks)
    sizes = [_text_size(fig, label, fontsize) for label in labels]
    width, height = fig.get_size_inches() * fig.dpi
    box = ax.get_position()
    left, right = box.x0 * width, box.x1 * width
    lo, hi = min(xs), max(xs)
    span = hi - lo
    if span == 0:
        ax.set_xlim(lo - 1, hi + 1)
    else:  # the outer labels' halves past the axes must stay in the figure (2 px to spare)
        need = max(sizes[0][0] / 2 + 2 - left, sizes[-1][0] / 2 + 2 - (width - right), 0)
        room = right - left
        margin = max(0.05, need / (room - 2 * need) if room > 2 * need else 0.5)
        ax.set_xlim(lo - margin * span, hi + margin * span)
    x0, x1 = ax.get_xlim()

    def at(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (right - left)

    def apart(a: int, b: int) -> bool:  # label a ends left of label b's start, gap pixels between
        return at(ticks[a]) + sizes[a][0] / 2 + gap <= at(ticks[b]) - sizes[b][0] / 2

    end = len(ticks) - 1
    kept = [0]
    for k in range(1, end):
        if apart(kept[-1], k) and apart(k, end):
            kept.append(k)
    if end > 0:
        kept.append(end)  # the first and the latest are far apart: the axis's two ends
    ax.set_xticks([ticks[k] for k in kept], [labels[k] for k in kept], fontsize=fontsize)
    tall = max(h for _, h in sizes) + 7 * fig.dpi / 72 + 4  # the labels, the tick and its pad (3.5 pt each)
    fig.subplots_adjust(bottom=max(tall / height, 0.02))
    return [ticks[k] for k in kept]


def _text_size(fig, text: str, fontsize: float) -> tuple[float, float]:
    """Width and height in pixels of a (multi-line) label as the figure's renderer sets it."""
    from matplotlib.font_manager import FontProperties

    renderer = fig.canvas.get_renderer()
    prop = FontProperties(size=fontsize)
    lines = text.split("\n")
    widths = [renderer.get_text_width_height_descent(line or " ", prop, ismath=False)[0] for line in lines]
    _, h, d = renderer.get_text_width_height_descent("lp", prop, ismath=False)
    return max(widths), (h + d) * 1.2 * len(lines)


def _ticks(xs: tuple[int, ...], most: int = 5) -> list[int]:
    """At most `most` runs labelled, evenly spread, the first and the latest among them."""
    if len(xs) <= most:
        return list(xs)
    step = (len(xs) - 1) / (most - 1)
    return sorted({xs[round(k * step)] for k in range(most)})


HEALTH_TITLE = "Device health: infrastructure trouble per device, not test verdicts"
TROUBLE = (  # (what, DeviceStats field, colour) stacked in this order
    ("errors", "errors", "#8e44ad"),
    ("moved elsewhere", "retried_away", "#c0392b"),
    ("cut short, run again", "cut_short", "#e67e22"),
)


def _trouble_colour(rate: float | None) -> str:
    """Green for none, amber under 5 % of the device's attempts, red from 5 %; grey: no attempts."""
    if rate is None:
        return "#bbbbbb"
    return "#2e8b57" if rate == 0 else "#e0a800" if rate < 5 else "#c0392b"


def device_chart(plt, stats: list[DeviceStats]) -> tuple[str, str]:
    """Each device's health from its infrastructure trouble (errors the device or its link
    caused, binaries moved away after one, attempts cut short there): left, as a share of
    the case attempts it got; right, counted by kind. Test verdicts are not drawn: a device's
    pass rate says which tests it drew (the one that drew the failing tests looks ill)."""
    names = [s.device if s.device == s.board or not s.board else f"{s.device} ({s.board})" for s in stats]
    rates = [s.trouble_rate for s in stats]
    height = 1.45 + 0.28 * len(stats)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.6, height), sharey=True)
    y = list(range(len(stats)))
    widths = [r or 0 for r in rates]
    left.barh(y, [max(w, 0.4) if r else w for w, r in zip(widths, rates, strict=True)], color="#c0392b")
    for bar, rate in zip(left.patches, rates, strict=True):
        bar.set_color(_trouble_colour(rate))
    left.set_yticks(y, names, fontsize=8)
    left.invert_yaxis()
    top = min(100.0, max(10.0, *widths) * 1.1)
    left.set_xlim(0, top / 0.6)  # the right 40 %: room for each bar's label after it
    left.set_xticks([t for t in left.get_xticks() if t <= top])
    left.set_xlim(0, top / 0.6)
    left.set_title("infrastructure trouble, % of its case attempts", fontsize=9)
    for i, s in enumerate(stats):
        left.text(widths[i] + top * 0.02, i, _health_label(s), va="center", fontsize=7)
    start = [0] * len(stats)
    for what, field, colour in TROUBLE:
        counts = [getattr(s, field) for s in stats]
        right.barh(y, counts, left=start, color=colour, label=what)
        start = [a + b for a, b in zip(start, counts, strict=True)]
    right.set_title("infrastructure trouble, by kind (case attempts)", fontsize=9)
    right.set_xlim(0, max(1, *start) * 1.15)
    right.xaxis.get_major_locator().set_params(integer=True)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False)
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", linewidth=0.3)
    fig.suptitle(HEALTH_TITLE, fontsize=9.5)
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    parts = [f"{n}: {_health_label(s)}" + _kinds(s) for n, s in zip(names, stats, strict=True)]
    return png, f"{HEALTH_TITLE}: " + "; ".join(parts)


def _health_label(s: DeviceStats) -> str:
    if not s.attempts:
        return "no case attempts"
    if not s.trouble:
        return f"none in {s.attempts} case attempts"
    return f"{s.trouble_rate:.1f} % ({s.trouble} of {s.attempts} case attempts)"


def _kinds(s: DeviceStats) -> str:
    kinds = [f"{getattr(s, field)} {what}" for what, field, _ in TROUBLE if getattr(s, field)]
    return f" ({', '.join(kinds)})" if kinds else ""


# -- code coverage (--ondevice-coverage) ---------------------------------------------------


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


def _percent(covered: int, total: int) -> str:
    return f"{100 * covered / total:.1f} % ({covered} of {total})" if total else "—"


def coverage_chart(plt, history: History, by_board: dict[str | None, list[tuple[int, Coverage]]]) -> tuple[str, str]:
    """Line coverage per board over the runs, one line each."""
    fig, ax = plt.subplots(figsize=(7.4, 2.3))
    alt = []
    for board, points in sorted(by_board.items(), key=lambda kv: (kv[0] is not None, kv[0] or "")):
        drawn = [(i, c.line_percent) for i, c in points if c.line_percent is not None]
        if not drawn:
            continue
        xs, ys = zip(*drawn, strict=True)
        name = board or "all boards"
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.6 if board is None else 1.0, label=name)
        alt.append(f"{name}: {ys[-1]:.1f} % of lines in the latest run")
    xs_all = tuple(sorted({i for points in by_board.values() for i, _ in points}))
    ax.set_ylabel("% of lines", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(True, axis="y", linewidth=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.subplots_adjust(left=0.08, right=0.98, top=0.95)

    def labels(ticks: list[int]) -> list[str]:
        return [f"#{history.runs[i].id} {history.runs[i].started[5:16].replace('T', ' ')}" for i in ticks]

    _run_axis(fig, ax, xs_all, labels, 7)
    png = _png(fig)
    plt.close(fig)
    return png, "Line coverage per board: " + "; ".join(alt)


def _coverage_section(plt, history: History) -> str:
    """The latest figures per board with the change since the run before, the files whose
    line coverage fell, and a chart over the runs."""
    by_board = coverage_by_run(history)
    if not by_board:  # no run of the window measured coverage
        return ""
    out = ["<h2>Code coverage</h2>"]
    rows = []
    for board, points in sorted(by_board.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        i, c = points[-1]
        change = ""
        if len(points) > 1 and c.line_percent is not None and points[-2][1].line_percent is not None:
            delta = c.line_percent - points[-2][1].line_percent
            change = _td(f"{delta:+.1f} points", "num bad" if delta < 0 else "num")
        rows.append(
            [
                _td(board or "all boards"),
                _td(f"#{history.runs[i].id}"),
                _td(_percent(c.line_covered, c.line_total), "num"),
                _td(_percent(c.function_covered, c.function_total), "num"),
                _td(_percent(c.branch_covered, c.branch_total), "num"),
                change or _td("—", "num"),
            ]
        )
    out.append(
        _table(["board", "run", "lines", "functions", "branches", "lines since the run before"], rows, "coverage")
    )
    fell = coverage_fell(history)
    if fell:
        out.append("<p>Files whose line coverage fell since the run before:</p>")
        cells = [
            [
                _td(file),
                _td(board or "all boards"),
                _td(_percent(then.line_covered, then.line_total), "num"),
                _td(_percent(now.line_covered, now.line_total), "num bad"),
            ]
            for file, board, then, now in fell[:MAX_COVERAGE_FILES]
        ]
        out.append(_table(["file", "board", "before", "latest"], cells, "coverage-fell"))
        if len(fell) > MAX_COVERAGE_FILES:
            out.append(f'<p class="muted">{len(fell) - MAX_COVERAGE_FILES} more files fell.</p>')
    png, alt = coverage_chart(plt, history, by_board)
    out.append(f'<img class="chart" alt="{_e(alt)}" title="{_e(alt)}" src="data:image/png;base64,{png}">')
    return "".join(out)


# -- the page ------------------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1180px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 22px 0 6px; border-bottom: 1px solid #ddd; }
.summary span { display: inline-block; margin-right: 14px; }
.bad { color: #c0392b; font-weight: 600; } .ok { color: #2e8b57; font-weight: 600; } .muted { color: #777; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 6px; }
img.chart { max-width: 100%; border: 1px solid #eee; }
table { border-collapse: collapse; margin: 4px 0 8px; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee;
  text-align: left; vertical-align: top; } th { background: #f5f5f5; } td.num { text-align: right; }
td { white-space: nowrap; } code, .msg { font: 12px ui-monospace, monospace; }
td.msg { white-space: pre-wrap; max-width: 560px; }
"""

# Not needed to see the page: it lets a headless browser say that every chart decoded.
SCRIPT = """window.addEventListener("load", function () {
  var imgs = document.querySelectorAll("img.chart"), n = 0;
  for (var i = 0; i < imgs.length; i++) if (imgs[i].complete && imgs[i].naturalWidth > 0) n++;
  document.body.dataset.chartsLoaded = n;
});"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _first(found: list, limit: int) -> list:
    """The rows a table shows: the first `limit` (0: every one)."""
    return found[:limit] if limit else found


def _more(found: list, limit: int, what: str, order: str) -> str:
    """What a table left out, counted, and how to see it (nothing when it left nothing out)."""
    more = len(found) - len(_first(found, limit))
    if more <= 0:
        return ""
    return (
        f'<p class="muted more">{more} more {what} not listed: the table shows the first {limit} ({order}); '
        "<code>pytest-ondevice report --rows 0</code> lists every one.</p>"
    )


def _td(value, cls: str = "") -> str:
    return f'<td class="{cls}">{_e(value)}</td>' if cls else f"<td>{_e(value)}</td>"


def _message_cell(text: str) -> str:
    """A failure's headline (a C case's first line, the assertion; a Python test's exception,
    not its traceback's opening) and the source line it points at, the rest folded (an
    older history may still hold xdist's worker header first)."""
    head, rest = headline(text)
    if not head:
        return '<td class="msg"></td>'
    folded = f"<details><summary>more</summary><pre>{_e(chr(10).join(rest[:40]))}</pre></details>" if rest else ""
    return f'<td class="msg">{_e(chr(10).join(head))}{folded}</td>'


def _when(iso: str) -> str:
    return iso.replace("T", " ").replace("+00:00", " UTC")


def _header(history: History, last: int) -> str:
    if not history.runs:
        return "<h1>pytest-ondevice nightly report</h1><p>The history holds no runs yet.</p>"
    run = history.runs[-1]
    c = run.counts
    rev = f"<code>{_e(run.git_rev[:12])}</code>" if run.git_rev else "not a git checkout"
    if run.git_dirty:
        rev += ' <span class="bad">(uncommitted changes)</span>'
    totals = [
        f'<span class="{"ok" if c.get("passed") else "muted"}">{c.get("passed", 0)} passed</span>',
        f'<span class="{"bad" if c.get("failed") else "muted"}">{c.get("failed", 0)} failed</span>',
        f'<span class="{"bad" if c.get("error") else "muted"}">{c.get("error", 0)} errors</span>',
        f'<span class="muted">{c.get("skipped", 0)} skipped</span>',
    ]
    shown = len(history.runs)
    window = f"the last {shown}" if shown < history.total_runs else f"all {shown}"
    plural = "" if history.total_runs == 1 else "s"
    finished = _when(run.finished)
    if finished[:10] == run.started[:10]:
        finished = finished[11:]  # the same day: the time is enough
    return (
        "<h1>pytest-ondevice nightly report</h1>"
        f'<p class="summary"><span>Latest run: <b>{_e(_when(run.started))}</b> to {_e(finished)}'
        f"</span><span>revision {rev}</span><span>host {_e(run.host or '?')}</span>"
        f"<span>exit status {_e(run.exitstatus)}</span></p>"
        f'<p class="summary">{"".join(totals)}</p>'
        f'<p class="muted">{history.total_runs} run{plural} in the history; charts and tables cover {window} '
        f"(--last {last}). Command: <code>pytest {_e(shlex.join(run.args))}</code></p>"
    )


def _left_out(left: LeftOut | None, memory: bool = False) -> str:
    """What the analysis left out of latency (memory: of memory figures), and why."""
    if left is None:
        return ""
    notes = []
    instrumented = left.instrumented_memory if memory else left.instrumented
    if memory and left.not_passed:
        notes.append(
            f"{_count(left.not_passed, 'figure')} of runs where the case did not pass left out: a failing "
            "case's stack is its failure path's (printing its message), not its code's, so stack figures are "
            "compared between passing runs only."
        )
    if instrumented:
        what = "figure" if memory else "latency record"
        notes.append(
            f"{_count(instrumented, what)} of coverage-instrumented builds (--ondevice-coverage) left out: "
            "the instrumentation's counters make code slower and deeper, so only plain builds are compared."
        )
    return "".join(f'<p class="muted left-out">{_e(note)}</p>' for note in notes)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _trends(
    plt, history: History, all_series: list[Series], slow: list[Series], threshold: float, left: LeftOut | None = None
) -> str:
    out = ["<h2>Latency per kernel and board</h2>"]
    if not all_series:
        return out[0] + "<p>No latency records in these runs (no case uses ONDEVICE_BENCH).</p>" + _left_out(left)
    out.append(_left_out(left))
    out.append(
        f'<p class="muted">Median per run; dotted: reference (median of the earlier runs); dashed: the '
        f"{threshold:g} % regression limit.</p>"
    )
    slow_keys = {(s.board, s.name) for s in slow}
    ordered = sorted(all_series, key=lambda s: ((s.board, s.name) not in slow_keys, s.board, s.name))
    out.append(_chart_grid(plt, history, ordered, threshold, "series not drawn (slow ones come first)"))
    return "".join(out)


def _chart_grid(plt, history: History, ordered: list[Series], threshold: float, undrawn: str) -> str:
    """A trend chart for each series, in that order, MAX_PANELS at most; then how many were
    left out (undrawn: what the rest are, and which come first)."""
    out = ['<div class="grid">']
    for s in ordered[:MAX_PANELS]:
        png, alt = trend_chart(plt, s, history.runs, threshold)
        out.append(f'<img class="chart" alt="{_e(alt)}" title="{_e(alt)}" src="data:image/png;base64,{png}">')
    out.append("</div>")
    if len(ordered) > MAX_PANELS:
        out.append(f'<p class="muted">{len(ordered) - MAX_PANELS} more {undrawn}.</p>')
    return "".join(out)


def _stack_section(
    plt,
    history: History,
    stacks: list[Series],
    deeper: list[Series],
    threshold: float,
    limit: int = MAX_ROWS,
    left: LeftOut | None = None,
) -> str:
    """Stack high-water per case (micro_test.h's `stack:CASE` records) of the runs where the
    case passed: what grew, then a chart per case over the runs, the deepest first."""
    note = _left_out(left, memory=True)
    if not stacks and not note:  # a history from before stack figures, or of binaries built without them
        return ""
    out = ["<h2>Stack high-water per case</h2>", note]
    if not stacks:
        return "".join(out)
    if deeper:
        rows = [
            [
                _td(s.name.removeprefix("stack:")),
                _td(s.board),
                _td(_fmt(s.reference or 0), "num"),
                _td(_fmt(s.latest), "num"),
                _td(f"{s.change():+.1f} %", "num bad"),
            ]
            for s in _first(deeper, limit)
        ]
        out.append(f"<p>Deeper than before by more than {threshold:g} %:</p>")
        out.append(_table(["case", "board", "reference (bytes)", "latest (bytes)", "change"], rows, "deeper-stacks"))
        out.append(_more(deeper, limit, "deeper stacks", "the most grown first"))
    ordered = sorted(stacks, key=lambda s: (s not in deeper, -s.latest))
    out.append(_chart_grid(plt, history, ordered, threshold, "cases not drawn (the deepest come first)"))
    return "".join(out)


def _device_errors_section(stats: list[DeviceStats], history: History, limit: int = MAX_ROWS) -> str:
    out = ["<h2>Devices with errors</h2>"]
    bad = [s for s in stats if s.errors or s.retried_away or s.cut_short]
    if not bad:
        out.append('<p class="ok">None.</p>' if history.runs else "<p>No runs.</p>")
        return "".join(out)
    bad = sorted(bad, key=lambda s: (-(s.errors + s.retried_away), -s.cut_short))
    rows = [
        [
            _td(s.device),
            _td(s.board or ""),
            _td(s.errors, "num"),
            _td(s.retried_away, "num"),
            _td(s.cut_short, "num"),
            _td(_when(history.runs[s.last_error_run].started)[:16] if s.last_error_run >= 0 else ""),
            _td(s.last_error[:300], "msg"),
        ]
        for s in _first(bad, limit)
    ]
    headers = ["device", "board", "errors", "moved elsewhere", "attempts cut short", "last error at", "last error"]
    out.append(_table(headers, rows, "device-errors"))
    out.append(_more(bad, limit, "devices with errors", "the most errors first"))
    return "".join(out)


def _pass_rate_section(plt, stats: list[DeviceStats]) -> str:
    """The devices' health chart (named for the pass rate it once drew)."""
    out = ["<h2>Device health: infrastructure trouble per device</h2>"]
    if not stats:
        return out[0] + "<p>No device ran a test in these runs.</p>"
    out.append(
        '<p class="muted">What the device or its link did to the case attempts it got: infrastructure errors '
        "(an error in a test's own code, a Python traceback, is not counted), binaries moved to another device "
        "after an error there, and attempts cut short there and run again. Test verdicts are not drawn: a "
        "device's pass rate says which tests it drew, not how healthy it is (the new failures and flaky cases "
        "above are the tests').</p>"
    )
    png, alt = device_chart(plt, stats)
    out.append(f'<img class="chart" alt="{_e(alt)}" title="{_e(alt)}" src="data:image/png;base64,{png}">')
    return "".join(out)


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


def _failures_section(found: list[NewFailure] | None, bisected: dict | None = None, limit: int = MAX_ROWS) -> str:
    out = ["<h2>New failures since the previous run</h2>"]
    if found is None:
        out.append("<p>No earlier run to compare with.</p>")
    elif not found:
        out.append('<p class="ok">None.</p>')
    else:
        rows = [
            [
                _td(f.result.case_name),
                _td(f.result.nodeid.split("::", 1)[0]),
                _td(f.result.board or ""),
                _td(f.result.device or ""),
                _td(f.result.outcome),
                _td(f.before),
                _message_cell(f.result.message or ""),
                *([_td(bisected.get((f.result.nodeid, f.result.board, None), ""), "first-bad")] if bisected else []),
            ]
            for f in _first(found, limit)
        ]
        headers = ["case", "file", "board", "device", "now", "before", "message"] + (["first bad"] if bisected else [])
        out.append(_table(headers, rows, "new-failures"))
        out.append(_more(found, limit, "new failures", "by file and case"))
    return "".join(out)


def _slow_section(
    all_series: list[Series],
    slow: list[Series],
    threshold: float,
    bisected: dict | None = None,
    moved: list[Series] | None = None,
    limit: int = MAX_ROWS,
    left: LeftOut | None = None,
) -> str:
    out = [f"<h2>Newly slow kernels (over {threshold:g} %)</h2>", _left_out(left)]
    by_kernel = {(board, metric): text for (_, board, metric), text in (bisected or {}).items() if metric}
    if not any(s.reference is not None for s in all_series):
        out.append(
            "<p>No earlier run to compare with.</p>" if all_series else "<p>No latency records in these runs.</p>"
        )
    elif not slow:
        out.append('<p class="ok">None.</p>')
    else:
        rows = [
            [
                _td(s.name),
                _td(s.board),
                _td(s.unit + ("" if s.deterministic else " (wall clock: noisy)")),
                _td(_fmt(s.reference or 0), "num"),
                _td(_fmt(s.latest), "num"),
                _td(f"{s.change():+.1f} %", "num bad"),
                *([_td(by_kernel.get((s.board, s.name), ""), "first-bad")] if by_kernel else []),
            ]
            for s in _first(slow, limit)
        ]
        headers = ["kernel", "board", "unit", "reference", "latest", "change"] + (["first bad"] if by_kernel else [])
        out.append(_table(headers, rows, "slow-kernels"))
        out.append(_more(slow, limit, "slower kernels", "the slowest first"))
    if moved:
        out.append(
            "<h3>Exact figures that changed since the run before</h3><p>Counted on a virtual clock "
            "(instructions), these are the same run to run: any change, under the limit too, is the code's.</p>"
        )
        rows = [
            [
                _td(s.name),
                _td(s.board),
                _td(s.unit),
                _td(_fmt(s.points[-2][1]), "num"),
                _td(_fmt(s.latest), "num"),
                _td(f"{100.0 * (s.latest - s.points[-2][1]) / (s.points[-2][1] or 1):+.2f} %", "num"),
                *([_td(by_kernel.get((s.board, s.name), ""), "first-bad")] if by_kernel else []),
            ]
            for s in _first(moved, limit)
        ]
        headers = ["kernel", "board", "unit", "before", "latest", "change"] + (["first bad"] if by_kernel else [])
        out.append(_table(headers, rows, "exact-changes"))
        out.append(_more(moved, limit, "changed exact figures", "the largest change first"))
    return "".join(out)


def _flaky_section(found: list[Flaky], runs: int, limit: int = MAX_ROWS) -> str:
    out = ["<h2>Flaky cases (same binary, both passed and failed; or passed only after a rerun)</h2>"]
    if runs < 2 and not found:
        out.append("<p>No earlier run to compare with.</p>")
    elif not found:
        out.append('<p class="ok">None.</p>')
    else:
        rows = [
            [
                _td(f.case_name),
                _td(f.nodeid.split("::", 1)[0]),
                _td(f.board or ""),
                f"<td><code>{_e(f.binary_sha256[:12] or '-')}</code></td>",
                _td(f.passed, "num"),
                _td(f.failed, "num"),
                _td(f.after_rerun, "num"),
                _td(f.last),
                _td("; ".join(f.reruns)[:300], "msg"),
            ]
            for f in _first(found, limit)
        ]
        headers = ["case", "file", "board", "binary", "passed", "failed", "passed after a rerun", "last", "reruns"]
        out.append(_table(headers, rows, "flaky"))
        out.append(_more(found, limit, "flaky cases", "the most failures first"))
    return "".join(out)


def _damaged_section(history: History) -> str:
    """What the report could not read: said first, so a short table is not taken for a good night."""
    if not history.damaged:
        return ""
    items = "".join(f'<li class="msg">{_e(d)}</li>' for d in history.damaged[:MAX_DAMAGED])
    more = len(history.damaged) - MAX_DAMAGED
    extra = f"<li>and {more} more</li>" if more > 0 else ""
    return (
        f'<h2 class="bad">Damaged values in the history ({len(history.damaged)} skipped)</h2>'
        "<p>pytest-ondevice never writes these: the file was changed by something else. The report below "
        "is drawn without them. Restore the file from a backup, or repair the values named here with "
        "<code>sqlite3</code>.</p>"
        f'<ul class="damaged">{items}{extra}</ul>'
    )


def render(history: History, threshold: float = 5.0, last: int = DEFAULT_LAST, rows: int = MAX_ROWS) -> str:
    """The whole page as one string (threshold in %; rows: of each table at most, 0 for all)."""
    plt = _pyplot()
    benches, left = usable(history)
    every = series(history, benches)
    all_series = [s for s in every if s.unit != MEMORY_UNIT]
    stacks = [s for s in every if s.unit == MEMORY_UNIT]
    slow = slow_kernels(all_series, history, threshold)
    stats = devices(history)
    body = [
        _header(history, last),
        _damaged_section(history),
        _failures_section(new_failures(history), first_bad(history), rows),
        _slow_section(
            all_series, slow, threshold, first_bad(history), changed_exact(all_series, slow, history), rows, left
        ),
        _flaky_section(flaky(history), len(history.runs), rows),
        _device_errors_section(stats, history, rows),
    ]
    if history.runs:  # what needs doing first, then the pictures
        body.append(_pass_rate_section(plt, stats))
        body.append(_trends(plt, history, all_series, slow, threshold, left))
        deeper = slow_kernels(stacks, history, threshold)
        body.append(_stack_section(plt, history, stacks, deeper, threshold, rows, left))
        body.append(_coverage_section(plt, history))
    charts = sum(part.count('<img class="chart"') for part in body)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>pytest-ondevice nightly report</title>"
        f"<style>{CSS}</style><script>{SCRIPT}</script></head>"
        f'<body data-charts="{charts}">{"".join(body)}</body></html>\n'
    )


def write(
    history: History, out: Path, threshold: float = 5.0, last: int = DEFAULT_LAST, warn=None, rows: int = MAX_ROWS
) -> Path:
    """The page written to out; each damaged value of the history also said on stderr (warn)."""
    out = Path(out)
    text = render(history, threshold, last, rows)
    say = warn or (lambda line: print(line, file=sys.stderr))
    for note in history.damaged:
        say(f"pytest-ondevice report: skipped a damaged value: {note}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out
