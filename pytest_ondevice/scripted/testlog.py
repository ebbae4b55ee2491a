"""The device log of one scripted test: every stream it opened (the console, each command
run), line by line with the stream's name, in one bounded file, live on the terminal
with -s, and its tail for the report of a failing test."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ..formats.devlog import DeviceLog
from ..formats.lines import LineSplitter

TAIL_LINES = 200  # shown in a failing test's report (the file has the rest)


class TestLog:
    __test__ = False  # not a pytest test class

    def __init__(self, path: Path, prefix: str, live: Callable[[str], None] | None, max_bytes: int | None) -> None:
        self.path = path
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._log = DeviceLog(path, prefix, self._tail.append, live, max_bytes)
        self._lock = threading.Lock()
        self._closed = False

    def stream(self, label: str) -> Callable[[bytes], None]:
        """Where one stream's bytes go: split into lines of their own, each named by label."""
        splitter = LineSplitter()

        def feed(data: bytes) -> None:
            lines = list(splitter.feed(data)) if data else list(splitter.close())
            with self._lock:
                if not self._closed:
                    for line in lines:
                        self._log.line(f"{label}| {line}")

        return feed

    def note(self, text: str) -> None:
        """What the test did (a command started, a firmware flashed), between the output."""
        with self._lock:
            if not self._closed:
                self._log.line(f"# {text}")

    def tail(self) -> str:
        with self._lock:
            return "\n".join(self._tail)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._log.close()
