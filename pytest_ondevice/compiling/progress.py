"""How far a build has got, for a long build's progress line: objects done, objects to
build (known up front from the plan, else as they are asked for), and the last started."""

from __future__ import annotations

import threading
from collections.abc import Iterable


class BuildProgress:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested: set[tuple] = set()
        self._finished: set[tuple] = set()
        self._planned: set[tuple] = set()  # what the selected binaries will compile, known up front
        self._current = ""

    def planned(self, keys: Iterable[tuple]) -> None:
        """Objects a binary will compile, counted before it starts."""
        with self._lock:
            self._planned.update(keys)

    def requested(self, keys: Iterable[tuple]) -> None:
        """Objects asked for: in the total even when the plan missed them."""
        with self._lock:
            self._requested.update(keys)

    def finished(self, key: tuple) -> None:
        with self._lock:
            self._finished.add(key)

    def started(self, what: str) -> None:
        """The step the progress line names: the last one started."""
        with self._lock:
            self._current = what

    def figures(self) -> tuple[int, int, str]:
        """(objects done, objects to build, the one last started)."""
        with self._lock:
            return len(self._finished), max(len(self._planned), len(self._requested)), self._current
