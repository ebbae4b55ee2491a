"""`pytest-ondevice bisect` on a throwaway repository of 16 commits of a small C library and
its tests: one commit breaks the build, a later one brings a bug, a later one makes a kernel
20 % slower. Git's bisection finds each exact commit in a worktree of its own, the build
store makes each step cheap, and the user's tree is as it was, also after a Ctrl-C."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import private_tmpdir

NEEDS_QEMU = pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")

HISTORY = Path(__file__).resolve().parent.parent / "examples" / "bisect" / "make_history.py"
_spec = importlib.util.spec_from_file_location("make_history", HISTORY)
make_history = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_history)
FIRST_BAD, DOES_NOT_BUILD, SLOWER = make_history.FIRST_BAD, make_history.DOES_NOT_BUILD, make_history.SLOWER

# the pytest-ondevice command, as this checkout has it
CLI = [sys.executable, "-c", "import sys; from pytest_ondevice.commands.cli import main; sys.exit(main())", "bisect"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bisect-cache")  # shared by the module's repositories, as a user's is


@pytest.fixture
def repo(tmp_path, cache):
    """Commits 1..16; returns the repository with commit i's hash as repo.commits[i]."""
    root = tmp_path / "lib-repo"
    commits = make_history.make(root, cache)
    (root / "untracked.txt").write_text("the user's own work in progress\n")  # must survive
    (root / "NOTES").write_text("an uncommitted edit\n")
    return SimpleNamespace(path=root, commits=commits)


