"""A content-addressed artifact store, shared by sessions, checkouts and CI runners.

ccache's and Bazel's lesson, made stricter: an artifact lives in a directory named by
the key of everything it was made from; it is written whole in a private staging dir
and renamed into place in one step, so an artifact can never sit beside another
build's key, two configurations live side by side, and concurrent runs never touch
each other's files. Its digest is stored with it and checked on every reuse.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

LAYOUT = "v2"  # bump when the meaning of a key or a manifest changes
MANIFEST_RESULTS = 16  # input sets remembered per manifest (ccache keeps a few too)
DEFAULT_MAX_SIZE = 5 << 30
_KILL_ENV = "ONDEVICE_TEST_KILL_AT"  # tests: die with SIGKILL at this write point
# every point where a build writes something a later run reads, in the order they happen
WRITE_POINTS = ("artifact-built", "meta-written", "entry-renamed", "manifest-written", "link-published")


class CacheError(Exception):
    """The cache or build dir is unusable: an infrastructure error naming the path and the fix."""


def default_dir() -> Path:
    """Per user, like ccache: shared by every checkout of this user on this machine."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-ondevice"


def unusable(path: Path, e: OSError, what: str = "cache dir") -> CacheError:
    """One message for every way a directory of ours cannot be written."""
    cause = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        fix = "free some space, or point ondevice_cache_dir / ondevice_build_dir elsewhere"
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "make it writable for this user, or set ondevice_cache_dir / ondevice_build_dir to a directory that is"
    else:
        fix = "check the directory, or set ondevice_cache_dir / ondevice_build_dir to another one"
    return CacheError(f"the {what} {path} cannot be used: {cause} ({e.filename or path}); {fix}")


