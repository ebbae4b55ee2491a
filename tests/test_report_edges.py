"""What the nightly report calls flaky and whom it blames, case by case: a verdict that flipped
on one binary, a pass that needed a rerun, and what is neither. Histories are written with
the recorder's own functions and read back as the report reads them. Found missing by
mutation testing (report.py's flaky and device code)."""

from __future__ import annotations

import base64
import re
import sys

import pytest
from test_report import _table_column

from pytest_ondevice.records import analysis, charts, reliability, report
from pytest_ondevice.records.history import Bench, Result, Run, append_run, connect, load

SHA, SHA2 = "ab" * 32, "cd" * 32
LOST = "pi-1: connection lost after 2.1 s (ssh: EOF)"


def _nights(path, *nights: list[Result]):
    """A history of one run per night, each with those results; read back."""
    db = connect(path)
    for n, results in enumerate(nights, start=1):
        run = Run(started=f"2026-11-{n:02d}T02:00:00+00:00", finished=f"2026-11-{n:02d}T02:10:00+00:00")
        append_run(db, run, results, [])
    db.close()
    return load(path)


def _case(outcome: str, name: str = "A", sha: str | None = SHA, **kw) -> Result:
    where = {"board": "rpi", "device": "pi-2", "binary_sha256": sha, **kw}
    return Result(f"a_test.c::{name}[rpi]", name, outcome, **where)


def _flaky(history) -> list[tuple]:
    return [(f.case_name, f.passed, f.failed, f.after_rerun, f.last, f.reruns) for f in reliability.flaky(history)]


def test_only_passes_and_failures_of_one_binary_can_flip(tmp_path):
    history = _nights(
        tmp_path / "h.db",
        [_case("error", "Errored"), _case("skipped", "Skipped"), _case("failed", "Rebuilt", sha=SHA)],
        [_case("passed", "Errored"), _case("failed", "Skipped"), _case("passed", "Rebuilt", sha=SHA2)],
        [_case("passed", "Python", sha=None), _case("failed", "Flips")],
        [_case("failed", "Python", sha=None), _case("passed", "Flips")],
    )
    assert _flaky(history) == [("Flips", 1, 1, 0, "passed", ())]  # the code changed, or no binary vouches for it


def test_a_failure_after_a_rerun_is_a_failure_not_a_flaky_pass(tmp_path):
    history = _nights(
        tmp_path / "h.db",
        [_case("failed", "Fails", sha=None, reruns=[LOST]), _case("failed", "Binary", reruns=[LOST])],
        [_case("failed", "Fails", sha=None, reruns=[LOST]), _case("failed", "Binary", reruns=[LOST])],
    )
    assert reliability.flaky(history) == []
    assert report._flaky_section([], len(history.runs)).endswith('<p class="ok">None.</p>')


def test_a_flaky_case_counts_each_verdict_in_run_order_and_names_each_cause_once_latest_first(tmp_path):
    history = _nights(
        tmp_path / "h.db",
        [_case("passed", reruns=[LOST], flaky="the first attempt crashed")],
        [_case("failed")],
        [_case("passed", reruns=["pi-3: device unreachable", LOST])],
        [_case("passed")],
    )
    (case,) = reliability.flaky(history)
    assert (case.case_name, case.board, case.binary_sha256) == ("A", "rpi", SHA)
    assert (case.passed, case.failed, case.after_rerun, case.last) == (3, 1, 2, "passed")
    assert case.reruns == (LOST, "pi-3: device unreachable", "the first attempt crashed")


def test_the_flaky_table_shows_the_short_binary_and_every_cause_in_one_cell(tmp_path):
    long_cause = "pi-1: " + "x" * 400
    history = _nights(
        tmp_path / "h.db",
        [_case("passed", reruns=[LOST]), _case("passed", "NoBinary", sha=None, reruns=[long_cause])],
    )
    page = report._flaky_section(reliability.flaky(history), len(history.runs))
    assert _table_column(page, "flaky") == ["A", "NoBinary"]
    assert _table_column(page, "flaky", 1) == ["a_test.c", "a_test.c"]
    assert _table_column(page, "flaky", 3) == [f"<code>{SHA[:12]}</code>", "<code>-</code>"]
    assert _table_column(page, "flaky", 8) == [LOST, long_cause[:300]]


def test_each_attempt_cut_short_counts_against_its_device_and_names_its_cause(tmp_path):
    history = _nights(
        tmp_path / "h.db",
        [_case("passed", reruns=[LOST, "pi-3: device unreachable"])],
        [_case("passed", reruns=[LOST]), _case("error", "B", device="pi-3", message="  pi-3: gone  \n")],
        [_case("passed", "C", device="pi-4"), _case("passed", "D", board="bluepill", device="zz-qemu")],
    )
    stats = {s.device: s for s in reliability.devices(history)}
    assert list(stats) == ["zz-qemu", "pi-1", "pi-2", "pi-3", "pi-4"]  # sorted by board, then device
    assert (stats["pi-1"].cut_short, stats["pi-1"].last_error, stats["pi-1"].last_error_run) == (2, LOST, 1)
    assert (stats["pi-3"].cut_short, stats["pi-3"].errors, stats["pi-3"].last_error) == (1, 1, "pi-3: gone")
    assert (stats["pi-2"].passed, stats["pi-2"].cut_short, stats["pi-4"].passed) == (2, 0, 1)
    page = report._device_errors_section(reliability.devices(history), history)
    assert _table_column(page, "device-errors") == ["pi-3", "pi-1"]  # errors first, then attempts cut short
    assert _table_column(page, "device-errors", 4) == ["1", "2"]
    assert _table_column(page, "device-errors", 5) == ["2026-11-02 02:00", "2026-11-02 02:00"]
    assert _table_column(page, "device-errors", 6) == ["pi-3: gone", LOST]


