"""The nightly job as shipped (examples/nightly/run.sh on its emulated farm), end to end."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow


def test_the_nightly_script_runs_the_farm_and_writes_junit_history_and_the_report(project):
    project.copy_examples()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OUT": "out"}
    env["TESTS"] = "examples/kernels"
    for _night in (1, 2):
        done = subprocess.run(
            ["bash", str(REPO / "examples/nightly/run.sh"), "-n", "2"],
            cwd=project.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    out = project.path / "out"
    assert "doctor: every board can run (3 device(s) checked)" in done.stdout
    assert "16 passed" in done.stdout  # 8 cases on each of the farm's 2 boards
    with sqlite3.connect(out / "history.db") as db:
        runs = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        devices = {row[0] for row in db.execute("SELECT DISTINCT device FROM results WHERE board IS NOT NULL")}
    assert runs == 2
    assert devices <= {"bluepill-qemu-a", "bluepill-qemu-b", "mps2-an386"} and "mps2-an386" in devices
    assert (out / "junit.xml").stat().st_size > 0
    page = (out / "nightly.html").read_text()
    assert page.count('class="chart"') >= 1
    # coverage of both boards, the two Blue Pill devices' counts merged, kept for each night
    assert "bluepill-qemu: lines" in done.stdout and "mps2-an386: lines" in done.stdout
    assert (out / "coverage" / "coverage.xml").is_file() and (
        out / "coverage" / "bluepill-qemu" / "index.html"
    ).is_file()
    with sqlite3.connect(out / "history.db") as db:
        nights = db.execute("SELECT COUNT(DISTINCT run_id) FROM coverage WHERE board IS NULL AND file IS NULL")
        assert nights.fetchone()[0] == 2
        # the night's records are the plain build's, never a coverage build's (issue 50, 3)
        assert db.execute("SELECT DISTINCT variant FROM benches").fetchall() == [("plain",)]
    assert "<h2>Code coverage</h2>" in page and "<h2>Stack high-water per case</h2>" in page
    # the coverage build ran on its own: its verdicts and records kept apart, its figures in the night's run
    assert (
        "ondevice history: " in done.stdout
        and " coverage figures of run 2 of out/coverage-history.db added to run 2 of out/history.db" in done.stdout
    )
    with sqlite3.connect(out / "coverage-history.db") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 2
        assert db.execute("SELECT DISTINCT variant FROM benches").fetchall() == [("gcov",)]  # stacks: no latency
    assert (out / "junit-coverage.xml").stat().st_size > 0


def test_the_nightly_job_with_bisect_names_the_commit_of_a_planted_bug_and_a_slower_kernel(tmp_path):
    """BISECT=1, over two nights of examples/bisect's repository (commit 1, then 16): the
    report shows the first bad commit beside the new failure and the slower kernel."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_history", REPO / "examples/bisect/make_history.py")
    make_history = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_history)
    repo = tmp_path / "lib-repo"
    commits = make_history.make(repo, tmp_path / "cache")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    env.update(TESTS="scale_test.c", BISECT="1", BISECT_STEPS="6")
    for rev in (commits[1], "main"):
        subprocess.run(["git", "checkout", "-q", rev], cwd=repo, check=True)
        night = subprocess.run(
            ["bash", str(REPO / "examples/nightly/run.sh")], cwd=repo, env=env, capture_output=True, text=True,
            timeout=900,
        )  # fmt: skip
    assert night.returncode == 1, night.stdout[-3000:] + night.stderr[-2000:]  # ScalesByTwo fails now
    bug, slower = commits[make_history.FIRST_BAD], commits[make_history.SLOWER]
    assert f"found: {bug[:12]} change {make_history.FIRST_BAD}" in night.stdout, night.stdout[-4000:]
    assert f"found: {slower[:12]} change {make_history.SLOWER}" in night.stdout, night.stdout[-4000:]
    page = (tmp_path / "out" / "nightly.html").read_text()
    assert page.count(f'<td class="first-bad">{bug[:12]} change {make_history.FIRST_BAD}</td>') == 2  # both boards
    assert f'<td class="first-bad">{slower[:12]} change {make_history.SLOWER}</td>' in page
    with sqlite3.connect(tmp_path / "out" / "history.db") as db:  # the slower kernel: found in plain figures
        latency = db.execute("SELECT DISTINCT variant FROM benches WHERE name = 'work_kernel'").fetchall()
    assert latency == [("plain",)]


def test_a_night_whose_tests_are_not_there_stops_saying_so(tmp_path):
    """xdist swallows pytest's "file or directory not found": the job would report a night of
    no tests (as a copy from `pytest-ondevice nightly DIR` run without TESTS once did)."""
    env = {**os.environ, "TESTS": "no-such-dir", "OUT": str(tmp_path / "out")}
    done = subprocess.run(
        ["bash", str(REPO / "examples/nightly/run.sh")], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "nightly: TESTS=no-such-dir does not exist here" in done.stderr
    assert not (tmp_path / "out" / "history.db").exists()
