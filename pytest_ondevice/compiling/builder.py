"""Turn test sources into binaries for a board, compiling nothing twice and nothing wrong.

The Builder is the facade a reader starts from: binary() reads top to bottom (flags, the
directory's library, models, the runtime, the test's own objects, the link), and compiling
one source is here. The other jobs are modules of their own: reuse.py finds a stored object
or binary again (under the key of all it was made from: ccache's manifests), linking.py
links, models.py compiles the models declared for ahead-of-time compilation, toolrunner.py
runs the compilers `jobs` at a time and kills them on stop, memo.py makes each step once per
session, progress.py counts for the progress line.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from ..config.board import BUILTIN_DIR, Board, debian_arch
from ..config.dirconfig import BuildFlags, DirConfig, FileSettings
from ..config.keys import CUDA_SUFFIX
from ..formats import NO_NEEDS, Needs, linemarkers
from ..formats.linemarkers import Expanded
from . import elf, inputs, pkgconfig, sizecheck, toolchain
from .buildstats import KEY_CHARS, BuildStats
from .errors import BuildError, EntryLost, LinkError
from .linking import Artifact, Linker, check_arch, prebuilt_inputs, publish
from .memo import SessionMemo
from .models import AotModels
from .progress import BuildProgress
from .reuse import Reuse, depfile_inputs
from .store import CacheError, Store, key_of, unusable
from .toolchain import ResolvedToolchain
from .toolrunner import ToolRunner

__all__ = ["Artifact", "BuildError", "BuildStats", "Builder", "EntryLost", "LinkError"]

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


class Builder:
    """A session's builds: binaries, the directories' libraries for crates, what a
    preprocessor removes; what it did (stats, model_sizes) and how far it is (progress)."""

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
        self.jobs = max(1, jobs)
        self.stats = BuildStats()
        self._memo = SessionMemo()
        self._progress = BuildProgress()
        try:
            root.mkdir(parents=True, exist_ok=True)
            ignore = root / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by pytest-ondevice\n*\n")
        except OSError as e:
            raise unusable(root, e, "build dir") from None
        self.store = Store(cache_dir or root / "cache", cache_shared)
        names = inputs.PathNames({"<ondevice>": INCLUDE_DIR, "<root>": self.source_root})
        self._reuse = Reuse(self.store, names)
        self._tools = ToolRunner(self.jobs, self.source_root, self.store.root)
        self._linker = Linker(self._tools, self._reuse, self._memo, self.stats, self.source_root)
        self._models = AotModels(root, self._reuse, self._memo, self.stats, self._progress, self._compile)
        self.model_sizes = self._models.sizes  # (board, model): what it takes

    # -- public --------------------------------------------------------------
    @property
    def tools_started(self) -> int:
        """Compilers, archivers and linkers run: none for a warm cache."""
        return self._tools.started

    def binary(
        self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path, rel: str, needs: Needs = NO_NEEDS
    ) -> Artifact:
        """Build one test binary; `rel` is the source's path relative to the project, `needs`
        what its test harness links (GoogleTest, CppUTest). Raises EntryLost when a cache
        entry it uses vanished meanwhile: after forget_vanished(), a second call builds what
        is gone (the caller decides how often: run/life.py)."""
        return self._binary(board, tc, cfg, source, rel, needs)

    def vanishing(self, lost: EntryLost) -> CacheError:
        """The error once entries keep vanishing: something else removes files from the store."""
        return CacheError(
            f"cache entries vanish while this session uses them ({lost.path}): something besides "
            f"pytest-ondevice removes files from {self.store.root}; stop it, or set ondevice_cache_dir "
            "to a directory only pytest-ondevice manages"
        )

    def intact(self, artifact: Artifact) -> bool:
        """Whether a binary built this session is still in the cache as built. One removed
        since (by hand: trims and cleans leave what a live session holds) is built again
        with binary(), never run as missing (no strike on the device, no failure)."""
        try:
            return self.store.digest(artifact.path) == artifact.sha256
        except OSError:
            return False

    def forget_vanished(self) -> None:
        """Forget this session's results whose cache entries are gone: asked again, they are rebuilt."""
        self._memo.forget_vanished()

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
        models, model_dirs = self._models.objects(board, tc, cfg)
        if model_dirs:  # NAME_model.h of each model the directory declares
            flags = pkgconfig.merged(flags, BuildFlags(include_dirs=model_dirs))
        archive = self._library(board, tc, cfg)
        runtime = [self._compile(board, tc, src, flags) for src in self.runtime_sources(board)]
        # a source made for this test file (its defines) sees it; a shared one (gtest's listener) is compiled once
        harness = pkgconfig.merged(flags, self._harness_flags(source, needs)) if needs.defines else flags
        objects = [self._compile(board, tc, src, harness if src in needs.sources else flags) for src in own]
        objects = _one_main(objects, own, needs)
        cxx = any(p.suffix in CXX_SUFFIXES for p in (*own, *cfg.sources))
        name = Path(rel).name + ".elf"
        inputs_ = [*objects, *models, *([archive] if archive else []), *prebuilt_inputs(board, cfg), *runtime]
        script = self._linker.linker_script(board)
        try:
            artifact = self._linker.link(board, tc, flags, inputs_, name, cxx, script, self.covered(board))
        except BuildError as e:
            raise sizecheck.from_link_output(board, str(e), rel) or e from None
        sizecheck.check_elf(board, artifact.path, rel)
        if gpu and (missing := _cuda().missing_images(artifact.path, board)):
            raise BuildError(
                f"{rel}: the binary carries no GPU code for {', '.join(missing)} ({board.path.name}'s "
                f"cuda.archs); nvcc was asked for it: is the CUDA toolkit older than that architecture?"
            )
        publish(self.root, board, rel, artifact)
        return artifact

    def _harness_flags(self, source: Path, needs: Needs) -> BuildFlags:
        """What a harness source of ours (a generated main) learns of the test file: its
        directory on the include path, its name as __FILE__ spells it, the format's defines."""
        name = os.path.relpath(source, self.source_root) if source.is_relative_to(self.source_root) else str(source)
        quoted = '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return BuildFlags(include_dirs=(source.parent,), defines=(*needs.defines, f"ONDEVICE_TEST_SOURCE={quoted}"))

    def summary(self) -> str:
        return self.stats.summary(self.store.stats.damaged, self.store.stats.uncached, self.store.stats.untrusted)

    def stop(self) -> None:
        """Session end or interrupt: compilers still running are killed, none start."""
        self._tools.stop()

    def close(self, max_cache_size: int | None = None) -> None:
        """After the last run: private artifacts dropped, the cache trimmed."""
        self.stop()
        self.store.close(max_cache_size)

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
                        check_arch(d / f"lib{lib}.a", board, f"{cfg.path}: pkg-config's -l{lib}")
            return flags

        return self._memo.once(("pkg-config", board.name, cfg.path, needs), ask)

    def offered_archive(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> tuple[Path, tuple[Path, ...]]:
        """One static library of the directory's `sources` and its models, for a Rust crate's
        build script (ondevice.toml `provides`), and where the models' headers are."""
        library = self._library(board, tc, cfg)
        models, dirs = self._models.objects(board, tc, cfg)
        if not models:
            assert library is not None
            return library, dirs

        def archive(out: Path) -> None:
            if library is not None:
                shutil.copyfile(library, out)
            self._tools.run([*tc.ar, "qcsD", str(out), *map(str, models)], "archive")

        inputs_ = [*([library] if library else []), *models]
        key = key_of("offered-archive", tc.identity, [self._reuse.input_digest(p) for p in inputs_])
        return self._reuse.stored(key, "libundertest.a", archive), dirs

    # -- library -------------------------------------------------------------
    def once(self, key: object, fn: Callable[[], T]) -> T:
        """fn's result, made once per session by whoever asks first (others wait for it)."""
        return self._memo.once(key, fn)

    def library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path | None:
        """The directory's library (its `sources`) for this board, as a static archive."""
        return self._library(board, tc, cfg)

    def _library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path | None:
        if not cfg.sources:
            return None
        return self._memo.once(("lib", board.name, cfg.path), lambda: self._build_library(board, tc, cfg))

    def _build_library(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> Path:
        assert cfg.path is not None
        flags = pkgconfig.merged(cfg.flags_for(board.name, board.kind), self._pkg_flags(board, cfg))
        # the whole library counts in the progress line from the start
        self._progress.requested(("obj", board.name, src, flags) for src in cfg.sources)
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
            return self._reuse.stored(
                key_of("archive", tc.identity, [self._reuse.input_digest(o) for o in objects]),
                "libundertest.a",
                # q, not r: members with the same basename (a/util.o, b/util.o) all stay
                lambda out: self._tools.run([*tc.ar, "qcsD", str(out), *map(str, objects)], "archive"),
            )
        except BuildError:
            self._reuse.check_inputs(objects)
            raise

    # -- compiling one source ------------------------------------------------
    def _compile(self, board: Board, tc: ResolvedToolchain, src: Path, flags: BuildFlags) -> Path:
        key = ("obj", board.name, src, flags)
        self._progress.requested([key])

        def compile_now() -> Path:
            if self._tools.stopped:  # queued behind an interrupt: give up at once, touch nothing
                self._progress.finished(key)
                raise BuildError("compile not started: the session is ending")
            self._progress.started(f"{board.name}: {src.name}")
            try:
                return self._compile_now(board, tc, src, flags)
            finally:
                self._progress.finished(key)

        return self._memo.once(key, compile_now)

    def plan(self, board: Board, cfg: DirConfig, source: Path, needs: Needs = NO_NEEDS) -> None:
        """Count what binary() will compile before it starts, so the progress line's total is
        known from its first line instead of growing as build threads get to each binary."""
        settings = cfg.for_file(source, board.name, board.kind)
        library = cfg.flags_for(board.name, board.kind)
        own = (*self.runtime_sources(board), *_own_sources(source, settings, needs))
        self._progress.planned((board.name, src, library) for src in cfg.sources)
        self._progress.planned((board.name, src, settings.flags, needs.pkg_config) for src in own)

    def progress(self) -> tuple[int, int, str]:
        """(objects done, objects to build, the one last started): for a long build's
        progress line."""
        return self._progress.figures()

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

    def included(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path) -> tuple[Path, ...]:
        """The project's files the compiler reads for this source (its -MM dependency list:
        the headers and sources it #includes, not the system's), once per session."""

        def ask() -> tuple[Path, ...]:
            flags = pkgconfig.merged(cfg.for_file(source, board.name, board.kind).flags, self._pkg_flags(board, cfg))
            args = [a for a in self._compile_args(board, source, flags) if a not in ("-c", str(source))]
            command, _ = self._compiler(board, tc, source, args)
            out = self.store.staging() / "deps"
            self._tools.run([*command, "-MM", str(source), "-MF", str(out)], "preprocess")
            words = out.read_text(errors="replace").replace("\\\n", " ").split(":", 1)[-1].split()
            return tuple(Path(w).resolve() for w in words if Path(w).is_file())

        return self._memo.once(("included", board.name, source), ask)

    def expanded(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, source: Path) -> Expanded:
        """Where this source's Unity assertions were expanded, as the compiler saw them: its
        preprocessed text (-E with the build's own flags, line markers kept) read as it is
        written out, once per board and source a session. A line Unity names after a wrapper
        is then the included file's by the preprocessor's word, not by a guess."""

        def ask() -> Expanded:
            flags = pkgconfig.merged(cfg.for_file(source, board.name, board.kind).flags, self._pkg_flags(board, cfg))
            args = [a for a in self._compile_args(board, source, flags) if a not in ("-c", str(source))]
            command, _ = self._compiler(board, tc, source, args)
            if source.suffix == CUDA_SUFFIX:  # the host pass's view, as compiled_out's
                command = _cuda().preprocess_argv(command)
            out = self.store.staging() / "expanded.i"
            try:
                self._tools.run([*command, "-E", str(source), "-o", str(out)], "preprocess")
                with out.open(encoding="utf-8", errors="replace") as text:
                    return linemarkers.read(text, self._tools.cwd)
            finally:
                out.unlink(missing_ok=True)  # megabytes of headers: read once, not kept

        return self._memo.once(("expanded", board.name, source), ask)

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
        self._tools.run(
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
        key = key_of("compile", identity, self._reuse.names.args(keyed), self.store.digest(src))
        covered = bool(self._coverage_flags(board, src))
        # instrumented: a name of its own, as its .gcda file will have it (two sources may share a name)
        name = f"{src.name}.{key[:KEY_CHARS]}.o" if covered else src.name + ".o"

        def compile_into(out: Path) -> list[str]:
            depfile = out.with_name("deps.d")
            self._tools.run([*command, "-o", str(out), "-MD", "-MF", str(depfile)], "compile")
            deps = [os.path.normpath(os.path.join(self.source_root, p)) for p in depfile_inputs(depfile)]
            depfile.unlink()
            return deps

        def keep(deps: list[str]) -> tuple[list[str], set[str]]:
            search = inputs.search_dirs(args, self.source_root)
            own = inputs.toolchain_include_dirs(compiler, tuple(board_flags), "c++" if cxx else "c")
            if src.suffix == CUDA_SUFFIX:  # the toolkit's headers: in its identity
                own = (*own, *_cuda().toolkit(board).include_dirs())
            candidates = inputs.shadow_candidates(deps, search, own)
            return [d for d in deps if inputs.under(d, search) or not inputs.under(d, own)], candidates

        entry, reused = self._reuse.cached(key, name, compile_into, keep)
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


def _one_main(objects: list[Path], own: tuple[Path, ...], needs: Needs) -> list[Path]:
    """A harness's main (our Unity runner) is linked only when nothing else of the binary
    defines main: decided from what the compiler made, not from one file's text, which
    misses `int CJSON_CDECL main(void)` and a runner Unity's generator wrote and
    ondevice.toml names among the file's sources."""
    ours = [o for o, src in zip(objects, own, strict=True) if src in needs.sources and elf.defines_global(o, "main")]
    if not ours:
        return objects
    theirs = any(elf.defines_global(o, "main") for o, src in zip(objects, own, strict=True) if src not in needs.sources)
    return [o for o in objects if o not in ours] if theirs else objects


def _own_sources(source: Path, settings: FileSettings, needs: Needs) -> tuple[Path, ...]:
    """What a test binary compiles besides the runtime and the library: the test source, its
    ondevice.toml extra sources and its harness's (one list for building and for planning)."""
    return (source, *settings.extra_sources, *needs.sources)