def state(repo: Path) -> tuple[str, str, str, str]:
    """What the user sees of the repository: HEAD, status, the index, the worktrees."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "status", "--porcelain"),
        git(repo, "ls-files", "-s"),
        git(repo, "worktree", "list", "--porcelain"),
    )


def bisect(repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=repo, capture_output=True, text=True, timeout=timeout)


def steps_of(result_json: Path) -> list[dict]:
    return json.loads(result_json.read_text())["steps"]


@pytest.mark.parametrize("board", ["host", pytest.param("bluepill-qemu", marks=[pytest.mark.slow, NEEDS_QEMU])])
def test_a_failure_is_bisected_to_its_exact_commit_and_the_tree_is_untouched(repo, board, tmp_path):
    before = state(repo.path)
    out = tmp_path / "result.json"
    good = repo.commits[1]
    result = bisect(repo.path, "--good", good, "--json", str(out), f"--board={board}", "scale_test.c::ScalesByTwo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {repo.commits[FIRST_BAD]}" in result.stdout
    assert f"  change {FIRST_BAD}" in result.stdout and "author: A Developer <dev@example.com>" in result.stdout
    steps = steps_of(out)
    assert 1 <= len(steps) <= 5, steps
    assert all(s["verdict"] in ("good", "bad", "skip") for s in steps)
    broken = [s for s in steps if s["rev"] == repo.commits[DOES_NOT_BUILD]]
    assert all(s["verdict"] == "skip" and s["why"] == "does not build" for s in broken)
    assert state(repo.path) == before  # HEAD, index, the user's edits and files, no worktree left
    assert not (Path(git(repo.path, "rev-parse", "--git-common-dir").strip()) / "ondevice-bisect.lock").exists()
    assert "refs/bisect" not in git(repo.path, "for-each-ref")
    later = [s for s in steps if s["verdict"] != "skip"]
    assert any(s["reused"] > 0 for s in later), steps  # the build store at work: a step reuses objects


@pytest.mark.slow
@NEEDS_QEMU
def test_a_latency_step_is_bisected_exactly_under_icount(repo, tmp_path):
    out = tmp_path / "result.json"
    result = bisect(
        repo.path,
        "--good",
        repo.commits[1],
        "--metric",
        "work_kernel",
        "--above",
        "+10%",
        "--json",
        str(out),
        "--board=bluepill-qemu",
        "scale_test.c::BenchWork",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {repo.commits[SLOWER]}" in result.stdout
    assert len(steps_of(out)) <= 5
    figures = {s["rev"]: s["metric"] for s in steps_of(out) if s["metric"] is not None}
    assert figures and all(f > 0 for f in figures.values())


def test_a_good_end_that_is_not_good_is_refused_saying_why(repo):
    result = bisect(repo.path, "--good", repo.commits[10], "--board=host", "scale_test.c::ScalesByTwo")
    assert result.returncode == 2
    assert f"the good end {repo.commits[10][:12]} is not good: failed: ScalesByTwo[host]" in result.stderr
    assert git(repo.path, "worktree", "list").count("\n") == 1


def test_a_second_bisect_on_the_same_repository_is_refused(repo):
    common = Path(repo.path, git(repo.path, "rev-parse", "--git-common-dir").strip())
    (common / "ondevice-bisect.lock").write_text(str(os.getpid()))  # a live holder
    result = bisect(repo.path, "--good", repo.commits[1], "--board=host", "scale_test.c::ScalesByTwo")
    assert result.returncode == 2
    assert f"another pytest-ondevice bisect (pid {os.getpid()}) is running on this repository" in result.stderr


def bisect_in_a_step(repo, env: dict) -> tuple[subprocess.Popen, str]:
    """A bisect started in a session of its own, once git bisect runs its first step; and
    what it printed so far."""
    proc = subprocess.Popen(
        [*CLI, "--good", repo.commits[1], "--board=host", "scale_test.c::ScalesByTwo"],
        cwd=repo.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    seen = ""
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while "revisions, about" not in seen and time.monotonic() < deadline:  # in git bisect run now
        seen += proc.stdout.readline()
    return proc, seen


def test_a_bisect_killed_outright_leaves_nothing_once_the_next_one_runs(repo, tmp_path):
    """SIGKILL gives no chance to clean up: its worktree (detached HEAD), bisect state and
    scratch dir stayed for good. The next bisect sees the lock's holder is dead, removes what
    it left and says so in one line."""
    before = state(repo.path)
    env = private_tmpdir(tmp_path)
    proc, _ = bisect_in_a_step(repo, env)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    common = Path(repo.path, git(repo.path, "rev-parse", "--git-common-dir").strip())
    (left,) = (common / "ondevice-bisect").iterdir()  # what the killed run left
    assert (
        str(left) in git(repo.path, "worktree", "list")
        and (common / "ondevice-bisect.lock").read_text().split()[0] == str(proc.pid)  # the lock says whose
    )
    (scratch,) = Path(env["TMPDIR"]).glob("ondevice-bisect-*")

    again = subprocess.run(
        [*CLI, "--good", repo.commits[10], "--board=host", "scale_test.c::ScalesByTwo"],  # refused after the clean-up
        cwd=repo.path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert again.returncode == 2, again.stdout + again.stderr
    assert (
        f"pytest-ondevice bisect: removed what a bisection killed before its clean-up left (pid {proc.pid}): "
        f"{left.relative_to(repo.path)}, {scratch}" in again.stdout
    ), again.stdout
    assert state(repo.path) == before  # no worktree left, none of the dead run's nor the second's
    assert not left.exists() and not scratch.exists() and not (common / "ondevice-bisect").exists()
    assert "refs/bisect" not in git(repo.path, "for-each-ref")
    assert not (common / "ondevice-bisect.lock").exists()


def slow_to_clean_up(where: Path) -> dict:
    """The environment of a bisection whose steps' pytest takes a second to end its run
    after Ctrl-C (as one with leases to release does), its run dir under where/.tmp."""
    (where / "slow_unconfigure.py").write_text(
        "import time, pytest\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_unconfigure(config):\n    time.sleep(1)\n"
    )
    env = private_tmpdir(where)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(where), env.get("PYTHONPATH", "")) if p)
    env["PYTEST_ADDOPTS"] = "-p slow_unconfigure"
    return env


def test_ctrl_c_mid_step_leaves_no_worktree_no_bisect_state_and_the_tree_as_it_was(repo, tmp_path):
    before = state(repo.path)
    env = slow_to_clean_up(tmp_path)
    proc, seen = bisect_in_a_step(repo, env)
    time.sleep(0.5)  # mid-step
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, seen + rest
    assert "interrupted; the worktree and the bisect state are removed" in seen + rest
    assert state(repo.path) == before
    assert "refs/bisect" not in git(repo.path, "for-each-ref")
    common = Path(repo.path, git(repo.path, "rev-parse", "--git-common-dir").strip())
    assert not (common / "ondevice-bisect.lock").exists()
    assert not any((common / "ondevice-bisect").glob("*")) if (common / "ondevice-bisect").exists() else True
    assert not list(Path(env["TMPDIR"]).glob("ondevice-run-*")), "the step's pytest was killed before its clean-up"


@pytest.mark.slow
@NEEDS_QEMU
def test_the_nightly_job_bisects_its_new_failure_and_slower_kernel_and_the_report_names_the_commits(repo, tmp_path):
    """Two nights: the first at commit 1, the second at commit 16. `bisect --history` finds the
    commit of the new failure and of the slower kernel, keeps both in the history, and the
    morning report shows them beside the regression."""
    history = tmp_path / "nightly.sqlite"
    run = [sys.executable, "-m", "pytest", "--board=bluepill-qemu", f"--history={history}", "-p", "no:cacheprovider"]
    git(repo.path, "checkout", "-q", "-f", repo.commits[1])
    subprocess.run([*run, "scale_test.c"], cwd=repo.path, capture_output=True, check=True)
    git(repo.path, "checkout", "-q", "-f", "main")
    night = subprocess.run([*run, "scale_test.c"], cwd=repo.path, capture_output=True, text=True)
    assert night.returncode == 1  # ScalesByTwo fails now
    result = bisect(repo.path, "--history", str(history), "--max-steps", "6")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"scale_test.c::ScalesByTwo[bluepill-qemu]: found: {repo.commits[FIRST_BAD][:12]} change {FIRST_BAD}" in (
        result.stdout
    )
    assert f"(work_kernel): found: {repo.commits[SLOWER][:12]} change {SLOWER}" in result.stdout
    from pytest_ondevice.records import history as records
    from pytest_ondevice.records.report import render

    kept = records.load(history)
    assert {(b.nodeid, b.metric, b.first_bad) for b in kept.bisections} == {
        ("scale_test.c::ScalesByTwo[bluepill-qemu]", None, repo.commits[FIRST_BAD]),
        ("scale_test.c::BenchWork[bluepill-qemu]", "work_kernel", repo.commits[SLOWER]),
    }
    page = render(kept)
    assert f"{repo.commits[FIRST_BAD][:12]} change {FIRST_BAD}" in page
    assert f"{repo.commits[SLOWER][:12]} change {SLOWER}" in page
    assert page.count('class="first-bad"') == 2


def test_a_budget_of_steps_stops_the_search_and_says_so(repo):
    result = bisect(
        repo.path, "--good", repo.commits[1], "--max-steps", "1", "--board=host", "scale_test.c::ScalesByTwo"
    )
    assert result.returncode == 2
    assert "the budget ran out after 1 steps, before the first bad commit was found" in result.stderr
    assert git(repo.path, "worktree", "list").count("\n") == 1


FLAKY = """#include <time.h>
#include "micro_test.h"
#include "scale.h"
TF_LITE_MICRO_TESTS_BEGIN
// fails at every revision on odd clock ticks: no revision's verdict is to be trusted
TF_LITE_MICRO_TEST(ScalesByTwo) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  TF_LITE_MICRO_EXPECT_EQ(scale(3) + (int)((t.tv_nsec / 1000) & 1), 6);
}
TF_LITE_MICRO_TESTS_END
"""


def test_repeated_steps_say_whether_their_runs_agreed(repo, tmp_path):
    out = tmp_path / "result.json"
    args = ("--good", repo.commits[1], "--repeat", "2", "--json", str(out), "--board=host", "scale_test.c::ScalesByTwo")
    result = bisect(repo.path, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {repo.commits[FIRST_BAD]}" in result.stdout
    assert "every step's 2 runs agreed" in result.stdout
    assert all(len(s["runs"]) == 2 for s in steps_of(out))


def test_a_flaky_case_is_not_bisected_blindly(tmp_path, cache):
    """A case that fails by chance at every revision: repeated runs disagree, and the result
    says so (the ends are refused for what they are, or the steps are marked not sure)."""
    root = tmp_path / "flaky-repo"
    make_history.make(root, cache)
    (root / "scale_test.c").write_text(FLAKY)
    (root / "lib" / "scale.c").write_text(make_history.SCALE.format(factor=2, rounds=10))
    git(root, "commit", "-q", "-am", "a flaky test, a correct library")
    first = git(root, "rev-parse", "HEAD").strip()
    for n in range(3):
        (root / "NOTES").write_text(f"more {n}\n")
        git(root, "commit", "-q", "-am", f"more {n}")
    result = bisect(root, "--good", first, "--repeat", "7", "--board=host", "scale_test.c::ScalesByTwo")
    said = result.stdout + result.stderr
    assert "runs disagree" in said, said


def test_a_project_in_a_subdirectory_of_the_repository_is_bisected_from_there(tmp_path, cache):
    """A monorepo: pytest's root is fw/, where the user runs bisect; each step runs there."""
    outer = tmp_path / "mono"
    outer.mkdir()
    made = make_history.make(outer / "fw", cache)  # a repository of its own ...
    shutil.move(str(outer / "fw" / ".git"), str(outer / ".git"))  # ... made the monorepo's, fw/ a subdirectory
    git(outer, "add", "-A")
    git(outer, "commit", "-q", "-m", "the firmware moves into fw/")
    first = git(outer, "rev-list", "--max-parents=0", "HEAD").strip()
    assert first == made[1]
    result = bisect(outer / "fw", "--good", git(outer, "rev-parse", "HEAD").strip(), "--bad", "HEAD",
                    "--board=host", "scale_test.c::ScalesByTwo")  # fmt: skip
    # the commit that moved fw/ fails there: the step found the case at fw/ (not "do not exist")
    assert "is not good: failed: ScalesByTwo[host]" in result.stderr, result.stderr


