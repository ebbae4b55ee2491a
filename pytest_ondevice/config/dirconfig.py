"""The per-directory `ondevice.toml`: the code under test, declared once.

Found upward from a test source (like conftest.py), it names the library the
tests link (sources by glob or list minus `exclude`, include dirs, defines, flags per
language, link libraries), settings per board kind and per board, and per-file
overrides such as a timeout. Paths and flags may name environment variables
(`${FLATBUFFERS_DIR}/include`), so one file serves every checkout and CI.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .keys import TEST_PATTERNS
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
# data: files the test reads, pushed beside the binary; format: the test harness (formats/)
_FILE_KEYS = {**_BUILD_KEYS, "data": list, "format": str}
# prebuilt: objects or static libraries per board, e.g. "vendor/{board}/libk.a" ({board}, {arch})
# pkg_config: packages found per board; pkg_config_path: extra .pc dirs ({board}, {arch})
_BOARD_KEYS = {k: list for k in ("include_dirs", "defines", "cflags", "cxxflags", "ldflags", "libs")}
SPEC = {
    "sources": list,
    "exclude": list,  # globs taken out of sources (kernels/*.cc also matches kernels/*_test.cc)
    "kind": {k: _BOARD_KEYS for k in ("host", "linux", "baremetal")},  # [kind.baremetal]: per kind of board
    "board": {"*": _BOARD_KEYS},  # [board.mps2-an386]: one board, after its kind
    "prebuilt": list,
    "pkg_config": list,
    "pkg_config_path": list,
    "provides": str,  # the library's pkg-config name, for a Rust -sys crate's build script
    # [models.NAME]: a SavedModel compiled ahead of time for each board, linked into this
    # directory's tests, which call NAME_run() from "NAME_model.h" (docs/aot.md)
    "models": {"*": {"saved_model": str, "signature": str, "tag_set": str}},
    **_FILE_KEYS,
    "files": {"*": {**_FILE_KEYS, "sources": list}},
    # a CMake project run as it is (in the ondevice.toml beside the ini; docs/cmake.md): its
    # source dir, cache variables, targets built, and the CTest labels run or left out
    # data: CTest test name (a glob) -> what it reads, relative to its working directory
    "cmake": {
        "source": str,
        "cache": "table",
        "targets": list,
        "labels": list,
        "exclude_labels": list,
        "data": "table",
    },
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
    format: str | None = None  # declared; None: told from what the source includes


@dataclass(frozen=True)
class Model:
    name: str  # a C identifier: NAME_run(), NAME_model.h
    saved_model: Path
    signature: str = "serving_default"
    tag_set: str = "serve"


@dataclass(frozen=True)
class DirConfig:
    path: Path | None  # None: no ondevice.toml found
    root: Path  # paths in the file are relative to this directory
    sources: tuple[Path, ...] = ()  # the library, one archive per board
    flags: BuildFlags = BuildFlags()
    timeout: float | None = None
    data: tuple[Path, ...] = ()
    format: str | None = None
    files: dict[str, dict] = field(default_factory=dict, hash=False, compare=False)
    prebuilt: tuple[str, ...] = ()  # path patterns relative to root
    pkg_config: tuple[str, ...] = ()
    pkg_config_path: tuple[str, ...] = ()  # path patterns relative to root
    per_board: dict[str, dict] = field(default_factory=dict, hash=False, compare=False)  # kind.X, board.X
    provides: str | None = None  # pkg-config name of the library (sources), for Rust crates
    models: tuple[Model, ...] = ()  # compiled ahead of time, linked into every test here

    def flags_for(self, board: str, kind: str) -> BuildFlags:
        """The directory's flags, then its [kind.KIND] table's, then its [board.NAME] table's."""
        flags = self.flags
        for table in (self.per_board.get(f"kind.{kind}"), self.per_board.get(f"board.{board}")):
            if table:
                flags = _plus(flags, table, self._paths(table.get("include_dirs", [])))
        return flags

    def prebuilt_for(self, board: str, arch: str) -> list[tuple[str, Path]]:
        """(pattern as written, path) of each prebuilt input for one board."""
        return [(p, (self.root / p.format(board=board, arch=arch)).resolve()) for p in self.prebuilt]

    def for_file(self, source: Path, board: str = "", kind: str = "") -> FileSettings:
        """Flags, extra sources, timeout and data files for one test source on one board,
        the board's and the file's overrides applied."""
        base = self.flags_for(board, kind)
        over = self.files.get(source.name)
        if over is None and self.files:  # a file named by its path (no table: no path to resolve)
            over = self.files.get(_relative(source, self.root))
        if not over:
            return FileSettings(base, (), self.timeout, self.data, self.format)
        flags = _plus(base, over, self._paths(over.get("include_dirs", [])))
        extra = tuple(self._glob(over.get("sources", []), "files.sources"))
        data = self.data + tuple(self._glob(over.get("data", []), "files.data"))
        return FileSettings(flags, extra, over.get("timeout", self.timeout), data, over.get("format", self.format))

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


