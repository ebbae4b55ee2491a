"""The compilers, archivers and linkers a build runs: `jobs` at a time, counted, and killed
with all they started when the session ends (each runs in a process group of its own)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
from pathlib import Path

from .errors import BuildError
from .store import CacheError

_DISK_TROUBLE = ("No space left on device", "Read-only file system", "Disk quota exceeded")


class ToolRunner:
    def __init__(self, jobs: int, cwd: Path, cache_root: Path) -> None:
        """cwd: where tools run (the project: relative paths in their output are the
        project's); cache_root: named when a tool cannot write its output there."""
        self.cwd = cwd
        self.cache_root = cache_root
        self.started = 0  # tools run: none for a warm cache
        self._slots = threading.Semaphore(max(1, jobs))
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = False

    @property
    def stopped(self) -> bool:
        """Whether stop() was called: a step queued behind it gives up before it starts."""
        return self._stopped

    def run(self, argv: list[str], what: str) -> None:
        """Run one tool to its end; BuildError with its output when it fails (CacheError
        when it could not write its output: a full or read-only disk is not the code's fault)."""
        with self._slots:
            try:
                with self._lock:
                    if self._stopped:
                        raise BuildError(f"{what} not started: the session is ending")
                    self.started += 1
                    proc = subprocess.Popen(
                        argv,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        cwd=self.cwd,
                        start_new_session=True,  # its own group: stop() ends cc1/as/ld too
                        # a copy, not "inherit": a vfork'd child reading the C environ while
                        # pytest's thread rewrites it fails with EFAULT (transports/_proc.py)
                        env=dict(os.environ),
                    )
                    self._running.add(proc)
            except OSError as e:
                raise BuildError(f"{what} failed: cannot run {argv[0]}: {e.strerror}") from None
            try:
                output, _ = proc.communicate()
            finally:
                with self._lock:
                    self._running.discard(proc)
        if proc.returncode != 0:
            text = output.decode(errors="replace").strip()
            trouble = next((t for t in _DISK_TROUBLE if t in text), None)
            if trouble:
                raise CacheError(
                    f"{what} could not write its output: {trouble}; free some space or point "
                    f"ondevice_cache_dir elsewhere (cache: {self.cache_root})\n{text}"
                )
            raise BuildError(f"{what} failed: {shlex.join(argv)}\n{text}")

    def stop(self) -> None:
        """Session end or interrupt: tools still running are killed, none start."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for proc in running:  # the driver and what it started (cc1, as, ld hold our pipe)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
