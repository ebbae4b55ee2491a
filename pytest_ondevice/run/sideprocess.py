"""A local board's binaries run in a forked process of their own while pytest reports.

A binary's path past its build (the recheck, the run, the log, the parse) is 1.3 to 1.6
ms of Python a binary. In pytest's process it adds to every case's own cost; on a thread
it only trades the interpreter lock back and forth (measured: futex storms, slower than
not running ahead at all). A forked child has an interpreter of its own, on another core,
and hands each result back through a pipe, in item order.

- It runs at most AHEAD binaries beyond the one pytest has reached: a skip decided at run
  time costs no more, and the results waiting to be read stay few. (The plugin starts it
  neither under -x, --maxfail or --stepwise nor when a conftest hooks around each test:
  see ways.py.)
- Forked only while this process has one thread: a fork copies the calling thread alone,
  so a lock another thread held would stay held in the child for good. So it is forked
  before the builds, and checks and builds them itself (`prepare`): pytest waits for that
  only while a compiler runs, never for the check of a warm cache.
- The child never returns into pytest: it runs what it was given, then `os._exit`s.
- Its binaries carry a tag in their environment, so that one it was running when it died
  is found and killed; the binary is then run again in pytest's process, as a rerun.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import logging.handlers
import os
import pickle
import secrets
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..transports._proc import kill_tagged
from ..transports.contract import signal_name
from .messages import Done, Ended, Say, Started, Told
from .spec import BinarySpec

RUN_HERE = object()  # what outcome() gives for a binary pytest's process must run itself
_PENDING = object()
AHEAD = 16  # binaries the child may run beyond the one pytest has reached
TAG = "ONDEVICE_SIDE_RUN"  # in the environment of every binary the child starts
_FRAME = struct.Struct("!I")


class Child(Protocol):
    """What the forked process does: the session's side of it (ways.py)."""

    def after_fork(self) -> None:
        """Pools and locks of its own, first thing in the child."""

    def prepare(self, tell: Callable[[Told], None]) -> None:
        """Start the builds; tell pytest's process how they go (from any thread)."""

    def run(self, spec: BinarySpec) -> Any:
        """One binary's result."""

    def counters(self) -> tuple[int, ...]:
        """What the summary counts: each run's change is sent with its result."""

    def stop(self) -> None:
        """pytest's process closed its end: the session is over, or pytest died."""

    def handover(self) -> Any:
        """The last word: what pytest's process takes over (built keys, cache entries held)."""


class Parent(Protocol):
    """What pytest's process does with what the child sends, as it arrives."""

    def counted(self, delta: tuple[int, ...]) -> None: ...

    def ended(self, handover: Any) -> None: ...

    def said(self, line: str) -> None: ...


class SideRunError(Exception):
    """A run in the side process raised what could not be handed back as itself."""


