"""Each step of a session's build made once (an object, a library, a model, pkg-config's
answer), by whoever asks first while the others wait; one whose cache entry has since
vanished is forgotten, so that asking again builds it again."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

from .errors import EntryLost

T = TypeVar("T")


class SessionMemo:
    def __init__(self) -> None:
        self._pending: dict[object, Future] = {}
        self._lock = threading.Lock()

    def once(self, key: object, fn: Callable[[], T]) -> T:
        """Run fn once per key per session; concurrent callers wait for the first."""
        with self._lock:
            fut = self._pending.get(key)
            if fut is None:
                fut = self._pending[key] = Future()
                owner = True
            else:
                owner = False
        if owner:
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)
        return fut.result()

    def forget_vanished(self) -> None:
        """Forget the results whose cache entries are gone: asked again, they are rebuilt."""
        with self._lock:
            gone = [key for key, fut in self._pending.items() if fut.done() and _vanished(fut)]
            for key in gone:
                del self._pending[key]


def _vanished(fut: Future) -> bool:
    """A finished step whose cache entry is gone, or that failed because one went."""
    error = fut.exception()
    if error is not None:
        return isinstance(error, EntryLost)
    result = fut.result()
    return isinstance(result, Path) and not os.path.lexists(result)
