"""The per-directory `ondevice.toml`: the code under test, declared once.

Found upward from a test source (like conftest.py), it names the library the
tests link (sources by glob or list, include dirs, defines, flags per language,
link libraries) and per-file overrides such as a timeout.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from .schema import SECONDS, ConfigError, check, load_toml

FILENAME = "ondevice.toml"

_BUILD_KEYS = {
    "include_dirs": list,
    "defines": list,
    "cflags": list,
    "cxxflags": list,
    "ldflags": list,
    "libs": list,
    "timeout": SECONDS,
}
_FILE_KEYS = {**_BUILD_KEYS, "data": list}  # data: files the test reads, pushed beside the binary
# prebuilt: objects or static libraries per board, e.g. "vendor/{board}/libk.a" ({board}, {arch})
# pkg_config: packages found per board; pkg_config_path: extra .pc dirs ({board}, {arch})
SPEC = {
    "sources": list,
    "prebuilt": list,
    "pkg_config": list,
    "pkg_config_path": list,
    **_FILE_KEYS,
    "files": {"*": {**_FILE_KEYS, "sources": list}},
}


@dataclass(frozen=True)
class BuildFlags:
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ()
    cxxflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileSettings:
    flags: BuildFlags
    extra_sources: tuple[Path, ...]
    timeout: float | None
    data: tuple[Path, ...]


@dataclass(frozen=True)
class DirConfig:
    path: Path | None  # None: no ondevice.toml found
    root: Path  # paths in the file are relative to this directory
    sources: tuple[Path, ...] = ()  # the library, one archive per board
    flags: BuildFlags = BuildFlags()
    timeout: float | None = None
    data: tuple[Path, ...] = ()
    files: dict[str, dict] = field(default_factory=dict, hash=False, compare=False)
    prebuilt: tuple[str, ...] = ()  # path patterns relative to root
    pkg_config: tuple[str, ...] = ()
    pkg_config_path: tuple[str, ...] = ()  # path patterns relative to root

    def prebuilt_for(self, board: str, arch: str) -> list[tuple[str, Path]]:
        """(pattern as written, path) of each prebuilt input for one board."""
        return [(p, (self.root / p.format(board=board, arch=arch)).resolve()) for p in self.prebuilt]

    def for_file(self, source: Path) -> FileSettings:
        """Flags, extra sources, timeout and data files for one test source, overrides applied."""
        over = self.files.get(source.name)
        if over is None:
            rel = _relative(source, self.root)
            over = self.files.get(rel, {})
        if not over:
            return FileSettings(self.flags, (), self.timeout, self.data)
        flags = BuildFlags(
            self.flags.include_dirs + tuple(self._paths(over.get("include_dirs", []))),
            self.flags.defines + tuple(over.get("defines", [])),
            self.flags.cflags + tuple(over.get("cflags", [])),
            self.flags.cxxflags + tuple(over.get("cxxflags", [])),
            self.flags.ldflags + tuple(over.get("ldflags", [])),
            self.flags.libs + tuple(over.get("libs", [])),
        )
        extra = tuple(self._glob(over.get("sources", []), "files.sources"))
        data = self.data + tuple(self._glob(over.get("data", []), "files.data"))
        return FileSettings(flags, extra, over.get("timeout", self.timeout), data)

    def _paths(self, items: list[str], key: str = "include_dirs") -> list[Path]:
        """Include dirs, each of which must exist: a typo would only move the error to a
        compiler's "file not found", or let a header of the same name elsewhere be used."""
        dirs = [(self.root / p).resolve() for p in items]
        for item, path in zip(items, dirs, strict=True):
            if not path.is_dir():
                what = "is not a directory" if path.exists() else "does not exist"
                raise ConfigError(f"{self.path}: '{key}' entry {item!r} {what} ({path})")
        return dirs

    def _check_overrides(self) -> None:
        """Each [files."NAME"] names a file here (by name anywhere below, or by path), and
        its include dirs exist: a misspelt name would silently apply to nothing."""
        for name, over in self.files.items():
            self._paths(over.get("include_dirs", []), f"files.{name}.include_dirs")
            if (self.root / name).is_file() or ("/" not in name and _named_below(self.root, name)):
                continue
            raise ConfigError(
                f"{self.path}: [files.{name!r}] names no file: there is no {name!r} in {self.root}"
                + ("" if "/" in name else " or below it")
            )

    def _glob(self, patterns: list[str], key: str) -> list[Path]:
        found: list[Path] = []
        for pattern in patterns:
            matches = sorted(self.root.glob(pattern)) if _is_glob(pattern) else [self.root / pattern]
            matches = [m.resolve() for m in matches if m.is_file()]
            if not matches:
                raise ConfigError(f"{self.path}: '{key}' entry {pattern!r} matches no file")
            found.extend(m for m in matches if m not in found)
        return found


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.name


def _named_below(root: Path, name: str) -> bool:
    """Is there a file called name under root (hidden dirs such as .git not searched)?"""
    for _here, dirs, files in os.walk(root):
        if name in files:
            return True
        dirs[:] = [d for d in dirs if not d.startswith(".")]
    return False


def find(start: Path, stop: Path) -> Path | None:
    """The nearest ondevice.toml from start's directory up to (and including) stop."""
    here = start if start.is_dir() else start.parent
    stop = stop.resolve()
    for d in [here.resolve(), *here.resolve().parents]:
        candidate = d / FILENAME
        if candidate.is_file():
            return candidate
        if d == stop:
            break
    return None


@functools.cache
def load(path: Path | None, fallback_root: Path) -> DirConfig:
    if path is None:
        return DirConfig(None, fallback_root)
    data = load_toml(path)
    check(data, SPEC, path)
    cfg = DirConfig(path, path.parent.resolve())
    sources = tuple(cfg._glob(data.get("sources", []), "sources"))
    flags = BuildFlags(
        tuple(cfg._paths(data.get("include_dirs", []))),
        *(tuple(data.get(k, [])) for k in ("defines", "cflags", "cxxflags", "ldflags", "libs")),
    )
    files = tuple(cfg._glob(data.get("data", []), "data"))
    DirConfig(path, cfg.root, files=data.get("files", {}))._check_overrides()
    return DirConfig(
        path,
        cfg.root,
        sources,
        flags,
        data.get("timeout"),
        files,
        data.get("files", {}),
        tuple(data.get("prebuilt", [])),
        tuple(data.get("pkg_config", [])),
        tuple(data.get("pkg_config_path", [])),
    )
