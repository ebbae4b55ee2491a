"""`pytest-ondevice bisect --history`: each new failure and slower kernel of the history's
last run bisected against the run before it, each answer kept in the history."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...formats.benchline import MEMORY_UNIT
from .git import BisectError, git
from .search import bisect

if TYPE_CHECKING:
    from ...records.history import Bisection

FLAKY_REPEAT = 3  # runs per step of a case the history calls flaky
HISTORY_WINDOW = 50  # runs read back to find each board's previous run


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
    """The last run's id, and what it got wrong that its board's previous run had right
    (nightlies per board may append to one file), by the rules bisect shares with the report
    (records/analysis.py): new failures by BISECT_FAILURES (failed now, passed there) and
    latency records slower by BISECT_SLOWER (over threshold % against that run; an exact
    figure: any rise)."""
    from ...records import analysis
    from ...records import history as records

    found = records.load(history_path, last=HISTORY_WINDOW, records=False)  # the figures, not the JSON
    if len(found.runs) < 2:
        raise BisectError(f"{history_path}: bisecting needs two runs to compare, it holds {len(found.runs)}")
    last = found.runs[-1]
    out = []
    for f in analysis.new_failures(found, analysis.BISECT_FAILURES) or []:
        r, then = f.result, f.then
        flaky = bool(r.flaky or r.reruns or (then is not None and (then.flaky or then.reruns)))
        good = f.previous.git_rev if f.previous is not None else None
        out.append(Suspect(r.nodeid, r.board, None, good or "", last.git_rev or "", (r.message or "")[:200], 0, flaky))
    latency = [s for s in analysis.series(found) if s.unit != MEMORY_UNIT]
    for slow in analysis.slower(latency, found, threshold, analysis.BISECT_SLOWER):
        s = slow.series
        if s.points[-1][0] != len(found.runs) - 1 or slow.reference_run is None:
            continue  # another board's latest run, bisected after its own night
        why = f"{s.name}: {slow.reference:g} -> {s.latest:g} {s.unit} ({slow.change:+.1f} %)"
        good = found.runs[slow.reference_run].git_rev
        out.append(Suspect(s.nodeid, s.board, s.name, good or "", last.git_rev or "", why, slow.change))
    if any(not (s.good_rev and s.bad_rev) for s in out):
        raise BisectError(
            f"{history_path}: the runs do not record their git revision (was pytest run in a git checkout?)"
        )
    return last.id or 0, out


def from_history(
    repo: Path, history_path: Path, pytest_args: list[str], threshold: float, max_steps: int, minutes: float, say=print
) -> list[Bisection]:
    """Bisect each new failure and latency regression of the history's last run against the
    run before it, within a budget of steps (each bisection's) and minutes (all of them);
    each answer is kept in the history beside the run."""
    from ...records import history as records

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
                    subject = git(repo, "show", "-s", "--format=%s", first).strip()
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
