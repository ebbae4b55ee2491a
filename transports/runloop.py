"""The one loop that watches a program run, whatever carries its output.

Every console (local pipes, SSH exec, adb shell) has the same duties: stream output
as it arrives, end the program at its deadline or when the session stops, wait for
the real end after the output closes (a program may close stdout and go on working),
and not wait forever for a grandchild that holds the output open after the program
exited. A console supplies a `Stream`; this module does the rest once.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .contract import InfrastructureError, OnBytes, RunEnd

# After the program exits, children that kept the output open get this long.
LINGER_SECONDS = 1.0
POLL_SECONDS = 0.1


class Stream(Protocol):
    def read(self, wait: float) -> bytes | None:
        """Output that arrived within `wait` seconds; None: none yet; b"": the output closed."""

    def poll(self) -> RunEnd | None:
        """How the program ended, once it has; raise ConnectionLost if the link went."""

    def wait(self, seconds: float) -> None:
        """Sleep until the program may have ended (after the output closed)."""

    def kill(self) -> None:
        """End the program and everything it started."""


class Interactive(Stream, Protocol):
    """A program a test talks to (a `device.start()` process, a console): a Stream whose
    input can be written, with its stderr kept apart where the link carries it apart."""

    def write(self, data: bytes) -> None:
        """Send to the program's input; InfrastructureError when the link is gone."""

    def close_input(self) -> None:
        """End of input (the program reads EOF)."""

    def errors(self) -> bytes:
        """Its stderr so far (b"" where stderr comes merged with the output)."""

    def close(self) -> None:
        """End it (if it still runs) and release the link."""


def drive(
    stream: Stream,
    timeout: float,
    on_bytes: OnBytes,
    stop: threading.Event | None = None,
    kill: Callable[[], None] | None = None,
) -> RunEnd:
    """Run `stream` to its end, the deadline or the session's stop; output goes to on_bytes.

    kill: how to end the program, when not stream.kill (a remote process group)."""
    kill = kill or stream.kill
    start = time.monotonic()
    deadline = start + timeout
    eof = False
    ended: RunEnd | None = None
    ended_at = 0.0
    flowing = False  # the last read brought output
    while True:
        if stop is not None and stop.is_set():  # the session is ending: leave nothing behind
            kill()
            raise InfrastructureError("run stopped: the session ended")
        now = time.monotonic()
        # while output flows the program is asked how it is only every POLL_SECONDS: each
        # question is a system call, and a test printing line by line would ask once a line
        if ended is None and (not flowing or now - ended_at >= POLL_SECONDS):
            ended = stream.poll()
            ended_at = now
        if ended is not None and (eof or now - ended_at > LINGER_SECONDS):
            if not eof:
                kill()  # a grandchild holds the output open: it goes with the program
            break
        if ended is None and now >= deadline:
            kill()
            ended = RunEnd(timed_out=timeout)
            break
        wait = min(POLL_SECONDS, max(0.0, deadline - now))
        if eof:
            stream.wait(min(wait, 0.05))
            continue
        data = stream.read(wait)
        flowing = bool(data)
        if data:
            on_bytes(data)
        elif data == b"":
            eof = True
    ended.duration = time.monotonic() - start
    return ended


class ExitLine:
    """Finds the runtime's `#ondevice exit N` line in a console with no exit status
    (bare metal over semihosting, a UART, Renode's terminal), across chunk borders."""

    PATTERN = re.compile(rb"#ondevice exit (-?\d+)\r?\n")

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> int | None:
        """The exit status once its whole line has arrived."""
        self._tail = (self._tail + data)[-256:]
        match = self.PATTERN.search(self._tail)
        return int(match.group(1)) if match else None