def _plus(flags: BuildFlags, table: dict, include_dirs: list[Path]) -> BuildFlags:
    return BuildFlags(
        flags.include_dirs + tuple(include_dirs),
        *(getattr(flags, k) + tuple(table.get(k, [])) for k in ("defines", "cflags", "cxxflags", "ldflags", "libs")),
    )


_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _expand(data: object, path: Path, key: str = "") -> object:
    """${VAR} and $VAR in every string (paths and flags), ~ at the start of one; an unset
    variable is an error naming the file, the key and the variable."""
    if isinstance(data, dict):
        return {k: _expand(v, path, f"{key}.{k}" if key else k) for k, v in data.items()}
    if isinstance(data, list):
        return [_expand(v, path, key) for v in data]
    if not isinstance(data, str):
        return data

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in os.environ:
            raise ConfigError(f"{path}: '{key}' entry {data!r} uses ${name}, which is not set in the environment")
        return os.environ[name]

    return os.path.expanduser(_VARIABLE.sub(value, data))


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
    """The nearest ondevice.toml from start's directory up to stop, or on up to the root of
    the repository stop lies in: run from a subdirectory (pytest then makes it the rootdir),
    the project's config is still found."""
    here = (start if start.is_dir() else start.parent).resolve()
    stop = _repository_root(stop.resolve())
    for d in [here, *here.parents]:
        candidate = d / FILENAME
        if candidate.is_file():
            return candidate
        if d == stop:
            break
    return None


def _check_board_tables(tables: dict, boards: Collection[str], path: Path) -> None:
    """A [board.NAME] of no known board would apply to nothing, in silence."""
    for name in tables:
        if boards and name not in boards:
            hint = difflib.get_close_matches(name, list(boards), n=1)
            also = f" (did you mean 'board.{hint[0]}'?)" if hint else ""
            raise ConfigError(f"{path}: [board.{name}] names no known board{also}; pytest-ondevice boards lists them")


def _repository_root(path: Path) -> Path:
    for d in [path, *path.parents]:
        if (d / ".git").exists() or (d / ".hg").exists():
            return d
    return path


def cmake_table(path: Path) -> dict[str, Any] | None:
    """The [cmake] table of an ondevice.toml, checked as the rest of the file is, its source
    dir resolved against the file's; None when it has none."""
    try:
        data = load_toml(path)
    except ConfigError:  # the directory's config says so, on the items it would build
        return None
    table = data.get("cmake")
    if table is None:
        return None
    check({"cmake": table}, {"cmake": SPEC["cmake"]}, path)  # the rest of the file is the items' business
    for name, paths in table.get("data", {}).items():
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ConfigError(f"{path}: [cmake.data] '{name}' must be a list of paths, got {paths!r}")
    if "source" not in table:
        raise ConfigError(f"{path}: [cmake] needs 'source', the project's dir (\".\" for this one)")
    return {**table, "source": (path.parent / table["source"]).resolve()}


def load(
    path: Path | None,
    fallback_root: Path,
    test_patterns: tuple[str, ...] = TEST_PATTERNS,
    boards: Collection[str] = (),
) -> DirConfig:
    """test_patterns: the collected test sources, which never go into the library; boards:
    the names a [board.NAME] table may take (none given: any)."""
    if path is None:
        return DirConfig(None, fallback_root)
    data = load_toml(path)
    check(data, SPEC, path)
    _check_board_tables(data.get("board", {}), boards, path)
    data = {k: _expand(v, path, k) for k, v in data.items()}
    cfg = DirConfig(path, path.parent.resolve())
    excluded = [cfg.root / p for p in data.get("exclude", [])]
    sources = tuple(
        src
        for src in cfg._glob(data.get("sources", []), "sources")
        if not any(fnmatch.fnmatch(src.name, t) for t in test_patterns)
        and not any(src.match(str(x)) or fnmatch.fnmatch(str(src), str(x)) for x in excluded)
    )
    per_board = {f"{group}.{name}": table for group in ("kind", "board") for name, table in data.get(group, {}).items()}
    for key, table in per_board.items():
        cfg._paths(table.get("include_dirs", []), f"{key}.include_dirs")
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
        data.get("format"),
        data.get("files", {}),
        tuple(data.get("prebuilt", [])),
        tuple(data.get("pkg_config", [])),
        tuple(data.get("pkg_config_path", [])),
        per_board,
        data.get("provides"),
        _models(data.get("models", {}), cfg.root, path),
    )


def _models(tables: dict[str, dict], root: Path, path: Path) -> tuple[Model, ...]:
    found = []
    for name, table in tables.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"{path}: [models.{name}]: a model's name is a C identifier (it names {name}_run())")
        if "saved_model" not in table:
            raise ConfigError(f"{path}: missing key 'models.{name}.saved_model' (the SavedModel directory)")
        where = (root / table["saved_model"]).resolve()
        if not (where / "saved_model.pb").is_file():
            raise ConfigError(
                f"{path}: key 'models.{name}.saved_model': {table['saved_model']} is not a SavedModel "
                f"directory (no saved_model.pb in {where})"
            )
        found.append(Model(name, where, table.get("signature", "serving_default"), table.get("tag_set", "serve")))
    return tuple(found)
