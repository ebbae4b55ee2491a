"""The rules of a new failure and of a slower figure (records/analysis.py), said once and
applied by both the morning report and `pytest-ondevice bisect --history`: the report's wide
rules, bisect's narrower ones, and where they part (docs/farm.md, docs/bisect.md)."""

from __future__ import annotations

import pytest

from pytest_ondevice.records import analysis
from pytest_ondevice.records.analysis import (
    BISECT_FAILURES,
    BISECT_SLOWER,
    NOT_RUN,
    REPORT_FAILURES,
    REPORT_SLOWER,
    changed_exact,
    new_failures,
    series,
    slow_kernels,
    slower,
)
from pytest_ondevice.records.history import Bench, History, Result, Run


def _history(*nights: tuple[list[Result], list[Bench]]) -> History:
    """Runs 1..N, one a night, oldest first, holding those results and records."""
    runs, results, benches = [], [], []
    for n, (rs, bs) in enumerate(nights, 1):
        runs.append(Run(started=f"2026-11-{n:02d}T02:00:00+00:00", finished="", git_rev=f"{n:040x}", id=n))
        for r in rs:
            r.run_id = n
            results.append(r)
        for b in bs:
            b.run_id = n
            benches.append(b)
    return History(runs, results, benches, len(runs))


def _r(case: str, outcome: str, board: str = "mps2", **kw) -> Result:
    return Result(f"k_test.c::{case}[{board}]", case, outcome, board=board, device=board, **kw)


def _b(name: str, median: float, board: str = "mps2", exact: bool = True, **kw) -> Bench:
    unit = "instructions" if exact else "ns"
    return Bench(
        f"k_test.c::K[{board}]", "K", name, unit, median, median, median, board=board, deterministic=exact, **kw
    )


# -- new failures ------------------------------------------------------------------------

# (verdict in the board's previous run, verdict now) -> (a new failure by the report's rule, by bisect's)
FAILURE_TABLE = [
    ("passed", "failed", True, True),
    ("passed", "error", True, False),  # an error is the device's: a step skips it, bisect cannot judge by it
    (NOT_RUN, "failed", True, False),  # a new case: news, but no good end to bisect from
    (NOT_RUN, "error", True, False),
    ("failed", "failed", False, False),  # failed before too: not new
    ("error", "failed", False, False),
    ("skipped", "failed", False, False),
    ("passed", "passed", False, False),
    ("passed", "skipped", False, False),
]


@pytest.mark.parametrize(("before", "now", "reported", "bisected"), FAILURE_TABLE)
def test_a_new_failure_is_what_each_tool_s_rule_says(before, now, reported, bisected):
    earlier = [_r("Other", "passed")] + ([] if before == NOT_RUN else [_r("Case", before)])
    history = _history((earlier, []), ([_r("Other", "passed"), _r("Case", now)], []))
    for rule, expected in ((REPORT_FAILURES, reported), (BISECT_FAILURES, bisected)):
        found = new_failures(history, rule)
        assert [(f.result.case_name, f.before) for f in found] == ([("Case", before)] if expected else []), rule


def test_the_report_s_rule_is_the_default_and_the_rules_say_what_they_count():
    assert REPORT_FAILURES.now == ("failed", "error") and REPORT_FAILURES.before == ("passed", NOT_RUN)
    assert BISECT_FAILURES.now == ("failed",) and BISECT_FAILURES.before == ("passed",)
    history = _history(([_r("A", "passed")], []), ([_r("A", "error")], []))
    assert [f.result.outcome for f in new_failures(history)] == ["error"]


def test_a_new_failure_is_held_against_its_board_s_previous_run_not_the_run_in_between():
    history = _history(
        ([_r("A", "passed"), _r("B", "failed")], []),  # mps2's night
        ([_r("A", "failed", board="rpi"), _r("B", "passed", board="rpi")], []),  # rpi's night between
        ([_r("A", "failed"), _r("B", "failed"), _r("C", "failed", board="esp32")], []),  # esp32's first run
    )
    for rule in (REPORT_FAILURES, BISECT_FAILURES):
        (found,) = new_failures(history, rule)
        assert (found.result.nodeid, found.before) == ("k_test.c::A[mps2]", "passed")
        assert found.previous is history.runs[0]  # its revision: bisect's good end
        assert found.then is not None and found.then.run_id == 1


def test_only_the_last_run_has_new_failures_and_one_run_has_nothing_to_compare_with():
    history = _history(([_r("A", "passed")], []), ([_r("A", "failed")], []), ([_r("A", "failed")], []))
    assert new_failures(history, REPORT_FAILURES) == []  # new two nights ago, not now
    assert new_failures(_history(([_r("A", "failed")], [])), REPORT_FAILURES) is None


