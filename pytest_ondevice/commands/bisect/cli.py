"""`pytest-ondevice bisect`: its options, and the result as a user reads it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from .git import BisectError, git
from .nightly import from_history
from .search import Result, bisect


def describe(repo: Path, result: Result) -> list[str]:
    """The result as a user reads it: the commit, the ends, every step."""
    lines = []
    if result.first_bad:
        info = git(repo, "show", "-s", "--format=%H%n%s%n%an <%ae>%n%ad", result.first_bad).splitlines()
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
        parent = git(repo, "rev-parse", f"{result.first_bad}^").strip()
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
        from ...records.history import HistoryError

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
