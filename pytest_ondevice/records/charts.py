"""The report's charts: PNGs (base64) drawn with the pyplot the page hands in, each with
its alt text. matplotlib is imported only when a chart is drawn."""

from __future__ import annotations

import base64
import io

from .analysis import Series
from .history import Coverage, History, Run
from .reliability import DeviceStats


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    fig.clf()
    return base64.b64encode(buf.getvalue()).decode("ascii")


def number(value: float) -> str:
    """A figure as the page and the charts show it: in groups of thousands, or to three digits."""
    return f"{value:,.0f}".replace(",", " ") if abs(value) >= 100 else f"{value:.3g}"


def trend_chart(plt, s: Series, runs: list[Run], threshold: float) -> tuple[str, str]:
    """(PNG as base64, alt text) of one kernel on one board."""
    from matplotlib.ticker import EngFormatter

    fig, ax = plt.subplots(figsize=(3.7, 1.85))
    xs, ys = zip(*s.points, strict=True)
    ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, color="#1f5fa8")
    ref, change = s.reference, s.change()
    alt = f"{s.name} on {s.board}: latest median {number(s.latest)} {s.unit} over {len(xs)} runs"
    if ref is not None:
        limit = ref * (1 + threshold / 100)
        ax.axhline(ref, color="#888888", linewidth=0.8, linestyle=":")
        ax.axhline(limit, color="#c0392b", linewidth=1.0, linestyle="--")
        slow = change is not None and change > threshold
        ax.plot([xs[-1]], [ys[-1]], marker="o", markersize=6, color="#c0392b" if slow else "#1f5fa8")
        alt += f"; reference {number(ref)}, {change:+.1f} % ({'over' if slow else 'within'} the {threshold:g} % limit)"
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
