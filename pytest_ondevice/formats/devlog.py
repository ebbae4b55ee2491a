"""Where a device's output goes: the parser, a log file, and optionally the terminal.

The log of every (board, binary) run is kept on disk (a failure report shows an
excerpt and the path); live output is prefixed with the board name so that
several devices can share one terminal. A flooding test must not fill the disk:
the file keeps the head and the tail of the output up to `max_bytes` (ini
`ondevice_log_max`) and says, where the cut is, how much was left out.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from .lines import LineSplitter
from .verdicts import RunEnd

DEFAULT_LOG_MAX = 8 << 20  # bytes per (board, binary) log file


class DeviceLog:
    def __init__(
        self,
        path: Path,
        board: str,
        on_line: Callable[[str], None],
        live: Callable[[str], None] | None = None,
        max_bytes: int | None = DEFAULT_LOG_MAX,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._prefix = f"[{board}] "
        self._on_line = on_line
        self._live = live
        self._splitter = LineSplitter()
        self._max = max_bytes or DEFAULT_LOG_MAX
        self._head_left = self._max // 2  # bytes the head may still take; then only the tail grows
        self._tail: deque[str] = deque()
        self._tail_bytes = 0
        self.cut_lines = 0
        self.cut_bytes = 0

    def feed(self, data: bytes) -> None:
        for line in self._splitter.feed(data):
            self.line(line)

    def line(self, line: str) -> None:
        """One whole line (a caller that splits several streams itself gives them here)."""
        self._keep(line + "\n")
        self._on_line(line)
        if self._live is not None:
            self._live(self._prefix + line)

    def _keep(self, text: str) -> None:
        size = len(text.encode("utf-8", errors="replace"))
        if not self._tail and size <= self._head_left:
            self._file.write(text)
            self._head_left -= size
            return
        self._head_left = 0
        self._tail.append(text)
        self._tail_bytes += size
        while self._tail_bytes > self._max - self._max // 2 and len(self._tail) > 1:
            dropped = len(self._tail.popleft().encode("utf-8", errors="replace"))
            self._tail_bytes -= dropped
            self.cut_lines += 1
            self.cut_bytes += dropped

    def close(self, end: RunEnd | None = None) -> None:
        for line in self._splitter.close():
            self.line(line)
        if self.cut_lines:
            self._file.write(
                f"# pytest-ondevice: {self.cut_lines} lines ({self.cut_bytes} bytes) cut here: the log keeps "
                f"the first and the last {self._max // 2} bytes of the output (ondevice_log_max)\n"
            )
        self._file.writelines(self._tail)
        self._tail.clear()
        if end is not None:
            self._file.write(f"# {describe_end(end)}\n")
        self._file.close()


def describe_end(end: RunEnd) -> str:
    how = end.abnormal() or (f"exited with code {end.exit_code}" if end.exit_code is not None else "ended")
    return f"pytest-ondevice: the binary {how} after {end.duration:.2f}s"


# -- the logs of attempts cut short and run again (run/life.py) ------------------------------
def attempt_log(log_path: Path, attempt: int) -> Path:
    return log_path.with_name(f"{log_path.name.removesuffix('.log')}.attempt{attempt}.log")


def keep_attempt_log(log_path: Path, attempt: int) -> Path | None:
    """An attempt's log, kept under its own name before the next attempt writes the log."""
    kept = attempt_log(log_path, attempt)
    try:
        os.replace(log_path, kept)
    except OSError:
        return None
    return kept


def remove_attempt_logs(log_path: Path) -> None:
    """Another session's attempt logs of this binary would be read as this one's. Attempts
    are numbered from 1 with no gap, so the first one missing ends the search: one failed
    unlink per binary, where listing the directory for each binary grew with its size."""
    attempt = 1
    while True:
        try:
            attempt_log(log_path, attempt).unlink()
        except OSError:
            return
        attempt += 1
