"""A local board's binaries run in a forked process of their own while pytest reports.

A binary's path past its build (the recheck, the run, the log, the parse) is 1.3 to 1.6
ms of Python a binary. In pytest's process it adds to every case's own cost; on a thread
it only trades the interpreter lock back and forth (measured: futex storms, slower than
not running ahead at all). A forked child has an interpreter of its own, on another core,
and hands each result back through a pipe, in item order.

Forked only while this process has one thread: a fork copies the calling thread alone,
so a lock another thread held would stay held in the child for good. The child never
returns into pytest: it runs the binaries it was given, then `os._exit`s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, BinaryIO

from .binaries import BinaryResult, BinarySpec

RUN_HERE = object()  # a future's result when the side process ended before giving it
_FRAME = struct.Struct("!I")


class SideRunError(Exception):
    """A run in the side process raised what could not be handed back as itself."""


class SideRuns:
    """The parent's end: one future per binary, each set as the child's result arrives."""

    def __init__(
        self, pid: int, results: int, commands: int, count: int, on_counts: Callable[[tuple[int, ...]], None]
    ) -> None:
        self.pid = pid
        self.futures: list[Future] = [Future() for _ in range(count)]
        self.on_counts = on_counts
        self._commands = commands
        self._stopped = False
        self._status: int | None = None
        self._left = 0  # results it never gave
        self._reader = threading.Thread(target=self._read, args=(results,), name="ondevice-side-runs", daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for index, outcome, delta, records in _frames(pipe):
                self.on_counts(delta)
                fut = self.futures[index]
                fut.records = records  # type: ignore[attr-defined]  # logged where the result is first read
                if isinstance(outcome, BaseException):
                    fut.set_exception(outcome)
                else:
                    fut.set_result(outcome)
        for fut in self.futures:  # it ended first (stopped, or died): the rest run in pytest's process
            if not fut.done():
                self._left += 1
                fut.set_result(RUN_HERE)

    def ended_early(self) -> str | None:
        """What to tell the user when the child died with results still owed."""
        if self._reader.is_alive() or self._stopped or not self._left:
            return None
        how = _how_it_ended(self._wait(1.0))
        return (
            f"the process that ran the local binaries beside pytest ended early ({how}): "
            f"{self._left} binaries were run in pytest's own process instead (the one it was running "
            "when it ended, if any, ran again there)"
        )

    def stop(self, grace: float = 5.0) -> None:
        """The session ends: the child stops its run (the binary's group is killed) and exits."""
        self._stopped = any(not f.done() for f in self.futures)
        with contextlib.suppress(OSError):
            os.close(self._commands)  # the child's watcher sees the pipe end
        if self._wait(grace) is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self._wait(None)
        self._reader.join(grace)

    def _wait(self, timeout: float | None) -> int | None:
        """The child's wait status once it has ended (within timeout seconds), else None."""
        if self._status is not None:
            return self._status
        deadline = time.monotonic() + (timeout or 0.0)
        while True:
            try:
                pid, status = os.waitpid(self.pid, 0 if timeout is None else os.WNOHANG)
            except ChildProcessError:
                return -1
            if pid:
                self._status = status
                return status
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)


def start(
    specs: Sequence[BinarySpec],
    run: Callable[[BinarySpec], BinaryResult],
    counters: Callable[[], tuple[int, ...]],
    on_stop: Callable[[], None],
    after_fork: Callable[[], None],
    on_counts: Callable[[tuple[int, ...]], None],
) -> SideRuns | None:
    """Fork the child that runs specs in order; None when this process has other threads.

    after_fork: called in the child first (fresh pools and locks); on_stop: called in the
    child when the parent closes its end (the session is over, or pytest died); on_counts:
    called here with what each run changed of counters()."""
    if threading.active_count() != 1:
        return None
    results_r, results_w = os.pipe()
    commands_r, commands_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child: coverage does not follow a fork)
        code = 70
        try:
            os.close(results_r)
            os.close(commands_w)
            after_fork()
            _child(specs, run, counters, on_stop, results_w, commands_r)
            code = 0
        finally:
            os._exit(code)
    os.close(results_w)
    os.close(commands_r)
    return SideRuns(pid, results_r, commands_w, len(specs), on_counts)


def _child(specs, run, counters, on_stop, results_fd: int, commands_fd: int) -> None:  # pragma: no cover
    # Ctrl-C, a closed terminal's SIGHUP and a CI's SIGTERM to the process group reach it
    # too: the parent decides, and closes the pipe, after which the run here is stopped
    # (its binary's group killed). Handlers, not SIG_IGN, which the binaries would inherit.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    stopping = threading.Event()

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(commands_fd, 1):
                pass
        stopping.set()
        on_stop()

    threading.Thread(target=watch, daemon=True).start()
    records: list[logging.LogRecord] = []
    logging.root.handlers[:] = [_Keep(records)]  # the parent's handlers get them through the pipe
    before = counters()
    with os.fdopen(results_fd, "wb") as pipe:
        for index, spec in enumerate(specs):
            if stopping.is_set():
                return
            try:
                outcome: Any = run(spec)
            except BaseException as e:  # a bug of ours: the item shows it
                outcome = _portable_error(e)
            now = counters()
            delta, before = tuple(a - b for a, b in zip(now, before, strict=True)), now
            try:
                frame = pickle.dumps((index, outcome, delta, [_portable(r) for r in records]), pickle.HIGHEST_PROTOCOL)
            except Exception as e:
                error = SideRunError(f"the result of {spec.rel} could not be handed back: {e!r}")
                frame = pickle.dumps((index, error, delta, []), pickle.HIGHEST_PROTOCOL)
            records.clear()
            try:
                pipe.write(_FRAME.pack(len(frame)) + frame)
                pipe.flush()
            except BrokenPipeError:
                return


class _Keep(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__()
        self._into = into

    def emit(self, record: logging.LogRecord) -> None:
        self._into.append(record)


def _portable(record: logging.LogRecord) -> logging.LogRecord:
    """The record with its message made text: its args or exception may not pickle."""
    record.msg = record.getMessage()
    record.args = None
    if record.exc_info:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None
    return record


def _portable_error(e: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else its traceback as text."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return SideRunError("".join(traceback.format_exception(e)))
    return e


def _frames(pipe: BinaryIO) -> Iterator[Any]:
    while True:
        head = pipe.read(_FRAME.size)
        if len(head) < _FRAME.size:
            return
        body = pipe.read(_FRAME.unpack(head)[0])
        try:
            yield pickle.loads(body)
        except Exception:
            return


def _how_it_ended(status: int | None) -> str:
    if status is None or status < 0:
        return "how is not known"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