# -- slower figures -------------------------------------------------------------------------


def test_the_report_holds_a_figure_against_the_median_of_earlier_runs_bisect_against_the_previous_run():
    nights = [100, 100, 200, 110]  # one noisy night, then 10 % over the usual
    history = _history(*(([_r("K", "passed")], [_b("gemm", m, exact=False)]) for m in nights))
    every = series(history)
    (reported,) = slower(every, history, 5.0, REPORT_SLOWER)
    assert (reported.reference, reported.change, reported.reference_run) == (100.0, pytest.approx(10.0), None)
    assert slower(every, history, 5.0, BISECT_SLOWER) == []  # 110 against the night before's 200: faster
    assert [s.name for s in slow_kernels(every, history, 5.0)] == ["gemm"]  # the report's rule


def test_the_previous_run_is_bisect_s_reference_and_its_revision_the_good_end():
    nights = [200, 100, 100, 110]  # 10 % over the night before; the earlier median (100) says so too
    history = _history(*(([_r("K", "passed")], [_b("gemm", m, exact=False)]) for m in nights))
    (found,) = slower(series(history), history, 5.0, BISECT_SLOWER)
    assert (found.reference, found.change, found.reference_run) == (100.0, pytest.approx(10.0), 2)
    assert found.series.nodeid == "k_test.c::K[mps2]"


@pytest.mark.parametrize(
    ("before", "now", "reported", "bisected"),
    [
        (1000, 1051, True, True),  # over 5 %
        (1000, 1050, False, True),  # at the threshold: not over it; an exact figure's rise is bisected
        (1000, 1001, False, True),  # any rise of an exact figure
        (1000, 999, False, False),  # faster
        (1000, 1000, False, False),
    ],
)
def test_an_exact_figure_is_slower_over_the_threshold_for_the_report_and_on_any_rise_for_bisect(
    before, now, reported, bisected
):
    history = _history(([_r("K", "passed")], [_b("gemm", before)]), ([_r("K", "passed")], [_b("gemm", now)]))
    every = series(history)
    assert bool(slower(every, history, 5.0, REPORT_SLOWER)) is reported
    assert bool(slower(every, history, 5.0, BISECT_SLOWER)) is bisected
    # what the report does not call slower but moved is listed apart, rises and falls alike
    assert bool(changed_exact(every, slow_kernels(every, history, 5.0), history)) is (before != now and not reported)


def test_a_wall_clock_figure_is_slower_only_over_the_threshold_by_either_rule():
    history = _history(
        ([_r("K", "passed")], [_b("sum", 1000, exact=False)]), ([_r("K", "passed")], [_b("sum", 1040, exact=False)])
    )
    every = series(history)
    assert slower(every, history, 5.0, REPORT_SLOWER) == [] and slower(every, history, 5.0, BISECT_SLOWER) == []
    assert [f.series.name for f in slower(every, history, 3.9, BISECT_SLOWER)] == ["sum"]


def test_a_figure_not_measured_in_its_board_s_latest_run_or_not_in_its_previous_run():
    history = _history(
        ([_r("K", "passed")], [_b("gemm", 100), _b("fft", 100)]),
        ([_r("K", "passed")], [_b("gemm", 200)]),  # fft not measured: no reference for bisect
        ([_r("K", "passed")], [_b("fft", 200)]),  # gemm not measured in mps2's latest run: not news
    )
    every = series(history)
    assert [f.series.name for f in slower(every, history, 5.0, REPORT_SLOWER)] == ["fft"]  # median of earlier: 100
    assert slower(every, history, 5.0, BISECT_SLOWER) == []  # mps2's previous run did not measure fft


def test_only_plain_builds_figures_are_compared_by_either_rule():
    history = _history(
        ([_r("K", "passed")], [_b("gemm", 100), _b("gemm", 300, variant="gcov")]),
        ([_r("K", "passed")], [_b("gemm", 100), _b("gemm", 900, variant="gcov")]),  # the instrumented one tripled
    )
    every = series(history)
    assert [(s.name, s.points) for s in every] == [("gemm", [(0, 100.0), (1, 100.0)])]
    assert slower(every, history, 5.0, REPORT_SLOWER) == [] and slower(every, history, 5.0, BISECT_SLOWER) == []


def test_the_slower_rules_are_the_ones_the_docs_name():
    assert (REPORT_SLOWER.against, REPORT_SLOWER.exact_rises) == (analysis.MEDIAN_OF_EARLIER, False)
    assert (BISECT_SLOWER.against, BISECT_SLOWER.exact_rises) == (analysis.PREVIOUS_RUN, True)
