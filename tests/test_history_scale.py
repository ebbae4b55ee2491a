"""A farm's history (benchmarks/history_scale.py's suite, smaller): what must not grow with it.
Appending a night costs the same whatever the history holds; the page's tables list a bounded
number of rows and count the rest; its charts are bounded too. No timings here: those are the
benchmark's."""

from __future__ import annotations

import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pytest_ondevice.commands.cli import main
from pytest_ondevice.formats.benchline import MEMORY_UNIT
from pytest_ondevice.records import analysis, history, reliability, report

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("history_scale", REPO / "benchmarks" / "history_scale.py")
scale = sys.modules["history_scale"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(scale)

NIGHTS, CASES, DEVICES = 20, 2_000, 8


@pytest.fixture(scope="module")
def farm(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("farm") / "history.db"
    scale.build(path, NIGHTS, CASES, DEVICES)
    return path


def _statements(monkeypatch, path: Path, run: history.Run, results, benches) -> list[str]:
    """Every SQL statement history.append runs (one per row of an executemany), without its values."""
    said: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kw):
        db = connect(*args, **kw)
        db.set_trace_callback(lambda sql: said.append(re.sub(r"VALUES \(.*", "VALUES (...)", sql, flags=re.S)))
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    history.append(path, run, results, benches)
    monkeypatch.setattr(sqlite3, "connect", connect)
    return said


def test_appending_a_night_runs_the_same_statements_whatever_the_history_holds(farm, tmp_path, monkeypatch):
    short, long = tmp_path / "short.db", tmp_path / "long.db"
    long.write_bytes(farm.read_bytes())
    s = scale.build(short, 2, CASES, DEVICES)
    run, reports = scale.night(s, 2)
    results, benches = scale.gathered(reports).records()
    assert len(results) == CASES and benches  # each case once, with its latency and stack records
    early = _statements(monkeypatch, short, run, results, benches)
    later = _statements(monkeypatch, long, run, results, benches)
    assert Counter(later) == Counter(early)
    # one INSERT per row, in one transaction, and a fixed few around them: nothing read back row by row
    rows = 1 + len(results) + len(benches)
    assert rows <= len(later) <= rows + 25, len(later) - rows
    assert not [s for s in later if re.search(r"FROM (results|benches)\b", s, re.I)]
    assert later.count("BEGIN IMMEDIATE") == 2  # the schema's, then the run's
    assert history.load(long).total_runs == NIGHTS + 1


def _tables(page: str) -> dict[str, int]:
    """Rows per table of the page (its class -> body rows)."""
    return {
        cls: body.count("<tr>")
        for cls, body in re.findall(r'<table class="([^"]+)">.*?<tbody>(.*?)</tbody>', page, re.S)
    }


def test_the_page_lists_at_most_its_row_limit_per_table_and_counts_the_rest(farm, monkeypatch):
    monkeypatch.setattr(report, "MAX_PANELS", 2)  # the charts' bound is theirs; drawing fewer is quicker
    found = history.load(farm, records=False)
    every = analysis.series(found)
    latency = [s for s in every if s.unit != MEMORY_UNIT]
    stacks = [s for s in every if s.unit == MEMORY_UNIT]
    lists = {
        "new-failures": (analysis.new_failures(found), "new failures"),
        "slow-kernels": (analysis.slow_kernels(latency, found, 5.0), "slower kernels"),
        "flaky": (reliability.flaky(found), "flaky cases"),
        "deeper-stacks": (analysis.slow_kernels(stacks, found, 5.0), "deeper stacks"),
    }
    limit = 3
    assert len(lists["flaky"][0]) > 10 * limit  # the farm's reruns: a long list to page
    page = report.render(found, rows=limit)
    tables = _tables(page)
    assert tables and max(tables.values()) <= limit, tables
    for cls, (items, what) in lists.items():
        if len(items) > limit:
            assert tables[cls] == limit
            assert f"{len(items) - limit} more {what} not listed" in page, cls
    assert "<code>pytest-ondevice report --rows 0</code> lists every one" in page
    # the charts: a panel per kernel and board (not per case), and per grown stack, each section bounded
    assert page.count('<img class="chart"') <= 2 * report.MAX_PANELS + 2
    assert f"{len(latency) - report.MAX_PANELS} more series not drawn" in page
    assert _tables(report.render(found, rows=0))["flaky"] == len(lists["flaky"][0])


def test_the_report_command_takes_its_row_limit_from_rows(farm, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "MAX_PANELS", 1)
    out = tmp_path / "r.html"
    assert main(["report", str(farm), "--html", str(out), "--rows", "2"]) == 0
    assert max(_tables(out.read_text()).values()) == 2
    with pytest.raises(SystemExit) as stopped:
        main(["report", str(farm), "--html", str(out), "--rows", "-1"])
    assert stopped.value.code == 2
    assert "'-1': expected a number of rows, 0 (every one) or more" in capsys.readouterr().err


def test_without_records_a_damaged_one_is_still_named_as_with_them(tmp_path):
    path = tmp_path / "h.db"
    run = history.Run(started="2026-11-01T02:00:00+00:00", finished="2026-11-01T02:10:00+00:00")
    benches = [history.Bench("t::A", "A", f"k{n}", "ns", 1, 1, 1, record={"n": n}) for n in range(4)]
    benches.append(history.Bench("t::A", "A", "none", "ns", 1, 1, 1))
    history.append(path, run, [history.Result("t::A", "A", "passed")], benches)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE benches SET record = '[1]' WHERE name = 'k1'")
        raw.execute("UPDATE benches SET record = 'not json' WHERE name = 'k2'")
        raw.execute("UPDATE benches SET record = '' WHERE name = 'k3'")
    full, lean = history.load(path), history.load(path, records=False)
    assert len(lean.damaged) == 2 and lean.damaged == full.damaged
    assert [b.record for b in full.benches] == [{"n": 0}, None, None, None, None]
    assert [b.record for b in lean.benches] == [None] * 5
    assert [(b.name, b.median) for b in lean.benches] == [(b.name, b.median) for b in full.benches]


def test_the_benchmark_runs_small(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its cached history goes there
    argv = [sys.executable, str(REPO / "benchmarks" / "history_scale.py"), "--nights", "3", "--cases", "200"]
    out = subprocess.run([*argv, "--devices", "4", "--runs", "1"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "history of 3 nights x 200 results (20 binaries) over 4 devices" in out.stdout
    assert re.search(r"append one night +wall +[\d.]+ s", out.stdout)
    assert re.search(r"report \(whole process\) +wall +[\d.]+ s", out.stdout)
    assert re.search(r"the page: \d+ KB", out.stdout)
