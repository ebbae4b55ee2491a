"""Digests remembered across sessions, as ccache's inode cache and git's index do: a file
whose device, inode, size, mtime and ctime are what they were when this account hashed it
still has that content, since any write sets its ctime to the present and nobody can set a
ctime back. A warm run then stats its sources, headers and cache entries instead of
reading them all (a warm check of TFLM's 84 kernel test binaries: 40 % of it was hashing).

A file changed within RACY_NS of being hashed is not remembered: a second change in the
same timestamp tick could leave every field as it was. The memo is this account's own
file; one that anyone else could have written is not believed."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
from pathlib import Path

RACY_NS = 2_000_000_000
MAX_ENTRIES = 1 << 17  # ~14 MB; the oldest go first
_LINE = re.compile(r"^(\d+:\d+:\d+:\d+:\d+) ([0-9a-f]{64})$", re.MULTILINE)


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


class DigestMemo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._known: dict[str, str] | None = None  # read at the first question
        self._new: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, st: os.stat_result) -> str | None:
        """The digest this account found for the file st describes, or None."""
        with self._lock:
            if self._known is None:
                self._known = self._load()
            return self._known.get(_key(st))

    def learn(self, st: os.stat_result, digest: str) -> None:
        """st: the file's stat from before it was read for digest."""
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
            return
        with self._lock:
            self._new[_key(st)] = digest

    def save(self) -> None:
        """Add what this session learned (best effort: a memo not written is only slower)."""
        with self._lock:
            new, self._new = self._new, {}
        if not new:
            return
        merged = {**self._load(), **new}  # with what other sessions added meanwhile
        lines = [f"{k} {v}\n" for k, v in list(merged.items())[-MAX_ENTRIES:]]
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with open(fd, "w", encoding="ascii") as f:
                f.writelines(lines)
            os.replace(temp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temp)

    def _load(self) -> dict[str, str]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return {}
        with open(fd, encoding="ascii", errors="replace") as f:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
                return {}  # not this account's own, or writable by others: never believed
            text = f.read()
        return dict(m.groups() for m in _LINE.finditer(text))
