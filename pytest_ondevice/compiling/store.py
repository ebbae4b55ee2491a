"""A content-addressed artifact store, shared by sessions, checkouts and CI runners.

ccache's and Bazel's lesson, made stricter: an artifact lives in a directory named by
the key of everything it was made from; it is written whole in a private staging dir
and renamed into place in one step, so an artifact can never sit beside another
build's key, two configurations live side by side, and concurrent runs never touch
each other's files. Its digest is stored with it and checked on every reuse.

What is run is only what a trusted account wrote (strictmodes.py: OpenSSH's rules): by
default this account's (or root's) files in directories no other account can write;
with `shared`, also those of the members of the cache root's group, in a setgid root.
A session's holds are visible to other processes (a hold file per session, kept
flock'ed while it lives), and a trim or a clean never removes what a live session holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import strictmodes

LAYOUT = "v2"  # bump when the meaning of a key or a manifest changes
MANIFEST_RESULTS = 16  # input sets remembered per manifest (ccache keeps a few too)
DEFAULT_MAX_SIZE = 5 << 30
SHARED_ENV = "ONDEVICE_CACHE_SHARED"  # like the ini's ondevice_cache_shared, for every run of a CI worker
_KILL_ENV = "ONDEVICE_TEST_KILL_AT"  # tests: die with SIGKILL at this write point
# every point where a build writes something a later run reads, in the order they happen
WRITE_POINTS = ("artifact-built", "meta-written", "entry-renamed", "manifest-written", "link-published")
_SUBDIRS = ("entries", "manifests", "locks", "tmp", "holds")
_KEY = re.compile(r"[0-9a-f]{64}")


class CacheError(Exception):
    """The cache or build dir is unusable: an infrastructure error naming the path and the fix."""


class Untrusted(CacheError):
    """The cache's own directories could have been written by an account this one does not
    trust: nothing there is used (the message names owner, mode and the fix)."""


def default_dir() -> Path:
    """Per user, like ccache: shared by every checkout of this user on this machine."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-ondevice"


