"""A run's shared state (leases, strikes, the host's working dirs), in the machine's temp
dir. A session killed outright (SIGKILL, a CI runner's timeout) cannot remove its own, so
each holds a lock on a file in it while it lives, and the next session removes this
account's run dirs whose lock nobody holds: they no longer pile up in /tmp.

The lock file names this machine (host name and boot id): a temp dir shared with another
machine (NFS mounted without locking across hosts, a VM's shared folder) may show its
locks as free, so only this machine's run dirs are swept. Where flock fails (NFS without
a lock daemon), the run goes on unlocked and its dir is never swept."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

PREFIX = "ondevice-run-"
LIVE = ".live"  # locked (shared) by the session for as long as it lives


def this_machine() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().strip()
    except OSError:
        boot = b""
    return socket.gethostname().encode() + b" " + boot


class RunDir:
    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX))
        self._pid = os.getpid()  # a forked child that ends never removes its parent's dir
        # locked before it has its name: a sweeper never finds it unlocked
        staged = self.path / f"{LIVE}.new"
        self._fd: int | None = os.open(staged, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(self._fd, this_machine())
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            os.rename(staged, self.path / LIVE)
        except OSError:  # no flock here: unlocked, so never swept
            os.close(self._fd)
            self._fd = None
            with contextlib.suppress(OSError):
                os.unlink(staged)

    def remove(self) -> None:
        if os.getpid() != self._pid:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def sweep(temp_dir: Path | None = None) -> int:
    """Remove the run dirs of this account's sessions on this machine that are gone (their
    lock is free). One without a lock file (being made, or an older version's) is left alone."""
    removed = 0
    here = this_machine()
    for path in Path(temp_dir or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            st = path.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            fd = os.open(path / LIVE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if os.read(fd, 4096) != here:
                raise OSError("another machine's")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its session lives, or is another machine's
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed += 1
        os.close(fd)
    return removed
