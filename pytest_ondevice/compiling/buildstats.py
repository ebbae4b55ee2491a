"""What a build did, counted by object: the figures of the build summary, merged across xdist workers."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

STAT_KINDS = ("compiled", "reused", "linked", "link_reused")
KEY_CHARS = 16  # of a cache key, to tell objects apart in the figures


@dataclass
class BuildStats:
    """What the build did, object by object: each counted once however often it was asked
    for (by several binaries, or by several xdist workers, whose keys merge() unites); one
    compiled anywhere is not also counted as reused."""

    keys: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in STAT_KINDS})
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str, key: str) -> None:
        with self._lock:
            self.keys[name].add(key[:KEY_CHARS])

    def merge(self, keys: dict[str, list[str]]) -> None:
        with self._lock:
            for name in STAT_KINDS:
                self.keys[name].update(keys.get(name, ()))

    def exported(self) -> dict[str, list[str]]:
        with self._lock:
            return {name: sorted(found) for name, found in self.keys.items()}

    @property
    def compiled(self) -> int:
        return len(self.keys["compiled"])

    @property
    def reused(self) -> int:
        return len(self.keys["reused"] - self.keys["compiled"])

    @property
    def linked(self) -> int:
        return len(self.keys["linked"])

    @property
    def link_reused(self) -> int:
        return len(self.keys["link_reused"] - self.keys["linked"])

    def summary(self, damaged: int = 0, uncached: int = 0, untrusted: int = 0) -> str:
        text = f"{self.compiled} compiled, {self.reused} reused; {self.linked} linked, {self.link_reused} reused"
        if damaged:
            text += f"; {damaged} damaged cache {'entry' if damaged == 1 else 'entries'} rebuilt"
        if untrusted:
            text += (
                f"; {untrusted} cache {'entry' if untrusted == 1 else 'entries'} another account could have "
                "written not used (rebuilt)"
            )
        if uncached:
            text += f"; {uncached} not cached (an input changed while it was built)"
        return text