def test_sigterm_mid_step_cleans_up_as_ctrl_c_does(repo, tmp_path):
    before = state(repo.path)
    env = slow_to_clean_up(tmp_path)
    args = ["--good", repo.commits[1], "--board=host", "scale_test.c::ScalesByTwo"]
    proc = subprocess.Popen(
        [*CLI, *args], cwd=repo.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    seen = ""
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while "revisions, about" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # a CI job's cancel: to the bisect process alone
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, seen + rest
    assert state(repo.path) == before
    assert "refs/bisect" not in git(repo.path, "for-each-ref")
    time.sleep(1)
    pattern = "pytest_ondevice.commands.bisect step"
    steps = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    ours = []  # other tests' bisections may run beside this one (-n 2): only steps in this repository count
    for pid in steps.split():
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(repo.path)):
                ours.append(pid)
    assert ours == [], "a step went on after the bisect ended"
    assert not list(Path(env["TMPDIR"]).glob("ondevice-run-*")), "the step's pytest was killed before its clean-up"


def test_a_history_of_one_run_per_board_is_read_board_by_board(tmp_path):
    """Nightlies per board append to one file: a board's failure is new against that
    board's previous run, not against another board's run in between."""
    from pytest_ondevice.commands.bisect.nightly import suspects
    from pytest_ondevice.records.history import Bench, Result, Run, append_run, connect

    def result(board, outcome):
        return Result(f"k_test.c::K[{board}]", "K", outcome, board=board, device=board)

    def bench(board, median):
        return Bench(f"k_test.c::K[{board}]", "K", "gemm", "instructions", median, median, median, board=board,
                     deterministic=True)  # fmt: skip

    db = connect(tmp_path / "h.db")
    for day, rev, board, outcome, median in ((1, "a", "mps2", "passed", 100), (2, "b", "rpi", "passed", 50),
                                              (3, "c", "mps2", "failed", 101)):  # fmt: skip
        run = Run(started=f"2026-11-0{day}T02:00:00+00:00", finished="", git_rev=rev * 40)
        append_run(db, run, [result(board, outcome)], [bench(board, median)])
    db.close()
    _, found = suspects(tmp_path / "h.db", 5.0)
    assert [(s.nodeid, s.metric, s.good_rev[0], s.bad_rev[0]) for s in found] == [
        ("k_test.c::K[mps2]", None, "a", "c"),
        ("k_test.c::K[mps2]", "gemm", "a", "c"),  # an exact figure: +1 % is news
    ]
