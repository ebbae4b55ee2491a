"""Turn test sources into binaries for a board, compiling nothing twice and nothing wrong.

Every object, archive, linker script and binary is stored under the key of all it was
made from (see store.py): the toolchain's identity, the command line with the project
and our headers' locations taken out, and the content of every file the compiler or
linker read, found after the fact from their dependency output (ccache's manifests),
plus the places where a header or library would have been found had it existed (so a
new one that shadows the old rebuilds). Files in the toolchain's own directories are
covered by its identity. Compilers run in parallel up to `jobs` at a time.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from ..config.board import BUILTIN_DIR, Board, debian_arch
from ..config.dirconfig import BuildFlags, DirConfig, FileSettings, Model
from ..config.keys import CUDA_SUFFIX
from ..formats import NO_NEEDS, Needs
from . import elf, inputs, pkgconfig, sizecheck, toolchain
from .store import CacheError, Entry, Store, checkpoint, key_of, unusable
from .toolchain import ResolvedToolchain

if TYPE_CHECKING:
    from . import aot

T = TypeVar("T")


def _cuda() -> ModuleType:
    """nvcc's module, imported by the first build with a .cu source: 3 ms of every other
    run's start-up with the AOT module (measured), for what most runs never build."""
    from . import cuda

    return cuda


PACKAGE_DIR = Path(__file__).resolve().parent.parent
INCLUDE_DIR = PACKAGE_DIR / "include"
COVERAGE_RUNTIME = BUILTIN_DIR / "runtime" / "common" / "coverage.c"
GCOV_INFO_SECTION = "ondevice_gcov_info"  # coverage.c walks it: __start_/__stop_ of a C-named section
CXX_SUFFIXES = {".cc", ".cpp", ".cxx", ".C", ".c++", CUDA_SUFFIX}  # nvcc hands a .cu's host code to C++
# a file changed this close to a compile's start may have been read half old, half new:
# timestamps come from a coarse kernel clock (a few ms), so allow for it
TOO_NEW_NS = 20_000_000
_DISK_TROUBLE = ("No space left on device", "Read-only file system", "Disk quota exceeded")


class BuildError(Exception):
    """A compile or link failed; the message carries the compiler's diagnostics."""


class LinkError(BuildError):
    """Every object compiled, and the link failed."""


class EntryLost(Exception):
    """A cache entry this session already had is gone (removed by hand, or by a tool that
    ignores holds): what used it is built again, never reported as the code's failure."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path


LOST_RETRIES = 2  # rebuilds of a binary whose cache entries keep vanishing, before an error


def _install_hint(board: Board, needs: Needs) -> str:
    """Where a test harness's library comes from, for this board."""
    if board.kind == "baremetal":
        what = needs.debian_package or "this test harness"
        return f"{what} needs an operating system: run these tests on a Linux or host board"
    if not needs.debian_package:
        return ""
    arch = debian_arch(board.arch)
    package = needs.debian_package + (f":{arch}" if arch else "")
    if arch:  # another architecture's package: dpkg must be told of it first (multiarch)
        return f"install it: dpkg --add-architecture {arch} && apt-get update && apt-get install {package}"
    return f"install it: apt-get install {package}"


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str


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