def test_devices_a_binary_moved_away_from_are_named_from_the_note_and_errors_sort_first(tmp_path):
    moved = "pi-9: unreachable; pi-1: lost (log: a.log); log: see a.log"  # pi-9 never ran anything itself
    db = connect(tmp_path / "h.db")
    for day, results in (
        (2, [_case("error", "B", device="pi-3", message="pi-3: gone again"), _case("passed", "C", device="pi-1")]),
        (1, [_case("error", "B", device="pi-3"), _case("error", "D", device="pi-4")]),  # appended last, ran first
        (3, [_case("passed", "E", device="pi-2", retried_after=moved, reruns=["pi-5: lost", "pi-6: lost"])]),
        (4, [_case("passed", "F", device="pi-2", reruns=["pi-6: lost"])]),
    ):
        run = Run(started=f"2026-11-0{day}T02:00:00+00:00", finished=f"2026-11-0{day}T02:10:00+00:00")
        append_run(db, run, results, [])
    db.close()
    history = load(tmp_path / "h.db")
    stats = {s.device: s for s in reliability.devices(history)}
    assert "log" not in stats  # after the first, only names seen as devices count
    assert (stats["pi-9"].retried_away, stats["pi-1"].retried_away, stats["pi-9"].last_error) == (1, 1, moved)
    assert (stats["pi-3"].errors, stats["pi-3"].last_error, stats["pi-3"].last_error_run) == (2, "pi-3: gone again", 1)
    assert (stats["pi-4"].last_error, stats["pi-4"].last_error_run) == ("", 0)  # an error that said nothing
    page = report._device_errors_section(reliability.devices(history), history)
    assert _table_column(page, "device-errors") == ["pi-3", "pi-1", "pi-4", "pi-9", "pi-6", "pi-5"]
    assert _table_column(page, "device-errors", 5) == [
        "2026-11-02 02:00",
        "2026-11-03 02:00",
        "2026-11-01 02:00",
        "2026-11-03 02:00",
        "2026-11-04 02:00",
        "2026-11-03 02:00",
    ]


def test_the_page_says_what_was_flaky_and_who_cut_attempts_short(tmp_path):
    history = _nights(tmp_path / "h.db", [_case("passed", reruns=[LOST])])
    page = report.render(history)
    assert _table_column(page, "flaky") == ["A"] and _table_column(page, "device-errors") == ["pi-1"]
    alt = re.search(r'alt="(Device health: [^"]*)"', page).group(1)
    assert alt == (
        "Device health: infrastructure trouble per device, not test verdicts: "
        "pi-1 (rpi): 100.0 % (1 of 1 case attempts) (1 cut short, run again); pi-2 (rpi): none in 1 case attempts"
    )


def test_the_last_verdict_is_the_latest_runs_even_when_an_earlier_night_was_appended_after_it(tmp_path):
    """Nightlies of several boards append to one file: the night that started last may be written first."""
    db = connect(tmp_path / "h.db")
    for day, outcome in ((2, "passed"), (1, "failed")):
        run = Run(started=f"2026-11-0{day}T02:00:00+00:00", finished=f"2026-11-0{day}T02:10:00+00:00")
        append_run(db, run, [_case(outcome)], [])
    db.close()
    assert _flaky(load(tmp_path / "h.db")) == [("A", 1, 1, 0, "passed", ())]


def test_a_flaky_case_s_last_verdict_is_its_last_pass_or_failure_not_a_later_error_or_skip(tmp_path):
    history = _nights(
        tmp_path / "h.db",
        [_case("failed")],
        [_case("passed")],
        [_case("error", message="pi-2: gone")],  # the device's doing, not a verdict on the code
        [_case("skipped")],
        [_case("passed", "B", reruns=[LOST, "pi-3: device unreachable"])],
    )
    assert _flaky(history) == [
        ("A", 1, 1, 0, "passed", ()),
        ("B", 1, 0, 1, "passed", ("pi-3: device unreachable", LOST)),
    ]
    page = report._flaky_section(reliability.flaky(history), len(history.runs))
    assert _table_column(page, "flaky", 8) == ["", f"pi-3: device unreachable; {LOST}"]  # one cell, latest first


def test_each_device_s_attempts_count_its_verdicts_and_a_plain_python_test_is_no_device(tmp_path):
    tool = "tests/test_tools.py::test_fleet_file_parses"
    history = _nights(
        tmp_path / "h.db",
        [
            Result(tool, "test_fleet_file_parses", "passed"),  # no board, no device: counted nowhere
            _case("passed", "A", device="pi-1"),
            _case("failed", "B", device="pi-1"),
            _case("passed", "C"),
        ],
        [
            Result(tool, "test_fleet_file_parses", "failed"),
            _case("failed", "A", device="pi-1"),
            _case("passed", "B", device="pi-1"),
        ],
    )
    stats = reliability.devices(history)
    assert [(s.device, s.passed, s.failed, s.pass_rate) for s in stats] == [("pi-1", 2, 2, 50.0), ("pi-2", 1, 0, 100.0)]
    assert [(s.attempts, s.trouble, s.trouble_rate) for s in stats] == [(4, 0, 0.0), (1, 0, 0.0)]
    page = report._pass_rate_section(report._pyplot(), stats)
    assert (
        'alt="Device health: infrastructure trouble per device, not test verdicts: '
        'pi-1 (rpi): none in 4 case attempts; pi-2 (rpi): none in 1 case attempts"'
    ) in page  # pi-1's failures are its tests', not its health
    assert page.startswith('<h2>Device health: infrastructure trouble per device</h2><p class="muted">')
    assert "Test verdicts are not drawn" in page
    assert page.endswith('">') and page.count("<img") == 1
    assert report._device_errors_section(stats, history) == '<h2>Devices with errors</h2><p class="ok">None.</p>'


