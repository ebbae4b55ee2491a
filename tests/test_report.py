"""`pytest-ondevice report`: a history written by the recorder's own functions, read as a
person reads it in the morning (in headless Chromium: every chart decoded, the right names
in the tables)."""

from __future__ import annotations

import hashlib
import random
import re
import shutil
import subprocess
import sys

import pytest

from pytest_ondevice.commands.cli import main
from pytest_ondevice.records import analysis, reliability, report
from pytest_ondevice.records.history import Bench, Result, Run, append_run, connect, load

# board -> (bench unit, deterministic, devices)
BOARDS = {
    "bluepill-qemu": ("instructions", True, ["bluepill-qemu"]),
    "mps2-an386": ("instructions", True, ["mps2-an386"]),
    "rpi": ("ns", False, ["pi-1", "pi-2"]),
}
CASES = [  # (source, case, bench names)
    ("examples/kernels/depthwise_conv_test.c", "SimpleTestQuantized", []),
    ("examples/kernels/fully_connected_test.cc", "FullyConnected.Float", []),
    ("examples/gemm/gemm_s8_test.c", "Int8OptimizedMatchesReferenceOnAllShapes", []),
    ("examples/gemm/gemm_s8_test.c", "BenchInt8Gemm32", ["gemm_s8_naive_32", "gemm_s8_opt_32"]),
    ("examples/gemm/gemm_f32_test.c", "BenchF32Gemm16", ["gemm_f32_naive_16", "gemm_f32_opt_16"]),
    ("examples/model/mlp_test.c", "MlpInt8", ["mlp_int8_64_32_10"]),
    ("examples/io/uart_echo_test.c", "EchoesAtSpeed", []),
]
BASE = {"gemm_s8_naive_32": 253204, "gemm_s8_opt_32": 129169, "gemm_f32_naive_16": 61440, "gemm_f32_opt_16": 35012}
BASE["mlp_int8_64_32_10"] = 22830
PI2_DOWN = "pi-2: cannot connect to 10.0.0.12:22: timed out after 10 s"


def _sha(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def synthetic(path, nights: int = 5) -> None:
    """Nightly runs of three boards. In the last night gemm_s8_opt_32 on bluepill-qemu got 20 %
    slower and SimpleTestQuantized fails on mps2-an386 (both binaries rebuilt); EchoesAtSpeed
    flips on rpi on one unchanged binary; pi-2 cannot be reached on some nights (its binaries
    move to pi-1; one night its cases are errors). docs/nightly-report.png: nights=14."""
    rnd = random.Random(7)
    db = connect(path)
    last = nights - 1
    for night in range(nights):
        day = f"2026-11-{night + 1:02d}"
        run = Run(
            started=f"{day}T02:00:{night:02d}+00:00",
            finished=f"{day}T02:14:{night:02d}+00:00",
            git_rev=_sha("rev", str(night))[:40],
            git_dirty=False,
            host="nightly-1",
            args=["--board=bluepill-qemu,mps2-an386,rpi", "--fleet=lab.toml", "--history=out/history.db"],
            exitstatus=1 if night in (2, 5, last) else 0,
        )
        results, benches = [], []
        pi2_down = night in (1, 3, last)
        for board, (unit, deterministic, devices) in BOARDS.items():
            for i, (source, case, bench_names) in enumerate(CASES):
                if case == "EchoesAtSpeed" and board != "rpi":
                    continue
                changed = night == last and (
                    (source.endswith("gemm_s8_test.c") and board == "bluepill-qemu")
                    or (case == "SimpleTestQuantized" and board == "mps2-an386")
                )
                where = {
                    "nodeid": f"{source}::{case}[{board}]",
                    "case_name": case,
                    "board": board,
                    "device": devices[i % len(devices)],
                    "binary_sha256": _sha(source, board, "v2" if changed else "v1"),
                }
                outcome, message, retried = "passed", None, None
                if where["device"] == "pi-2" and pi2_down:
                    where["device"], retried = "pi-1", PI2_DOWN
                if case == "SimpleTestQuantized" and board == "mps2-an386" and night == last:
                    outcome, message = "failed", "output[0] == 71 failed at depthwise_conv_test.c:88 (70 vs 71)"
                if case == "EchoesAtSpeed" and night in (2, 5):
                    outcome, message = "failed", "timed out after 2s while this case was running"
                if board == "rpi" and night == 3 and where["device"] == "pi-1" and i < 2:
                    outcome, message, where["device"] = "error", PI2_DOWN + "; then no other device", "pi-2"
                results.append(Result(**where, outcome=outcome, duration=0.4, message=message, retried_after=retried))
                for name in bench_names if outcome == "passed" else []:
                    factor = 1.0 if deterministic else rnd.uniform(0.98, 1.02)
                    if name == "gemm_s8_opt_32" and board == "bluepill-qemu" and night == last:
                        factor = 1.2
                    median = BASE[name] * factor * (1.6 if board == "rpi" else 1.0)
                    if board == "rpi":
                        median /= 3  # ns at 1.2 GHz, roughly
                    spread = 0 if deterministic else median * 0.01
                    benches.append(
                        Bench(
                            **where,
                            name=name,
                            unit=unit,
                            median=round(median, 1),
                            min=round(median - spread, 1),
                            max=round(median + spread, 1),
                            deterministic=deterministic,
                        )
                    )
        results.append(Result("tests/test_tools.py::test_fleet_file_parses", "test_fleet_file_parses", "passed"))
        append_run(db, run, results, benches)
    db.close()


@pytest.fixture
def history_db(tmp_path):
    path = tmp_path / "history.db"
    synthetic(path)
    return path


def test_the_analysis_names_the_slow_kernel_the_new_failure_the_flaky_case_and_the_bad_device(history_db):
    history = load(history_db)
    assert len(history.runs) == history.total_runs == 5
    new = analysis.new_failures(history)
    assert [(f.result.case_name, f.result.board, f.before) for f in new] == [
        ("SimpleTestQuantized", "mps2-an386", "passed")
    ]
    slow = analysis.slow_kernels(analysis.series(history), history, 5.0)
    assert [(s.name, s.board, round(s.change())) for s in slow] == [("gemm_s8_opt_32", "bluepill-qemu", 20)]
    assert analysis.slow_kernels(analysis.series(history), history, 25.0) == []
    flaky = reliability.flaky(history)
    assert [(f.case_name, f.board, f.passed, f.failed) for f in flaky] == [("EchoesAtSpeed", "rpi", 4, 1)]
    bad = {s.device: (s.errors, s.retried_away) for s in reliability.devices(history) if s.errors or s.retried_away}
    assert bad == {"pi-2": (2, 9)}


def _table_column(dom: str, cls: str, col: int = 0) -> list[str]:
    table = re.search(rf'<table class="{cls}">(.*?)</table>', dom, re.S)
    assert table, f"no table {cls} in the page"
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in rows]
    return [c[col] for c in cells if c]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not on PATH (scripts/setup.sh installs it): the page cannot be opened")
    return found