class SideRuns:
    """The parent's end: each binary's result as the child sends it, read by pytest's own
    thread when an item asks (a reader thread would only hand the interpreter lock back
    and forth: measured, items waited 0.1-0.3 ms a binary for it to get a turn)."""

    def __init__(self, pid: int, keys: Sequence[object], results: int, commands: int, tag: str, parent: Parent) -> None:
        self.pid = pid
        self._slots: list[Any] = [_PENDING] * len(keys)  # a result, _Raised, or RUN_HERE
        self._records: list[list[logging.LogRecord]] = [[] for _ in keys]
        self._index = {key: i for i, key in enumerate(keys)}
        self._parent = parent
        self._results = results
        self._buffer = bytearray()
        self._eof = False
        self._commands = commands
        self._tag = tag
        self._environment = _environment()
        self._reached = -1
        self._read_once = [False] * len(keys)
        self._started = -1  # the binary the child last started
        self._lost: int | None = None  # the one it was running when it ended, if any
        self._cut: int | None = None  # from here on, pytest's process runs them
        self._why: str | None = None  # why (for the summary)
        self._stopped = False
        self._status: int | None = None
        self._prepared: list[Told] = []  # what prepare() told, not yet read
        self._lock = threading.RLock()

    def wait_prepared(self, until: Callable[[Told], bool], done: Callable[[], bool] = lambda: False) -> None:
        """Read what the child's prepare() tells until until(it) is true, or done() after
        anything it sent, or the child ends."""
        while True:
            while self._prepared:
                if until(self._prepared.pop(0)):
                    return
            if self._eof or done():
                return
            self._pump(block=True)

    def holds(self, key: object) -> bool:
        return key in self._index

    def reach(self, key: object) -> bool:
        """pytest has come to this binary's items: the child may run up to AHEAD beyond it.
        True the first time."""
        index = self._index.get(key, -1)
        if index <= self._reached:
            return False
        self._reached = index
        with contextlib.suppress(OSError):
            os.write(self._commands, _FRAME.pack(index))
        return True

    def told(self) -> list[Told]:
        """What prepare() has told since last asked, without waiting."""
        self._pump(block=False)
        told, self._prepared = self._prepared, []
        return told

    def ready(self, key: object) -> bool:
        """Whether the binary's result is here: outcome() will neither wait nor say RUN_HERE."""
        index = self._index[key]
        if self._slots[index] is _PENDING:
            self._pump(block=False)
        slot = self._slots[index]
        return (self._cut is None or index < self._cut) and slot is not _PENDING and slot is not RUN_HERE

    def outcome(self, key: object) -> tuple[Any, list[logging.LogRecord]]:
        """The binary's result (raising what its run raised), or RUN_HERE; with the log
        records its run left, the first time it is asked for."""
        self.reach(key)
        index = self._index[key]
        first = not self._read_once[index]
        self._read_once[index] = True
        # a binary here would see os.environ as it is now: one run there saw it as it was
        if first and self._cut is None and _environment() != self._environment:
            self._abandon(index, f"the environment changed ({_changed(self._environment)})")
        if self._cut is not None and index >= self._cut:
            return RUN_HERE, []
        while self._slots[index] is _PENDING:
            self._pump(block=True)
        slot = self._slots[index]
        if isinstance(slot, _Raised):
            raise slot.error
        records = self._records[index] if first else []
        self._records[index] = []
        return slot, records

    @property
    def reason(self) -> str:
        """Why the rest ran in pytest's process (once they do)."""
        return self._why or "it was stopped"

    def lost(self, key: object) -> bool:
        """Whether the child was running this binary when it ended (it runs again here)."""
        return self._lost is not None and self._index.get(key) == self._lost

    def note(self) -> str | None:
        """Why some binaries ran in pytest's own process after all: said, never silent."""
        if self._why is None or self._cut is None or self._cut >= len(self._slots):
            return None
        again = " (the one it was at then ran there, as a rerun)" if self._lost is not None else ""
        return (
            f"the local binaries stopped running beside pytest: {self._why}; from the "
            f"{_ordinal(self._cut + 1)} of {len(self._slots)} on, they ran in pytest's own process{again}"
        )

    def stop(self, grace: float = 5.0) -> None:
        """The session ends (or stops early): the child stops its run (the binary's group is
        killed) and exits; what it sent last (its counts) is read before this returns."""
        if not self._stopped:
            self._stopped = True
            with contextlib.suppress(OSError):
                os.close(self._commands)  # the child's watcher sees the pipe end
        deadline = time.monotonic() + grace
        while not self._eof and (left := deadline - time.monotonic()) > 0:  # read: a full pipe holds it up
            if select.select([self._results], [], [], left)[0]:
                self._pump(block=True)
        if self._wait(max(0.0, deadline - time.monotonic())) is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self._wait(None)
            kill_tagged(f"{TAG}={self._tag}".encode())
        while not self._eof:
            self._pump(block=True)

    def runs_here(self, key: object) -> bool:
        """Whether pytest's process runs this binary: the child stopped before it."""
        return self._cut is not None and self._index.get(key, -1) >= self._cut

    def _abandon(self, index: int, why: str) -> None:
        """Results from index on are not used: the child stops, pytest's process runs them."""
        self._cut, self._why = index, why
        self.stop()

    def _pump(self, block: bool) -> None:
        """Read what the child has sent (waiting for something if block) and file it."""
        with self._lock:
            if self._eof:
                return
            try:
                if not block and not select.select([self._results], [], [], 0)[0]:
                    return
                data = os.read(self._results, 1 << 20)
                if data:
                    self._buffer += data
                    self._file_frames()
                    return
                why = None
            except Exception as e:  # never leave an item waiting for good
                why = f"reading its results failed: {e!r}"
            self._eof = True
            os.close(self._results)
            self._cut_short(why)

    def _file_frames(self) -> None:
        buffer = self._buffer
        start = 0
        while len(buffer) - start >= _FRAME.size:
            size = _FRAME.unpack_from(buffer, start)[0]
            end = start + _FRAME.size + size
            if len(buffer) < end:
                break
            message = pickle.loads(memoryview(buffer)[start + _FRAME.size : end])
            start = end
            match message:
                case Started(index):
                    self._started = index
                case Done(index, outcome, counted, records):
                    self._parent.counted(counted)
                    self._slots[index] = _Raised(outcome) if isinstance(outcome, BaseException) else outcome
                    self._records[index] = records
                case Say(line):  # for the person watching: out now, even while an item waits
                    self._parent.said(line)
                case Ended(handover, counted):
                    self._parent.ended(handover)
                    self._parent.counted(counted)
                case _:  # a build's progress: read by wait_prepared() and told()
                    self._prepared.append(message)
        del buffer[:start]

    def _cut_short(self, why: str | None) -> None:
        """The child's results end here: what it still owed, pytest's process runs."""
        owed = next((i for i, slot in enumerate(self._slots) if slot is _PENDING), None)
        if owed is not None and self._cut is None:
            if why is None and not self._stopped:
                why = f"the process running them ended ({_how_it_ended(self._wait(1.0))})"
            if why is not None:
                self._cut, self._why = owed, why
                if self._started == owed:
                    self._lost = owed
                    kill_tagged(f"{TAG}={self._tag}".encode())  # the binary it left running
                if not self._stopped:
                    self.stop()
        self._slots = [RUN_HERE if slot is _PENDING else slot for slot in self._slots]

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