def test_a_new_failure_of_a_plain_python_test_leaves_board_device_and_message_empty(tmp_path):
    tool = "tests/test_tools.py::test_fleet_file_parses"
    history = _nights(
        tmp_path / "h.db",
        [Result(tool, "test_fleet_file_parses", "passed")],
        [Result(tool, "test_fleet_file_parses", "failed")],  # no board, no device, nothing said
    )
    page = report._failures_section(analysis.new_failures(history))
    assert [_table_column(page, "new-failures", col)[0] for col in range(7)] == [
        "test_fleet_file_parses",
        "tests/test_tools.py",
        "",
        "",
        "failed",
        "passed",
        "",
    ]


def test_each_damaged_value_is_an_item_of_its_own_and_the_page_s_default_limit_is_5_percent(tmp_path):
    history = _nights(tmp_path / "h.db", [_case("passed")])
    history.damaged = ["one", "two"]
    assert report._damaged_section(history).endswith(
        '<ul class="damaged"><li class="msg">one</li><li class="msg">two</li></ul>'
    )
    out = report.write(history, tmp_path / "r.html", warn=lambda line: None)
    assert "<h2>Newly slow kernels (over 5 %)</h2>" in out.read_text()


# -- the rest of the page: what it says first, the new failures, the slow kernels ----------


def _write(path, *nights: tuple[Run, list[Result], list[Bench]]):
    """Runs appended in that order, with their results and latency records."""
    db = connect(path)
    for run, results, benches in nights:
        append_run(db, run, results, benches)
    db.close()
    return path


def _night(day: int, **kw) -> Run:
    return Run(started=f"2026-11-{day:02d}T02:00:05+00:00", finished=f"2026-11-{day:02d}T02:14:09+00:00", **kw)


def test_the_header_says_when_what_where_and_how_the_latest_run_went(tmp_path):
    results = [_case("passed", n) for n in "ABC"] + [_case("error", n) for n in "DE"] + [_case("skipped", "F")]
    rev = "0123456789abcdef" * 2 + "01234567"
    latest = _night(3, git_rev=rev, git_dirty=True, host="nightly-<1>", args=["--board=rpi", "-k", "a b"], exitstatus=1)
    path = _write(tmp_path / "h.db", (_night(1), [], []), (_night(2), [], []), (latest, results, []))
    assert report._header(load(path, last=2), 2) == (
        "<h1>pytest-ondevice nightly report</h1>"
        '<p class="summary"><span>Latest run: <b>2026-11-03 02:00:05 UTC</b> to 02:14:09 UTC</span>'
        f'<span>revision <code>{rev[:12]}</code> <span class="bad">(uncommitted changes)</span></span>'
        "<span>host nightly-&lt;1&gt;</span><span>exit status 1</span></p>"
        '<p class="summary"><span class="ok">3 passed</span><span class="muted">0 failed</span>'
        '<span class="bad">2 errors</span><span class="muted">1 skipped</span></p>'
        '<p class="muted">3 runs in the history; charts and tables cover the last 2 (--last 2). '
        "Command: <code>pytest --board=rpi -k &#x27;a b&#x27;</code></p>"
    )


def test_the_header_of_a_run_outside_git_that_ended_the_next_day(tmp_path):
    run = Run(started="2026-11-01T23:50:00+00:00", finished="2026-11-02T00:20:00+00:00", git_dirty=False)
    path = _write(tmp_path / "h.db", (run, [_case("failed")], []))
    header = report._header(load(path), 30)
    assert "<b>2026-11-01 23:50:00 UTC</b> to 2026-11-02 00:20:00 UTC</span>" in header
    assert "<span>revision not a git checkout</span><span>host ?</span><span>exit status None</span>" in header
    assert (
        '<span class="muted">0 passed</span><span class="bad">1 failed</span><span class="muted">0 errors</span>'
        in (header)
    )
    assert "1 run in the history; charts and tables cover all 1 (--last 30). Command: <code>pytest </code>" in header
    connect(tmp_path / "empty.db").close()
    assert report._header(load(tmp_path / "empty.db"), 30) == (
        "<h1>pytest-ondevice nightly report</h1><p>The history holds no runs yet.</p>"
    )


def _r(name: str, outcome: str, board: str = "rpi", **kw) -> Result:
    return Result(f"a_test.c::{name}[{board}]", name, outcome, board=board, device=f"{board}-1", **kw)


