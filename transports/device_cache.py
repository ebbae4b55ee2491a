"""Where a transport may keep files it will execute on a device, and how it prunes them.

Written once for every transport with a device-side cache (SSH now, ADB next). The
attacks this stops (issue 17): another account creating our cache dir first in /tmp and
swapping a binary between push and exec, a symlink pointing our cache (and its prune) at
the user's own files, a same-size file under a hash name. So:

- the root is ours alone: by default under the device user's home, else
  `<scratch_root>/ondevice-<user>`; every directory above it is owned by root or us and
  not writable by others (unless sticky, like /tmp: others cannot rename our entry
  there), and the root itself is a real directory (lstat: not a symlink), owned by us,
  not group/world writable — OpenSSH's StrictModes rules. Anything else is an
  InfrastructureError naming path, owner and mode;
- entries are named by content (`bin/<sha256>`); a reused entry is verified on the device
  before its first exec in a session (the transport does that);
- a prune removes only names we create, and never an entry a live session holds (each
  session lists what it uses in `sessions/<id>/.holds/`; a session dir exists while its
  session may still run something).
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import secrets
import shlex
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..compiling import strictmodes
from .contract import ConnectionLost, Deployed, InfrastructureError

HOME_SUBDIR = ".cache/pytest-ondevice"
BIN = "bin"
SESSIONS = "sessions"
HOLDS = ".holds"
ENTRY = re.compile(r"[0-9a-f]{64}")
PART = re.compile(r"[0-9a-f]{64}\.part-[0-9a-f]+")
SESSION = re.compile(r"[0-9a-f]{16}")
STALE_PART_S = 3600.0


class DeviceFs(Protocol):
    """What the rules need of a device's file system (paramiko's SFTPClient has it all)."""

    def lstat(self, path: str) -> Any: ...
    def mkdir(self, path: str, mode: int = 0o777) -> None: ...
    def chmod(self, path: str, mode: int) -> None: ...
    def normalize(self, path: str) -> str: ...
    def listdir_attr(self, path: str = ".") -> list[Any]: ...
    def listdir(self, path: str = ".") -> list[str]: ...
    def remove(self, path: str) -> None: ...
    def symlink(self, source: str, dest: str) -> None: ...
    def utime(self, path: str, times: Any) -> None: ...
    def put(self, local: str, remote: str) -> Any: ...
    def get(self, remote: str, local: str) -> Any: ...
    def posix_rename(self, old: str, new: str) -> None: ...


def root_for(home: str, user: str, scratch_root: str | None) -> tuple[str, str]:
    """(the directory that must be safe to build in, our root below it)."""
    if scratch_root:
        return scratch_root, posixpath.join(scratch_root, f"ondevice-{user}")
    return home, posixpath.join(home, HOME_SUBDIR)


def prepare(fs: DeviceFs, base: str, root: str, uid: int, trusted: Sequence[int] = ()) -> str:
    """Make (or accept) our root and its bin/ and sessions/ dirs, verified; return the root."""
    try:
        real = fs.normalize(base)  # realpath on the device: a symlink on the way is judged where it leads
    except OSError as e:
        raise InfrastructureError(f"{base} does not exist on the device ({e}); set scratch_root") from None
    path = "/"
    for part in [p for p in real.split("/") if p]:
        _check_above(fs.lstat(path), path, uid, trusted)
        path = posixpath.join(path, part)
    _check_above(fs.lstat(path), path, uid, trusted)
    for sub in _below(real, posixpath.relpath(root, base)):
        _make_ours(fs, sub, uid)
    real_root = posixpath.join(real, posixpath.relpath(root, base))
    for sub in (BIN, SESSIONS):
        _make_ours(fs, posixpath.join(real_root, sub), uid)
    return real_root


def _below(base: str, rel: str) -> list[str]:
    out, path = [], base
    for part in rel.split("/"):
        path = posixpath.join(path, part)
        out.append(path)
    return out


def _make_ours(fs: DeviceFs, path: str, uid: int) -> None:
    with contextlib.suppress(OSError):
        fs.mkdir(path, 0o700)  # fails when it exists: then judged as found
    attr = fs.lstat(path)
    why = strictmodes.problem(
        attr, lambda owner: owner == uid, owners=f"not by the device user (uid {uid})", local=False
    )
    if why is None and not stat.S_ISDIR(attr.st_mode):
        why = "is not a directory"
    if why:
        raise _unsafe(path, attr, why)


def _check_above(attr: Any, path: str, uid: int, trusted: Sequence[int] = ()) -> None:
    """trusted: system accounts that own directories there (Android: system owns /data, and
    the shell group may write /data/local/tmp)."""
    why = strictmodes.problem(
        attr,
        lambda owner: owner in (0, uid, *trusted),
        lambda gid: gid in trusted,
        sticky_ok=True,
        owners=f"neither root nor the device user (uid {uid})",
        local=False,
    )
    if why:
        raise _unsafe(path, attr, why)


def _unsafe(path: str, attr: Any, why: str) -> InfrastructureError:
    return InfrastructureError(
        f"unsafe directory on the device: {path} {why} (owner uid {attr.st_uid}, mode "
        f"{stat.S_IMODE(attr.st_mode):04o}); binaries run from there could be swapped by another account. "
        "Fix its owner/mode, or set scratch_root in the board's [transport] to a directory only this "
        "account can write"
    )


def held(fs: DeviceFs, root: str) -> set[str]:
    """Every entry some session dir on the device still holds."""
    out: set[str] = set()
    sessions = posixpath.join(root, SESSIONS)
    for name in fs.listdir(sessions):
        if SESSION.fullmatch(name):
            with contextlib.suppress(OSError):
                out.update(n for n in fs.listdir(posixpath.join(sessions, name, HOLDS)) if ENTRY.fullmatch(n))
    return out


def prune(fs: DeviceFs, root: str, keep: int) -> list[str]:
    """Drop least recently used entries beyond `keep`, and stale partial pushes; names we made only."""
    bin_dir = posixpath.join(root, BIN)
    entries = fs.listdir_attr(bin_dir)
    done = sorted(
        (a for a in entries if ENTRY.fullmatch(a.filename) and stat.S_ISREG(a.st_mode or 0)),
        key=lambda a: a.st_mtime or 0,
        reverse=True,
    )
    stale = [a for a in entries if PART.fullmatch(a.filename) and time.time() - (a.st_mtime or 0) > STALE_PART_S]
    victims = [a.filename for a in done[keep:]]
    if victims:
        taken = held(fs, root)
        victims = [v for v in victims if v not in taken]
    removed = []
    for name in [*victims, *(a.filename for a in stale)]:
        with contextlib.suppress(OSError):
            fs.remove(posixpath.join(bin_dir, name))
            removed.append(name)
    return removed


KEEPER = (
    "ondevice_kill() { n=0; while [ $n -lt 50 ]; do "
    'p=$(grep -l "$1" /proc/[0-9]*/environ 2>/dev/null | sed "s,^/proc/,,;s,/environ$,,"); '
    '[ -z "$p" ] && return 0; kill -KILL $p 2>/dev/null; n=$((n+1)); done; }; '
    'ondevice_alive() { [ -f "$1/.keeper" ] || return 0; read -r kp ks < "$1/.keeper" || return 1; '
    '[ -r /proc/$kp/stat ] || return 1; set -- $(sed "s/.*) //" /proc/$kp/stat); '
    '[ "$1" != Z ] && [ "${20}" = "$ks" ]; }; '
    'printf "#ondevice-hello %s %s\\n" "$(id -u)" "$HOME"; '
    'while IFS= read -r c; do eval "$c"; printf "\\n#ondevice-done NONCE %s\\n" $?; done; '
    'if [ -n "$ondevice_S" ]; then ondevice_kill "ONDEVICE_SESSION=$ondevice_sid"; rm -rf "$ondevice_S"; fi'
)
"""The keeper, for any transport with a POSIX shell on the device (sshd's, adb shell's): a loop
running our commands, one a line, each answered by `#ondevice-done NONCE STATUS`; at EOF
(the session's end or a dropped link) it ends every process whose environment holds
ONDEVICE_SESSION=<id> and removes the session dir. `ondevice_kill PATTERN` ends the processes
whose environment matches (so a child that called setsid() too); `ondevice_alive DIR` says
whether the session owning DIR still has its keeper (pid and start time in DIR/.keeper)."""


def start_session(scratch: str, sid: str) -> str:
    """For the keeper: make the session dir (and its holds), record the keeper there, own both."""
    return (
        f'ondevice_S={shlex.quote(scratch)}; ondevice_sid={sid}; mkdir -m 700 "$ondevice_S" '
        f'"$ondevice_S/{HOLDS}" && set -- $(sed "s/.*) //" /proc/$$/stat) && '
        f'echo "$$ ${{20}}" > "$ondevice_S/.keeper"'
    )


def sweep(root: str) -> str:
    """End what sessions killed before us left (their keeper is gone), and remove their dirs."""
    sessions = shlex.quote(f"{root}/{SESSIONS}")
    return (
        f'for d in {sessions}/*; do n=${{d##*/}}; case "$n" in *[!0-9a-f]*) continue;; esac; '
        f'[ ${{#n}} -eq 16 ] && [ "$d" != "$ondevice_S" ] || continue; ondevice_alive "$d" && continue; '
        'ondevice_kill "ONDEVICE_SESSION=$n"; rm -rf "$d"; done; true'
    )


class DeviceCache:
    """A session's view of the device cache: what it holds, pushed or verified, and the
    session dir where binaries run from (under their own names, argv[0]).

    Shared by every transport that keeps binaries on a device; `fs` is its file access
    (SFTP, or adb sync plus shell commands) and `run` runs a shell command there."""

    def __init__(self, root: str, scratch: str, run: Callable[[str], str]) -> None:
        self.root, self.bin, self.scratch = root, f"{root}/{BIN}", scratch
        self.run = run
        self.held: dict[str, int] = {}  # content hash -> size, listed once at the start
        self.pushed: set[str] = set()  # pushed by this session
        self.verified: set[str] = set()  # entries whose sha256 the device confirmed this session
        self.holds: set[str] = set()  # entries this session holds against another session's prune
        self.linked: set[str] = set()
        self.reported: set[str] = set()  # deploys already reported (pushed or held) to the runner
        self.names: dict[str, str] = {}
        self.damaged = 0  # cached entries whose content no longer matched their name
        self._lock = threading.Lock()
        self._push_locks: dict[str, threading.Lock] = {}

    def list_held(self, fs: DeviceFs) -> None:
        """What the device already holds, listed once rather than asked per binary."""
        self.held = {
            a.filename: a.st_size
            for a in fs.listdir_attr(self.bin)
            if ENTRY.fullmatch(a.filename) and stat.S_ISREG(a.st_mode or 0)
        }

    def place(self, fs: DeviceFs, artifact: Path, sha256: str, data: Sequence[Path]) -> Deployed:
        """The binary in the cache, linked into the session dir under its own name; data beside it."""
        name = self.stage(fs, artifact, sha256)
        link = f"{self.scratch}/{name}"
        run_dir = None
        if data:  # the binary's own cwd: two binaries' same-named files never meet
            run_dir = f"{self.scratch}/{name}.data"
            with contextlib.suppress(OSError):
                fs.mkdir(run_dir, 0o700)
            for path in data:  # small and test-specific: pushed every time, no cache
                _put_tree(fs, path, f"{run_dir}/{path.name}")
        with self._lock:  # a retry's deploy of what this session pushed is no second push
            pushed = sha256 in self.pushed and sha256 not in self.reported
            self.reported.add(sha256)
        return Deployed(link, sha256, pushed=pushed, cwd=run_dir)

    def stage(self, fs: DeviceFs, artifact: Path, sha256: str) -> str:
        """The binary in the cache and linked into the session dir: all its run needs but its
        data files; its name there. The push queue stages each binary ahead of its run, so
        that the run's deploy asks the device nothing (a round trip of 1-5 ms on loopback,
        between two runs of a slot, measured)."""
        self.ensure(fs, artifact, sha256)
        name = self._name_for(artifact.name, sha256)
        with self._push_lock(sha256):  # the push queue and a run may stage it at once
            if name not in self.linked:  # the session dir is new each session
                fs.symlink(f"{self.bin}/{sha256}", f"{self.scratch}/{name}")
                self.linked.add(name)
        return name

    def ensure(self, fs: DeviceFs, artifact: Path, sha256: str) -> None:
        """The cache holds exactly this content afterwards: pushed, or verified, once per session."""
        with self._push_lock(sha256):
            cached = f"{self.bin}/{sha256}"
            if sha256 not in self.holds:  # a live session's entries are never pruned by another
                fs.symlink(cached, f"{self.scratch}/{HOLDS}/{sha256}")
                self.holds.add(sha256)
            if sha256 in self.pushed or sha256 in self.verified:
                return
            if self.held.get(sha256) == artifact.stat().st_size and self._verify(sha256):
                fs.utime(cached, None)  # most recently used: pruned last
                self.verified.add(sha256)
                return
            part = f"{cached}.part-{secrets.token_hex(6)}"
            try:
                fs.put(str(artifact), part)  # confirmed: a short write (disk full) is caught here
                fs.chmod(part, 0o700)
                fs.posix_rename(part, cached)
            except OSError:
                with contextlib.suppress(Exception):
                    fs.remove(part)  # the room it took is the next push's
                raise
            self.held[sha256] = artifact.stat().st_size
            self.pushed.add(sha256)

    def _verify(self, sha256: str) -> bool:
        """What an earlier session left is run only if its content is still what its name says."""
        try:
            out = self.run(f"sha256sum {shlex.quote(self.bin + '/' + sha256)}")
        except ConnectionLost:
            raise
        except InfrastructureError:  # no sha256sum on the device, or the file went: push it again
            return False
        ok = out.split()[:1] == [sha256]
        if not ok:
            self.damaged += 1
        return ok

    def forget(self, sha256: str) -> None:
        """The entry vanished (pruned or deleted under us): the next deploy pushes it again."""
        self.held.pop(sha256, None)
        self.pushed.discard(sha256)
        self.verified.discard(sha256)

    def new_session(self, scratch: str) -> None:
        """After a reconnect: a new session dir holds nothing yet."""
        self.scratch, self.linked, self.holds, self.verified = scratch, set(), set(), set()

    def used(self) -> bool:
        return bool(self.pushed or self.verified)

    def _push_lock(self, sha256: str) -> threading.Lock:
        with self._lock:
            return self._push_locks.setdefault(sha256, threading.Lock())

    def _name_for(self, name: str, sha256: str) -> str:
        """Keep the binary's own name (argv[0]); two different binaries never share one."""
        owner = self.names.setdefault(name, sha256)
        return name if owner == sha256 else f"{name}-{sha256[:12]}"


def _put_tree(fs: DeviceFs, path: Path, remote: str) -> None:
    """A data file, or a directory with every file below it at the same relative paths."""
    if not path.is_dir():
        fs.put(str(path), remote)
        return
    with contextlib.suppress(OSError):  # there already
        fs.mkdir(remote, 0o700)
    for child in sorted(path.iterdir()):
        _put_tree(fs, child, f"{remote}/{child.name}")