class Builder:
    def __init__(
        self,
        root: Path,
        jobs: int,
        source_root: Path | None = None,
        defines: tuple[str, ...] = (),
        cache_dir: Path | None = None,
        cache_shared: bool | None = None,
        coverage_dir: Path | None = None,
        test_patterns: tuple[str, ...] = (),
    ) -> None:
        """cache_shared: accept the cache entries of the members of the cache root's group
        (ondevice_cache_shared; None: from ONDEVICE_CACHE_SHARED); coverage_dir: build for
        gcov (boards with an OS) and say there where each instrumented object is."""
        self.root = root
        self.coverage_dir = coverage_dir
        self.test_patterns = test_patterns  # the collected sources: their own functions are not counted
        self.source_root = Path(os.path.normpath(source_root or Path.cwd()))
        src = str(self.source_root)
        # the same sources give the same bytes in any checkout: paths in debug info and
        # __FILE__ are relative to the project, our own headers' install path is hidden
        self._session_flags = [  # the compiler tries the last map first
            f"-ffile-prefix-map={src}=.",
            f"-ffile-prefix-map={src}/=",
            f"-ffile-prefix-map={INCLUDE_DIR}=ondevice-include",
            *(f"-D{d}" for d in defines),  # session-wide (--bench-disable)
        ]
        self._names = inputs.PathNames({"<ondevice>": INCLUDE_DIR, "<root>": self.source_root})
        self._listings = inputs.Listings()
        self.jobs = max(1, jobs)
        self.stats = BuildStats()
        self._slots = threading.Semaphore(self.jobs)
        self._pending: dict[object, Future] = {}
        self._lock = threading.Lock()
        # Look-ups in the store take turns. Each is dozens of short system calls, and the
        # interpreter lock changes hands at each one when several threads look at once: four
        # threads checking 100 warm binaries made 52,000 futex calls, each check 2.5 times
        # the CPU it takes alone.
        self._looking = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._closed = False
        self._no_depfile: set[tuple[str, ...]] = set()  # linkers without --dependency-file
        self._requested: set[tuple] = set()
        self._finished: set[tuple] = set()
        self._planned: set[tuple] = set()  # what the selected binaries will compile, known up front
        self.tools_started = 0  # compilers, archivers and linkers run: none for a warm cache
        self._current = ""
        self.model_sizes: dict[tuple[str, str], aot.ModelSizes] = {}  # (board, model): what it takes
        try:
            root.mkdir(parents=True, exist_ok=True)
            ignore = root / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by pytest-ondevice\n*\n")
        except OSError as e:
            raise unusable(root, e, "build dir") from None
        self.store = Store(cache_dir or root / "cache", cache_shared)

    # -- public --------------------------------------------------------------
    def binary(
        self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path, rel: str, needs: Needs = NO_NEEDS
    ) -> Artifact:
        """Build one test binary; `rel` is the source's path relative to the project, `needs`
        what its test harness links (GoogleTest, CppUTest). Called again for a binary whose
        cache entry vanished since (see intact()), it builds what is gone."""
        for _ in range(LOST_RETRIES):
            try:
                return self._binary(board, tc, cfg, source, rel, needs)
            except EntryLost:
                self._forget_vanished()
        try:
            return self._binary(board, tc, cfg, source, rel, needs)
        except EntryLost as e:
            raise CacheError(
                f"cache entries vanish while this session uses them ({e.path}): something besides "
                f"pytest-ondevice removes files from {self.store.root}; stop it, or set ondevice_cache_dir "
                "to a directory only pytest-ondevice manages"
            ) from None

    def intact(self, artifact: Artifact) -> bool:
        """Whether a binary built this session is still in the cache as built. One removed
        since (by hand: trims and cleans leave what a live session holds) is built again
        with binary(), never run as missing (no strike on the device, no failure)."""
        try:
            return self.store.digest(artifact.path) == artifact.sha256
        except OSError:
            return False

    def _forget_vanished(self) -> None:
        """Forget this session's results whose cache entries are gone: asked again, they are rebuilt."""
        with self._lock:
            gone = [key for key, fut in self._pending.items() if fut.done() and _vanished(fut)]
            for key in gone:
                del self._pending[key]

    def _binary(
        self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path, rel: str, needs: Needs
    ) -> Artifact:
        settings = cfg.for_file(source, board.name, board.kind)
        flags = pkgconfig.merged(settings.flags, self._pkg_flags(board, cfg))
        if board.memory.stack_limit:  # each case's stack budget, checked by micro_test.h on the device
            flags = pkgconfig.merged(
                flags, BuildFlags(defines=(f"ONDEVICE_BOARD_STACK_LIMIT={board.memory.stack_limit}",))
            )
        if needs.pkg_config:
            flags = pkgconfig.merged(flags, self._pkg_flags(board, cfg, needs))
        own = _own_sources(source, settings, needs)
        gpu = any(p.suffix == CUDA_SUFFIX for p in (*own, *cfg.sources))
        if gpu:  # the CUDA runtime for the board's architecture, static unless the board says shared
            cuda = _cuda()
            flags = pkgconfig.merged(flags, BuildFlags(ldflags=tuple(cuda.link_flags(cuda.toolkit(board), board))))
        models, model_dirs = self._models(board, tc, cfg)
        if model_dirs:  # NAME_model.h of each model the directory declares
            flags = pkgconfig.merged(flags, BuildFlags(include_dirs=model_dirs))
        archive = self._library(board, tc, cfg)
        runtime = [self._compile(board, tc, src, flags) for src in self.runtime_sources(board)]
        # a source made for this test file (its defines) sees it; a shared one (gtest's listener) is compiled once
        harness = pkgconfig.merged(flags, self._harness_flags(source, needs)) if needs.defines else flags
        objects = [self._compile(board, tc, src, harness if src in needs.sources else flags) for src in own]
        cxx = any(p.suffix in CXX_SUFFIXES for p in (*own, *cfg.sources))
        name = Path(rel).name + ".elf"
        inputs_ = [*objects, *models, *([archive] if archive else []), *self._prebuilt(board, cfg), *runtime]
        script = self._linker_script(board)
        try:
            artifact = self._link(board, tc, flags, inputs_, name, cxx, script)
        except BuildError as e:
            raise sizecheck.from_link_output(board, str(e), rel) or e from None
        sizecheck.check_elf(board, artifact.path, rel)
        if gpu and (missing := _cuda().missing_images(artifact.path, board)):
            raise BuildError(
                f"{rel}: the binary carries no GPU code for {', '.join(missing)} ({board.path.name}'s "
                f"cuda.archs); nvcc was asked for it: is the CUDA toolkit older than that architecture?"
            )
        self._publish(board, rel, artifact)
        return artifact

    def _harness_flags(self, source: Path, needs: Needs) -> BuildFlags:
        """What a harness source of ours (a generated main) learns of the test file: its
        directory on the include path, its name as __FILE__ spells it, the format's defines."""
        name = os.path.relpath(source, self.source_root) if source.is_relative_to(self.source_root) else str(source)
        quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return BuildFlags(include_dirs=(source.parent,), defines=(*needs.defines, f"ONDEVICE_TEST_SOURCE={quoted}"))

    def _publish(self, board: Board, rel: str, artifact: Artifact) -> None:
        """A link to the latest binary of a source for people (a debugger, a flasher), named
        after the whole source name (a_test.c and a_test.cc never share one); runs use the
        cache entry itself."""
        link = self.root / board.name / "bin" / f"{rel}.elf"
        with contextlib.suppress(OSError):
            if os.readlink(link) == str(artifact.path):
                return  # a rerun: already there
        tmp = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(artifact.path)
            checkpoint("link-published")
            os.replace(tmp, link)
        except OSError as e:
            raise unusable(self.root, e, "build dir") from None

    def summary(self) -> str:
        return self.stats.summary(self.store.stats.damaged, self.store.stats.uncached, self.store.stats.untrusted)

    def stop(self) -> None:
        """Session end or interrupt: compilers still running are killed, none start."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:  # the driver and what it started (cc1, as, ld hold our pipe)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)

    def close(self, max_cache_size: int | None = None) -> None:
        """After the last run: private artifacts dropped, the cache trimmed."""
        self.stop()
        self.store.close(max_cache_size)

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

    def _pkg_flags(self, board: Board, cfg: DirConfig, needs: Needs | None = None) -> BuildFlags:
        """The directory's pkg_config packages for this board (or, given needs, the test
        harness's alone), asked once per session."""

        def ask() -> BuildFlags:  # a missing package: PkgConfigError, an environment error (not BuildError)
            if needs is None:
                flags = pkgconfig.flags_for(board, cfg)
            else:
                flags = pkgconfig.flags_for(board, cfg, needs.pkg_config, _install_hint(board, needs))
            dirs = [Path(f[2:]) for f in flags.ldflags if f.startswith("-L")]
            for lib in flags.libs:  # the static libraries pkg-config named: built for this board?
                for d in dirs:
                    if (d / f"lib{lib}.a").is_file():
                        _check_arch(d / f"lib{lib}.a", board, f"{cfg.path}: pkg-config's -l{lib}")
            return flags

        return self._once(("pkg-config", board.name, cfg.path, needs), ask)

    def _linker_script(self, board: Board) -> Path | None:
        """The board's script with its [memory] figures filled in, stored by its content."""
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

        def store() -> Path:
            return self._stored(key_of("linker-script", text), "link.ld", lambda out: out.write_text(text))

        return self._once(("ld", text), store)

    def _stored(self, key: str, name: str, make: Callable[[Path], object]) -> Path:
        """The cache's entry for key, made into `name` by whoever gets there first."""
        with self.store.lock(key):
            entry = self.store.get(key)
            if entry is None:
                staged = self.store.staging()
                make(staged / name)
                entry = self.store.commit(staged, name, key)
        return entry.path

    # -- models compiled ahead of time --------------------------------------------
    def _models(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> tuple[list[Path], tuple[Path, ...]]:
        """The objects of the directory's models for this board (each compiled once per
        session), and where their generated headers are."""
        objects: list[Path] = []
        dirs: list[Path] = []
        for model in cfg.models:
            found, where = self._once(("aot", board.name, model), lambda m=model: self._model(board, tc, cfg, m))
            objects += found
            dirs.append(where)
        return objects, tuple(dirs)

    def _model(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, model: Model) -> tuple[list[Path], Path]:
        """tfcompile's kernels and constants, from the store (keyed by the SavedModel's content,
        TensorFlow's version, the triple and the CPU), and the C entry made from its header."""
        from . import aot  # imported by a directory that declares a model, not by every run

        if not board.aot.triple:
            raise aot.AotError(
                f"model '{model.name}' ({cfg.path}) cannot be compiled for board '{board.name}': its board file "
                'has no [aot] triple (XLA\'s target triple, e.g. triple = "armv7em-none-eabihf", cpu = "cortex-m4")'
            )
        triple = aot.native_triple() if board.aot.triple == "native" else board.aot.triple
        tf = aot.compiler()
        try:
            content = aot.saved_model_digest(model.saved_model)
        except OSError as e:
            raise aot.AotError(f"model '{model.name}': cannot read {model.saved_model}: {e.strerror}") from None
        key = key_of(
            "aot",
            tf.identity,
            content,
            triple,
            board.aot.cpu,
            model.signature,
            model.tag_set,
            aot.class_name(model.name),
        )
        made: dict[str, Path] = {}

        def produce(which: str) -> Callable[[Path], object]:
            def into(out: Path) -> None:
                if not made:
                    with self._lock:
                        self._current = f"{board.name}: model {model.name} (tfcompile)"
                    staged = self.store.staging()
                    result = aot.compile_model(
                        tf,
                        model.saved_model,
                        model.signature,
                        model.tag_set,
                        aot.class_name(model.name),
                        triple,
                        board.aot.cpu,
                        staged,
                    )
                    if result.returncode != 0 or not (staged / "model_constants.o").is_file():
                        raise aot.AotError(aot.failure(model.name, board.name, triple, result))
                    made["dir"] = staged
                    self.stats.count("compiled", key)
                shutil.copyfile(made["dir"] / which, out)

            return into

        header = self._stored(key_of(key, "header"), "model.h", produce("model.h"))
        kernels = self._stored(key_of(key, "kernels"), f"{model.name}.o", produce("model.o"))
        constants = self._stored(key_of(key, "constants"), f"{model.name}_constants.o", produce("model_constants.o"))
        if not made:
            self.stats.count("reused", key)
        _check_arch(kernels, board, f"model '{model.name}'")
        try:
            program = aot.read_header(header.read_text(errors="replace"))
        except aot.HeaderError as e:
            raise aot.AotError(
                f"model '{model.name}' cannot run on board '{board.name}' without XLA's runtime: {e}"
            ) from None
        # one directory per SavedModel: two ondevice.toml may each name a model "mlp"
        place = hashlib.sha256(str(model.saved_model).encode()).hexdigest()[:10]
        where = self.root / board.name / "aot" / f"{model.name}-{place}"
        try:
            h_text, c_text = aot.c_entry(program, model.name)
        except aot.HeaderError as e:
            raise aot.AotError(f"model '{model.name}' ({model.saved_model}): {e}") from None
        written = aot.write_if_changed(where / f"{model.name}_model.h", h_text)
        written = aot.write_if_changed(where / f"{model.name}_model.c", c_text) or written
        if written:  # a file this new could be half-written to the store's eye: let it settle
            time.sleep(TOO_NEW_NS * 1.5 / 1e9)
        entry = self._compile(board, tc, where / f"{model.name}_model.c", BuildFlags(include_dirs=(where,)))
        with self._lock:
            self.model_sizes[(board.name, model.name)] = aot.sizes(program, kernels, constants)
        return [entry, kernels, constants], where

    def offered_archive(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> tuple[Path, tuple[Path, ...]]:
        """One static library of the directory's `sources` and its models, for a Rust crate's
        build script (ondevice.toml `provides`), and where the models' headers are."""
        library = self._library(board, tc, cfg)
        models, dirs = self._models(board, tc, cfg)
        if not models:
            assert library is not None
            return library, dirs

        def archive(out: Path) -> None:
            if library is not None:
                shutil.copyfile(library, out)
            self._tool([*tc.ar, "qcsD", str(out), *map(str, models)], "archive")

        inputs_ = [*([library] if library else []), *models]
        key = key_of("offered-archive", tc.identity, [self._input_digest(p) for p in inputs_])
        return self._stored(key, "libundertest.a", archive), dirs

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

    def once(self, key: object, fn: Callable[[], T]) -> T:
        """fn's result, made once per session by whoever asks first (others wait for it)."""
        return self._once(key, fn)

    def library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path | None:
        """The directory's library (its `sources`) for this board, as a static archive."""
        return self._library(board, tc, cfg)

    def _library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path | None:
        if not cfg.sources:
            return None
        return self._once(("lib", board.name, cfg.path), lambda: self._build_library(board, tc, cfg))

    def _build_library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path:
        assert cfg.path is not None
        flags = pkgconfig.merged(cfg.flags_for(board.name, board.kind), self._pkg_flags(board, cfg))
        with self._lock:  # the whole library counts in the progress line from the start
            self._requested.update(("obj", board.name, src, flags) for src in cfg.sources)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(self._compile, board, tc, src, flags) for src in cfg.sources]
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
        try:
            return self._stored(
                key_of("archive", tc.identity, [self._input_digest(o) for o in objects]),
                "libundertest.a",
                # q, not r: members with the same basename (a/util.o, b/util.o) all stay
                lambda out: self._tool([*tc.ar, "qcsD", str(out), *map(str, objects)], "archive"),
            )
        except BuildError:
            self._check_inputs(objects)
            raise

    def _input_digest(self, path: Path) -> str:
        """An input's digest; one of ours that vanished from the cache is built again."""
        try:
            return self.store.digest(path)
        except FileNotFoundError:
            if inputs.under(str(path), [str(self.store.base)]):
                raise EntryLost(path) from None
            raise

    def _check_inputs(self, paths: list[Path]) -> None:
        """After a failed archive or link: an input of ours gone meanwhile is the cause."""
        for path in paths:
            if inputs.under(str(path), [str(self.store.base)]) and not os.path.lexists(path):
                raise EntryLost(path)

    # -- compile and link ----------------------------------------------------
    def _compile(self, board: Board, tc: ResolvedToolchain, src: Path, flags: BuildFlags) -> Path:
        key = ("obj", board.name, src, flags)
        with self._lock:
            self._requested.add(key)

        def compile_now() -> Path:
            with self._lock:
                if self._closed:  # queued behind an interrupt: give up at once, touch nothing
                    self._finished.add(key)
                    raise BuildError("compile not started: the session is ending")
                self._current = f"{board.name}: {src.name}"
            try:
                return self._compile_now(board, tc, src, flags)
            finally:
                with self._lock:
                    self._finished.add(key)

        return self._once(key, compile_now)

    def plan(self, board: Board, cfg: DirConfig, source: Path, needs: Needs = NO_NEEDS) -> None:
        """Count what binary() will compile before it starts, so the progress line's total is
        known from its first line instead of growing as build threads get to each binary."""
        settings = cfg.for_file(source, board.name, board.kind)
        library = cfg.flags_for(board.name, board.kind)
        own = (*self.runtime_sources(board), *_own_sources(source, settings, needs))
        with self._lock:
            self._planned.update((board.name, src, library) for src in cfg.sources)
            self._planned.update((board.name, src, settings.flags, needs.pkg_config) for src in own)

    def progress(self) -> tuple[int, int, str]:
        """(objects done, objects to build, the one last started): for a long build's
        progress line."""
        with self._lock:
            return len(self._finished), max(len(self._planned), len(self._requested)), self._current

    def covered(self, board: Board) -> bool:
        """Whether this session instruments the board's code for gcov: every board with an
        OS, and bare metal built by GCC (its counts go home over the output: coverage.c)."""
        if self.coverage_dir is None:
            return False
        return board.kind != "baremetal" or toolchain.resolve(board).kind == "gnu"

    def _coverage_flags(self, board: Board, src: Path) -> list[str]:
        """gcov's flags for one source: none for the runtime (startup runs before .bss is
        zeroed; the dump must not count itself); on bare metal, the objects' gcov_info go
        to a section the runtime walks instead of to constructors that write files."""
        if not self.covered(board) or src in self.runtime_sources(board) or src.is_relative_to(PACKAGE_DIR):
            return []
        if src.suffix == CUDA_SUFFIX:  # nvcc's host pass takes no gcov flags: docs/cuda.md
            return []  # ours (a harness's main or listener) is not the code under test either
        flags = ["--coverage"]
        if any(fnmatch.fnmatch(src.name, p) for p in self.test_patterns):
            # the test's own functions and our header's get no counters (the report leaves them out,
            # and a small board's RAM has no room for them); what it inlines from headers under test does
            mine = f"(^|/){re.escape(src.name)}$"
            flags.append(f"-fprofile-exclude-files=^{re.escape(str(INCLUDE_DIR))}/;{mine}")
        if board.kind == "baremetal":
            flags.append(f"-fprofile-info-section={GCOV_INFO_SECTION}")
        return flags

    def runtime_sources(self, board: Board) -> tuple[Path, ...]:
        """The board's runtime, and in a covered bare-metal build the counts' way home."""
        if board.kind == "baremetal" and self.covered(board):
            return (*board.toolchain.runtime, COVERAGE_RUNTIME)
        return board.toolchain.runtime

    @property
    def coverage_strip(self) -> int:
        """GCOV_PREFIX_STRIP for what this session compiles: an object's counts go to
        $GCOV_PREFIX/<its name>.gcda, whatever staging directory it was compiled in."""
        return len(self.store.base.parts) + 1  # base/tmp/<staging dir>/<object>

    def _compile_args(self, board: Board, src: Path, flags: BuildFlags) -> list[str]:
        """Everything after the compiler's name but the output: one place for builds and
        the preprocessor's look at a test source."""
        cxx = src.suffix in CXX_SUFFIXES
        return [
            *(board.toolchain.cxxflags if cxx else board.toolchain.cflags),
            *(flags.cxxflags if cxx else flags.cflags),
            *self._session_flags,
            *self._coverage_flags(board, src),
            f"-I{INCLUDE_DIR}",
            f"-I{src.parent}",
            *(f"-I{d}" for d in flags.include_dirs),
            *(f"-D{d}" for d in flags.defines),
            "-c",
            str(src),
        ]

    def compiled_out(
        self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path, cases: dict[str, int]
    ) -> dict[str, str]:
        """Which of these cases (name -> declaration line) the preprocessor removes for this
        board, each with the directive that removed it: decided from what is compiled (a
        marker after each declaration, kept only in active code), never from a guess."""
        lines = source.read_text(encoding="utf-8", errors="replace").splitlines()
        marked = list(lines)
        for line in cases.values():
            if 1 <= line <= len(marked) and not marked[line - 1].rstrip().endswith("\\"):
                marked[line - 1] += f" ondevice_case_marker_{line}"
        flags = pkgconfig.merged(cfg.for_file(source, board.name, board.kind).flags, self._pkg_flags(board, cfg))
        staged = self.store.staging()
        copy = staged / source.name
        copy.write_text("\n".join(marked) + "\n")
        args = [a for a in self._compile_args(board, source, flags) if a not in ("-c", str(source))]
        out = staged / "preprocessed"
        command, _ = self._compiler(board, tc, source, args)
        if source.suffix == CUDA_SUFFIX:  # the host pass's view, one architecture's
            command = _cuda().preprocess_argv(command)
        self._tool(
            [*command, "-E", "-P" if source.suffix != CUDA_SUFFIX else "-Xcompiler=-P", str(copy), "-o", str(out)],
            "preprocess",
        )
        kept = set(re.findall(r"ondevice_case_marker_(\d+)", out.read_text(errors="replace")))
        return {name: _condition(lines, line) for name, line in cases.items() if str(line) not in kept}

    def _compiler(self, board: Board, tc: ResolvedToolchain, src: Path, args: list[str]) -> tuple[list[str], str]:
        """The command that compiles src with these arguments, and the identity of what runs:
        the board's C or C++ compiler, or nvcc driving the C++ one for a CUDA source."""
        if src.suffix == CUDA_SUFFIX:
            cuda = _cuda()
            tk = cuda.toolkit(board)
            return cuda.compile_argv(tk, board, tc.cxx, args), f"{tc.identity}+nvcc:{tk.identity}"
        return [*(tc.cxx if src.suffix in CXX_SUFFIXES else tc.cc), *args], tc.identity

    def _compile_now(self, board: Board, tc: ResolvedToolchain, src: Path, flags: BuildFlags) -> Path:
        cxx = src.suffix in CXX_SUFFIXES
        compiler = tc.cxx if cxx else tc.cc
        board_flags = board.toolchain.cxxflags if cxx else board.toolchain.cflags
        args = self._compile_args(board, src, flags)
        command, identity = self._compiler(board, tc, src, args)
        keyed = command[1:] if src.suffix == CUDA_SUFFIX else args  # nvcc's own path: in its identity
        key = key_of("compile", identity, self._names.args(keyed), self.store.digest(src))
        covered = bool(self._coverage_flags(board, src))
        # instrumented: a name of its own, as its .gcda file will have it (two sources may share a name)
        name = f"{src.name}.{key[:KEY_CHARS]}.o" if covered else src.name + ".o"

        def compile_into(out: Path) -> list[str]:
            depfile = out.with_name("deps.d")
            self._tool([*command, "-o", str(out), "-MD", "-MF", str(depfile)], "compile")
            deps = [os.path.normpath(os.path.join(self.source_root, p)) for p in _depfile(depfile)]
            depfile.unlink()
            return deps

        def keep(deps: list[str]) -> tuple[list[str], set[str]]:
            search = inputs.search_dirs(args, self.source_root)
            own = inputs.toolchain_include_dirs(compiler, tuple(board_flags), "c++" if cxx else "c")
            if src.suffix == CUDA_SUFFIX:  # the toolkit's headers: in its identity
                own = (*own, *_cuda().toolkit(board).include_dirs())
            candidates = inputs.shadow_candidates(deps, search, own)
            return [d for d in deps if inputs.under(d, search) or not inputs.under(d, own)], candidates

        entry, reused = self._cached(key, name, compile_into, keep)
        self.stats.count("reused" if reused else "compiled", key)
        if covered:
            self._note_covered(board, compiler, entry.path)
        return entry.path

    def _note_covered(self, board: Board, compiler: tuple[str, ...], obj: Path) -> None:
        """Where the notes (.gcno) of an instrumented object are, for the report: a file per
        object beside the counts, which every process of the session (xdist workers) adds to."""
        assert self.coverage_dir is not None
        note = {"board": board.name, "kind": board.kind, "object": str(obj), "compiler": list(compiler)}
        where = self.coverage_dir / (obj.name.removesuffix(".o") + ".where")
        with contextlib.suppress(OSError):
            where.write_text(json.dumps(note))

    def _link(
        self,
        board: Board,
        tc: ResolvedToolchain,
        flags: BuildFlags,
        objects: list[Path],
        name: str,
        cxx: bool,
        script: Path | None,
    ) -> Artifact:
        compiler = tc.cxx if cxx else tc.cc
        # a C++ driver links libstdc++ last by itself; a -lstdc++ from a .pc file (CppUTest's)
        # would put it before a library that replaces operator new/delete, and a static link fails
        tail = [
            *tc.ldflags,
            *flags.ldflags,
            *(["--coverage"] if self.covered(board) else []),
            *([f"-T{script}"] if script else []),
            *(f"-l{lib}" for lib in (*flags.libs, *board.toolchain.libs) if not (cxx and lib == "stdc++")),
        ]
        named = [*objects, *([script] if script else [])]
        digests = {str(p): self._input_digest(p) for p in named}
        key_args = [digests.get(a.removeprefix("-T"), a) for a in tail]
        key = key_of("link", tc.identity, [digests[str(p)] for p in objects], self._names.args(key_args))

        def link_into(out: Path) -> list[str]:
            argv = [*compiler, *map(str, objects), *tail]
            depfile = out.with_name("link.d")
            if compiler not in self._no_depfile:
                try:
                    self._tool([*argv, f"-Wl,--dependency-file={depfile}", "-o", str(out)], "link")
                except BuildError as e:
                    if "dependency-file" not in str(e):
                        raise
                    self._no_depfile.add(compiler)
            if compiler in self._no_depfile:
                self._tool([*argv, "-o", str(out)], "link")
            deps = [self._link_input(p, compiler, tail, shadows) for p in _depfile(depfile)]
            depfile.unlink(missing_ok=True)
            return [*deps, *inputs.named_files(tail, self.source_root)]

        shadows: set[str] = set()  # where a file found on the search path would have been taken first

        def keep(deps: list[str]) -> tuple[list[str], set[str]]:
            own = inputs.toolchain_library_dirs(compiler, tc.ldflags)
            user = [v for _, v in inputs.flag_values(tail, ("-L",))]
            mine = [str(self.store.base)]  # inputs already in the key by digest
            deps = [d for d in dict.fromkeys(deps) if not inputs.under(d, mine)]
            kept = [d for d in deps if inputs.under(d, user) or not inputs.under(d, own)]
            return kept, inputs.library_candidates(tail, self.source_root) | shadows

        try:
            entry, reused = self._cached(key, name, link_into, keep)
        except BuildError as e:  # from the linker: every object compiled
            self._check_inputs(named)  # unless one vanished from the cache meanwhile
            raise LinkError(str(e)) from None
        self.stats.count("link_reused" if reused else "linked", key)
        return Artifact(entry.path, entry.sha256)

    def _link_input(self, name: str, compiler: tuple[str, ...], tail: list[str], shadows: set[str]) -> str:
        """A file the linker read, as its dependency file names it: a relative name is in
        the link's directory, else where the linker searched (a -T script found on -L)."""
        here = os.path.normpath(os.path.join(self.source_root, name))
        if os.path.isabs(name) or os.path.exists(here):
            return here
        user = [os.path.join(self.source_root, v) for _, v in inputs.flag_values(tail, ("-L",))]
        for directory in (*user, *inputs.link_search_dirs(compiler, tuple(tail))):
            found = os.path.normpath(os.path.join(directory, name))
            if os.path.isfile(found):
                shadows.add(here)
                return found
        return here

    def _cached(
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
                digests[self._names.name(path)] = self.store.digest(Path(path))
        except OSError:
            return None  # read, then removed: nothing to vouch for
        misses: dict[str, list[str]] = {}  # by directory: checked a listing at a time
        for path in sorted(candidates - read):
            try:
                st = os.lstat(path)
            except OSError:
                parent, name = os.path.split(path)
                misses.setdefault(self._names.name(parent), []).append(name)
                continue
            if max(st.st_mtime_ns, st.st_ctime_ns) >= started - TOO_NEW_NS:
                return None  # appeared while building: the build may or may not have seen it
        return {"deps": digests, "misses": misses}

    def _holds(self, record: dict) -> bool:
        for name, digest in record["deps"].items():
            try:
                if self.store.digest(Path(self._names.path(name))) != digest:
                    return False
            except OSError:
                return False
        return not any(
            self._listings.any_exists(self._names.path(parent), names) for parent, names in record["misses"].items()
        )

    def _tool(self, argv: list[str], what: str) -> None:
        with self._slots:
            try:
                with self._lock:
                    if self._closed:
                        raise BuildError(f"{what} not started: the session is ending")
                    self.tools_started += 1
                    proc = subprocess.Popen(
                        argv,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        cwd=self.source_root,
                        start_new_session=True,  # its own group: stop() ends cc1/as/ld too
                        # a copy, not "inherit": a vfork'd child reading the C environ while
                        # pytest's thread rewrites it fails with EFAULT (transports/_proc.py)
                        env=dict(os.environ),
                    )
                    self._running.add(proc)
            except OSError as e:
                raise BuildError(f"{what} failed: cannot run {argv[0]}: {e.strerror}") from None
            try:
                output, _ = proc.communicate()
            finally:
                with self._lock:
                    self._running.discard(proc)
        if proc.returncode != 0:
            text = output.decode(errors="replace").strip()
            trouble = next((t for t in _DISK_TROUBLE if t in text), None)
            if trouble:
                raise CacheError(
                    f"{what} could not write its output: {trouble}; free some space or point "
                    f"ondevice_cache_dir elsewhere (cache: {self.store.root})\n{text}"
                )
            raise BuildError(f"{what} failed: {shlex.join(argv)}\n{text}")


def _vanished(fut: Future) -> bool:
    """A finished step whose cache entry is gone, or that failed because one went."""
    error = fut.exception()
    if error is not None:
        return isinstance(error, EntryLost)
    result = fut.result()
    return isinstance(result, Path) and not os.path.lexists(result)


_DIRECTIVE = re.compile(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b")


def _condition(lines: list[str], line: int) -> str:
    """The innermost conditional directive around a line, as written ("#ifdef X")."""
    stack: list[str] = []
    for text in lines[: line - 1]:
        m = _DIRECTIVE.match(text)
        if m is None:
            continue
        if m.group(1) in ("if", "ifdef", "ifndef"):
            stack.append(text.strip())
        elif m.group(1) == "endif":
            if stack:
                stack.pop()
        elif stack:  # elif / else: the branch the case sits in
            stack[-1] = f"{stack[-1]} ... {text.strip()}"
    return stack[-1] if stack else "a preprocessor condition"


def _depfile(path: Path) -> list[str]:
    try:
        return inputs.parse_depfile(path.read_text(errors="replace"))
    except OSError:
        return []


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


def _own_sources(source: Path, settings: FileSettings, needs: Needs) -> tuple[Path, ...]:
    """What a test binary compiles besides the runtime and the library: the test source, its
    ondevice.toml extra sources and its harness's (one list for building and for planning)."""
    return (source, *settings.extra_sources, *needs.sources)
