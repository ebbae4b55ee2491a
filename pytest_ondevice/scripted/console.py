"""A program on the device that a test talks to: pexpect's engine over its output.

pexpect's `SpawnBase` does the matching (`expect`, `expect_exact`, `before`, `after`,
`match`, TIMEOUT and EOF in pattern lists); what it reads comes from a thread that pumps
the transport's stream (local pipes, an SSH channel, an adb shell, QEMU's serial) into a
queue and the test's device log. A failed expect is an AssertionError that shows the
pattern, the timeout and the tail of what arrived; a link lost meanwhile is the
transport's InfrastructureError (an error of the device, never the test's failure).
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pexpect
from pexpect.spawnbase import SpawnBase

from ..transports import InfrastructureError, Interactive, RunEnd

TAIL_SHOWN = 600  # characters of what arrived, in a failed expect's message
READ_WAIT = 0.05


class ExpectTimeout(AssertionError):
    """What the test waited for did not arrive in time."""


class ProgramEnded(AssertionError):
    """The program ended (or its console closed) before what the test waited for arrived."""


class Console(SpawnBase):
    """pexpect's API over one program on the device (see the module's docstring)."""

    # SpawnBase's own, which a spawn's read and send use: private there, so its stubs leave
    # them out (the coders: codecs' incremental ones, or pexpect's pass-through in bytes mode)
    _decoder: Any
    _encoder: Any
    _log: Callable[[str | bytes, str], None]
    _coerce_send_string: Callable[[str | bytes], Any]

    def __init__(
        self,
        process: Interactive,
        what: str,
        on_bytes: Callable[[bytes], None],
        stop: threading.Event,
        timeout: float = 30,
        encoding: str | None = "utf-8",
        linesep: str = "\n",
    ) -> None:
        self.what = what  # "rpi@pi1: ./cli --serve", for messages
        super().__init__(timeout=timeout, maxread=65536, encoding=encoding, codec_errors="replace")
        self.linesep = linesep if encoding else linesep.encode()
        self.delayafterread = None  # the reader blocks on the queue: no polling to slow down
        self.closed = False  # (SpawnBase starts closed: a spawn opens itself)
        self._process = process
        self._on_bytes = on_bytes
        self._stop = stop
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self._pending = self.string_type()
        self._eof = False
        self.end: RunEnd | None = None
        self.lost: InfrastructureError | None = None  # why the link went, if it did
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._pump, name=f"ondevice-console {what}", daemon=True)
        self._reader.start()

    # -- the reader thread -------------------------------------------------------------
    def _pump(self) -> None:
        try:
            while not self._stop.is_set():
                data = self._process.read(READ_WAIT)
                if data:
                    self._on_bytes(data)
                    self._queue.put(data)
                elif data == b"":
                    break
                elif self.end is None:
                    self.end = self._process.poll()  # ended, but a child may still hold the output
                    if self.end is not None:
                        self._drain()
                        break
            if self.end is None:
                self.end = self._wait_end()
        except InfrastructureError as e:
            self.lost = e
        except Exception as e:  # never a silent reader: the next expect says what broke
            self.lost = InfrastructureError(f"{self.what}: reading the output failed: {e!r}")
        finally:
            with contextlib.suppress(Exception):
                self._on_bytes(b"")  # the end of this stream: its last partial line is logged
            self._queue.put(None)
            self._done.set()

    def _drain(self) -> None:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            data = self._process.read(0.02)
            if not data:
                return
            self._on_bytes(data)
            self._queue.put(data)

    def _wait_end(self) -> RunEnd | None:
        """After the output closed: how the program ended (a console with no end: None)."""
        for _ in range(20):
            end = self._process.poll()
            if end is not None:
                return end
            self._process.wait(0.05)
        return None

    # -- what pexpect asks of a spawn ------------------------------------------------------
    def read_nonblocking(self, size: int = 1, timeout: float | None = -1) -> Any:
        if timeout == -1:
            timeout = self.timeout
        if not self._pending and not self._eof:
            try:
                chunk = self._queue.get(timeout=timeout) if timeout is None or timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                raise pexpect.TIMEOUT("no output within the timeout") from None
            if chunk is None:
                self._eof = True
                tail = self._decoder.decode(b"", final=True)
                self._pending += tail
            else:
                self._pending += self._decoder.decode(chunk, final=False)
        if not self._pending and self._eof:
            self.flag_eof = True
            if self.lost is not None:
                raise self.lost
            raise pexpect.EOF("the program's output closed")
        data, self._pending = self._pending[:size], self._pending[size:]
        self._log(data, "read")
        return data

    def send(self, s: str | bytes) -> int:
        data = self._coerce_send_string(s)
        self._log(data, "send")
        raw = self._encoder.encode(data, final=False)
        if self.lost is not None:
            raise self.lost
        self._process.write(raw)
        return len(raw)

    def sendline(self, s: str | bytes = "") -> int:
        return self.send(self._coerce_send_string(s) + self.linesep)

    def write(self, s: str | bytes) -> None:
        self.send(s)

    def sendeof(self) -> None:
        """End of input: the program reads EOF."""
        self._process.close_input()

    # -- expect, with messages a person can act on -----------------------------------------
    # (a test's expects block: pexpect's async_=True, typed in its overloads, is not offered)
    def expect(  # type: ignore[override]
        self, pattern: Any, timeout: float | None = -1, searchwindowsize: int | None = -1, **kw: Any
    ) -> int:
        __tracebackhide__ = True
        return self._explained(
            lambda: super(Console, self).expect(pattern, timeout, searchwindowsize, **kw), pattern, timeout, ""
        )

    def expect_exact(  # type: ignore[override]
        self, pattern_list: Any, timeout: float | None = -1, searchwindowsize: int | None = -1, **kw: Any
    ) -> int:
        __tracebackhide__ = True
        return self._explained(
            lambda: super(Console, self).expect_exact(pattern_list, timeout, searchwindowsize, **kw),
            pattern_list,
            timeout,
            "exact ",
        )

    def _explained(self, call: Callable[[], int], pattern: Any, timeout: float | None, kind: str) -> int:
        __tracebackhide__ = True
        try:
            return call()
        except pexpect.TIMEOUT:
            seconds = self.timeout if timeout == -1 else timeout
            raise ExpectTimeout(
                f"{self.what}: expected {kind}{_shown(pattern)} within {seconds:g}s; {self._arrived()}"
            ) from None
        except pexpect.EOF:
            raise ProgramEnded(
                f"{self.what}: {self._how_ended()} before {kind}{_shown(pattern)} arrived; {self._arrived()}"
            ) from None

    def _arrived(self) -> str:
        text = self.before if isinstance(self.before, (str, bytes)) else ""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not text.strip():  # a line end after the last match is not news
            return "nothing arrived since the last match"
        tail = text[-TAIL_SHOWN:]
        cut = f"the last {len(tail)} of {len(text)} characters" if len(text) > len(tail) else "what arrived"
        return f"{cut} since the last match:\n{tail}"

    def _how_ended(self) -> str:
        self._done.wait(1.0)
        end = self.end
        if end is None:
            return "the console closed"
        return "the program " + (end.abnormal() or f"exited with code {end.exit_code}")

    # -- the program -------------------------------------------------------------------
    def isalive(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the program to end; its exit status (-N for a signal, as subprocess gives)."""
        if not self._done.wait(timeout):
            raise ExpectTimeout(f"{self.what}: still running after {timeout:g}s")
        if self.lost is not None:
            raise self.lost
        return returncode(self.end)

    @property
    def returncode(self) -> int | None:
        return returncode(self.end) if self._done.is_set() else None

    def close(self, force: bool = True) -> None:
        """End the program (if it runs) and release the link; the reader stops."""
        with contextlib.suppress(Exception):
            self._process.close()
        self._done.wait(2.0)
        self.closed = True

    def terminate(self, force: bool = False) -> bool:
        self.close()
        return True

    def __repr__(self) -> str:
        return f"<Console {self.what}>"


def returncode(end: RunEnd | None) -> int | None:
    """subprocess's convention: the exit code, or minus the signal's number."""
    if end is None:
        return None
    if end.signal:
        with contextlib.suppress(KeyError):
            return -signal.Signals[end.signal].value
        return -1
    return end.exit_code


def _shown(pattern: Any) -> str:
    if isinstance(pattern, list):
        return "one of " + ", ".join(_shown(p) for p in pattern)
    if pattern is pexpect.EOF:
        return "EOF"
    if pattern is pexpect.TIMEOUT:
        return "TIMEOUT"
    raw = getattr(pattern, "pattern", pattern)
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    return repr(raw)
