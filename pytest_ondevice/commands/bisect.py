"""`pytest-ondevice bisect`: the first commit where selected cases fail, or a bench record
got slower, found by git's own bisection in a worktree of its own.

The user's working tree, index and HEAD are never touched: git checks each candidate out in
a detached worktree under the repository's git directory, and `git bisect run` drives the
search, calling back into this module for each step (`python -m pytest_ondevice.commands.bisect
step CONFIG`). A step runs pytest with the user's options and says:

- good (exit 0): every selected case passed (and the metric, if any, is within its limit);
- bad (exit 1): a selected case failed (or the metric is over its limit);
- skip (exit 125): the revision does not build, the cases do not exist there, or the run
  met an infrastructure error: never counted as good or bad.

Every build goes through the one build store, so a step compiles only what changed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..compiling.store import pid_alive
from ..formats.benchline import MEMORY_UNIT

GOOD, BAD, SKIP = "good", "bad", "skip"
EXIT = {GOOD: 0, BAD: 1, SKIP: 125}
ABORT = 128  # git bisect run stops at once on an exit status above 127
PYTEST_GRACE = 30.0  # seconds a step's pytest has to end its run after Ctrl-C
DOES_NOT_BUILD = "does not build"
FLAKY_REPEAT = 3  # runs per step of a case the history calls flaky
HISTORY_WINDOW = 50  # runs read back to find each board's previous run
_BUILD_LINE = re.compile(r"ondevice build: (\d+) compiled, (\d+) reused")


class BisectError(Exception):
    """Bisection cannot start or go on: the message says why and what to do."""


@dataclass
class Step:
    rev: str
    subject: str
    verdict: str
    why: str
    seconds: float
    compiled: int = 0
    reused: int = 0
    runs: list[str] = field(default_factory=list)  # each repeat's verdict
    metric: float | None = None
    log: str = ""  # what the failing case said (its failure and output), for the report


@dataclass
class Config:
    """What a step needs, written to a file that `git bisect run` hands each step."""

    pytest_args: list[str]
    metric: str | None = None
    above: float | None = None  # the limit, absolute (from --above VALUE or the good revision's +PCT)
    repeat: int = 1
    steps_file: str = ""
    junit_dir: str = ""
    max_steps: int = 0  # a budget (0: none): git bisect run is stopped when it is spent
    deadline: float = 0.0  # time.time() after which no step starts (0: none)
    subdir: str = "."  # where pytest runs, relative to the worktree's top (the user's cwd in the repo)
    unbuildable_is_bad: bool = False  # the bad end is a build failure: a revision that does not build is bad


# -- a step ------------------------------------------------------------------------------


def run_step(config: Config, top: Path) -> Step:
    """Run pytest `repeat` times at the checked-out revision and decide its verdict."""
    rev = _git(top, "rev-parse", "HEAD").strip()
    subject = _git(top, "log", "-1", "--format=%s").strip()
    if (top / ".gitmodules").is_file():  # neither worktree add nor bisect's checkouts update them
        _git(top, "submodule", "update", "--init", "--recursive", "--quiet")
    cwd = top / config.subdir
    started = time.monotonic()
    verdicts, whys, figures, logs = [], [], [], []
    compiled = reused = 0
    for attempt in range(config.repeat):
        junit = Path(config.junit_dir) / f"{rev[:12]}-{attempt}.xml"
        bench = Path(config.junit_dir) / f"{rev[:12]}-{attempt}.json"
        argv = [sys.executable, "-m", "pytest", *config.pytest_args, f"--junitxml={junit}", "-p", "no:cacheprovider"]
        if config.metric:
            argv.append(f"--bench-json={bench}")
        proc = _pytest(argv, cwd)
        m = _BUILD_LINE.search(proc.stdout)
        if m:
            compiled, reused = compiled + int(m.group(1)), reused + int(m.group(2))
        verdict, why = judge(proc.returncode, junit, proc.stdout)
        if verdict == SKIP and why == DOES_NOT_BUILD and config.unbuildable_is_bad:
            verdict = BAD
        logs.append(case_log(junit))
        figure = None
        if verdict == GOOD and config.metric:
            figure = metric_value(bench, config.metric)
            if figure is None:
                verdict, why = SKIP, f"no bench record {config.metric} at this revision"
            elif config.above is not None and figure > config.above:
                verdict, why = BAD, f"{config.metric} = {figure:g}, over the limit {config.above:g}"
            else:
                why = f"{config.metric} = {figure:g}"
        verdicts.append(verdict)
        whys.append(why)
        figures.append(figure)
    verdict, why = _settle(verdicts, whys)
    known = [f for f in figures if f is not None]
    step = Step(rev, subject, verdict, why, round(time.monotonic() - started, 2), compiled, reused, verdicts)
    step.log = next((log for log in logs if log), "")
    step.metric = sorted(known)[len(known) // 2] if known else None
    return step


def _pytest(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """pytest, given time to end its run on Ctrl-C (release its leases, stop its compilers)
    instead of subprocess.run's kill a quarter second later."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        out, err = proc.communicate()
    except BaseException:
        try:
            proc.wait(timeout=PYTEST_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def judge(returncode: int, junit: Path, stdout: str) -> tuple[str, str]:
    """One pytest run's verdict for bisection, from its exit status and JUnit report."""
    if returncode in (4, 5):
        return SKIP, "the selected cases do not exist at this revision"
    if returncode in (2, 3):
        return SKIP, f"pytest stopped (exit {returncode}): {_last_line(stdout)}"
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return SKIP, f"no report from pytest (exit {returncode}): {_last_line(stdout)}"
    failed, built_not, errors = [], [], []
    for case in cases:
        name = case.get("name", "?")
        failure = case.find("failure")
        error = case.find("error")
        if failure is not None:
            text = (failure.get("message") or "") + (failure.text or "")
            (built_not if "build failed for board" in text else failed).append(name)
        elif error is not None:
            errors.append(name)
    if failed:
        return BAD, f"failed: {', '.join(failed[:5])}" + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    if built_not:
        return SKIP, DOES_NOT_BUILD
    if errors:
        return SKIP, f"infrastructure errors: {', '.join(errors[:3])}"
    if not cases:
        return SKIP, "no case ran"
    return GOOD, f"{len(cases)} passed"


def case_log(junit: Path, limit: int = 2000) -> str:
    """The first failing case's failure text and output, bounded."""
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return ""
    for case in cases:
        failure = case.find("failure")
        if failure is not None:
            out = case.find("system-out")
            text = "\n".join(
                x for x in ((failure.text or failure.get("message") or ""), out.text if out is not None else "") if x
            )
            return text.strip()[:limit]
    return ""


def metric_value(bench: Path, name: str) -> float | None:
    """The median of the named bench record (the first board's that has it)."""
    try:
        records = json.loads(bench.read_text())["records"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for record in records:
        if record.get("name") == name and isinstance(record.get("median"), (int, float)):
            return float(record["median"])
    return None


def _settle(verdicts: list[str], whys: list[str]) -> tuple[str, str]:
    """Repeats that agree give their verdict; a split is decided by the majority of good
    and bad runs and says so (a tie, or only skips, is a skip)."""
    counts = Counter(verdicts)
    if len(counts) == 1:
        return verdicts[0], whys[-1]
    good, bad = counts[GOOD], counts[BAD]
    split = f"runs disagree: {good} good, {bad} bad, {counts[SKIP]} skipped of {len(verdicts)}"
    if good == bad:
        return SKIP, split
    return (GOOD if good > bad else BAD), split


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def step_main(config_path: str) -> int:
    """The command `git bisect run` calls at each candidate revision."""
    config = Config(**json.loads(Path(config_path).read_text()))
    done = len(Path(config.steps_file).read_text().splitlines()) if Path(config.steps_file).exists() else 0
    if (config.max_steps and done >= config.max_steps) or (config.deadline and time.time() > config.deadline):
        print(f"pytest-ondevice bisect: budget spent after {done} steps", flush=True)
        return ABORT  # git bisect run stops at once
    try:
        step = run_step(config, Path.cwd())
    except (KeyboardInterrupt, BisectError):
        return ABORT  # interrupted, or git itself failed: stop the search rather than guess
    with open(config.steps_file, "a") as f:
        f.write(json.dumps(asdict(step)) + "\n")
    with contextlib.suppress(OSError):  # the reader gone (a broken pipe) must not turn the verdict into bad
        print(
            f"pytest-ondevice bisect: {step.rev[:12]} {step.verdict} ({step.why}) in {step.seconds:.1f} s", flush=True
        )
    return EXIT[step.verdict]


# -- the search ----------------------------------------------------------------------------


@dataclass
class Result:
    first_bad: str | None
    candidates: list[str]  # when skipped revisions leave several
    steps: list[Step]
    good: Step
    bad: Step


def bisect(
    repo: Path,
    good: str,
    bad: str,
    pytest_args: list[str],
    metric: str | None = None,
    above: str | None = None,
    repeat: int = 1,
    say=print,
    max_steps: int = 0,
    deadline: float = 0.0,
    unbuildable_is_bad: bool = False,
) -> Result:
    """Find the first bad commit between good and bad, in a worktree of its own."""
    top = Path(_git(repo, "rev-parse", "--show-toplevel").strip())
    common = Path(_git(repo, "rev-parse", "--git-common-dir").strip())
    common = common if common.is_absolute() else (repo / common).resolve()
    good_rev = _rev(top, good)
    bad_rev = _rev(top, bad)
    if metric is None and above is not None:
        raise BisectError("--above needs --metric NAME (a bench record's name)")
    with _lock(common) as dead:
        _remove_leftovers(top, common, dead, say)
        with tempfile.TemporaryDirectory(prefix="ondevice-bisect-") as tmp:
            _note_scratch(common, tmp)
            work = common / "ondevice-bisect" / Path(tmp).name
            steps = str(Path(tmp) / "steps.jsonl")
            subdir = str(Path(os.path.realpath(repo)).relative_to(os.path.realpath(top)))
            config = Config(
                pytest_args, metric, None, max(1, repeat), steps, tmp, max_steps, deadline, subdir, unbuildable_is_bad
            )
            work.parent.mkdir(parents=True, exist_ok=True)
            _git(top, "worktree", "add", "--detach", "--quiet", str(work), bad_rev)
            try:
                return _search(work, good_rev, bad_rev, config, above, Path(tmp), say)
            finally:
                _clean(top, work)


def _search(work: Path, good: str, bad: str, config: Config, above: str | None, tmp: Path, say) -> Result:
    say(f"pytest-ondevice bisect: checking the bad end {bad[:12]}")
    bad_step = run_step(config, work)
    _git(work, "checkout", "--quiet", "--detach", good)
    say(f"pytest-ondevice bisect: checking the good end {good[:12]}")
    good_step = run_step(config, work)
    if above is not None:
        config.above = _limit(above, good_step.metric, config.metric)
        bad_step = _rejudge(bad_step, config)
        good_step = _rejudge(good_step, config)
    if good_step.verdict != GOOD:
        raise BisectError(f"the good end {good[:12]} is not good: {good_step.why}")
    if bad_step.verdict != BAD:
        raise BisectError(f"the bad end {bad[:12]} is not bad: {bad_step.why}")
    count = int(_git(work, "rev-list", "--count", f"{good}..{bad}").strip())
    about = max(1, count.bit_length())  # git's: about log2 of the revisions left
    say(f"pytest-ondevice bisect: {count} revisions, about {about} steps")
    path = tmp / "config.json"
    path.write_text(json.dumps(asdict(config)))
    _git(work, "bisect", "start", bad, good)
    proc = subprocess.Popen(
        ["git", "bisect", "run", sys.executable, "-m", "pytest_ondevice.commands.bisect", "step", str(path)],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # ended as a group, whatever ends this process
    )
    output = []
    try:
        assert proc.stdout is not None
        taken = 0
        for line in proc.stdout:
            output.append(line)
            if line.startswith("pytest-ondevice bisect: budget spent"):
                say(line.strip())
            elif line.startswith("pytest-ondevice bisect: "):
                taken += 1
                say(f"pytest-ondevice bisect: step {taken} of about {about}: {line[24:].strip()}")
        proc.wait()
    except BaseException:
        _stop(proc)
        raise
    text = "".join(output)
    steps = [Step(**json.loads(line)) for line in Path(config.steps_file).read_text().splitlines() if line.strip()]
    first = re.search(r"^([0-9a-f]{40}) is the first bad commit", text, re.M)
    if first:
        return Result(first.group(1), [first.group(1)], steps, good_step, bad_step)
    many = re.findall(r"^([0-9a-f]{40})$", text.split("The first bad commit could be any of:")[-1], re.M)
    if "could be any of" in text:
        return Result(None, many, steps, good_step, bad_step)
    if "budget spent" in text:
        raise BisectError(f"the budget ran out after {len(steps)} steps, before the first bad commit was found")
    raise BisectError(f"git bisect run did not finish: {_last_line(text)}")


def _rejudge(step: Step, config: Config) -> Step:
    """An end's verdict once the limit is known (it was measured before)."""
    if step.verdict == GOOD and step.metric is not None and config.above is not None and step.metric > config.above:
        step.verdict, step.why = BAD, f"{config.metric} = {step.metric:g}, over the limit {config.above:g}"
    return step


def _limit(above: str, baseline: float | None, metric: str | None) -> float:
    """--above VALUE, or +PCT over the good revision's figure."""
    text = above.strip()
    if text.startswith("+") and text.endswith("%"):
        if baseline is None:
            raise BisectError(f"--above {above}: the good revision has no bench record {metric} to compare with")
        return baseline * (1 + float(text[1:-1]) / 100)
    try:
        return float(text)
    except ValueError:
        raise BisectError(f"--above {above!r}: give a number, or +PCT% over the good revision") from None


def _stop(proc: subprocess.Popen) -> None:
    """Interrupted (Ctrl-C, SIGTERM, a broken pipe): the search and its step's pytest are told
    as Ctrl-C tells them, given time to end their run, then ended as a group. git exits at
    once: the wait is for the whole group, or the step's pytest was killed while it released
    its leases and removed its run dir."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + PYTEST_GRACE + 5
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=PYTEST_GRACE + 5)
    while _group_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _group_running(pgid: int) -> bool:
    """Whether a process of the group is still running (a zombie waiting for its parent is not)."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc: any member, zombie or not
        try:
            os.killpg(pgid, 0)
        except OSError:
            return False
        return True
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, _ppid, group = f.read().rpartition(")")[2].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            return True
    return False


def _clean(top: Path, work: Path) -> None:
    """No worktree and no bisect state left behind, whatever happened."""
    with contextlib.suppress(BisectError):
        _git(work, "bisect", "reset")
    with contextlib.suppress(BisectError):
        _git(top, "worktree", "remove", "--force", str(work))
    with contextlib.suppress(BisectError):
        _git(top, "worktree", "prune")
    with contextlib.suppress(OSError):
        work.parent.rmdir()  # .git/ondevice-bisect/, when no other bisection's worktree is in it


@contextlib.contextmanager
def _lock(common: Path):
    """One bisection per repository at a time: a second is refused, naming the first. Yields
    the lines of a stale lock (its holder's pid, then its scratch dir): a run killed before
    its clean-up, whose leftovers are then removed (None: no stale lock)."""
    path = _lock_path(common)
    dead: list[str] | None = None
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            lines = _read_lines(path)
            holder = lines[0] if lines else ""
            if holder.isdigit() and pid_alive(int(holder)):
                raise BisectError(
                    f"another pytest-ondevice bisect (pid {holder}) is running on this repository; "
                    "wait for it, or stop it"
                ) from None
            dead = lines
            path.unlink(missing_ok=True)  # its process is gone: the lock is stale
    else:
        raise BisectError(f"cannot take {path}")
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        yield dead
    finally:
        path.unlink(missing_ok=True)


def _lock_path(common: Path) -> Path:
    return common / "ondevice-bisect.lock"


def _read_lines(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def _note_scratch(common: Path, scratch: str) -> None:
    """The lock names the run's scratch dir too, for the run after one killed outright."""
    with open(_lock_path(common), "a") as f:
        f.write(f"{scratch}\n")


def _remove_leftovers(top: Path, common: Path, dead: list[str] | None, say) -> None:
    """What a bisection killed outright (SIGKILL, a machine that went down) left: its worktree
    under .git/ondevice-bisect/, its bisect state and its scratch dir. Called holding the
    lock, so nothing there belongs to a live run; said in one line."""
    place = common / "ondevice-bisect"
    worktrees = _worktrees_under(top, place)
    scratch = _dead_scratch(dead)
    if not worktrees and scratch is None:
        return
    for work in worktrees:
        if work.is_dir():  # (git may list one whose directory is gone: the prune below drops it)
            _clean(top, work)
            shutil.rmtree(work, ignore_errors=True)  # one git never registered (killed while adding it)
    with contextlib.suppress(BisectError):
        _git(top, "worktree", "prune")
    with contextlib.suppress(OSError):
        place.rmdir()
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    who = f"pid {dead[0]}" if dead and dead[0].isdigit() else "its process is gone"
    left = [_shown_path(w, top) for w in worktrees] + ([str(scratch)] if scratch is not None else [])
    say(f"pytest-ondevice bisect: removed what a bisection killed before its clean-up left ({who}): {', '.join(left)}")


def _worktrees_under(top: Path, place: Path) -> list[Path]:
    """Worktrees in place: those git lists, and directories it does not (yet) know."""
    found = []
    with contextlib.suppress(BisectError):
        for line in _git(top, "worktree", "list", "--porcelain").splitlines():
            if line.startswith("worktree ") and Path(line[9:]).resolve().parent == place.resolve():
                found.append(Path(line[9:]))
    if place.is_dir():
        known = {w.resolve() for w in found}
        found += [d for d in sorted(place.iterdir()) if d.is_dir() and d.resolve() not in known]
    return found


def _dead_scratch(dead: list[str] | None) -> Path | None:
    """The dead run's scratch dir, as its lock named it, if it is still there (and is one of ours)."""
    if not dead or len(dead) < 2:
        return None
    scratch = Path(dead[1])
    return scratch if scratch.name.startswith("ondevice-bisect-") and scratch.is_dir() else None


def _shown_path(path: Path, top: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(top.resolve()))
    return str(path)


def _rev(repo: Path, name: str) -> str:
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").strip()
    except BisectError:
        raise BisectError(f"{name!r} is not a commit of {repo}") from None


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise BisectError(f"git {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return proc.stdout


# -- the nightly job ----------------------------------------------------------------------


@dataclass
class Suspect:
    """A new failure (metric None) or a latency regression of the history's last run."""

    nodeid: str
    board: str | None
    metric: str | None
    good_rev: str
    bad_rev: str
    why: str
    change: float = 0.0  # a bench record's, in %
    flaky: bool = False  # the history says its verdict may be luck: each step is repeated


def suspects(history_path: Path, threshold: float) -> tuple[int, list[Suspect]]:
    """The last run's id, and what it got wrong that the previous run of the same board had
    right (nightlies per board may append to one file): cases that failed and passed there,
    and bench records slower by more than threshold % (an exact figure: any rise)."""
    from ..records import history as records

    found = records.load(history_path, last=HISTORY_WINDOW, records=False)  # the figures, not the JSON
    if len(found.runs) < 2:
        raise BisectError(f"{history_path}: bisecting needs two runs to compare, it holds {len(found.runs)}")
    last = found.runs[-1]
    boards: dict[int, set] = {}
    for r in found.results:
        boards.setdefault(r.run_id, set()).add(r.board)

    def before(board):
        return next((run for run in reversed(found.runs[:-1]) if board in boards.get(run.id, ())), None)

    # each run's results and records by case, looked up once each: a farm's night holds
    # thousands of cases, and a search through every result per failure grew as their product
    results = {(r.run_id, r.nodeid): r for r in reversed(found.results)}  # the first of each wins
    benches = {(b.run_id, b.nodeid, b.name): b for b in reversed(found.benches)}
    previous_of = {board: before(board) for board in boards.get(last.id, ())}
    out = []
    for r in found.results:
        previous = previous_of.get(r.board) if r.run_id == last.id and r.outcome == "failed" else None
        if previous is None:
            continue
        then = results.get((previous.id, r.nodeid))
        if then is None or then.outcome != "passed":
            continue
        flaky = bool(r.flaky or r.reruns or then.flaky or then.reruns)
        out.append(Suspect(r.nodeid, r.board, None, previous.git_rev or "", last.git_rev or "",
                           (r.message or "")[:200], 0, flaky))  # fmt: skip
    for b in found.benches:
        previous = previous_of.get(b.board) if b.run_id == last.id and b.unit != MEMORY_UNIT else None
        if previous is None:
            continue
        old = benches.get((previous.id, b.nodeid, b.name))
        if old is None or not old.median or old.variant != b.variant:  # an instrumented build's: not latency
            continue
        change = 100.0 * (b.median - old.median) / old.median
        if change > threshold or (b.deterministic and old.deterministic and change > 0):  # exact: any rise
            why = f"{b.name}: {old.median:g} -> {b.median:g} {b.unit} ({change:+.1f} %)"
            out.append(Suspect(b.nodeid, b.board, b.name, previous.git_rev or "", last.git_rev or "", why, change))
    if any(not (s.good_rev and s.bad_rev) for s in out):
        raise BisectError(
            f"{history_path}: the runs do not record their git revision (was pytest run in a git checkout?)"
        )
    return last.id or 0, out


def from_history(
    repo: Path, history_path: Path, pytest_args: list[str], threshold: float, max_steps: int, minutes: float, say=print
) -> list:
    """Bisect each new failure and latency regression of the history's last run against the
    run before it, within a budget of steps (each bisection's) and minutes (all of them);
    each answer is kept in the history beside the run."""
    from ..records import history as records

    run_id, found = suspects(history_path, threshold)
    deadline = time.time() + minutes * 60 if minutes else 0.0
    answers = []
    for s in found:
        what = f"{s.nodeid}" + (f" ({s.metric})" if s.metric else "")
        args = [*pytest_args, *([f"--board={s.board}"] if s.board else []), s.nodeid]
        status, first, subject, steps, detail = "not bisected", None, None, 0, ""
        if s.good_rev == s.bad_rev:
            detail = "both runs were of the same revision: not a change of the code"
        elif deadline and time.time() > deadline:
            detail = "the time budget was spent on earlier bisections"
        else:
            say(f"pytest-ondevice bisect: {what}: {s.why}")
            try:
                above = (
                    (f"+{min(threshold, s.change / 2):g}%" if s.change < threshold else f"+{threshold:g}%")
                    if s.metric
                    else None
                )
                repeat = FLAKY_REPEAT if s.flaky else 1
                broken = s.why.startswith("build failed")  # the commit to find is the one that broke the build
                result = bisect(
                    repo, s.good_rev, s.bad_rev, args, s.metric, above, repeat, say, max_steps, deadline, broken
                )
                steps = len(result.steps)
                if result.first_bad:
                    status, first = "found", result.first_bad
                    subject = _git(repo, "show", "-s", "--format=%s", first).strip()
                else:
                    status, detail = "ambiguous", "one of " + ", ".join(c[:12] for c in result.candidates)
            except BisectError as e:
                detail = str(e)
        answer = records.Bisection(run_id, s.nodeid, s.board, s.metric, s.good_rev, s.bad_rev, first, subject, steps,
                                   status, detail)  # fmt: skip
        records.append_bisection(history_path, answer)
        say(f"pytest-ondevice bisect: {what}: {status}" + (f": {first[:12]} {subject}" if first else f" ({detail})"))
        answers.append(answer)
    if not found:
        say("pytest-ondevice bisect: the last run has no new failure and no slower kernel to bisect")
    return answers


# -- the report ----------------------------------------------------------------------------


def describe(repo: Path, result: Result) -> list[str]:
    """The result as a user reads it: the commit, the ends, every step."""
    lines = []
    if result.first_bad:
        info = _git(repo, "show", "-s", "--format=%H%n%s%n%an <%ae>%n%ad", result.first_bad).splitlines()
        lines += [
            f"first bad commit: {info[0]}",
            f"  {info[1]}",
            f"  author: {info[2]}",
            f"  date:   {info[3]}",
        ]
    else:
        lines.append("the first bad commit is one of (the others between them were skipped):")
        lines += [f"  {rev}" for rev in result.candidates]
    if result.first_bad:
        parent = _git(repo, "rev-parse", f"{result.first_bad}^").strip()
        last_good = next((s for s in result.steps if s.rev == parent), result.good)
        first_bad = next((s for s in result.steps if s.rev == result.first_bad), result.bad)
        lines.append(f"at the last good commit {last_good.rev[:12]}: {last_good.why}")
        lines.append(f"at the first bad commit {first_bad.rev[:12]}: {first_bad.why}")
        # the device log's path was in the worktree, removed by now
        lines += [f"    {line}" for line in first_bad.log.splitlines()[:20] if not line.startswith("device log:")]
    lines.append(f"good end {result.good.rev[:12]}: {result.good.why}")
    lines.append(f"bad end  {result.bad.rev[:12]}: {result.bad.why}")
    lines.append("steps:")
    for n, step in enumerate(result.steps, 1):
        runs = f"; runs: {', '.join(step.runs)}" if len(step.runs) > 1 else ""
        lines.append(
            f"  {n}. {step.rev[:12]} {step.verdict:4}  {step.seconds:6.1f} s  {step.compiled} compiled, "
            f"{step.reused} reused  {step.subject[:50]}  ({step.why}{runs})"
        )
    split = [s for s in result.steps if len(set(s.runs)) > 1]
    if split:
        lines.append(f"not sure: {len(split)} step(s) had runs that disagreed (see above): the case may be flaky")
    elif any(len(s.runs) > 1 for s in result.steps):
        lines.append(f"every step's {len(result.steps[0].runs)} runs agreed")
    return lines


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """`python -m pytest_ondevice.commands.bisect step CONFIG` (git bisect run's callback)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "step":
        return step_main(args[1])
    print("usage: pytest-ondevice bisect --good REV --bad REV [pytest options]", file=sys.stderr)
    return 2


def command(argv: list[str]) -> int:
    """`pytest-ondevice bisect`, as the CLI dispatches it."""
    parser = argparse.ArgumentParser(
        prog="pytest-ondevice bisect",
        description="Find the first commit where the selected cases fail, or a bench record got slower. "
        "Run it in your git repository; other options and node ids go to pytest.",
    )
    parser.add_argument("--good", metavar="REV", help="a revision where the cases pass")
    parser.add_argument("--bad", default="HEAD", metavar="REV", help="a revision where they fail (default HEAD)")
    parser.add_argument("--metric", metavar="NAME", help="a bench record: a step over --above is bad")
    parser.add_argument("--above", metavar="VALUE|+PCT%", help="the limit of --metric: a figure, or +PCT%% over good")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="run each step N times (a flaky case)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    parser.add_argument(
        "--history",
        type=Path,
        metavar="FILE",
        help="instead of --good: bisect each new failure and slower kernel of the history's last run "
        "against the run before it, and keep the answers in the history (the nightly job)",
    )
    parser.add_argument("--threshold", type=float, default=5.0, metavar="PCT", help="with --history: slower by (5)")
    parser.add_argument("--max-steps", type=int, default=0, metavar="N", help="a budget of steps per bisection")
    parser.add_argument("--max-minutes", type=float, default=0, metavar="M", help="a budget of minutes, in all")
    args, rest = parser.parse_known_args(argv)
    for number in (signal.SIGTERM, signal.SIGHUP):  # a CI job's cancel: clean up as for Ctrl-C
        signal.signal(number, _interrupt)
    if args.metric and args.above is None:
        parser.error("--metric needs --above VALUE or --above +PCT%")
    repo = Path.cwd()
    if args.history:
        from ..records.history import HistoryError

        try:
            answers = from_history(repo, args.history, rest, args.threshold, args.max_steps, args.max_minutes)
        except (BisectError, HistoryError) as e:
            print(f"pytest-ondevice bisect: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("pytest-ondevice bisect: interrupted; the worktree and the bisect state are removed", file=sys.stderr)
            return 130
        return 0 if all(a.status == "found" for a in answers) else 1
    if not args.good:
        parser.error("--good REV is needed (or --history FILE)")
    try:
        result = bisect(repo, args.good, args.bad, rest, args.metric, args.above, args.repeat, print, args.max_steps)
    except BisectError as e:
        print(f"pytest-ondevice bisect: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pytest-ondevice bisect: interrupted; the worktree and the bisect state are removed", file=sys.stderr)
        return 130
    for line in describe(repo, result):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0 if result.first_bad or result.candidates else 1


if __name__ == "__main__":
    sys.exit(main())