def checkpoint(name: str) -> None:
    """A write point; the crash-safety tests kill the process here."""
    if os.environ.get(_KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Entry:
    path: Path  # the artifact, never written again once in place
    sha256: str


@dataclass
class StoreStats:
    hits: int = 0
    misses: int = 0
    damaged: int = 0  # entries whose content no longer matched their digest: rebuilt
    uncached: int = 0  # built while an input changed: used once, never stored
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = root / LAYOUT
        self.stats = StoreStats()
        self._staging: list[Path] = []
        self._used: set[str] = set()
        self._lock = threading.Lock()
        self._digests: dict[tuple, str] = {}
        self._tag = f"{socket.gethostname()}-{os.getpid()}-"
        try:
            for sub in ("entries", "manifests", "locks", "tmp"):
                (self.base / sub).mkdir(parents=True, exist_ok=True)
            probe = self.base / "tmp" / f".probe-{self._tag}{threading.get_ident()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise unusable(root, e) from None
        self.sweep()

    # -- entries --------------------------------------------------------------
    def get(self, key: str) -> Entry | None:
        """The verified artifact stored under key, or None (a damaged one is removed)."""
        where = self._entry_dir(key)
        try:
            meta = json.loads((where / "meta.json").read_text())
            path = where / meta["name"]
            digest = self.digest(path)
        except (OSError, ValueError, KeyError, TypeError):
            if where.exists():  # an entry we cannot read is as good as damaged
                self._discard(where)
                self.stats.count("damaged")
            return None
        if digest != meta.get("sha256"):
            self._discard(where)
            self.stats.count("damaged")
            return None
        with contextlib.suppress(OSError):
            os.utime(where)  # least recently used goes first when trimming
        with self._lock:
            self._used.add(key)
        self.stats.count("hits")
        return Entry(path, digest)

    def staging(self) -> Path:
        """A private directory to build in; committed whole or swept."""
        try:
            path = Path(self.base / "tmp" / f"{self._tag}{os.urandom(6).hex()}")
            path.mkdir()
        except OSError as e:
            raise unusable(self.root, e) from None
        with self._lock:
            self._staging.append(path)
        return path

    def commit(self, staged: Path, name: str, key: str) -> Entry:
        """Move a staged artifact into place under key in one rename; the digest goes with it."""
        artifact = staged / name
        self.stats.count("misses")
        try:
            digest = self.digest(artifact)
            _write_atomic(staged / "meta.json", json.dumps({"name": name, "sha256": digest}))
            checkpoint("meta-written")
            for p in (artifact, staged / "meta.json"):
                os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) & ~0o222)  # an entry is never written again
            where = self._entry_dir(key)
            where.parent.mkdir(exist_ok=True)
            try:
                os.rename(staged, where)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                existing = self.get(key)  # someone stored the same inputs first
                if existing is not None:
                    self._forget_staging(staged, remove=True)
                    return existing
                os.rename(staged, where)  # theirs was damaged and is gone now
            checkpoint("entry-renamed")
        except OSError as e:
            raise unusable(self.root, e) from None
        self._forget_staging(staged)
        with self._lock:
            self._used.add(key)
        return Entry(where / name, digest)

    def keep_private(self, staged: Path, name: str) -> Entry:
        """An artifact built from inputs that changed meanwhile: used this session, never stored."""
        self.stats.count("misses")
        self.stats.count("uncached")
        return Entry(staged / name, self.digest(staged / name))

    # -- manifests: input sets found after the fact (headers, linker inputs) --
    def lookup(self, key: str, still_true: Callable[[dict], bool]) -> str | None:
        """The result key of the newest recorded input set that still holds."""
        try:
            results = json.loads(self._manifest(key).read_text())["results"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        for record in reversed(results):
            try:
                if still_true(record):
                    return record["key"]
            except (KeyError, TypeError, ValueError):
                continue
        return None

    def record(self, key: str, record: dict) -> None:
        path = self._manifest(key)
        try:
            path.parent.mkdir(exist_ok=True)
            with self.lock(f"manifest-{key}"):
                try:
                    results = json.loads(path.read_text())["results"]
                except (OSError, ValueError, KeyError, TypeError):
                    results = []
                results = [r for r in results if r.get("key") != record["key"]][-(MANIFEST_RESULTS - 1) :]
                _write_atomic(path, json.dumps({"results": [*results, record]}), staging=self.base / "tmp")
                checkpoint("manifest-written")
        except OSError as e:
            raise unusable(self.root, e) from None

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """One builder per key at a time, across threads, processes and xdist workers."""
        path = self.base / "locks" / key[:2] / key
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise unusable(self.root, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- digests ----------------------------------------------------------------
    def digest(self, path: Path) -> str:
        """sha256 of a file, computed once per content this session (keyed by inode and times)."""
        st = os.stat(path)
        memo = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        value = self._digests.get(memo)
        if value is None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            value = self._digests[memo] = h.hexdigest()
        return value

    # -- housekeeping ---------------------------------------------------------
    def sweep(self) -> int:
        """Remove what interrupted sessions left: staging dirs of dead processes on this host,
        and anyone's older than a day (a shared cache on another machine's disk)."""
        removed = 0
        host = socket.gethostname()
        for path in _listdir(self.base / "tmp"):
            owner, _, _rest = path.name.rpartition("-")  # host-pid-random
            owner_host, _, pid = owner.rpartition("-")
            stale = False
            if owner_host == host and pid.isdigit():
                stale = not _alive(int(pid))
            else:
                with contextlib.suppress(OSError):
                    stale = time.time() - path.lstat().st_mtime > 86400
            if stale and not path.name.startswith(self._tag):
                _remove(path)
                removed += 1
        return removed

    def close(self, max_size: int | None = None) -> None:
        """Session end: drop this session's private artifacts; trim to max_size if this
        session stored anything (one that only reused entries cannot have grown the cache,
        and a trim reads every entry: ~50 ms for a TFLM tree's, at the end of each run)."""
        with self._lock:
            staged, self._staging = self._staging, []
        for path in staged:
            _remove(path)
        with contextlib.suppress(OSError, CacheError):
            self._add_to_totals()
            if max_size is not None and self.stats.misses:
                self.trim(max_size)

    def totals(self) -> dict[str, int]:
        """Counts over every session that used this cache (`pytest-ondevice cache stats`)."""
        try:
            return json.loads((self.base / "stats.json").read_text())
        except (OSError, ValueError):
            return {}

    def _add_to_totals(self) -> None:
        mine = {k: getattr(self.stats, k) for k in ("hits", "misses", "damaged", "uncached")}
        if not any(mine.values()):
            return
        with self.lock("stats"):
            totals = self.totals()
            for name, n in mine.items():
                totals[name] = totals.get(name, 0) + n
            _write_atomic(self.base / "stats.json", json.dumps(totals), staging=self.base / "tmp")

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) in the store."""
        count = size = 0
        for where in self._entries():
            count += 1
            size += sum(p.stat().st_size for p in where.iterdir() if p.is_file())
        return count, size

    def trim(self, max_size: int) -> int:
        """Least recently used first, down to 90 % of max_size; never what this session used."""
        sized = []
        total = 0
        for where in self._entries():
            with contextlib.suppress(OSError):
                size = sum(p.stat().st_size for p in where.iterdir() if p.is_file())
                sized.append((where.stat().st_mtime, size, where))
                total += size
        if total <= max_size:
            return 0
        removed = 0
        for _mtime, size, where in sorted(sized):
            if total <= max_size * 0.9:
                break
            if where.name in self._used:
                continue
            self._discard(where)
            total -= size
            removed += 1
        return removed

    def clear(self) -> None:
        """Everything but what live sessions are building (their staging dirs)."""
        for sub in ("entries", "manifests"):
            grave = self.base / "tmp" / f"{self._tag}{os.urandom(6).hex()}"
            with contextlib.suppress(OSError):
                os.rename(self.base / sub, grave)  # out of sight at once, then removed
                _remove(grave)
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            (self.base / "stats.json").unlink()
        self.sweep()

    # -- paths ----------------------------------------------------------------
    def _entry_dir(self, key: str) -> Path:
        return self.base / "entries" / key[:2] / key

    def _manifest(self, key: str) -> Path:
        return self.base / "manifests" / key[:2] / f"{key}.json"

    def _entries(self) -> Iterator[Path]:
        for shard in _listdir(self.base / "entries"):
            yield from _listdir(shard)

    def _discard(self, where: Path) -> None:
        """Out of the way in one rename first, so no reader ever sees half an entry."""
        grave = self.base / "tmp" / f"{self._tag}{os.urandom(6).hex()}"
        try:
            os.rename(where, grave)
        except OSError:
            return
        _remove(grave)

    def _forget_staging(self, staged: Path, remove: bool = False) -> None:
        with self._lock:
            if staged in self._staging:
                self._staging.remove(staged)
        if remove:
            _remove(staged)


def parse_size(text: str) -> int:
    """'5G', '500M', '2048K' or bytes, as ccache -M takes them."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (value[:-1], value[-1]) if value[-1:] in units else (value, "")
    try:
        size = int(float(number) * units[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (write e.g. 5G or 500M)") from None
    if size <= 0:
        raise ValueError(f"must be more than 0: {text!r}")
    return size


def key_of(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _write_atomic(path: Path, text: str, staging: Path | None = None) -> None:
    tmp = (staging or path.parent) / f".{path.name}.{os.getpid()}.{threading.get_ident()}.{os.urandom(3).hex()}"
    tmp.write_text(text)
    os.replace(tmp, path)


def _listdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def _remove(path: Path) -> None:
    def writable(func, p, _exc):  # entries are read-only: make them removable
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o755)
            os.chmod(p, 0o755)
            func(p)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=writable)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