def _dump_dom(html_path) -> str:
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    out = subprocess.run([*cmd, "--dump-dom", html_path.as_uri()], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_page_opens_in_a_browser_with_every_chart_drawn_and_the_right_names(history_db, tmp_path, capsys):
    out = tmp_path / "site" / "nightly.html"
    assert main(["report", str(history_db), "--html", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report written to {out}"
    text = out.read_text()
    assert "http://" not in text and "https://" not in text  # opens from disk, offline
    dom = _dump_dom(out)
    charts = int(re.search(r'data-charts="(\d+)"', dom).group(1))
    assert charts == 5 * 3 + 1  # a panel per (board, kernel), the devices chart
    assert re.search(r'data-charts-loaded="(\d+)"', dom).group(1) == str(charts)
    alts = re.findall(r'<img class="chart" alt="([^"]+)"', dom)
    assert len(alts) == charts and all(alts)
    assert alts[0] == (
        "Device health: infrastructure trouble per device, not test verdicts: bluepill-qemu: none in 30 case "
        "attempts; mps2-an386: none in 30 case attempts; pi-1 (rpi): none in 27 case attempts; pi-2 (rpi): "
        "64.7 % (11 of 17 case attempts) (2 errors, 9 moved elsewhere)"
    )  # mps2-an386 drew the failing case, pi-1 the flaky one: their health is none the worse
    assert alts[1].startswith("gemm_s8_opt_32 on bluepill-qemu") and "over the 5 % limit" in alts[1]  # slow first
    assert all("within the 5 % limit" in a for a in alts[2:])
    assert _table_column(dom, "new-failures") == ["SimpleTestQuantized"]
    assert _table_column(dom, "slow-kernels") == ["gemm_s8_opt_32"]
    assert _table_column(dom, "slow-kernels", 5) == ["+20.0 %"]
    assert _table_column(dom, "flaky") == ["EchoesAtSpeed"]
    assert _table_column(dom, "device-errors") == ["pi-2"]
    assert "5 runs in the history" in dom


def test_threshold_and_last_choose_what_counts(history_db, tmp_path):
    out = tmp_path / "r.html"
    assert main(["report", str(history_db), "--html", str(out), "--threshold", "25%", "--last", "2"]) == 0
    text = out.read_text()
    assert 'class="slow-kernels"' not in text and "Newly slow kernels (over 25 %)" in text
    assert "charts and tables cover the last 2" in text
    assert _table_column(text, "new-failures") == ["SimpleTestQuantized"]
    assert 'class="flaky"' not in text  # its flip is outside the last two nights


def test_an_empty_history_one_run_and_no_benches_all_render(tmp_path):
    path = tmp_path / "h.db"
    connect(path).close()
    out = tmp_path / "empty.html"
    assert main(["report", str(path), "--html", str(out)]) == 0
    assert "The history holds no runs yet." in out.read_text()
    db = connect(path)
    run = Run(started="2026-11-01T02:00:00+00:00", finished="2026-11-01T02:01:00+00:00", host="h")
    append_run(db, run, [Result("a_test.c::A[host]", "A", "failed", board="host", device="host", message="x")], [])
    db.close()
    assert main(["report", str(path), "--html", str(out)]) == 0
    text = out.read_text()
    assert text.count("No earlier run to compare with.") == 2  # new failures, flaky
    assert "No latency records in these runs" in text
    assert text.count('<img class="chart"') == 1  # the devices chart


def test_a_missing_or_foreign_file_is_one_line_and_exit_1(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope.db"), "--html", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert err == f"pytest-ondevice report: {tmp_path / 'nope.db'}: no such history file\n"
    (tmp_path / "notes.db").write_text("not sqlite at all\n" * 100)
    assert main(["report", str(tmp_path / "notes.db"), "--html", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a pytest-ondevice history file" in err
    assert not (tmp_path / "r.html").exists()


def test_without_matplotlib_the_report_says_what_to_install(history_db, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert main(["report", str(history_db), "--html", str(tmp_path / "r.html")]) == 1
    assert "pip install 'pytest-ondevice[report]'" in capsys.readouterr().err


def test_the_plugin_and_the_report_module_do_not_import_matplotlib():
    records = ("report", "analysis", "reliability", "charts", "history", "recorder")
    modules = ", ".join(f"pytest_ondevice.records.{name}" for name in records)
    code = f"import sys, {modules}; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


PASSING = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Steady) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TEST(Lucky) { TF_LITE_MICRO_EXPECT_EQ(2, 2); }
    TF_LITE_MICRO_TESTS_END
"""
RERUN_CONFTEST = """
    import os, pytest

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_setup(item):  # as the run side says it: after the item's own setup
        if getattr(item, "case", None) == "Lucky" and os.environ.get("RERUN"):
            item.user_properties.append(("rerun", "pi-1: connection lost after 2.1 s (ssh: EOF)"))
            item.user_properties.append(("retried_after", "pi-1: connection lost after 2.1 s (ssh: EOF)"))
            if os.environ["RERUN"] == "flaky":
                item.user_properties.append(("flaky", "the attempt on pi-1 ended in a crash of the binary"))
"""


def test_a_pass_after_a_rerun_is_flaky_in_the_report_naming_device_and_cause(project, tmp_path, monkeypatch, capsys):
    project.write("lucky_test.c", PASSING)
    project.write("conftest.py", RERUN_CONFTEST)
    monkeypatch.setenv("RERUN", "1")
    project.run("--history=h.db").assert_outcomes(passed=2)  # every case passed
    out = tmp_path / "r.html"
    assert main(["report", str(project.path / "h.db"), "--html", str(out)]) == 0
    text = out.read_text()
    assert "<h2>Flaky cases (same binary, both passed and failed; or passed only after a rerun)</h2>" in text
    (sha,) = {r.binary_sha256 for r in load(project.path / "h.db").results}
    row = [_table_column(text, "flaky", col) for col in range(9)]  # one run is enough: a rerun is seen in it
    assert row == [
        ["Lucky"],
        ["lucky_test.c"],
        ["host"],
        [f"<code>{sha[:12]}</code>"],
        ["1"],  # passed
        ["0"],  # failed
        ["1"],  # passed after a rerun
        ["passed"],  # last
        ["pi-1: connection lost after 2.1 s (ssh: EOF)"],
    ]
    assert _table_column(text, "device-errors") == ["pi-1"]  # the device the attempt was cut short on
    assert _table_column(text, "device-errors", 4) == ["1"]  # attempts cut short
    assert _table_column(text, "device-errors", 6) == ["pi-1: connection lost after 2.1 s (ssh: EOF)"]

    monkeypatch.setenv("RERUN", "")  # a clean night: still flaky over the window, and only Lucky
    project.run("--history=h.db").assert_outcomes(passed=2)
    monkeypatch.setenv("RERUN", "flaky")
    project.run("--history=h.db").assert_outcomes(passed=2)
    history = load(project.path / "h.db")
    (lucky,) = reliability.flaky(history)
    assert (lucky.case_name, lucky.passed, lucky.failed, lucky.after_rerun, lucky.last) == ("Lucky", 3, 0, 2, "passed")
    assert lucky.reruns == (
        "pi-1: connection lost after 2.1 s (ssh: EOF)",
        "the attempt on pi-1 ended in a crash of the binary",
    )
    assert main(["report", str(project.path / "h.db"), "--html", str(out)]) == 0
    assert "the attempt on pi-1 ended in a crash of the binary" in _table_column(out.read_text(), "flaky", 8)[0]
    assert capsys.readouterr().err == ""


def test_a_case_that_passed_cleanly_in_every_run_is_not_flaky(tmp_path):
    path = tmp_path / "h.db"
    db = connect(path)
    for night in (1, 2):
        run = Run(started=f"2026-11-0{night}T02:00:00+00:00", finished=f"2026-11-0{night}T02:01:00+00:00")
        where = {"board": "rpi", "device": "pi-1", "binary_sha256": "ab" * 32}
        results = [Result("a_test.c::A[rpi]", "A", "passed", **where)]
        results.append(Result("a_test.c::B[rpi]", "B", "failed" if night == 1 else "passed", **where))
        append_run(db, run, results, [])
    db.close()
    assert [f.case_name for f in reliability.flaky(load(path))] == ["B"]  # flipped on one binary; A never reran
    assert "No earlier run" not in report._flaky_section([], 2)  # two runs compared: none is flaky
    assert report._flaky_section([], 2).endswith('<p class="ok">None.</p>')
    assert report._flaky_section([], 1).endswith("<p>No earlier run to compare with.</p>")


def _damage(path, sql: str) -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute(sql)


def test_a_history_with_damaged_json_still_renders_naming_each_skipped_value(history_db, tmp_path, capsys):
    _damage(history_db, "UPDATE runs SET args = '[\"--board=rpi\", ' WHERE id = 5")  # cut short
    _damage(history_db, "UPDATE benches SET record = 'not json' WHERE rowid = 1")
    _damage(history_db, "UPDATE results SET reruns = '{\"a\": 1}' WHERE rowid = 2")
    out = tmp_path / "r.html"
    assert main(["report", str(history_db), "--html", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3, err
    assert err[0].startswith(f"pytest-ondevice report: skipped a damaged value: {history_db}: runs row id=5, column ")
    assert "args is not JSON (" in err[0] and err[0].endswith("read as no arguments")
    assert f"{history_db}: results rowid=2 (" in err[1] and "column reruns is not a list of strings" in err[1]
    assert f"{history_db}: benches rowid=1 (" in err[2] and "column record is not JSON" in err[2]
    text = out.read_text()
    assert "Damaged values in the history (3 skipped)" in text
    assert _table_column(text, "new-failures") == ["SimpleTestQuantized"]  # the rest of the page as before
    assert _table_column(text, "slow-kernels") == ["gemm_s8_opt_32"]
    assert _table_column(text, "flaky") == ["EchoesAtSpeed"]


def test_flaky_cases_come_failures_first_then_most_reruns_and_devices_count_each_cut_short_attempt(tmp_path):
    """Found missing by mutation testing: the order of the flaky table, a rerun pass whose result
    names no binary, two attempts cut short on one device, reruns that are not strings."""
    path = tmp_path / "h.db"
    db = connect(path)
    lost = "pi-1: connection lost (log: a.log)"
    for night in (1, 2):
        run = Run(started=f"2026-11-0{night}T02:00:00+00:00", finished=f"2026-11-0{night}T02:01:00+00:00")
        where = {"board": "rpi", "device": "pi-2", "binary_sha256": "cd" * 32}
        results = [
            Result("a_test.c::Once[rpi]", "Once", "passed", **where, reruns=[lost] if night == 2 else []),
            Result("a_test.c::Twice[rpi]", "Twice", "passed", **where, reruns=[lost, lost]),
            Result("a_test.c::Flip[rpi]", "Flip", "failed" if night == 1 else "passed", **where),
            Result("py::NoBinary", "NoBinary", "passed", board="rpi", device="pi-2", flaky="said so"),
        ]
        append_run(db, run, results, [])
    db.close()
    history = load(path)
    found = reliability.flaky(history)
    assert [(f.case_name, f.failed, f.after_rerun) for f in found] == [
        ("Flip", 1, 0),
        ("Twice", 0, 2),  # ties by node id
        ("NoBinary", 0, 2),
        ("Once", 0, 1),
    ]
    assert found[2].binary_sha256 == "" and found[2].reruns == ("said so",)
    stats = {s.device: s for s in reliability.devices(history)}
    assert (stats["pi-1"].cut_short, stats["pi-1"].board, stats["pi-1"].last_error) == (5, "rpi", lost)
    _damage(path, "UPDATE results SET reruns = '[1, 2]' WHERE rowid = 1")
    damaged = load(path)
    assert damaged.results[0].reruns == [] and len(damaged.damaged) == 1
    assert "column reruns is not a list of strings ('[1, 2]')" in damaged.damaged[0]
