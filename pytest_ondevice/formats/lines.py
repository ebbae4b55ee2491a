"""Turn a device's raw byte stream into text lines, with bounded memory.

Devices send chunks split anywhere, `\\r\\n` or `\\n`, stray NULs and bytes that
are not UTF-8; a runaway program may print megabytes without a newline. Every
consumer (parser, log file, live log) sees the same clean lines.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

MAX_LINE_BYTES = 4096


class LineSplitter:
    """Feed bytes, get complete lines; a line longer than max_line is cut into pieces."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_line

    def feed(self, data: bytes) -> Iterator[str]:
        self._buf += data
        buf = self._buf
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            yield from self._pieces(bytes(buf[start:nl]))
            start = nl + 1
        while len(buf) - start > self._max:
            yield _decode(buf[start : start + self._max])
            start += self._max
        del buf[:start]

    def close(self) -> Iterator[str]:
        """The unterminated tail, if any: a program may die mid-line."""
        if self._buf:
            tail = bytes(self._buf)
            self._buf.clear()
            yield from self._pieces(tail)

    def _pieces(self, data: bytes) -> Iterator[str]:
        """One line, cut into pieces of at most max_line bytes (an empty line is one piece)."""
        for i in range(0, len(data) or 1, self._max):
            yield _decode(data[i : i + self._max])


def _decode(raw: bytes | bytearray) -> str:
    return bytes(raw).decode("utf-8", errors="replace").strip("\r").replace("\x00", "")


class BoundedLines:
    """Keeps the first `head` and the last `tail` lines, counting what was dropped."""

    def __init__(self, head: int = 40, tail: int = 160) -> None:
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=tail)
        self._head_max = head
        self.dropped = 0

    def append(self, line: str) -> None:
        if len(self.head) < self._head_max:
            self.head.append(line)
            return
        if len(self.tail) == self.tail.maxlen:
            self.dropped += 1
        self.tail.append(line)

    def absorb(self, other: BoundedLines) -> None:
        """Another buffer's lines after these, its cut counted as a cut (not kept as a line
        saying how much it cut, which would count wrong once cut again)."""
        for line in other.head:
            self.append(line)
        self.dropped += other.dropped
        for line in other.tail:
            self.append(line)

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def text(self) -> str:
        lines = list(self.head)
        if self.dropped:
            lines.append(f"... {self.dropped} lines not shown (see the full log file) ...")
        lines.extend(self.tail)
        return "\n".join(lines)
