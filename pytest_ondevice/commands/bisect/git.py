"""git as bisection calls it: a command that fails is a BisectError saying what git said."""

from __future__ import annotations

import subprocess
from pathlib import Path


class BisectError(Exception):
    """Bisection cannot start or go on: the message says why and what to do."""


def commit_of(repo: Path, name: str) -> str:
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}").strip()
    except BisectError:
        raise BisectError(f"{name!r} is not a commit of {repo}") from None


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise BisectError(f"git {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    return proc.stdout
