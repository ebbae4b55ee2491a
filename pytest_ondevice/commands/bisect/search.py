"""The search: both ends checked, then `git bisect run` in a worktree of its own, calling
back into `python -m pytest_ondevice.commands.bisect step CONFIG` at each candidate."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .git import BisectError, commit_of, git
from .step import BAD, GOOD, PYTEST_GRACE, Config, Step, last_line, run_step
from .worktree import clean, lock, note_scratch, remove_leftovers


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
    top = Path(git(repo, "rev-parse", "--show-toplevel").strip())
    common = Path(git(repo, "rev-parse", "--git-common-dir").strip())
    common = common if common.is_absolute() else (repo / common).resolve()
    good_rev = commit_of(top, good)
    bad_rev = commit_of(top, bad)
    if metric is None and above is not None:
        raise BisectError("--above needs --metric NAME (a bench record's name)")
    with lock(common) as dead:
        remove_leftovers(top, common, dead, say)
        with tempfile.TemporaryDirectory(prefix="ondevice-bisect-") as tmp:
            note_scratch(common, tmp)
            work = common / "ondevice-bisect" / Path(tmp).name
            steps = str(Path(tmp) / "steps.jsonl")
            subdir = str(Path(os.path.realpath(repo)).relative_to(os.path.realpath(top)))
            config = Config(
                pytest_args, metric, None, max(1, repeat), steps, tmp, max_steps, deadline, subdir, unbuildable_is_bad
            )
            work.parent.mkdir(parents=True, exist_ok=True)
            git(top, "worktree", "add", "--detach", "--quiet", str(work), bad_rev)
            try:
                return _search(work, good_rev, bad_rev, config, above, Path(tmp), say)
            finally:
                clean(top, work)


def _search(work: Path, good: str, bad: str, config: Config, above: str | None, tmp: Path, say) -> Result:
    say(f"pytest-ondevice bisect: checking the bad end {bad[:12]}")
    bad_step = run_step(config, work)
    git(work, "checkout", "--quiet", "--detach", good)
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
    count = int(git(work, "rev-list", "--count", f"{good}..{bad}").strip())
    about = max(1, count.bit_length())  # git's: about log2 of the revisions left
    say(f"pytest-ondevice bisect: {count} revisions, about {about} steps")
    path = tmp / "config.json"
    path.write_text(json.dumps(asdict(config)))
    git(work, "bisect", "start", bad, good)
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
    raise BisectError(f"git bisect run did not finish: {last_line(text)}")


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
