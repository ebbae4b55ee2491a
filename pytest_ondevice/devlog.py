"""Where a device's output goes: the parser, a log file, and optionally the terminal.

The full log of every (board, binary) run is kept on disk (a failure report
shows an excerpt and the path); live output is prefixed with the board name so
that several devices can share one terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .lines import LineSplitter
from .protocol import RunEnd


class DeviceLog:
    def __init__(
        self,
        path: Path,
        board: str,
        on_line: Callable[[str], None],
        live: Callable[[str], None] | None = None,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._prefix = f"[{board}] "
        self._on_line = on_line
        self._live = live
        self._splitter = LineSplitter()

    def feed(self, data: bytes) -> None:
        for line in self._splitter.feed(data):
            self._line(line)

    def _line(self, line: str) -> None:
        self._file.write(line + "\n")
        self._on_line(line)
        if self._live is not None:
            self._live(self._prefix + line)

    def close(self, end: RunEnd | None = None) -> None:
        for line in self._splitter.close():
            self._line(line)
        if end is not None:
            self._file.write(f"# {describe_end(end)}\n")
        self._file.close()


def describe_end(end: RunEnd) -> str:
    how = end.abnormal() or (f"exited with code {end.exit_code}" if end.exit_code is not None else "ended")
    return f"pytest-ondevice: the binary {how} after {end.duration:.2f}s"