def test_a_new_failure_is_one_that_passed_or_did_not_run_in_the_previous_run_of_its_board(tmp_path):
    path = _write(
        tmp_path / "h.db",
        (
            _night(1),
            [
                _r("Passed", "passed"),
                _r("Failed", "failed"),
                _r("Skipped", "skipped"),
                _r("Regressed", "passed", "mps2"),
            ],
            [],
        ),
        (_night(2), [_r("Other", "passed", board="mps2")], []),  # another board's nightly
        (_night(3), [_r("Regressed", "failed", board="mps2")], []),  # mps2's previous run: it failed there already
        (
            _night(4),
            [_r(n, o) for n, o in [("Passed", "error"), ("Failed", "failed"), ("Skipped", "failed")]]
            + [_r("New", "failed", message=" " + "x" * 400), _r("Other", "passed")]
            + [_r("First", "failed", board="esp32"), _r("Regressed", "failed", board="mps2")],  # esp32's first run
            [],
        ),
    )
    found = analysis.new_failures(load(path))
    assert [(f.result.case_name, f.result.outcome, f.before) for f in found] == [
        ("New", "failed", "not run"),
        ("Passed", "error", "passed"),
    ]
    assert analysis.new_failures(load(path, last=1)) is None  # one run: nothing to compare with
    page = report._failures_section(found)
    assert _table_column(page, "new-failures", 1) == ["a_test.c", "a_test.c"]
    assert page.startswith(
        '<h2>New failures since the previous run</h2><table class="new-failures"><thead><tr><th>case</th><th>file'
        "</th><th>board</th><th>device</th><th>now</th><th>before</th><th>message</th></tr></thead><tbody><tr><td>New"
        f'</td><td>a_test.c</td><td>rpi</td><td>rpi-1</td><td>failed</td><td>not run</td><td class="msg">{"x" * 300}'
        "</td></tr><tr><td>Passed</td>"
    )
    assert report._failures_section([]) == '<h2>New failures since the previous run</h2><p class="ok">None.</p>'
    assert (
        report._failures_section(None)
        == "<h2>New failures since the previous run</h2><p>No earlier run to compare with.</p>"
    )


def _bench(name: str, median: float, board: str | None = "bluepill", deterministic: bool = True, **kw) -> Bench:
    unit = "instructions" if deterministic else "ns"
    return Bench(
        f"k_test.c::K[{board}]", "K", name, unit, median, median, median, board=board, deterministic=deterministic, **kw
    )


def test_a_kernel_is_newly_slow_only_over_the_threshold_and_in_its_boards_latest_run(tmp_path):
    both = [_r("K", "passed", board="bluepill"), _r("K", "passed", board="mps2")]
    path = _write(
        tmp_path / "h.db",
        (_night(1), both, [_bench("gemm", 200), _bench("conv", 1000), _bench("fft", 100), _bench("dot", 100, "mps2")]),
        (_night(2), both, [_bench("gemm", 200), _bench("conv", 1000), _bench("fft", 200), _bench("dot", 120, "mps2")]),
        (_night(3), both[:1], [_bench("gemm", 220), _bench("conv", 1050)]),  # fft not run; mps2's last night was 2
    )
    history = load(path)
    all_series = analysis.series(history)
    assert [(s.board, s.name, s.points) for s in all_series] == [
        ("bluepill", "conv", [(0, 1000.0), (1, 1000.0), (2, 1050.0)]),
        ("bluepill", "fft", [(0, 100.0), (1, 200.0)]),
        ("bluepill", "gemm", [(0, 200.0), (1, 200.0), (2, 220.0)]),
        ("mps2", "dot", [(0, 100.0), (1, 120.0)]),
    ]
    slow = analysis.slow_kernels(all_series, history, 4.9)
    assert [(s.name, s.change()) for s in slow] == [("dot", 20.0), ("gemm", 10.0), ("conv", 5.0)]  # slowest first
    assert [s.name for s in analysis.slow_kernels(all_series, history, 5.0)] == ["dot", "gemm"]  # over, not at, it
    assert [s.name for s in analysis.slow_kernels(all_series, history, 20.0)] == []
    assert report._slow_section(all_series, slow, 4.9) == (
        '<h2>Newly slow kernels (over 4.9 %)</h2><table class="slow-kernels"><thead><tr><th>kernel</th><th>board</th>'
        "<th>unit</th><th>reference</th><th>latest</th><th>change</th></tr></thead><tbody>"
        '<tr><td>dot</td><td>mps2</td><td>instructions</td><td class="num">100</td><td class="num">120</td>'
        '<td class="num bad">+20.0 %</td></tr><tr><td>gemm</td><td>bluepill</td><td>instructions</td>'
        '<td class="num">200</td><td class="num">220</td><td class="num bad">+10.0 %</td></tr><tr><td>conv</td>'
        '<td>bluepill</td><td>instructions</td><td class="num">1 000</td><td class="num">1 050</td>'
        '<td class="num bad">+5.0 %</td></tr></tbody></table>'
    )
    assert report._slow_section(all_series, [], 20.0) == (
        '<h2>Newly slow kernels (over 20 %)</h2><p class="ok">None.</p>'
    )


def test_a_wall_clock_kernel_is_said_to_be_noisy_and_a_run_measuring_it_twice_counts_its_median(tmp_path):
    twice = [_bench("sum", 90, board=None, deterministic=False), _bench("sum", 130, board=None, deterministic=False)]
    path = _write(
        tmp_path / "h.db",
        (_night(1), [], [_bench("sum", 100, board=None, deterministic=False)]),
        (_night(2), [], [*twice, _bench("sum", 200, board=None, deterministic=False)]),
    )
    history = load(path)
    (s,) = analysis.series(history)
    assert (s.board, s.unit, s.deterministic, s.points) == ("-", "ns", False, [(0, 100.0), (1, 130.0)])
    assert "<td>ns (wall clock: noisy)</td>" in report._slow_section([s], [s], 5.0)
    (first,) = analysis.series(load(path, last=1))
    assert report._slow_section([first], [], 5.0).endswith("<p>No earlier run to compare with.</p>")
    assert report._slow_section([], [], 5.0).endswith("<p>No latency records in these runs.</p>")


