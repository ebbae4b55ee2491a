"""`pytest-ondevice report`: a history file as one static HTML page to read in the morning.

The page needs no server, no network and no script to be read: charts are PNGs drawn by
matplotlib and embedded as data URLs (its one inline script only lets a headless browser
say that every chart decoded). matplotlib is imported when a report is drawn, never by the
plugin."""

from __future__ import annotations

import html
import shlex
import sys
from pathlib import Path

from ..formats.benchline import MEMORY_UNIT
from .analysis import (
    LeftOut,
    NewFailure,
    Series,
    changed_exact,
    coverage_by_run,
    coverage_fell,
    first_bad,
    new_failures,
    series,
    slow_kernels,
    usable,
)
from .charts import coverage_chart, device_chart, number, trend_chart
from .failmessage import headline
from .history import History
from .reliability import DeviceStats, Flaky, devices, flaky

DEFAULT_LAST = 30  # runs in the window the charts and tables look at
MAX_PANELS = 24  # latency panels drawn at most; the newly slow ones first
INSTALL_HINT = "pip install 'pytest-ondevice[report]'"
MAX_DAMAGED = 20  # damaged values named on the page; the rest counted
MAX_COVERAGE_FILES = 40  # files whose line coverage fell, named on the page; the rest counted
MAX_ROWS = 50  # rows of each table on the page (a farm's night may bring hundreds); the rest counted


class MatplotlibMissing(Exception):
    """The report extra is not installed."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise MatplotlibMissing(f"the report draws its charts with matplotlib: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _percent(covered: int, total: int) -> str:
    return f"{100 * covered / total:.1f} % ({covered} of {total})" if total else "—"


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
                _td(number(s.reference or 0), "num"),
                _td(number(s.latest), "num"),
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
                _td(number(s.reference or 0), "num"),
                _td(number(s.latest), "num"),
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
                _td(number(s.points[-2][1]), "num"),
                _td(number(s.latest), "num"),
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
