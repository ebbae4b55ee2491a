"""What keeps the user's tree safe: one bisection per repository at a time (a lock naming
its holder and scratch dir), and no worktree, bisect state or scratch dir left behind, also
by a bisection killed outright (the next one removes what it left)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ...compiling.store import pid_alive
from .git import BisectError, git


def clean(top: Path, work: Path) -> None:
    """No worktree and no bisect state left behind, whatever happened."""
    with contextlib.suppress(BisectError):
        git(work, "bisect", "reset")
    with contextlib.suppress(BisectError):
        git(top, "worktree", "remove", "--force", str(work))
    with contextlib.suppress(BisectError):
        git(top, "worktree", "prune")
    with contextlib.suppress(OSError):
        work.parent.rmdir()  # .git/ondevice-bisect/, when no other bisection's worktree is in it


@contextlib.contextmanager
def lock(common: Path) -> Iterator[list[str] | None]:
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


def note_scratch(common: Path, scratch: str) -> None:
    """The lock names the run's scratch dir too, for the run after one killed outright."""
    with open(_lock_path(common), "a") as f:
        f.write(f"{scratch}\n")


def remove_leftovers(top: Path, common: Path, dead: list[str] | None, say) -> None:
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
            clean(top, work)
            shutil.rmtree(work, ignore_errors=True)  # one git never registered (killed while adding it)
    with contextlib.suppress(BisectError):
        git(top, "worktree", "prune")
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
        for line in git(top, "worktree", "list", "--porcelain").splitlines():
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