def test_numbers_are_shown_in_groups_of_thousands_or_to_three_digits():
    assert [charts.number(v) for v in (130000, 1000, 100, 99.5, 0.000123, -150)] == [
        "130 000",
        "1 000",
        "100",
        "99.5",
        "0.000123",
        "-150",
    ]


def test_damaged_values_are_named_up_to_twenty_then_counted(tmp_path):
    path = _write(tmp_path / "h.db", (_night(1), [], []))
    history = load(path)
    assert report._damaged_section(history) == ""
    for n, more in ((20, ""), (21, "<li>and 1 more</li>"), (23, "<li>and 3 more</li>")):
        history.damaged = [f"value <{i}>" for i in range(n)]
        page = report._damaged_section(history)
        assert page.startswith(
            f'<h2 class="bad">Damaged values in the history ({n} skipped)</h2><p>pytest-ondevice never writes these: '
            "the file was changed by something else. The report below is drawn without them. Restore the file from a "
            "backup, or repair the values named here with <code>sqlite3</code>.</p>"
            '<ul class="damaged"><li class="msg">value &lt;0&gt;</li>'
        )
        assert page.endswith(f'<li class="msg">value &lt;19&gt;</li>{more}</ul>') and page.count("<li") == 20 + bool(
            more
        )


# -- the charts, as drawn: what a reader sees in them ----------------------------------------


class Kept:
    """matplotlib's pyplot, keeping each figure as drawn (the report clears and closes them)."""

    def __init__(self) -> None:
        self.plt = report._pyplot()
        self.figures: list = []

    def subplots(self, *args, **kw):
        fig, axes = self.plt.subplots(*args, **kw)
        fig.clf = lambda *a, **k: None
        self.figures.append(fig)
        return fig, axes

    def close(self, fig) -> None:
        pass  # the fixture closes them once the test has looked


@pytest.fixture
def kept():
    plt = Kept()
    yield plt
    for fig in plt.figures:
        plt.plt.close(fig)


def _png_size(png: str) -> tuple[int, int]:
    data = base64.b64decode(png)
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _runs(n: int) -> list[Run]:
    return [_night(i + 1) for i in range(n)]


def test_a_trend_panel_shows_every_point_its_reference_and_limit_with_the_latest_point_marked(kept):
    slow = analysis.Series("bluepill", "gemm", "instructions", True, [(0, 200.0), (1, 200.0), (2, 230.0)])
    png, alt = charts.trend_chart(kept, slow, _runs(3), 5.0)
    assert alt == (
        "gemm on bluepill: latest median 230 instructions over 3 runs; reference 200, +15.0 % (over the 5 % limit)"
    )
    assert _png_size(png) == (370, 185)  # the page's grid cell
    (ax,) = kept.figures[0].axes
    low, high = ax.get_ylim()
    assert low < 200 and high > 230 and ax.get_title() == "gemm · bluepill · instructions"
    styles = {(ln.get_linestyle(), ln.get_color()) for ln in ax.lines}
    assert (":", "#888888") in styles and ("--", "#c0392b") in styles  # the page says: dotted reference, dashed limit
    reference, limit = (ln.get_ydata()[0] for ln in ax.lines if ln.get_linestyle() in (":", "--"))
    assert (reference, limit) == (200.0, 210.0)
    (latest,) = [ln for ln in ax.lines if len(ln.get_xdata()) == 1 and ln.get_marker() == "o"]
    assert (list(latest.get_xdata()), list(latest.get_ydata()), latest.get_color()) == ([2], [230.0], "#c0392b")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["11-01", "11-02", "11-03"]

    within = analysis.Series("bluepill", "gemm", "instructions", True, [(0, 200.0), (1, 200.0), (2, 150.0)])
    _, alt = charts.trend_chart(kept, within, _runs(3), 5.0)
    assert alt.endswith("reference 200, -25.0 % (within the 5 % limit)")
    (ax,) = kept.figures[1].axes
    assert ax.get_ylim()[0] < 150 and ax.get_ylim()[1] > 210  # the limit line is in the picture too
    assert [ln.get_color() for ln in ax.lines if len(ln.get_xdata()) == 1 and ln.get_marker() == "o"] == ["#1f5fa8"]

    at_the_limit = analysis.Series("rpi", "sum", "ns", False, [(0, 200000.0), (1, 210000.0)])
    _, alt = charts.trend_chart(kept, at_the_limit, _runs(2), 5.0)
    assert alt.endswith("reference 200 000, +5.0 % (within the 5 % limit)")  # over it is slow, at it is not
    (ax,) = kept.figures[2].axes
    assert [ln.get_color() for ln in ax.lines if len(ln.get_xdata()) == 1 and ln.get_marker() == "o"] == ["#1f5fa8"]
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all(re.fullmatch(r"[\d.]+k", t) for t in labels), labels  # 200k, not 200000 nor 200 k


