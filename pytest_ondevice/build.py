"""Turn test sources into binaries for a board, compiling nothing twice.

Every object is cached under a key made of the toolchain identity, the exact
command line and the content of the source and of every header the compiler
reported (its -MMD output), so an unchanged rerun compiles nothing. The code
under test declared in ondevice.toml becomes one static archive per board,
shared by all test binaries of that directory. Compiler processes run in
parallel up to `jobs` at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from . import elf, pkgconfig, sizecheck
from .board import Board
from .dirconfig import BuildFlags, DirConfig
from .toolchain import ResolvedToolchain

T = TypeVar("T")
INCLUDE_DIR = Path(__file__).resolve().parent / "include"
CXX_SUFFIXES = {".cc", ".cpp", ".cxx", ".C", ".c++"}


class BuildError(Exception):
    """A compile or link failed; the message carries the compiler's diagnostics."""


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str


@dataclass
class BuildStats:
    compiled: int = 0
    reused: int = 0
    linked: int = 0
    link_reused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def summary(self) -> str:
        return f"{self.compiled} compiled, {self.reused} reused; {self.linked} linked, {self.link_reused} reused"


class Builder:
    def __init__(self, root: Path, jobs: int, source_root: Path | None = None, defines: tuple[str, ...] = ()) -> None:
        self.root = root
        # __FILE__ relative to the project, as failure messages should show it
        self._prefix_map = [f"-fmacro-prefix-map={source_root}/="] if source_root else []
        self._prefix_map += [f"-D{d}" for d in defines]  # session-wide (--bench-disable)
        self.jobs = max(1, jobs)
        self.stats = BuildStats()
        self._slots = threading.Semaphore(self.jobs)
        self._pending: dict[object, Future] = {}
        self._lock = threading.Lock()
        self._hashes: dict[tuple[str, int, int], str] = {}
        root.mkdir(parents=True, exist_ok=True)
        ignore = root / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# created by pytest-ondevice\n*\n")

    # -- public --------------------------------------------------------------
    def binary(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path, rel: str) -> Artifact:
        """Build one test binary; `rel` is the source's path relative to the project."""
        settings = cfg.for_file(source)
        flags, extra = pkgconfig.merged(settings.flags, self._pkg_flags(board, cfg)), settings.extra_sources
        out_dir = self.root / board.name
        archive = self._library(board, tc, cfg)
        # the runtime is compiled with each directory's flags: one copy per set of flags, so
        # directories with different flags neither share a wrong object nor evict each other's
        flags_id = hashlib.sha256(repr(flags).encode()).hexdigest()[:10]
        runtime = [
            self._compile(board, tc, src, flags, out_dir / "runtime" / flags_id / (src.name + ".o"))
            for src in board.toolchain.runtime
        ]
        objects = [
            self._compile(board, tc, src, flags, out_dir / "tests" / (_safe_rel(src, name) + ".o"))
            for src, name in [
                (source, rel),
                *((x, f"{rel}.extra/{_rel_to(x, cfg.root)}") for x in extra),
            ]
        ]
        cxx = any(p.suffix in CXX_SUFFIXES for p in (source, *extra, *cfg.sources))
        exe = out_dir / "bin" / Path(rel).with_suffix("")
        if board.kind == "baremetal":
            exe = exe.with_name(exe.name + ".elf")
        inputs = [*objects, *([archive] if archive else []), *self._prebuilt(board, cfg), *runtime]
        script = self._linker_script(board)
        try:
            artifact = self._link(board, tc, flags, inputs, exe, cxx, script)
        except BuildError as e:
            raise sizecheck.from_link_output(board, str(e), rel) or e from None
        sizecheck.check_elf(board, artifact.path, rel)
        return artifact

    def _prebuilt(self, board: Board, cfg: DirConfig) -> list[Path]:
        """The directory's prebuilt objects and libraries for this board, checked to exist and
        to be built for the board's architecture (from their ELF headers, not a failed link)."""
        paths = []
        for pattern, path in cfg.prebuilt_for(board.name, board.arch):
            where = f"{cfg.path}: prebuilt '{pattern}'"
            if not path.is_file():
                raise BuildError(f"{where}: {path} not found for board {board.name} (build it for this board first)")
            _check_arch(path, board, where)
            paths.append(path)
        return paths

    def _pkg_flags(self, board: Board, cfg: DirConfig) -> BuildFlags:
        """The directory's pkg_config packages for this board, asked once per session."""

        def ask() -> BuildFlags:
            try:
                flags = pkgconfig.flags_for(board, cfg)
            except pkgconfig.PkgConfigError as e:
                raise BuildError(str(e)) from None
            dirs = [Path(f[2:]) for f in flags.ldflags if f.startswith("-L")]
            for lib in flags.libs:  # the static libraries pkg-config named: built for this board?
                for d in dirs:
                    if (d / f"lib{lib}.a").is_file():
                        _check_arch(d / f"lib{lib}.a", board, f"{cfg.path}: pkg-config's -l{lib}")
            return flags

        return self._once(("pkg-config", board.name, cfg.path), ask)

    def _linker_script(self, board: Board) -> Path | None:
        """The board's script with its [memory] figures filled in."""
        template = board.toolchain.linker_script
        if template is None:
            return None
        mem = board.memory
        values = {
            "FLASH_ORIGIN": hex(mem.flash_origin),
            "FLASH_SIZE": str(mem.flash or 0),
            "RAM_ORIGIN": hex(mem.ram_origin),
            "RAM_SIZE": str(mem.ram or 0),
            "STACK_SIZE": str(mem.stack),
        }
        text = template.read_text()
        for key, value in values.items():
            text = text.replace(f"@{key}@", value)
        out = self.root / board.name / "link.ld"
        if _read(out) != text:
            out.parent.mkdir(parents=True, exist_ok=True)
            _write(out, text)
        return out

    # -- library -------------------------------------------------------------
    def _once(self, key: object, fn: Callable[[], T]) -> T:
        """Run fn once per key per session; concurrent callers wait for the first."""
        with self._lock:
            fut = self._pending.get(key)
            owner = fut is None
            if owner:
                fut = self._pending[key] = Future()
        if owner:
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)
        return fut.result()

    def _library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path | None:
        if not cfg.sources:
            return None
        return self._once(("lib", board.name, cfg.path), lambda: self._build_library(board, tc, cfg))

    def _build_library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path:
        assert cfg.path is not None
        cfg_id = hashlib.sha256(str(cfg.path).encode()).hexdigest()[:10]
        lib_dir = self.root / board.name / "lib" / f"{cfg.root.name}-{cfg_id}"
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [
                pool.submit(
                    self._compile,
                    board,
                    tc,
                    src,
                    pkgconfig.merged(cfg.flags, self._pkg_flags(board, cfg)),
                    lib_dir / "obj" / (_safe_rel(src, _rel_to(src, cfg.root)) + ".o"),
                )
                for src in cfg.sources
            ]
            errors, objects = [], []
            for f in futures:
                try:
                    objects.append(f.result())
                except BuildError as e:
                    errors.append(str(e))
        if errors:
            raise BuildError(
                f"the library declared in {cfg.path} failed to build "
                f"({len(errors)} of {len(cfg.sources)} sources):\n" + "\n".join(errors)
            )
        archive = lib_dir / "libundertest.a"
        key = self._key(tc.identity, [str(o) for o in objects], [self._hash(o) for o in objects])
        if _read(archive.with_suffix(".key")) == key and archive.exists():
            return archive
        tmp = archive.with_name(f".{archive.name}.{os.getpid()}.{threading.get_ident()}")
        self._tool([*tc.ar, "rcs", str(tmp), *map(str, objects)], "archive")
        os.replace(tmp, archive)
        _write(archive.with_suffix(".key"), key)
        return archive

    # -- compile and link ----------------------------------------------------
    def _compile(self, board: Board, tc: ResolvedToolchain, src: Path, flags: BuildFlags, out: Path) -> Path:
        return self._once(("obj", out), lambda: self._compile_now(board, tc, src, flags, out))

    def _compile_now(self, board: Board, tc: ResolvedToolchain, src: Path, flags: BuildFlags, out: Path) -> Path:
        cxx = src.suffix in CXX_SUFFIXES
        argv = [
            *(tc.cxx if cxx else tc.cc),
            *(board.toolchain.cxxflags if cxx else board.toolchain.cflags),
            *(flags.cxxflags if cxx else flags.cflags),
            *self._prefix_map,
            f"-I{INCLUDE_DIR}",
            f"-I{src.parent}",
            *(f"-I{d}" for d in flags.include_dirs),
            *(f"-D{d}" for d in flags.defines),
            "-c",
            str(src),
        ]
        manifest = out.with_name(out.name + ".json")
        key = self._key(tc.identity, argv, [self._hash(src)])
        if out.exists() and self._manifest_valid(manifest, key):
            self.stats.count("reused")
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.{threading.get_ident()}")
        dep = tmp.with_name(tmp.name + ".d")
        try:
            self._tool([*argv, "-o", str(tmp), "-MMD", "-MF", str(dep)], "compile")
            deps = _parse_depfile(dep.read_text(errors="replace"))
        finally:
            dep.unlink(missing_ok=True)
        os.replace(tmp, out)
        recorded = {str(p): self._hash(Path(p)) for p in deps if Path(p).is_file()}
        _write(manifest, json.dumps({"key": key, "deps": recorded}))
        self.stats.count("compiled")
        return out

    def _link(
        self,
        board: Board,
        tc: ResolvedToolchain,
        flags: BuildFlags,
        inputs: list[Path],
        exe: Path,
        cxx: bool,
        script: Path | None,
    ) -> Artifact:
        argv = [
            *(tc.cxx if cxx else tc.cc),
            *map(str, inputs),
            *board.toolchain.ldflags,
            *flags.ldflags,
            *([f"-T{script}"] if script else []),
            *(f"-l{lib}" for lib in (*flags.libs, *board.toolchain.libs)),
        ]
        hashed = [*inputs, *([script] if script else [])]
        key = self._key(tc.identity, argv, [self._hash(p) for p in hashed])
        keyfile = exe.with_name(exe.name + ".key")
        if exe.exists() and _read(keyfile) == key:
            self.stats.count("link_reused")
            return Artifact(exe, self._hash(exe))
        exe.parent.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_name(f".{exe.name}.{os.getpid()}.{threading.get_ident()}")
        self._tool([*argv, "-o", str(tmp)], "link")
        os.replace(tmp, exe)
        _write(keyfile, key)
        self.stats.count("linked")
        return Artifact(exe, self._hash(exe))

    def _tool(self, argv: list[str], what: str) -> None:
        with self._slots:
            try:
                proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL)
            except OSError as e:
                raise BuildError(f"{what} failed: cannot run {argv[0]}: {e.strerror}") from None
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).decode(errors="replace").strip()
            raise BuildError(f"{what} failed: {shlex.join(argv)}\n{output}")

    # -- cache helpers -------------------------------------------------------
    def _manifest_valid(self, manifest: Path, key: str) -> bool:
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return False
        if data.get("key") != key:
            return False
        for path, digest in data.get("deps", {}).items():
            p = Path(path)
            if not p.is_file() or self._hash(p) != digest:
                return False
        return True

    def _hash(self, path: Path) -> str:
        st = path.stat()
        memo = (str(path), st.st_mtime_ns, st.st_size)
        digest = self._hashes.get(memo)
        if digest is None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            digest = self._hashes[memo] = h.hexdigest()
        return digest

    @staticmethod
    def _key(identity: str, argv: list[str], digests: list[str]) -> str:
        return hashlib.sha256(json.dumps([identity, argv, digests]).encode()).hexdigest()


def _check_arch(path: Path, board: Board, where: str) -> None:
    want = _host_arch() if board.arch == "native" else board.arch
    try:
        found = elf.machines(path)
    except elf.ElfError as e:
        raise BuildError(f"{where}: {e}") from None
    if found and found != {want}:
        raise BuildError(
            f"{where}: {path.name} was built for {', '.join(sorted(found))}, but board {board.name} "
            f"is {want}: rebuild it for {board.name}"
        )


def _host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, "arm" if machine.startswith("arm") else machine)


def _rel_to(path: Path, root: Path) -> str:
    return os.path.relpath(path, root)


def _safe_rel(path: Path, rel: str) -> str:
    """Object names keep the source's relative path, so a/x.c and b/x.c never collide."""
    parts = [("__up__" if p == ".." else p) for p in Path(rel).parts if p not in ("", ".", "/")]
    return "/".join(parts) if parts else path.name


_DEP_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


def _parse_depfile(text: str) -> list[str]:
    body = text.replace("\\\n", " ").replace("\\\r\n", " ")
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


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)
