"""Run a local process with streamed output, a hard timeout and no orphans.

Used by every transport whose device is a local process (the host itself,
QEMU). The child gets its own session, so a timeout or a stray grandchild is
ended by killing the whole process group.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_ondevice.protocol import RunEnd

from . import InfrastructureError

# After the main process exits, children that kept the pipe open get this long.
LINGER_SECONDS = 1.0
READ_SIZE = 65536


def run_streaming(
    argv: list[str],
    timeout: float,
    on_bytes: Callable[[bytes], None],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stop: threading.Event | None = None,
) -> RunEnd:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as e:  # the file cannot be run here: not the test's verdict
        raise InfrastructureError(f"cannot execute {argv[0]}: {e.strerror or e}") from None
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = start + timeout
    timed_out = False
    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > LINGER_SECONDS:
                break  # a grandchild holds the pipe open; the group is killed below
            if exited_at is None and now >= deadline:
                timed_out = True
                _kill_group(proc)
                break
            if stop is not None and stop.is_set():  # the session is ending
                _kill_group(proc)
                break
            wait = min(0.1, max(0.0, deadline - now))
            ready, _, _ = select.select([fd], [], [], wait)
            if ready:
                data = os.read(fd, READ_SIZE)
                if not data:  # the output closed, not the program: it may still be working
                    timed_out = _wait_exit(proc, deadline, stop)
                    break
                on_bytes(data)
    finally:
        _kill_group(proc, quiet=True)
        proc.stdout.close()
    returncode = proc.wait()
    end = RunEnd(duration=time.monotonic() - start)
    if timed_out:
        end.timed_out = timeout
    elif returncode < 0:
        end.signal = _signal_name(-returncode)
    else:
        end.exit_code = returncode
    return end


def _wait_exit(proc: subprocess.Popen, deadline: float, stop: threading.Event | None) -> bool:
    """After end-of-file, wait for the exit until the deadline; True if it struck.

    A binary may close stdout and stderr and go on working (or just be slow to exit):
    killing it at end-of-file would report a crash that never happened."""
    while proc.poll() is None:
        if stop is not None and stop.is_set():
            return False  # the session is ending: the group is killed by the caller
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill_group(proc)
            return True
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=min(0.05, remaining))
    return False


def _kill_group(proc: subprocess.Popen, quiet: bool = False) -> None:
    """SIGKILL the whole group: the binary and anything it started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: pgid == pid
    if not quiet:
        proc.wait()


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class RunDirs:
    """Private working directories for local runs (a binary's cwd, holding links to its data
    files), removed at close: never inside the build cache, whose entries are shared by
    sessions and never written."""

    def __init__(self) -> None:
        self._root: Path | None = None

    def make(self, data: Sequence[Path]) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="ondevice-run-"))
        run_dir = Path(tempfile.mkdtemp(dir=self._root))
        for path in data:
            (run_dir / path.name).symlink_to(path.resolve())
        return run_dir

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