def test_a_first_point_and_a_long_title_are_drawn_too(kept):
    long = analysis.Series("mps2-an386", "mlp_int8_64_32_10_relu6", "instructions", True, [(0, 5.0)])
    _, alt = charts.trend_chart(kept, long, _runs(1), 5.0)
    assert alt == (
        "mlp_int8_64_32_10_relu6 on mps2-an386: latest median 5 instructions over 1 runs; "
        "no earlier run to compare with"
    )
    (ax,) = kept.figures[0].axes
    assert ax.get_title() == "mlp_int8_64_32_10_relu6 · mps2-an386\ninstructions"  # too wide for one line
    assert ax.get_ylim()[0] < 5 < ax.get_ylim()[1]
    assert len([ln for ln in ax.lines if ln.get_linestyle() in (":", "--")]) == 0
    for name, wraps in (("n" * 35, False), ("n" * 36, True)):  # "name · rpi · ns": 46 characters fit on a line
        charts.trend_chart(kept, analysis.Series("rpi", name, "ns", False, [(0, 1.0)]), _runs(1), 5.0)
        assert ("\n" in kept.figures[-1].axes[0].get_title()) is wraps


def test_at_most_five_runs_are_labelled_the_first_and_the_latest_among_them():
    assert charts._ticks((0, 1, 2, 3, 4)) == [0, 1, 2, 3, 4]
    assert charts._ticks(tuple(range(12))) == [0, 3, 6, 8, 11]
    assert charts._ticks((2, 5, 9, 10, 11, 13)) == [2, 5, 9, 11, 13]


def test_the_device_chart_draws_each_device_s_infrastructure_trouble_not_its_tests_verdicts(kept):
    stats = [
        reliability.DeviceStats("host", "host", passed=10),
        reliability.DeviceStats("pi-1", "rpi", passed=19, failed=1, errors=2, retried_away=1),
        reliability.DeviceStats("pi-2", "rpi", passed=1, failed=99),  # drew the failing tests: healthy
        reliability.DeviceStats("pi-3", "rpi", passed=199, errors=1),
        reliability.DeviceStats("pi-4", "rpi", errors=4),
        reliability.DeviceStats("pi-5", "rpi", passed=9, cut_short=1, test_errors=5),
        reliability.DeviceStats("pi-6", "rpi"),
    ]
    png, alt = charts.device_chart(kept, stats)
    assert alt == (
        "Device health: infrastructure trouble per device, not test verdicts: host: none in 10 case attempts; "
        "pi-1 (rpi): 13.0 % (3 of 23 case attempts) (2 errors, 1 moved elsewhere); "
        "pi-2 (rpi): none in 100 case attempts; pi-3 (rpi): 0.5 % (1 of 200 case attempts) (1 errors); "
        "pi-4 (rpi): 100.0 % (4 of 4 case attempts) (4 errors); "
        "pi-5 (rpi): 6.7 % (1 of 15 case attempts) (1 cut short, run again); pi-6 (rpi): no case attempts"
    )
    assert _png_size(png) == (860, round(100 * (1.45 + 0.28 * 7)))
    fig = kept.figures[0]
    left, right = fig.axes
    assert fig._suptitle.get_text() == "Device health: infrastructure trouble per device, not test verdicts"
    assert left.get_title() == "infrastructure trouble, % of its case attempts"
    assert right.get_title() == "infrastructure trouble, by kind (case attempts)"
    from matplotlib.colors import to_hex  # here: importing the tests must not import matplotlib

    colors = [to_hex(bar.get_facecolor()) for bar in left.patches]
    green, amber, red, grey = "#2e8b57", "#e0a800", "#c0392b", "#bbbbbb"
    assert colors == [green, red, green, amber, red, red, grey]  # none green, under 5 % amber, from 5 % red
    assert [round(bar.get_width(), 1) for bar in left.patches] == [0, 13.0, 0, 0.5, 100.0, 6.7, 0]
    assert [t.get_text() for t in left.texts][:2] == ["none in 10 case attempts", "13.0 % (3 of 23 case attempts)"]
    assert max(left.get_xticks()) <= 100 and left.get_xlim()[1] > 100  # room for the labels, no tick past 100 %
    assert [t.get_text() for t in left.get_yticklabels()] == [
        "host",
        "pi-1 (rpi)",
        "pi-2 (rpi)",
        "pi-3 (rpi)",
        "pi-4 (rpi)",
        "pi-5 (rpi)",
        "pi-6 (rpi)",
    ]
    assert not any(t.get_visible() and t.get_text() for t in right.get_yticklabels())  # the names once, left
    kinds = [(bar.get_x(), bar.get_width()) for bar in right.patches]  # stacked: errors, moved, cut short
    assert kinds[1] == (0, 2) and kinds[7 + 1] == (2, 1) and kinds[14 + 5] == (0, 1)
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        "errors",
        "moved elsewhere",
        "cut short, run again",
    ]
    assert right.get_xlim() == (0.0, 4 * 1.15)
    assert all(float(t).is_integer() for t in right.get_xticks())  # whole attempts only
    charts.device_chart(kept, [reliability.DeviceStats("host", "host", passed=1)])
    left, no_errors = kept.figures[1].axes
    assert no_errors.get_xlim() == (0.0, 1.15) and left.get_xlim()[1] > 10
    assert [float(t) for t in no_errors.get_xticks() if t <= 1.15] == [0.0, 1.0]  # no half an error


def test_an_error_of_a_test_s_own_code_is_not_the_device_s(tmp_path):
    fixture_error = (
        "device = <Device rpi@pi-2>\n\n    @pytest.fixture\n    def calc(device):\n"
        ">       raise KeyError('CALC_PATH')\nE       KeyError: 'CALC_PATH'\n\nconftest.py:9: KeyError"
    )
    history = _nights(
        tmp_path / "h.db",
        [
            _case("error", "Fixture", message=fixture_error),
            _case("error", "Lost", message="infrastructure error, not the test's failure: pi-2: connection lost"),
            _case("passed", "Fine"),
        ],
    )
    (pi2,) = reliability.devices(history)
    assert (pi2.errors, pi2.test_errors, pi2.attempts, pi2.trouble) == (1, 1, 3, 1)
    assert pi2.last_error == "infrastructure error, not the test's failure: pi-2: connection lost"


