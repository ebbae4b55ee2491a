"""Which figures the morning report compares (issue 50): a stack high-water only from runs
where its case passed (item 6), latency and stack only from plain builds, never from
coverage-instrumented ones (item 3). Histories are written with the recorder's own functions
and read back as the report reads them."""

from __future__ import annotations

import itertools
import re

import pytest
from test_report_edges import Kept

from pytest_ondevice.records import analysis, charts, reliability, report
from pytest_ondevice.records.history import Bench, Coverage, Result, Run, append_run, connect, load

CASE = "dot_test.c::DotS8Small[rpi]"


def _night(day: int) -> Run:
    return Run(started=f"2026-11-{day:02d}T02:00:00+00:00", finished=f"2026-11-{day:02d}T02:10:00+00:00")


def _stack(nodeid: str, case: str, used: float, board: str = "rpi") -> Bench:
    return Bench(nodeid, case, f"stack:{case}", "bytes", used, used, used, board=board, deterministic=True)


def _latency(median: float, board: str = "bluepill") -> Bench:
    return Bench(
        f"k_test.c::K[{board}]", "K", "gemm", "instructions", median, median, median, board=board, deterministic=True
    )


def _history(path, nights: list[tuple[list[Result], list[Bench]]]):
    db = connect(path)
    for day, (results, benches) in enumerate(nights, start=1):
        append_run(db, _night(day), results, benches)
    db.close()
    return load(path)


def _dot(outcome: str, used: float, **kw) -> tuple[Result, Bench]:
    return Result(CASE, "DotS8Small", outcome, board="rpi", device="pi-2", **kw), _stack(CASE, "DotS8Small", used)


def test_a_case_that_failed_is_no_stack_regression_its_passing_runs_are_compared(tmp_path):
    """The case failed and printed its message: 68 -> 672 bytes is the failure path's stack."""
    passing = [_dot("passed", 68) for _ in range(3)]
    failing = _dot("failed", 672, message="dot[3] == 12 failed at dot_test.c:40 (11 vs 12)")
    grown = Result("dot_test.c::DotS8Large[rpi]", "DotS8Large", "passed", board="rpi", device="pi-2")
    history = _history(
        tmp_path / "h.db",
        [([r], [b, _stack(grown.nodeid, "DotS8Large", 100)]) for r, b in passing[:2]]
        + [([passing[2][0], grown], [passing[2][1], _stack(grown.nodeid, "DotS8Large", 100)])]
        + [([failing[0], grown], [failing[1], _stack(grown.nodeid, "DotS8Large", 160)])],
    )
    benches, left = analysis.usable(history)
    assert left.not_passed == 1 and 672 not in [b.median for b in benches]
    stacks = {s.name: s for s in analysis.series(history)}
    assert stacks["stack:DotS8Small"].points == [(0, 68.0), (1, 68.0), (2, 68.0)]  # the failing night left out
    deeper = analysis.slow_kernels(list(stacks.values()), history, 5.0)
    assert [(s.name, s.latest) for s in deeper] == [("stack:DotS8Large", 160.0)]  # a passing case that grew: still said
    page = report.render(history)
    section = page[page.index("<h2>Stack high-water per case</h2>") :]
    rows = re.search(r'<table class="deeper-stacks">.*?</table>', section, re.S).group(0)
    assert "DotS8Large" in rows and "DotS8Small" not in rows and "+888" not in page
    assert "1 figure of runs where the case did not pass left out" in section
    assert "compared between passing runs only" in section


def test_a_case_whose_every_stack_figure_is_of_a_failing_run_says_so_and_draws_nothing(tmp_path):
    history = _history(tmp_path / "h.db", [([r], [b]) for r, b in (_dot("failed", 600), _dot("error", 620))])
    assert analysis.series(history) == []
    section = report._stack_section(report._pyplot(), history, [], [], 5.0, left=analysis.usable(history)[1])
    assert section.startswith("<h2>Stack high-water per case</h2>") and "2 figures of runs where" in section
    assert "<img" not in section
    plain = _history(tmp_path / "p.db", [([_dot("passed", 60)[0]], [])])
    assert report._stack_section(report._pyplot(), plain, [], [], 5.0, left=analysis.usable(plain)[1]) == ""


def _instrumented(b: Bench) -> Bench:
    b.variant = "gcov"  # as bench records of an --ondevice-coverage build are kept (issue 50, item 3)
    return b