class _Raised:
    """A run's exception, kept to be raised where the result is read."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def start(specs: Sequence[BinarySpec], child: Child, parent: Parent) -> SideRuns | None:
    """Fork the child that runs specs in order; None when this process has other threads.

    In the child: child.after_fork() first, then child.prepare(tell), whose messages the
    parent reads with wait_prepared() (a Say goes to parent.said() as it arrives, even while
    an item waits for a result); child.run(spec) for each, child.stop() when the parent
    closes its end, child.handover() last, handed to parent.ended(). parent.counted() gets
    what each run changed of child.counters()."""
    if threading.active_count() != 1:
        return None
    tag = secrets.token_hex(8)
    results_r, results_w = os.pipe()
    commands_r, commands_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child: coverage does not follow a fork)
        code = 70
        try:
            gc.freeze()  # pytest's heap, as forked: never walked here (at 100,000 cases, seconds a pass)
            os.close(results_r)
            os.close(commands_w)
            os.environ[TAG] = tag
            child.after_fork()
            _child(specs, child, results_w, commands_r)
            code = 0
        finally:
            os._exit(code)
    os.close(results_w)
    os.close(commands_r)
    return SideRuns(pid, [s.key for s in specs], results_r, commands_w, tag, parent)


def _child(specs: Sequence[BinarySpec], child: Child, results_fd: int, commands_fd: int) -> None:  # pragma: no cover
    # Ctrl-C, a closed terminal's SIGHUP and a CI's SIGTERM to the process group reach it
    # too: the parent decides, and closes the pipe, after which the run here is stopped
    # (its binary's group killed). Handlers, not SIG_IGN, which the binaries would inherit.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    stopping = False
    reached = -1
    changed = threading.Condition()

    def watch() -> None:
        nonlocal stopping, reached
        with contextlib.suppress(OSError), os.fdopen(commands_fd, "rb") as commands:
            while len(head := commands.read(_FRAME.size)) == _FRAME.size:
                with changed:
                    reached = max(reached, _FRAME.unpack(head)[0])
                    changed.notify()
        with changed:
            stopping = True
            changed.notify()
        child.stop()

    threading.Thread(target=watch, daemon=True).start()
    keep = logging.handlers.BufferingHandler(sys.maxsize)  # never flushed: sent with each result
    records = keep.buffer
    logging.root.handlers[:] = [keep]  # the parent's handlers get them through the pipe
    before = child.counters()
    writing = threading.Lock()  # prepare's threads tell the parent too
    with os.fdopen(results_fd, "wb") as pipe:

        def send(message: Any) -> None:
            frame = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
            with writing:
                pipe.write(_FRAME.pack(len(frame)) + frame)
                pipe.flush()

        def tell(message: Told) -> None:
            if stopping:
                return  # the parent reads only the end now
            with contextlib.suppress(OSError, ValueError):  # the parent stopped reading: it stops us too
                send(message)

        child.prepare(tell)

        for index, spec in enumerate(specs):
            with changed:
                changed.wait_for(functools.partial(lambda i: stopping or i <= reached + AHEAD, index))
                if stopping:
                    break
            send(Started(index))
            try:
                outcome: Any = child.run(spec)
            except BaseException as e:  # a bug of ours: the item shows it
                outcome = _portable_error(e)
            now = child.counters()
            delta, before = tuple(a - b for a, b in zip(now, before, strict=True)), now
            kept = [_portable(r) for r in records]
            records.clear()
            try:
                send(Done(index, outcome, delta, kept))
            except BrokenPipeError:
                return
            except Exception as e:  # the result did not pickle (nothing was written)
                error = SideRunError(f"the result of {spec.rel} could not be handed back: {e!r}")
                send(Done(index, error, delta, []))
        with contextlib.suppress(Exception):  # with what was counted since the last result (builds)
            send(Ended(child.handover(), tuple(a - b for a, b in zip(child.counters(), before, strict=True))))


def _portable(record: logging.LogRecord) -> logging.LogRecord:
    """The record with its message made text: its args or exception may not pickle."""
    record.msg = record.getMessage()
    record.args = None
    if record.exc_info:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None
    return record


def _portable_error(e: BaseException) -> BaseException:
    """The exception itself, noting where it was raised, when it survives pickling; else
    its traceback as text."""
    where = "".join(traceback.format_exception(e))
    try:
        e.add_note(f"raised in the process running the local binaries:\n{where}")
        pickle.loads(pickle.dumps(e))
    except Exception:
        return SideRunError(where)
    return e


def _environment() -> dict[str, str]:
    """What a local binary inherits, less what pytest sets around each test itself."""
    env = dict(os.environ)
    env.pop("PYTEST_CURRENT_TEST", None)
    env.pop(TAG, None)
    return env


def _changed(before: dict[str, str]) -> str:
    now = _environment()
    names = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _how_it_ended(status: int | None) -> str:
    if status is None or status < 0:
        return "how is not known"
    if os.WIFSIGNALED(status):
        return f"killed by {signal_name(os.WTERMSIG(status))}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