def shared_from_env() -> bool:
    """ONDEVICE_CACHE_SHARED=1 (or true/yes/on): the opt-in, for runs that set no ini value."""
    return os.environ.get(SHARED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def unusable(path: Path, e: OSError, what: str = "cache dir") -> CacheError:
    """One message for every way a directory of ours cannot be written."""
    cause = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        fix = "free some space, or point ondevice_cache_dir / ondevice_build_dir elsewhere"
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "make it writable for this user, or set ondevice_cache_dir / ondevice_build_dir to a directory that is"
        if what == "cache dir":
            fix += " (a cache several accounts write needs ondevice_cache_shared = true)"
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
    untrusted: int = 0  # entries another account could have written: never used, rebuilt
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


class Trust:
    """Whose files this store uses. Private (the default): this account's and root's, in
    nothing another account can write. Shared: also those of the members of the cache
    root's group, which may write there (the root must be setgid, so all it holds stays
    the group's); never what every account may write."""

    def __init__(self, shared: bool, gid: int | None = None) -> None:
        self.uid = os.geteuid()
        self.shared = shared
        self.gid = gid if shared else None  # the cache root's group
        self._members: dict[int, bool] = {}
        self._own_group = strictmodes.private_group(self.uid)

    def owner_ok(self, uid: int) -> bool:
        if uid in (0, self.uid):
            return True
        if self.gid is None:
            return False
        if uid not in self._members:  # asked once per account per session
            self._members[uid] = strictmodes.member(uid, self.gid)
        return self._members[uid]

    def group_ok(self, gid: int) -> bool:
        """The shared cache's group; or this account's own private group (umask 002 on a
        user-private-group system made our dirs group-writable: nobody else is in it)."""
        return gid == self.gid or gid == self._own_group

    def problem(self, st: os.stat_result, kind: int, sticky_ok: bool = False) -> str | None:
        """Why st (an lstat result) may not be used as a kind (S_IFDIR, S_IFREG), or None."""
        why = strictmodes.problem(st, self.owner_ok, self.group_ok, sticky_ok)
        if why is None and stat.S_IFMT(st.st_mode) != kind:
            why = "is not a directory" if kind == stat.S_IFDIR else "is not a regular file"
        return why

    def dir_mode(self, mode: int) -> int:
        """The mode a directory we create gets, whatever the umask: nobody else writes it
        (private), or the group does and keeps it (shared: setgid)."""
        mode = stat.S_IMODE(mode)
        return (mode | 0o2070) & ~0o002 if self.shared else mode & ~0o022

    def file_mode(self, mode: int, writable: bool = True) -> int:
        mode = stat.S_IMODE(mode)
        mode = (mode | (0o060 if writable else 0o040)) & ~0o002 if self.shared else mode & ~0o022
        return mode if writable else mode & ~0o222


class Store:
    def __init__(self, root: Path, shared: bool | None = None) -> None:
        """shared: accept the entries of the cache root's group's members (None: from
        ONDEVICE_CACHE_SHARED). Raises CacheError (Untrusted) naming the fix."""
        self.root = root
        self.trust = Trust(False)
        self.stats = StoreStats()
        self._staging: list[Path] = []
        self._used: set[str] = set()  # keys this session holds
        self._lock = threading.Lock()
        self._digests: dict[tuple, str] = {}
        self._tag = f"{socket.gethostname()}-{os.getpid()}-"
        self._checked: set[Path] = set()  # shard dirs found trustworthy this session
        self._hold_fd: int | None = None
        self._hold_path = Path()
        self._trim_fd: int | None = None
        self._trim_users = 0
        self._trim_lock = threading.Lock()
        try:
            real = self._prepare_root(Path(os.path.abspath(root)), shared_from_env() if shared is None else shared)
            self.base = real / LAYOUT
            self._mkdir(self.base)
            for sub in _SUBDIRS:
                self._mkdir(self.base / sub)
            probe = self.base / "tmp" / f".probe-{self._tag}{threading.get_ident()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise unusable(root, e) from None
        self.sweep()

    # -- trust ------------------------------------------------------------------
    def _prepare_root(self, path: Path, shared: bool) -> Path:
        """Make the root (and what is missing above it) with our modes, then judge it and
        every directory above it, as sshd judges ~/.ssh: the real path, each one lstat'ed."""
        missing = []
        probe = path
        while not os.path.lexists(probe):
            missing.append(probe)
            probe = probe.parent
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):
                directory.mkdir()
                if shared and directory == path:  # a new shared root: the group of its creator
                    os.chmod(directory, Trust(True).dir_mode(os.lstat(directory).st_mode))
                else:  # above a shared root, its group must be able to pass (under umask 077 too)
                    mode = stat.S_IMODE(os.lstat(directory).st_mode) & ~0o022
                    os.chmod(directory, mode | 0o010 if shared else mode)
        real = Path(os.path.realpath(path))
        st = os.lstat(real)
        self.trust = Trust(shared, st.st_gid)
        for above in reversed(real.parents):
            why = self.trust.problem(os.lstat(above), stat.S_IFDIR, sticky_ok=True)
            if why:
                raise self._untrusted(path, above, why)
        why = self.trust.problem(st, stat.S_IFDIR, sticky_ok=True)  # like /tmp: v2 below is judged
        if why:
            raise self._untrusted(path, real, why)
        if shared and not st.st_mode & stat.S_ISGID:
            raise Untrusted(
                f"the shared cache dir {strictmodes.describe(real, st, 'is not setgid')}: what each account "
                f"writes there must stay its group's; make it so: chmod g+s {real}"
            )
        return real

    def _untrusted(self, root: Path, path: Path, why: str) -> Untrusted:
        st = os.lstat(path)
        text = f"the cache dir {root} cannot be trusted: {strictmodes.describe(path, st, why)}"
        text += "; another account could put binaries there that run as yours (a failing test would pass). "
        if self.trust.shared:
            return Untrusted(
                text + f"A shared cache trusts the members of its group {strictmodes.group_name(self.trust.gid or 0)} "
                f"only: fix the owner or mode of {path}, or remove it (what others wrote is not used)"
            )
        change = f"chmod go-w {path}"
        if not self.trust.owner_ok(st.st_uid):
            change = f"chown {strictmodes.login(self.trust.uid)} {path}"
        fix = f"Make it this account's alone ({change}), or point ondevice_cache_dir at a private directory"
        if st.st_mode & 0o020 and not st.st_mode & 0o002 and path == Path(os.path.realpath(root)):
            fix += (
                f"; to share it with every member of the group {strictmodes.group_name(st.st_gid)}, "
                f"set ondevice_cache_shared = true (or {SHARED_ENV}=1) and chmod g+s {path}"
            )
        return Untrusted(text + fix)

    def _mkdir(self, path: Path, shard: bool = False) -> None:
        """One of our directories: made with our mode, or found and judged. An untrusted
        shard (of entries, manifests, locks) is moved out of the way and made again."""
        for _ in range(2):
            try:
                path.mkdir()
                os.chmod(path, self.trust.dir_mode(os.lstat(path).st_mode))
            except FileExistsError:
                pass
            why = self.trust.problem(os.lstat(path), stat.S_IFDIR)
            if not why:
                return
            if not shard:
                break
            self._discard(path)  # its entries were never used: nothing to count
        assert why, "the loop ends only on a problem"
        raise self._untrusted(self.root, path, why)

    def _trusted(self, path: Path, kind: int) -> os.stat_result | None:
        """path's lstat if it may be used, else None (the caller moves it aside: rebuilt)."""
        st = os.lstat(path)
        if self.trust.problem(st, kind):
            return None
        return st

    def _shard_ok(self, shard: Path) -> bool:
        """A shard of entries or manifests: trusted once per session (its parent is ours, so
        only a trusted account could replace it)."""
        if shard in self._checked:
            return True
        try:
            if self._trusted(shard, stat.S_IFDIR) is None:
                return False
        except FileNotFoundError:
            return True  # made when something is stored there
        self._checked.add(shard)
        return True

    # -- entries --------------------------------------------------------------
    def get(self, key: str) -> Entry | None:
        """The verified artifact stored under key, held for this session, or None (a damaged
        or untrusted one is moved out of the way, so it is rebuilt)."""
        with self._holding(key):
            return self._verified(key)

    def _verified(self, key: str, count: bool = True) -> Entry | None:
        """count: an untrusted entry is counted (not when its manifest already was)."""
        where = self._entry_dir(key)
        untrusted = "untrusted" if count else None
        if not self._shard_ok(where.parent):
            self._drop(where.parent, untrusted)
            return None
        try:
            if self._trusted(where, stat.S_IFDIR) is None or self._trusted(where / "meta.json", stat.S_IFREG) is None:
                self._drop(where, untrusted)
                return None
        except FileNotFoundError:
            if os.path.lexists(where):  # an entry without its meta.json
                self._drop(where, "damaged")
            return None
        except OSError:
            self._drop(where, "damaged")
            return None
        try:
            meta = json.loads(_read_nofollow(where / "meta.json"))
            path = where / meta["name"]
            if "/" in meta["name"] or self._trusted(path, stat.S_IFREG) is None:
                self._drop(where, untrusted)
                return None
            digest = self.digest(path)
        except (OSError, ValueError, KeyError, TypeError):
            self._drop(where, "damaged")  # an entry we cannot read is as good as damaged
            return None
        if digest != meta.get("sha256"):
            self._drop(where, "damaged")
            return None
        with contextlib.suppress(OSError):
            os.utime(where)  # least recently used goes first when trimming
        self.stats.count("hits")
        return Entry(path, digest)

    def _drop(self, where: Path, why: str | None) -> None:
        if why:
            self.stats.count(why)
        self._discard(where)

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
            for p in (artifact, staged / "meta.json"):  # an entry is never written again
                os.chmod(p, self.trust.file_mode(os.lstat(p).st_mode, writable=False))
            os.chmod(staged, self.trust.dir_mode(os.lstat(staged).st_mode))
            where = self._entry_dir(key)
            self._mkdir(where.parent, shard=True)
            with self._holding(key):
                try:
                    os.rename(staged, where)
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    existing = self._verified(key, count=False)  # someone stored the same inputs first
                    if existing is not None:
                        self._forget_staging(staged, remove=True)
                        return existing
                    try:
                        os.rename(staged, where)  # theirs was damaged and is gone now
                    except OSError as again:
                        if again.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                            raise
                        return Entry(artifact, digest)  # one we cannot move away: ours stays private
            checkpoint("entry-renamed")
        except Untrusted:
            raise
        except OSError as e:
            raise unusable(self.root, e) from None
        self._forget_staging(staged)
        return Entry(where / name, digest)

    def keep_private(self, staged: Path, name: str) -> Entry:
        """An artifact built from inputs that changed meanwhile: used this session, never stored."""
        self.stats.count("misses")
        self.stats.count("uncached")
        return Entry(staged / name, self.digest(staged / name))

    # -- manifests: input sets found after the fact (headers, linker inputs) --
    def lookup(self, key: str, still_true: Callable[[dict], bool], count: bool = True) -> str | None:
        """The result key of the newest recorded input set that still holds (an untrusted
        manifest is none; count: counted as such, once per build)."""
        path = self._manifest(key)
        try:
            if not self._shard_ok(path.parent) or self._trusted(path, stat.S_IFREG) is None:
                if count:
                    self.stats.count("untrusted")  # what it names is built again
                return None
            results = json.loads(_read_nofollow(path))["results"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        for record in reversed(results):
            try:
                if still_true(record):
                    return record["key"]
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return None

    def record(self, key: str, record: dict) -> None:
        path = self._manifest(key)
        try:
            self._mkdir(path.parent, shard=True)
            with self.lock(f"manifest-{key}"):
                try:
                    results = json.loads(_read_nofollow(path))["results"]
                    if self._trusted(path, stat.S_IFREG) is None:
                        results = []
                except (OSError, ValueError, KeyError, TypeError):
                    results = []
                results = [r for r in results if r.get("key") != record["key"]][-(MANIFEST_RESULTS - 1) :]
                self._write(path, json.dumps({"results": [*results, record]}))
                checkpoint("manifest-written")
        except Untrusted:
            raise
        except OSError as e:
            raise unusable(self.root, e) from None

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """One builder per key at a time, across threads, processes, xdist workers and
        accounts (a lock file is opened read-only: flock needs no more)."""
        path = self.base / "locks" / key[:2] / key
        try:
            self._mkdir(path.parent, shard=True)
            fd = self._open_lock(path)
        except Untrusted:
            raise
        except OSError as e:
            raise unusable(self.root, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _open_lock(self, path: Path) -> int:
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        with contextlib.suppress(OSError):  # another account's lock file of the same name: fine
            os.fchmod(fd, self.trust.file_mode(os.fstat(fd).st_mode))
        return fd

    # -- holds: what live sessions use, seen by every process ------------------
    @contextlib.contextmanager
    def _holding(self, key: str) -> Iterator[None]:
        """key held by this session before it is looked at, while no trim or clean runs
        (they take the trim lock exclusively): what a session found stays there."""
        with self._trim_lock:  # one shared flock for all this session's threads
            if self._trim_users == 0:
                if self._trim_fd is None:
                    self._trim_fd = self._open_lock(self.base / "locks" / "trim")
                fcntl.flock(self._trim_fd, fcntl.LOCK_SH)
            self._trim_users += 1
        try:
            self._hold(key)
            yield
        finally:
            with self._trim_lock:
                self._trim_users -= 1
                if self._trim_users == 0 and self._trim_fd is not None:
                    fcntl.flock(self._trim_fd, fcntl.LOCK_UN)

    def _hold(self, *keys: str) -> None:
        with self._lock:
            new = [k for k in dict.fromkeys(keys) if k not in self._used]
            if not new:
                return
            if self._hold_fd is None:
                self._hold_fd, self._hold_path = self._new_hold_file()
            os.write(self._hold_fd, "".join(f"{k}\n" for k in new).encode())
            self._used.update(new)

    def _new_hold_file(self) -> tuple[int, Path]:
        """holds/<host>-<pid>-<random>, flock'ed for the session's life: made aside and
        renamed in locked, so no trim ever sees it unlocked while its session lives."""
        name = f"{self._tag}{os.urandom(6).hex()}"
        tmp = self.base / "tmp" / f"{name}.hold"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.fchmod(fd, self.trust.file_mode(os.fstat(fd).st_mode) & ~0o022)
        os.write(fd, f"# pytest-ondevice session: host {socket.gethostname()} pid {os.getpid()}\n".encode())
        os.rename(tmp, self.base / "holds" / name)
        return fd, self.base / "holds" / name

    def held(self) -> set[str]:
        """Every key a live session holds; hold files of sessions that ended (their flock is
        gone with them, killed or not) are removed."""
        keys = set(self._used)
        for path in _listdir(self.base / "holds"):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its session lives
                    with open(fd, closefd=False, errors="replace") as f:
                        keys.update(line.strip() for line in f if _KEY.fullmatch(line.strip()))
                    continue
                with contextlib.suppress(OSError):
                    path.unlink()
            finally:
                os.close(fd)
        return keys

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """No session adds a hold meanwhile (a trim's or a clean's time to choose and move)."""
        fd = self._open_lock(self.base / "locks" / "trim")  # its own fd: a flock per open file
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
                stale = not pid_alive(int(pid))
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
        and a trim reads every entry: ~50 ms for a TFLM tree's, at the end of each run);
        then let go of its holds."""
        with self._lock:
            staged, self._staging = self._staging, []
        for path in staged:
            _remove(path)
        with contextlib.suppress(OSError, CacheError):
            self._add_to_totals()
            if max_size is not None and self.stats.misses:
                self.trim(max_size)
        self.release()

    def hand_over(self) -> tuple[list[str], list[Path], Path | None]:
        """What this process holds, the staging dirs it made and its hold file: for the
        process that will close the session (take_over), when this one ends first (the side
        process)."""
        with self._lock:
            hold = self._hold_path if self._hold_fd is not None else None
            return sorted(self._used), list(self._staging), hold

    def take_over(self, held: list[str], staging: list[Path], hold: Path | None) -> None:
        """Hold another process's keys, then remove its hold file (no moment unheld), and its
        staging dirs at close, as this one's."""
        self._hold(*held)
        if hold is not None and hold != self._hold_path:
            with contextlib.suppress(OSError):
                os.unlink(hold)
        with self._lock:
            self._staging.extend(staging)

    def release(self) -> None:
        """This session holds nothing any more: its hold file goes."""
        with self._lock:
            fd, self._hold_fd = self._hold_fd, None
            self._used = set()
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._hold_path)
            os.close(fd)
        with self._trim_lock:
            if self._trim_fd is not None and self._trim_users == 0:
                os.close(self._trim_fd)
                self._trim_fd = None

    def totals(self) -> dict[str, int]:
        """Counts over every session that used this cache (`pytest-ondevice cache stats`)."""
        try:
            return json.loads((self.base / "stats.json").read_text())
        except (OSError, ValueError):
            return {}

    def _add_to_totals(self) -> None:
        mine = {k: getattr(self.stats, k) for k in ("hits", "misses", "damaged", "uncached", "untrusted")}
        if not any(mine.values()):
            return
        with self.lock("stats"):
            totals = self.totals()
            for name, n in mine.items():
                totals[name] = totals.get(name, 0) + n
            self._write(self.base / "stats.json", json.dumps(totals))

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) in the store."""
        count = size = 0
        for where in self._entries():
            count += 1
            size += _size(where)
        return count, size

    def trim(self, max_size: int) -> int:
        """Least recently used first, down to 90 % of max_size; never what a live session
        holds (this one's or another process's)."""
        sized = []
        total = 0
        for where in self._entries():
            with contextlib.suppress(OSError):
                size = _size(where)
                sized.append((where.lstat().st_mtime, size, where))
                total += size
        if total <= max_size:
            return 0
        graves = []
        with self._exclusive():
            held = self.held()
            for _mtime, size, where in sorted(sized):
                if total <= max_size * 0.9:
                    break
                if where.name in held:
                    continue
                grave = self._move_away(where)
                if grave is not None:
                    graves.append(grave)
                    total -= size
        for grave in graves:
            _remove(grave)
        return len(graves)

    def clear(self) -> tuple[int, int, int]:
        """Everything but what live sessions hold or are building (their staging dirs):
        (entries removed, their bytes, entries kept because a live session holds them)."""
        graves, removed, size, kept = [], 0, 0, 0
        with self._exclusive():
            held = self.held()
            for where in self._entries():
                if where.name in held:
                    kept += 1
                    continue
                bytes_ = _size(where)
                grave = self._move_away(where)
                if grave is not None:
                    graves.append(grave)
                    removed, size = removed + 1, size + bytes_
            grave = self._grave()
            with contextlib.suppress(OSError):
                os.rename(self.base / "manifests", grave)  # out of sight at once, then removed
                graves.append(grave)
            self._mkdir(self.base / "manifests")
            with contextlib.suppress(OSError):
                (self.base / "stats.json").unlink()
        for grave in graves:
            _remove(grave)
        self.sweep()
        return removed, size, kept

    # -- paths ----------------------------------------------------------------
    def _entry_dir(self, key: str) -> Path:
        return self.base / "entries" / key[:2] / key

    def _manifest(self, key: str) -> Path:
        return self.base / "manifests" / key[:2] / f"{key}.json"

    def _entries(self) -> Iterator[Path]:
        for shard in _listdir(self.base / "entries"):
            if not shard.is_symlink():
                yield from _listdir(shard)

    def _grave(self) -> Path:
        return self.base / "tmp" / f"{self._tag}{os.urandom(6).hex()}"

    def _move_away(self, where: Path) -> Path | None:
        """Out of the way in one rename, so no reader ever sees half an entry: into tmp/ to
        be removed, or (another account's dir we may not move elsewhere) beside itself."""
        for grave in (self._grave(), where.with_name(f".gone-{os.urandom(6).hex()}")):
            try:
                os.rename(where, grave)
                return grave
            except FileNotFoundError:
                return None
            except OSError:
                continue
        return None

    def _discard(self, where: Path) -> None:
        grave = self._move_away(where)
        if grave is not None:
            _remove(grave)

    def _write(self, path: Path, text: str) -> None:
        """A file of ours replaced whole (manifests, totals), with our mode whatever the umask."""
        _write_atomic(path, text, staging=self.base / "tmp", mode=self.trust.file_mode(0o644))

    def _forget_staging(self, staged: Path, remove: bool = False) -> None:
        with self._lock:
            if staged in self._staging:
                self._staging.remove(staged)
        if remove:
            _remove(staged)


def key_of(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _write_atomic(path: Path, text: str, staging: Path | None = None, mode: int | None = None) -> None:
    tmp = (staging or path.parent) / f".{path.name}.{os.getpid()}.{threading.get_ident()}.{os.urandom(3).hex()}"
    tmp.write_text(text)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def _read_nofollow(path: Path) -> str:
    """A file's text, never through a symlink put in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with open(fd, errors="replace") as f:
        return f.read()


def _size(where: Path) -> int:
    """Bytes of an entry's files (lstat: a symlink in it counts as itself, never its target)."""
    total = 0
    for p in _listdir(where):
        with contextlib.suppress(OSError):
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


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


def pid_alive(pid: int) -> bool:
    """Whether a process of this host still runs (one of another account's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
