"""What an earlier build made, found again in the store, and what a new one makes, kept there.

A compile or link is stored under the key of all it was made from: the toolchain's
identity, the command line with the project's and our headers' locations taken out, and
the content of every file the compiler or linker read, found after the fact from their
dependency output (ccache's manifests), plus the places where a header or library would
have been found had it existed (so a new one that shadows the old rebuilds). Files in the
toolchain's own directories are covered by its identity. What is made from known content
alone (a linker script, an archive of stored objects) is stored under the key of that.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import inputs
from .errors import EntryLost
from .store import Entry, Store, checkpoint, key_of

# a file changed this close to a compile's start may have been read half old, half new:
# timestamps come from a coarse kernel clock (a few ms), so allow for it
TOO_NEW_NS = 20_000_000


class Reuse:
    def __init__(self, store: Store, names: inputs.PathNames) -> None:
        """names: how a manifest spells a file's path (the project's and our headers'
        locations as placeholders), so that another checkout finds the same entries."""
        self.store = store
        self.names = names
        self._listings = inputs.Listings()
        # Look-ups in the store take turns. Each is dozens of short system calls, and the
        # interpreter lock changes hands at each one when several threads look at once: four
        # threads checking 100 warm binaries made 52,000 futex calls, each check 2.5 times
        # the CPU it takes alone.
        self._looking = threading.Lock()

    def cached(
        self,
        key: str,
        name: str,
        build: Callable[[Path], list[str]],
        keep: Callable[[list[str]], tuple[list[str], set[str]]],
    ) -> tuple[Entry, bool]:
        """The entry for key's inputs as they are now, and whether it was reused.

        A manifest under key lists the input sets seen before, each naming its result;
        a set still holds when every file read has the same digest and every place that
        would have shadowed one is still empty."""
        with self._looking:  # most look-ups find their entry: no lock file, one thread at a time
            found = self._reuse(key, count=False)
        if found is not None:
            return found, True
        with self.store.lock(key):
            found = self._reuse(key)  # built meanwhile by another process?
            if found is not None:
                return found, True
            staged = self.store.staging()
            started = time.time_ns()
            deps = build(staged / name)
            checkpoint("artifact-built")
            kept, candidates = keep(deps)
            record = self._record(kept, candidates, set(deps), started)
            if record is None:
                return self.store.keep_private(staged, name), False
            record["key"] = key_of(key, record["deps"], record["misses"])
            entry = self.store.commit(staged, name, record["key"])
            self.store.record(key, record)
            return entry, False

    def stored(self, key: str, name: str, make: Callable[[Path], object]) -> Path:
        """The cache's entry for key, made into `name` by whoever gets there first."""
        with self.store.lock(key):
            entry = self.store.get(key)
            if entry is None:
                staged = self.store.staging()
                make(staged / name)
                entry = self.store.commit(staged, name, key)
        return entry.path

    def input_digest(self, path: Path) -> str:
        """An input's digest; one of ours that vanished from the cache is built again."""
        try:
            return self.store.digest(path)
        except FileNotFoundError:
            if inputs.under(str(path), [str(self.store.base)]):
                raise EntryLost(path) from None
            raise

    def check_inputs(self, paths: list[Path]) -> None:
        """After a failed archive or link: an input of ours gone meanwhile is the cause."""
        for path in paths:
            if inputs.under(str(path), [str(self.store.base)]) and not os.path.lexists(path):
                raise EntryLost(path)

    def _reuse(self, key: str, count: bool = True) -> Entry | None:
        """The entry a manifest under key names for the inputs as they are now, verified.
        A record names its result by the key of its inputs: a manifest edited to name another
        entry (one built from other sources) is never followed."""
        result = self.store.lookup(
            key, lambda r: r["key"] == key_of(key, r["deps"], r["misses"]) and self._holds(r), count
        )
        return self.store.get(result) if result is not None else None

    def _record(self, deps: list[str], candidates: set[str], read: set[str], started: int) -> dict | None:
        """What a manifest keeps of one build, or None if an input changed while it ran."""
        digests = {}
        try:
            for path in deps:
                st = os.stat(path)
                if max(st.st_mtime_ns, st.st_ctime_ns) >= started - TOO_NEW_NS:
                    return None
                digests[self.names.name(path)] = self.store.digest(Path(path))
        except OSError:
            return None  # read, then removed: nothing to vouch for
        misses: dict[str, list[str]] = {}  # by directory: checked a listing at a time
        for path in sorted(candidates - read):
            try:
                st = os.lstat(path)
            except OSError:
                parent, name = os.path.split(path)
                misses.setdefault(self.names.name(parent), []).append(name)
                continue
            if max(st.st_mtime_ns, st.st_ctime_ns) >= started - TOO_NEW_NS:
                return None  # appeared while building: the build may or may not have seen it
        return {"deps": digests, "misses": misses}

    def _holds(self, record: dict) -> bool:
        for name, digest in record["deps"].items():
            try:
                if self.store.digest(Path(self.names.path(name))) != digest:
                    return False
            except OSError:
                return False
        return not any(
            self._listings.any_exists(self.names.path(parent), names) for parent, names in record["misses"].items()
        )


def depfile_inputs(path: Path) -> list[str]:
    """The files a compiler or linker says it read (its dependency file); none if it wrote none."""
    try:
        return inputs.parse_depfile(path.read_text(errors="replace"))
    except OSError:
        return []