def test_latency_of_a_coverage_instrumented_build_is_left_out_and_the_page_says_so(tmp_path):
    ran = [Result("k_test.c::K[bluepill]", "K", "passed", board="bluepill", device="bluepill")]
    history = _history(tmp_path / "h.db", [(ran, [_latency(1000)]) for _ in range(3)] + [(ran, [_latency(1000)])])
    (gcov,) = [b for b in history.benches if b.run_id == history.runs[-1].id]
    # the latest night measured it once plain and once under coverage, 33 % slower
    history.benches.append(_instrumented(Bench(**{**vars(gcov), "median": 1330.0, "min": 1330.0, "max": 1330.0})))
    deep = _stack(ran[0].nodeid, "K", 900, board="bluepill")
    deep.run_id = gcov.run_id
    history.benches.append(_instrumented(deep))
    every = analysis.series(history)
    assert [(s.name, s.points[-1]) for s in every] == [("gemm", (3, 1000.0))]
    assert analysis.slow_kernels(every, history, 5.0) == [] and analysis.changed_exact(every, [], history) == []
    left = analysis.usable(history)[1]
    assert (left.instrumented, left.instrumented_memory) == (1, 1)
    page = report.render(history)
    slow = page[page.index("<h2>Newly slow kernels") : page.index("<h2>Flaky")]
    assert '<p class="ok">None.</p>' in slow
    assert "1 latency record of coverage-instrumented builds (--ondevice-coverage) left out" in slow
    trends = page[page.index("<h2>Latency per kernel and board</h2>") :]
    assert "1 latency record of coverage-instrumented builds" in trends
    assert "1 figure of coverage-instrumented builds" in page[page.index("<h2>Stack high-water") :]


def test_a_history_of_plain_builds_only_says_nothing_of_instrumented_figures(tmp_path):
    ran = [Result("k_test.c::K[bluepill]", "K", "passed", board="bluepill", device="bluepill")]
    history = _history(tmp_path / "h.db", [(ran, [_latency(1000)]), (ran, [_latency(1400)])])
    for b in history.benches[:1]:
        b.variant = None  # a record from before variants were kept: plain
    assert [s.name for s in analysis.slow_kernels(analysis.series(history), history, 5.0)] == ["gemm"]
    page = report.render(history)
    assert "left-out" not in page and "instrumented" not in page


# -- the charts' labels, as drawn (issue 50, item 12: the last x label was cut off) ----------


@pytest.fixture
def kept():
    plt = Kept()
    yield plt
    for fig in plt.figures:
        plt.plt.close(fig)


def _drawn_labels(fig) -> list:
    """The window boxes of the figure's visible x tick labels, each axis's left to right,
    once drawn as the PNG is."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        low, high = sorted(ax.get_xlim())
        ticks = zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
        shown = [t for x, t in ticks if low <= x <= high and t.get_visible() and t.get_text()]  # as drawn
        boxes.append(sorted((t.get_window_extent(renderer) for t in shown), key=lambda b: b.x0))
    return boxes


def _assert_whole_and_apart(fig) -> None:
    width, height = fig.canvas.get_width_height()
    for boxes in _drawn_labels(fig):
        assert boxes
        for b in boxes:
            assert b.x0 >= 0 and b.x1 <= width and b.y0 >= 0 and b.y1 <= height, (b, width, height)
        for a, b in itertools.pairwise(boxes):
            assert a.x1 < b.x0, (a, b)  # no two labels touch


def _runs(starts: list[str]) -> list[Run]:
    return [Run(started=s, finished=s, git_rev=f"{i:x}" * 40) for i, s in enumerate(starts)]


def test_every_run_label_of_a_trend_chart_shows_whole_within_the_panel(kept):
    nights = _runs([f"2026-11-{d:02d}T02:00:00+00:00" for d in range(1, 15)])
    series = analysis.Series("rpi", "gemm_f32_naive_16", "ns", False, [(i, 33000.0 + i % 3 * 200) for i in range(14)])
    charts.trend_chart(kept, series, nights, 5.0)
    _assert_whole_and_apart(kept.figures[-1])
    (ax,) = kept.figures[-1].axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == "11-01\n0000000" and labels[-1] == "11-14\nddddddd"  # the first and the latest

    # runs three a day over three days: "11-02 06:10" labels, wider than a day's
    busy = _runs([f"2026-11-{1 + i // 3:02d}T{(i % 3) * 6:02d}:10:00+00:00" for i in range(7)])
    charts.trend_chart(kept, analysis.Series("rpi", "gemm", "ns", False, [(i, 100.0 + i) for i in range(7)]), busy, 5.0)
    _assert_whole_and_apart(kept.figures[-1])
    (ax,) = kept.figures[-1].axes
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()][-1] == "11-03 00:10"  # the latest kept

    charts.trend_chart(kept, analysis.Series("rpi", "one", "ns", False, [(0, 5.0)]), busy[:1], 5.0)
    _assert_whole_and_apart(kept.figures[-1])


def test_every_run_label_of_the_coverage_chart_shows_whole(kept, tmp_path):
    db = connect(tmp_path / "c.db")
    for day in range(1, 15):
        figures = [Coverage(b, None, line_covered=700 + day, line_total=1000) for b in ("rpi", None)]
        append_run(db, _night(day), [Result("a.c::A[rpi]", "A", "passed", board="rpi")], [], figures)
    db.close()
    history = load(tmp_path / "c.db")
    charts.coverage_chart(kept, history, analysis.coverage_by_run(history))
    _assert_whole_and_apart(kept.figures[-1])
    (ax,) = kept.figures[-1].axes
    assert ax.get_xticklabels()[-1].get_text() == "#14 11-14 02:00"


def test_the_device_chart_s_labels_show_whole(kept):
    stats = [reliability.DeviceStats(f"pi-{i}", "rpi", passed=10 * i, errors=i % 3) for i in range(1, 9)]
    charts.device_chart(kept, stats)
    _assert_whole_and_apart(kept.figures[-1])
