"""gcov's counts sent over a bare-metal board's output (boards/runtime/common/coverage.c):
stamped lines decoded back into .gcda files, each checked against the length and CRC-32
the device computed, and bounded in memory like every other part of a run's output.

    gcda NAME            a file begins
    gcdata BASE64        up to 180 of its bytes
    gcda-end BYTES CRC   it ends: its length and CRC-32 (hex)
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib

MAX_FILE_BYTES = 16 << 20  # one object's counts: TFLM's largest is ~60 KiB
MAX_RUN_BYTES = 256 << 20  # every file of one run together
MAX_FILES = 20_000
MAX_PROBLEMS = 20
_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,240}\.gcda")
_END = re.compile(r"(\d{1,12}) ([0-9a-f]{8})")
VERBS = ("gcda", "gcdata", "gcda-end")


class GcdaReceiver:
    """Files arrive one at a time; a file cut short, damaged or over its bounds is dropped
    and named in problems, never handed on as counts."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.problems: list[str] = []
        self.bytes = 0  # of every file kept
        self._name: str | None = None
        self._data = bytearray()
        self._bad = ""  # why the open file will be dropped

    def line(self, verb: str, body: str) -> None:
        body = body.strip()
        if verb == "gcda":
            self._begin(body)
        elif verb == "gcdata":
            self._more(body)
        elif verb == "gcda-end":
            self._end(body)

    def close(self) -> None:
        """The output ended: a file still open never arrived whole."""
        if self._name is not None:
            self._problem(f"{self._name}: the output ended before the file did")
            self._name = None

    def _begin(self, name: str) -> None:
        self.close()
        self._name, self._data, self._bad = name, bytearray(), ""
        if not _NAME.fullmatch(name):
            self._bad = "not a .gcda file's name"
        elif len(self.files) >= MAX_FILES:
            self._bad = f"more than {MAX_FILES} files in one run"

    def _more(self, text: str) -> None:
        if self._name is None or self._bad:
            return
        try:
            chunk = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            self._bad = "a line of it is not base64"
            return
        if len(self._data) + len(chunk) > MAX_FILE_BYTES or self.bytes + len(self._data) + len(chunk) > MAX_RUN_BYTES:
            self._bad = f"over {MAX_FILE_BYTES >> 20} MiB (or the run's {MAX_RUN_BYTES >> 20} MiB)"
            self._data = bytearray()
            return
        self._data += chunk

    def _end(self, body: str) -> None:
        name, self._name = self._name, None
        if name is None:
            return
        m = _END.fullmatch(body)
        if self._bad:
            self._problem(f"{name}: {self._bad}")
        elif m is None:
            self._problem(f"{name}: its closing line is malformed")
        elif int(m.group(1)) != len(self._data) or zlib.crc32(self._data) != int(m.group(2), 16):
            self._problem(
                f"{name}: damaged on the way ({len(self._data)} bytes arrived, CRC-32 {zlib.crc32(self._data):08x}; "
                f"the device sent {m.group(1)}, {m.group(2)})"
            )
        else:
            self.bytes += len(self._data) - len(self.files.get(name, b""))
            self.files[name] = bytes(self._data)
        self._data = bytearray()

    def _problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
