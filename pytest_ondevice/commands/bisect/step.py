"""One step of a bisection: pytest run at the checked-out revision (`repeat` times), and
its verdict for `git bisect run`: good (exit 0), bad (1) or skip (125); 128 stops the search."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .git import BisectError, git

GOOD, BAD, SKIP = "good", "bad", "skip"
EXIT = {GOOD: 0, BAD: 1, SKIP: 125}
ABORT = 128  # git bisect run stops at once on an exit status above 127
PYTEST_GRACE = 30.0  # seconds a step's pytest has to end its run after Ctrl-C
DOES_NOT_BUILD = "does not build"
_BUILD_LINE = re.compile(r"ondevice build: (\d+) compiled, (\d+) reused")


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


def run_step(config: Config, top: Path) -> Step:
    """Run pytest `repeat` times at the checked-out revision and decide its verdict."""
    rev = git(top, "rev-parse", "HEAD").strip()
    subject = git(top, "log", "-1", "--format=%s").strip()
    if (top / ".gitmodules").is_file():  # neither worktree add nor bisect's checkouts update them
        git(top, "submodule", "update", "--init", "--recursive", "--quiet")
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
        return SKIP, f"pytest stopped (exit {returncode}): {last_line(stdout)}"
    try:
        cases = list(ET.parse(junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return SKIP, f"no report from pytest (exit {returncode}): {last_line(stdout)}"
    failed: list[str] = []
    built_not: list[str] = []
    errors: list[str] = []
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


def last_line(text: str) -> str:
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
