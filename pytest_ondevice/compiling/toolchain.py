"""Find the compilers for a board: GNU triple, then clang, then zig.

A missing toolchain is the most common first-run failure, so its error names
what was tried, the Debian package and the pip alternative.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..config.board import Board


class ToolchainError(Exception):
    """No usable compiler for a board; the message says how to install one."""


@dataclass(frozen=True)
class ResolvedToolchain:
    kind: str  # "native", "ndk", "gnu", "clang" or "zig"
    cc: tuple[str, ...]
    cxx: tuple[str, ...]
    ar: tuple[str, ...]
    identity: str  # changes when the compiler does: part of every cache key
    ldflags: tuple[str, ...] = ()  # the board's, as this compiler links them

    @property
    def description(self) -> str:
        return shlex.join(self.cc)


NDK_ENV = ("ANDROID_NDK_HOME", "ANDROID_NDK_ROOT")


_RESOLVING = threading.Lock()


def resolve(board: Board) -> ResolvedToolchain:
    """Asked by every build thread at once: one of them probes the compiler, the rest reuse it."""
    zig = zig_installed() if board.toolchain.zig_target else None  # a search of sys.path: 1 ms
    env = (*(os.environ.get(k) for k in ("CC", "CXX", "AR", "PATH", *NDK_ENV)), zig)
    with _RESOLVING:
        return _resolve(board.name, board.toolchain, env)


@functools.cache
def _resolve(board_name: str, tc, env: tuple) -> ResolvedToolchain:
    tried: list[str] = []
    for candidate in _candidates(tc):
        if candidate[0] == "zig" and not zig_installed():
            tried.append("zig cc (pip package ziglang not installed)")
            continue
        tried.append(shlex.join(candidate[1]))
        if _available(candidate[1]):
            kind, cc, cxx, ar = candidate
            return ResolvedToolchain(
                kind, cc, cxx, ar, _identity(cc, os.environ.get("PATH")), _ldflags(kind, tc.ldflags)
            )
    install = []
    if tc.debian_package:
        install.append(f"apt-get install {tc.debian_package}")
    if tc.zig_target:
        install.append("pip install ziglang")
    how = " or ".join(install) or "install a compiler for this board"
    raise ToolchainError(
        f"no toolchain for board '{board_name}': tried {', '.join(tried)}; install one: {how}"
    )


def _candidates(tc):
    if tc.gnu == "":
        # set but empty is unset, as make and CMake take it
        cc = tuple(shlex.split(os.environ.get("CC") or "cc"))
        cxx = tuple(shlex.split(os.environ.get("CXX") or "c++"))
        ar = tuple(shlex.split(os.environ.get("AR") or "ar"))
        yield "native", cc, cxx, ar
        return
    ndk = _ndk_bin(tc)
    if ndk is not None:
        yield (
            "ndk",
            (str(ndk / f"{tc.ndk_target}-clang"),),
            (str(ndk / f"{tc.ndk_target}-clang++"),),
            (str(ndk / "llvm-ar"),),
        )
    if tc.gnu:
        yield "gnu", (f"{tc.gnu}-gcc",), (f"{tc.gnu}-g++",), (f"{tc.gnu}-ar",)
    if tc.clang_target:
        target = f"--target={tc.clang_target}"
        ar = ("llvm-ar",) if shutil.which("llvm-ar") else ("ar",)
        yield "clang", ("clang", target), ("clang++", target), ar
    if tc.zig_target:
        zig = (sys.executable, "-m", "ziglang")
        yield "zig", (*zig, "cc", "-target", tc.zig_target), (*zig, "c++", "-target", tc.zig_target), (*zig, "ar")


def _ndk_bin(tc) -> Path | None:
    """The NDK's prebuilt LLVM bin dir, when the board builds with the NDK and one is set."""
    home = tc.ndk_home or next((os.environ[k] for k in NDK_ENV if os.environ.get(k)), None)
    if not tc.ndk_target or not home:
        return None
    return Path(os.path.expanduser(home)) / "toolchains" / "llvm" / "prebuilt" / "linux-x86_64" / "bin"


def _ldflags(kind: str, board_ldflags: tuple[str, ...]) -> tuple[str, ...]:
    """Android's loader runs position-independent executables only; the NDK links them
    against the phone's own libc, so a board's `-static` (for the GNU or zig fallback,
    which has no bionic) does not apply."""
    if kind == "ndk":
        return (*(f for f in board_ldflags if f != "-static"), "-pie")
    return board_ldflags


