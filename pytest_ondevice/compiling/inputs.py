"""What a compile or link read, named the way a cache key must see it.

A key must change when anything the compiler or linker read changes, including a
header that would now be found earlier on the search path, and must not change
with where the project is checked out or where the plugin is installed.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

_DEP_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")
_SEARCH_FLAGS = ("-iquote", "-I", "-isystem", "-idirafter")  # GCC's search order


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (compiler -MD, ld --dependency-file)."""
    body = text.replace("\\\r\n", " ").replace("\\\n", " ")
    deps: list[str] = []
    for rule in body.splitlines():
        _, sep, rhs = rule.partition(": ")
        if not sep:
            continue
        for tok in _DEP_TOKEN.findall(rhs):
            path = tok.replace("\\ ", " ").replace("\\#", "#").replace("$$", "$")
            if path not in deps:
                deps.append(path)
    return deps


class PathNames:
    """Absolute paths under a few anchors (the project, our own headers) written
    relative to them, so keys carry across checkouts and installs."""

    def __init__(self, anchors: dict[str, Path]) -> None:
        # longest first: our headers may live inside the project (an editable install)
        self._anchors = sorted(((n, os.path.normpath(str(p))) for n, p in anchors.items()), key=lambda a: -len(a[1]))

    def name(self, path: str) -> str:
        for anchor, base in self._anchors:
            if path == base or path.startswith(base + os.sep):
                return anchor + path[len(base) :]
        return path

    def path(self, name: str) -> str:
        for anchor, base in self._anchors:
            if name.startswith(anchor):
                return base + name[len(anchor) :]
        return name

    def args(self, argv: Iterable[str]) -> list[str]:
        out = []
        for arg in argv:
            for anchor, base in self._anchors:
                arg = arg.replace(base, anchor)
            out.append(arg)
        return out


def flag_values(argv: Sequence[str], flags: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) for each of flags in argv, written joined (-Ifoo) or apart (-I foo)."""
    found = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        for flag in flags:
            if arg == flag and i + 1 < len(argv):
                found.append((flag, argv[i + 1]))
                i += 1
                break
            if arg.startswith(flag) and len(arg) > len(flag) and not _longer_flag(arg, flags, flag):
                found.append((flag, arg[len(flag) :]))
                break
        i += 1
    return found


def _longer_flag(arg: str, flags: Sequence[str], flag: str) -> bool:
    return any(f != flag and f.startswith(flag) and arg.startswith(f) for f in flags)


def search_dirs(argv: Sequence[str], cwd: Path) -> list[str]:
    """The user's include search path in the order the compiler walks it."""
    found = flag_values(argv, _SEARCH_FLAGS)
    dirs: list[str] = []
    for flag in _SEARCH_FLAGS:
        for f, value in found:
            if f == flag:
                d = os.path.normpath(os.path.join(cwd, value))
                if d not in dirs:
                    dirs.append(d)
    return dirs


def under(path: str, dirs: Iterable[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip(os.sep) + os.sep) for d in dirs)


def shadow_candidates(deps: Iterable[str], user_dirs: Sequence[str], own_dirs: Sequence[str]) -> set[str]:
    """Where each header would have been found had it existed in one of the user's
    directories searched before the one it came from: a file appearing there later must
    rebuild (ccache cannot see that). Every directory that holds the header counts (a/b.h
    may have been included as "b.h" or as "a/b.h"); the toolchain's own directories are
    its identity's."""
    order = [*user_dirs, *own_dirs]
    found: set[str] = set()
    for dep in deps:
        for i, d in enumerate(order):
            if under(dep, [d]):
                rel = os.path.relpath(dep, d)
                found.update(os.path.join(earlier, rel) for earlier in user_dirs[: min(i, len(user_dirs))])
    return found - set(deps)