# -- the page as a whole -----------------------------------------------------------------------


def test_the_flaky_and_device_tables_read_in_full(tmp_path):
    history = _nights(
        tmp_path / "h.db",
        [_case("failed", "Flip", board=None), _case("passed", "Lucky", reruns=[LOST, LOST])],
        [_case("passed", "Flip", board=None), _case("error", "Down", device="pi-3", message=" x" * 200)],
    )
    assert report._flaky_section(reliability.flaky(history), 2) == (
        "<h2>Flaky cases (same binary, both passed and failed; or passed only after a rerun)</h2>"
        '<table class="flaky"><thead><tr><th>case</th><th>file</th><th>board</th><th>binary</th><th>passed</th>'
        "<th>failed</th><th>passed after a rerun</th><th>last</th><th>reruns</th></tr></thead><tbody>"
        f'<tr><td>Flip</td><td>a_test.c</td><td></td><td><code>{SHA[:12]}</code></td><td class="num">1</td>'
        '<td class="num">1</td><td class="num">0</td><td>passed</td><td class="msg"></td></tr>'
        f'<tr><td>Lucky</td><td>a_test.c</td><td>rpi</td><td><code>{SHA[:12]}</code></td><td class="num">1</td>'
        f'<td class="num">0</td><td class="num">1</td><td>passed</td><td class="msg">{LOST}</td></tr></tbody></table>'
    )
    stats = reliability.devices(history)
    page = report._device_errors_section(stats, history)
    assert page.startswith(
        '<h2>Devices with errors</h2><table class="device-errors"><thead><tr><th>device</th><th>board</th>'
        "<th>errors</th><th>moved elsewhere</th><th>attempts cut short</th><th>last error at</th><th>last error</th>"
        '</tr></thead><tbody><tr><td>pi-3</td><td>rpi</td><td class="num">1</td><td class="num">0</td>'
        '<td class="num">0</td><td>2026-11-02 02:00</td><td class="msg">'
    )
    assert _table_column(page, "device-errors", 6)[0] == ("x " * 200).strip()[:300]  # cut at 300 characters
    assert _table_column(page, "device-errors") == ["pi-3", "pi-1"]  # errors before attempts cut short
    assert report._device_errors_section([], load(connect(tmp_path / "e.db").close() or tmp_path / "e.db")) == (
        "<h2>Devices with errors</h2><p>No runs.</p>"
    )
    assert report._pass_rate_section(None, []) == (
        "<h2>Device health: infrastructure trouble per device</h2><p>No device ran a test in these runs.</p>"
    )


def test_the_newly_slow_are_drawn_first_and_panels_past_24_are_counted(tmp_path):
    names = [f"k{i:02d}" for i in range(26)]
    path = _write(
        tmp_path / "h.db",
        (_night(1), [_r("K", "passed", board="bluepill")], [_bench(n, 100) for n in names]),
        (
            _night(2),
            [_r("K", "passed", board="bluepill")],
            [_bench(n, 150 if n in ("k20", "k25") else 100) for n in names],
        ),
    )
    history = load(path)
    all_series = analysis.series(history)
    slow = analysis.slow_kernels(all_series, history, 5.0)
    plt = report._pyplot()
    page = report._trends(plt, history, all_series, slow, 5.0)
    alts = re.findall(r'<img class="chart" alt="([^"]+)" title="\1" src="data:image/png;base64,[A-Za-z0-9+/=]+">', page)
    assert [a.split(" ")[0] for a in alts] == ["k20", "k25", *names[:20], "k21", "k22"]  # 24 panels
    assert page.startswith(
        '<h2>Latency per kernel and board</h2><p class="muted">Median per run; dotted: reference (median of the '
        'earlier runs); dashed: the 5 % regression limit.</p><div class="grid"><img class="chart"'
    )
    assert page.endswith('</div><p class="muted">2 more series not drawn (slow ones come first).</p>')
    assert report._trends(plt, history, all_series[:24], [], 5.0).endswith("</div>")  # all drawn: nothing said
    assert report._trends(plt, history, [], [], 5.0) == (
        "<h2>Latency per kernel and board</h2><p>No latency records in these runs (no case uses ONDEVICE_BENCH).</p>"
    )


def test_the_page_puts_what_needs_doing_first_and_counts_its_charts(tmp_path):
    history = _nights(tmp_path / "h.db", [_case("passed")], [_case("failed")])
    history.damaged = ["a value"]
    page = report.render(history, threshold=7.5, last=9)
    assert page.startswith(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>pytest-ondevice nightly report</title>'
        f"<style>{report.CSS}</style><script>{report.SCRIPT}</script></head>"
        '<body data-charts="1"><h1>pytest-ondevice nightly report</h1>'
    )
    assert page.endswith("</body></html>\n")
    headings = re.findall(r"<h2[^>]*>(.*?)</h2>", page)
    assert headings == [
        "Damaged values in the history (1 skipped)",
        "New failures since the previous run",
        "Newly slow kernels (over 7.5 %)",
        "Flaky cases (same binary, both passed and failed; or passed only after a rerun)",
        "Devices with errors",
        "Device health: infrastructure trouble per device",
        "Latency per kernel and board",
    ]
    assert "(--last 9)" in page and ".bad { color: #c0392b; font-weight: 600; }" in page  # failures in red
    assert "<style>\nbody { font: 14px/1.45 system-ui, sans-serif;" in page
    assert '</code></p><h2 class="bad">Damaged values' in page  # one section after the other
    assert _table_column(page, "new-failures") == ["A"]  # two runs are enough to compare
    default = report.render(history)
    assert "Newly slow kernels (over 5 %)" in default and "(--last 30)" in default