def _available(argv: tuple[str, ...]) -> bool:
    if not argv:  # CC of blanks only
        return False
    if argv[0] == sys.executable and argv[1:3] == ("-m", "ziglang"):
        return zig_installed()
    if shutil.which(argv[0]) is None:
        return False
    if any(a.startswith("--target=") for a in argv):  # clang: does it know this target?
        probe = [*argv, "-x", "c", "-fsyntax-only", "-"]
        try:
            return subprocess.run(probe, input=b"", capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    return True


def zig_installed() -> bool:
    """The `ziglang` wheel: a cross compiler for every target, from PyPI."""
    return _ziglang_found()


@functools.cache
def _ziglang_found() -> bool:
    """Looked up once: a search of sys.path for every binary built adds up."""
    return importlib.util.find_spec("ziglang") is not None


@functools.cache
def _identity(cc: tuple[str, ...], path: str | None) -> str:
    """Path and version banner of the compiler: a new compiler invalidates the cache. (By
    PATH too: a launcher's name, `ccache gcc`, stays the same when PATH finds another gcc.)"""
    where = os.path.realpath(shutil.which(cc[0]) or cc[0])
    early = _EARLY.pop(cc, None)
    if early is not None and early.still_true(cc):
        out = _banner(early.proc)
    else:
        if early is not None:
            _end(early.proc)
        out = _banner(None, cc)
    return hashlib.sha256(where.encode() + b"\0" + out).hexdigest()[:16]


# pytest's own mark of the test under way: set around each test, read by no compiler
_NOT_THE_COMPILERS = frozenset({"PYTEST_CURRENT_TEST"})


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _NOT_THE_COMPILERS}


def _files(cc: tuple[str, ...]) -> tuple[tuple[str, int, int, int, int], ...]:
    """Every word of the command that names a program (the launcher and what it runs:
    `ccache gcc`), as it is on disk: replaced in place, it is another compiler."""
    found = []
    for word in cc:
        program = shutil.which(word) if not word.startswith("-") else None
        if program is not None:
            real = os.path.realpath(program)
            with contextlib.suppress(OSError):
                st = os.stat(real)
                found.append((real, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(found)


@dataclass
class _Early:
    """A compiler's --version started early, and what it was asked under."""

    files: tuple[tuple[str, int, int, int, int], ...]  # the programs the command names, as they were
    environ: dict[str, str]  # all of it: a launcher or a wrapper script may read any of it
    cwd: str
    proc: subprocess.Popen

    def still_true(self, cc: tuple[str, ...]) -> bool:
        """Asked of the programs the build runs now, as they are now, under the same environment."""
        try:
            cwd = os.getcwd()
        except OSError:
            return False
        return self.files == _files(cc) and self.environ == _environ() and self.cwd == cwd


_EARLY: dict[tuple[str, ...], _Early] = {}
VERSION_TIMEOUT = 60.0  # seconds a compiler may take to say its version


def ask_early(board: Board) -> None:
    """Start the board's compiler's `--version` now, while pytest collects: the first
    build check waits 2-3 ms for its answer otherwise, before the first test can run. Only
    a compiler found on PATH as named; the others are asked when a build resolves them. The
    answer is used only if nothing it could depend on changed by then (a conftest's PATH,
    a compiler replaced in place)."""
    for kind, cc, *_ in _candidates(board.toolchain):
        if not cc or kind == "zig" or any(a.startswith("--target=") for a in cc):
            return  # none, or found by a probe of its own: asked by the build
        if shutil.which(cc[0]) is None:
            continue  # resolve() tries the next one too
        if cc not in _EARLY:
            with contextlib.suppress(OSError):
                asked = (_files(cc), _environ(), os.getcwd())
                # a session of its own: a wrapper's children end with it (see _end)
                proc = subprocess.Popen(
                    [*cc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
                )
                _EARLY[cc] = _Early(*asked, proc)
        return


def forget_early() -> None:
    """End what was asked early and never read (a session that built nothing): killed, not
    waited for (a compiler that hangs on --version would hold the session's end)."""
    while _EARLY:
        _end(_EARLY.popitem()[1].proc)


def _end(proc: subprocess.Popen) -> None:
    """Kill an early question and all it started (a wrapper script's compiler holds the
    pipe too, and would keep a read of it waiting), reap it and close its pipe."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _banner(proc: subprocess.Popen | None, cc: tuple[str, ...] = ()) -> bytes:
    try:
        if proc is None:
            return subprocess.run([*cc, "--version"], capture_output=True, timeout=VERSION_TIMEOUT).stdout
        return proc.communicate(timeout=VERSION_TIMEOUT)[0]
    except (OSError, subprocess.TimeoutExpired):
        if proc is not None:
            _end(proc)
        return b""


_PARENTS: list[_Early] = []


def _parents_own() -> None:
    """In a forked child: an answer owed to the parent is never read here (nor reaped: kept
    until the child's os._exit)."""
    _PARENTS.extend(_EARLY.values())
    _EARLY.clear()


os.register_at_fork(after_in_child=_parents_own)