def library_candidates(argv: Sequence[str], cwd: Path) -> set[str]:
    """Every file a -lNAME could open in the user's -L directories."""
    lib_dirs = [os.path.normpath(os.path.join(cwd, v)) for _, v in flag_values(argv, ("-L",))]
    names: list[str] = []
    for _, value in flag_values(argv, ("-l",)):
        names += [value[1:]] if value.startswith(":") else [f"lib{value}.a", f"lib{value}.so"]
    return {os.path.join(d, n) for d in lib_dirs for n in names}


def named_files(argv: Sequence[str], cwd: Path) -> list[str]:
    """Files an argument names outright (a linker script, a version script, an object in
    ldflags): what the linker reads even when it cannot tell us."""
    files = []
    for arg in argv:
        for piece in arg.split(","):
            for candidate in (piece, piece[2:] if piece.startswith(("-T", "-L")) else None):
                if candidate and not candidate.startswith("-"):
                    path = os.path.normpath(os.path.join(cwd, candidate))
                    if os.path.isfile(path) and path not in files:
                        files.append(path)
    return files


@functools.cache
def toolchain_include_dirs(compiler: tuple[str, ...], flags: tuple[str, ...], lang: str) -> tuple[str, ...]:
    """The compiler's own include directories (covered by its identity, not hashed)."""
    dirs, inside = [], False
    for line in _ask_driver([*compiler, *flags, "-E", "-v", "-x", lang, os.devnull]).stderr.splitlines():
        if line.startswith("#include <...> search starts here:"):
            inside = True
        elif line.startswith("End of search list."):
            inside = False
        elif inside:
            dirs.append(line.strip().removesuffix(" (framework directory)"))
    return _both_spellings(dirs)


@functools.cache
def toolchain_library_dirs(compiler: tuple[str, ...], flags: tuple[str, ...]) -> tuple[str, ...]:
    """The compiler's own library directories (its start files, libc, libgcc)."""
    dirs: list[str] = []
    for line in _ask_driver([*compiler, *flags, "-print-search-dirs"]).stdout.splitlines():
        name, _, value = line.partition(": ")
        if name in ("install", "libraries"):
            dirs.extend(v.lstrip("=") for v in value.split(os.pathsep) if v.strip())
    return _both_spellings(dirs)


@functools.cache
def link_search_dirs(compiler: tuple[str, ...], flags: tuple[str, ...]) -> tuple[str, ...]:
    """The -L directories the driver passes to the linker, specs files' included (picolibc's
    `-Tpicolibc.ld` is found there, and ld's dependency file names it as given)."""
    dirs: list[str] = []
    for line in _ask_driver([*compiler, *flags, "-###", "-o", os.devnull, "x.o"]).stderr.splitlines():
        if " -L" in line:  # the collect2/ld command line
            try:
                words = shlex.split(line)
            except ValueError:
                continue
            dirs += [w[2:] for w in words if w.startswith("-L") and len(w) > 2]
    return tuple(os.path.normpath(d) for d in dict.fromkeys(dirs))


def _ask_driver(argv: list[str]) -> subprocess.CompletedProcess:
    """What the compiler driver says about itself; empty output if it cannot be run."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return subprocess.CompletedProcess(argv, -1, "", "")


def _both_spellings(dirs: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for d in dirs:
        for spelling in (os.path.normpath(d), os.path.realpath(d)):
            if spelling not in out and spelling != os.sep:
                out.append(spelling)
    return tuple(out)


class Listings:
    """Which names exist in a directory, read once per session: a key's misses are
    checked by the thousand on a warm rerun, a directory at a time."""

    def __init__(self) -> None:
        self._names: dict[str, frozenset[str]] = {}

    def names(self, directory: str) -> frozenset[str]:
        names = self._names.get(directory)
        if names is None:
            try:
                names = frozenset(os.listdir(directory))
            except OSError:
                names = frozenset()
            self._names[directory] = names
        return names

    def any_exists(self, directory: str, names: Iterable[str]) -> bool:
        return not self.names(directory).isdisjoint(names)