def test_the_page_is_written_as_utf8_where_asked_and_each_damaged_value_is_said(tmp_path, capsys):
    history = _nights(tmp_path / "h.db", [_case("passed", "Größe")], [_case("failed", "Größe")])  # a new failure
    history.damaged = ["one", "two"]
    said: list[str] = []
    out = report.write(history, tmp_path / "site" / "deep" / "r.html", warn=said.append)
    assert out == tmp_path / "site" / "deep" / "r.html"
    assert said == [
        "pytest-ondevice report: skipped a damaged value: one",
        "pytest-ondevice report: skipped a damaged value: two",
    ]
    assert "Größe" in out.read_bytes().decode("utf-8")
    report.write(history, out)  # again, over it; said on stderr
    assert capsys.readouterr().err.splitlines() == said


def test_without_matplotlib_the_report_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(report.MatplotlibMissing) as e:
        report._pyplot()
    assert str(e.value) == "the report draws its charts with matplotlib: pip install 'pytest-ondevice[report]'"


def test_names_are_escaped_quotes_included():
    assert report._td('a "b" <c>') == "<td>a &quot;b&quot; &lt;c&gt;</td>"
    assert report._td("'x'", "msg") == '<td class="msg">&#x27;x&#x27;</td>'
    assert report._when("2026-11-01T02:00:05+00:00") == "2026-11-01 02:00:05 UTC"


# -- what stood in the way of a reader (issue: the morning report names the commit) --------


def test_a_failure_shows_its_assertion_and_source_line_first_the_rest_folded_without_xdists_header():
    text = (
        "[gw1] linux -- Python 3.11.7 /home/ci/.venv/bin/python\n"
        "out[0] == 127 failed at add_test.cc:14 (-56 vs 127)\n"
        "  add_test.cc:13  int8_t out[1];\n"
        "> add_test.cc:14  EXPECT_EQ(out[0], 127);\n"
        "  add_test.cc:15  }\n"
        "device log: /tmp/x.log\n"
    )
    cell = report._message_cell(text)
    assert cell.startswith(
        '<td class="msg">out[0] == 127 failed at add_test.cc:14 (-56 vs 127)\n'
        "&gt; add_test.cc:14  EXPECT_EQ(out[0], 127);<details><summary>more</summary><pre>"
    )
    assert "[gw1]" not in cell and "device log: /tmp/x.log" in cell  # folded, not lost
    from pytest_ondevice.records.failmessage import without_worker_header

    assert without_worker_header(text).startswith("out[0] == 127 failed")  # as the history keeps it


def test_runs_of_one_day_are_told_apart_by_their_time_and_revision():
    runs = [Run(started=f"2026-11-25T{h:02d}:10:00+00:00", finished="", git_rev=f"{h:x}" * 40) for h in (9, 11, 13)]
    assert charts.run_labels(runs, [0, 1, 2]) == ["09:10\n9999999", "11:10\nbbbbbbb", "13:10\nddddddd"]
    days = [Run(started=f"2026-11-{d:02d}T02:00:00+00:00", finished="") for d in (1, 2)]
    assert charts.run_labels(days, [0, 1]) == ["11-01", "11-02"]  # one run a day: the day, no revision known


def test_items_that_never_reached_a_fleet_device_are_no_device_of_the_pass_rate(tmp_path):
    fleet = [
        Result("a_test.c::A[bluepill]", "A", "passed", board="bluepill", device="bluepill-1"),
        Result("a_test.c::B[bluepill]", "B", "failed", board="bluepill", device="bluepill-2"),
        Result("b_test.c::C[bluepill]", "C", "error", board="bluepill", device=None),  # the board was down
        Result("c_test.c::D[host]", "D", "passed", board="host", device=None),  # no fleet: the board is the device
    ]
    history = load(_write(tmp_path / "h.db", (_night(1), fleet, [])))
    assert [s.device for s in reliability.devices(history)] == ["bluepill-1", "bluepill-2", "host"]


def test_an_exact_figure_that_moved_under_the_limit_is_listed_beside_its_first_bad_commit(tmp_path):
    ran = [_r("K", "passed", board="bluepill")]
    path = _write(
        tmp_path / "h.db",
        (_night(1, git_rev="a" * 40), ran, [_bench("gemm", 1000), _bench("wall", 100, deterministic=False)]),
        (_night(2, git_rev="b" * 40), ran, [_bench("gemm", 1032), _bench("wall", 103, deterministic=False)]),
    )
    history = load(path)
    every = analysis.series(history)
    slow = analysis.slow_kernels(every, history, 5.0)
    assert slow == []  # +3.2 % is under the 5 % line
    moved = analysis.changed_exact(every, slow, history)
    assert [(s.name, s.latest) for s in moved] == [("gemm", 1032.0)]  # the wall-clock +3 % is noise, not listed
    bisected = {("k_test.c::K[bluepill]", "bluepill", "gemm"): "c0ffee123456 make gemm tile 8"}
    page = report._slow_section(every, slow, 5.0, bisected, moved)
    assert '<table class="exact-changes">' in page and "+3.20 %" in page
    assert '<td class="first-bad">c0ffee123456 make gemm tile 8</td>' in page
