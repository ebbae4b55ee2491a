"""What `pytest-ondevice bisect --history` bisects: the last run's new failures and slower
records by the rules it shares with the morning report (records/analysis.py: BISECT_FAILURES,
BISECT_SLOWER), narrower than the report's where a bisection needs a good end to search from."""

from __future__ import annotations

from pytest_ondevice.commands.bisect.nightly import suspects
from pytest_ondevice.formats.benchline import MEMORY_UNIT
from pytest_ondevice.records import analysis
from pytest_ondevice.records.history import Bench, Result, Run, append_run, connect, load


def _r(case: str, outcome: str, **kw) -> Result:
    return Result(f"k_test.c::{case}[mps2]", case, outcome, board="mps2", device="mps2", **kw)


def _b(name: str, median: float, unit: str = "instructions", **kw) -> Bench:
    return Bench("k_test.c::K[mps2]", "K", name, unit, median, median, median, board="mps2", deterministic=True, **kw)


def test_bisect_takes_the_failures_that_passed_before_and_the_figures_that_rose_since_the_run_before(tmp_path):
    path = tmp_path / "h.db"
    nights = [
        (
            "a",
            [_r("A", "passed"), _r("B", "passed"), _r("D", "passed"), _r("K", "passed")],
            [_b("gemm", 1000), _b("fft", 1000), _b("gemm", 3000, variant="gcov"), _b("stack:K", 100, MEMORY_UNIT)],
        ),
        (
            "b",
            [
                _r("A", "failed", message="A: expected 6, got 5"),
                _r("B", "error", message="mps2: connection lost"),  # the device's: a step would skip it
                _r("C", "failed"),  # a new case: no good end
                _r("D", "failed", reruns=["mps2: connection lost"]),  # its verdict may be luck
                _r("K", "passed"),
            ],
            [_b("gemm", 1001), _b("fft", 1000), _b("gemm", 9000, variant="gcov"), _b("stack:K", 400, MEMORY_UNIT)],
        ),
    ]
    db = connect(path)
    for day, (rev, results, benches) in enumerate(nights, 1):
        run = Run(started=f"2026-11-0{day}T02:00:00+00:00", finished="", git_rev=rev * 40)
        append_run(db, run, results, benches)
    db.close()
    run_id, found = suspects(path, 5.0)
    assert run_id == 2
    assert [(s.nodeid, s.metric, s.good_rev[0], s.bad_rev[0], s.flaky) for s in found] == [
        ("k_test.c::A[mps2]", None, "a", "b", False),
        ("k_test.c::D[mps2]", None, "a", "b", True),
        ("k_test.c::K[mps2]", "gemm", "a", "b", False),  # an exact +0.1 %; not the instrumented build's, nor the stack
    ]
    assert found[0].why == "A: expected 6, got 5"
    assert found[2].why == "gemm: 1000 -> 1001 instructions (+0.1 %)"
    # the report's rule on the same history: the error and the new case are news there too
    reported = analysis.new_failures(load(path), analysis.REPORT_FAILURES)
    assert [f.result.case_name for f in reported] == ["A", "B", "C", "D"]
