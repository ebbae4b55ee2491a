"""`pytest-ondevice bisect`: the first commit where selected cases fail, or a bench record
got slower, found by git's own bisection in a worktree of its own.

The user's working tree, index and HEAD are never touched: git checks each candidate out in
a detached worktree under the repository's git directory, and `git bisect run` drives the
search, calling back into this package for each step (`python -m pytest_ondevice.commands.bisect
step CONFIG`). A step runs pytest with the user's options and says:

- good (exit 0): every selected case passed (and the metric, if any, is within its limit);
- bad (exit 1): a selected case failed (or the metric is over its limit);
- skip (exit 125): the revision does not build, the cases do not exist there, or the run
  met an infrastructure error: never counted as good or bad.

Every build goes through the one build store, so a step compiles only what changed.

The parts: step.py (one step and its verdict), search.py (the two ends, then git bisect run),
worktree.py (the lock and the clean-up), nightly.py (--history: the last run's suspects),
cli.py (the options and what the user reads), git.py (git's calls), __main__.py (the step's
entry point).
"""

from .cli import command

__all__ = ["command"]
