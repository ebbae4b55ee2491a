"""Linking a test binary: its objects, the board's linker script and the prebuilt inputs
checked for the board's architecture, one link per set of inputs (reuse.py), and the
binary published under the build dir for people (a debugger, a flasher)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import threading
from dataclasses import dataclass
from pathlib import Path

from ..config.board import Board
from ..config.dirconfig import BuildFlags, DirConfig
from . import elf, inputs
from .buildstats import BuildStats
from .errors import BuildError, LinkError
from .memo import SessionMemo
from .reuse import Reuse, depfile_inputs
from .store import checkpoint, key_of, unusable
from .toolchain import ResolvedToolchain
from .toolrunner import ToolRunner


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str


def hashed(path: Path) -> Artifact:
    """A binary another tool built (cargo, CMake), named by its content as ours are."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return Artifact(path, digest.hexdigest())


class Linker:
    def __init__(
        self, tools: ToolRunner, reuse: Reuse, memo: SessionMemo, stats: BuildStats, source_root: Path
    ) -> None:
        self.tools = tools
        self.reuse = reuse
        self.memo = memo
        self.stats = stats
        self.source_root = source_root
        self._no_depfile: set[tuple[str, ...]] = set()  # linkers without --dependency-file

    def link(
        self,
        board: Board,
        tc: ResolvedToolchain,
        flags: BuildFlags,
        objects: list[Path],
        name: str,
        cxx: bool,
        script: Path | None,
        coverage: bool = False,
    ) -> Artifact:
        """The binary of these objects (and libraries), linked by the C or C++ driver;
        coverage: with gcov's runtime."""
        compiler = tc.cxx if cxx else tc.cc
        # a C++ driver links libstdc++ last by itself; a -lstdc++ from a .pc file (CppUTest's)
        # would put it before a library that replaces operator new/delete, and a static link fails
        tail = [
            *tc.ldflags,
            *flags.ldflags,
            *(["--coverage"] if coverage else []),
            *([f"-T{script}"] if script else []),
            *(f"-l{lib}" for lib in (*flags.libs, *board.toolchain.libs) if not (cxx and lib == "stdc++")),
        ]
        named = [*objects, *([script] if script else [])]
        digests = {str(p): self.reuse.input_digest(p) for p in named}
        key_args = [digests.get(a.removeprefix("-T"), a) for a in tail]
        key = key_of("link", tc.identity, [digests[str(p)] for p in objects], self.reuse.names.args(key_args))

        def link_into(out: Path) -> list[str]:
            argv = [*compiler, *map(str, objects), *tail]
            depfile = out.with_name("link.d")
            if compiler not in self._no_depfile:
                try:
                    self.tools.run([*argv, f"-Wl,--dependency-file={depfile}", "-o", str(out)], "link")
                except BuildError as e:
                    if "dependency-file" not in str(e):
                        raise
                    self._no_depfile.add(compiler)
            if compiler in self._no_depfile:
                self.tools.run([*argv, "-o", str(out)], "link")
            deps = [self._link_input(p, compiler, tail, shadows) for p in depfile_inputs(depfile)]
            depfile.unlink(missing_ok=True)
            return [*deps, *inputs.named_files(tail, self.source_root)]

        shadows: set[str] = set()  # where a file found on the search path would have been taken first

        def keep(deps: list[str]) -> tuple[list[str], set[str]]:
            own = inputs.toolchain_library_dirs(compiler, tc.ldflags)
            user = [v for _, v in inputs.flag_values(tail, ("-L",))]
            mine = [str(self.reuse.store.base)]  # inputs already in the key by digest
            deps = [d for d in dict.fromkeys(deps) if not inputs.under(d, mine)]
            kept = [d for d in deps if inputs.under(d, user) or not inputs.under(d, own)]
            return kept, inputs.library_candidates(tail, self.source_root) | shadows

        try:
            entry, reused = self.reuse.cached(key, name, link_into, keep)
        except BuildError as e:  # from the linker: every object compiled
            self.reuse.check_inputs(named)  # unless one vanished from the cache meanwhile
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

    def linker_script(self, board: Board) -> Path | None:
        """The board's script with its [memory] figures filled in, stored by its content."""
        text = filled_linker_script(board)
        if text is None:
            return None

        def store() -> Path:
            return self.reuse.stored(key_of("linker-script", text), "link.ld", lambda out: out.write_text(text))

        return self.memo.once(("ld", text), store)


def filled_linker_script(board: Board) -> str | None:
    """The board's linker script with its [memory] figures in place of @FLASH_ORIGIN@ and
    its kin: one text for our builds and a CMake project's."""
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
    return text


def prebuilt_inputs(board: Board, cfg: DirConfig) -> list[Path]:
    """The directory's prebuilt objects and libraries for this board, checked to exist and
    to be built for the board's architecture (from their ELF headers, not a failed link)."""
    paths = []
    for pattern, path in cfg.prebuilt_for(board.name, board.arch):
        where = f"{cfg.path}: prebuilt '{pattern}'"
        if not path.is_file():
            raise BuildError(f"{where}: {path} not found for board {board.name} (build it for this board first)")
        check_arch(path, board, where)
        paths.append(path)
    return paths


def check_arch(path: Path, board: Board, where: str) -> None:
    """An object or library from elsewhere must be built for the board: said before a link
    that would fail with a linker's riddle."""
    want = host_arch() if board.arch == "native" else board.arch
    try:
        found = elf.machines(path)
    except elf.ElfError as e:
        raise BuildError(f"{where}: {e}") from None
    if found and found != {want}:
        raise BuildError(
            f"{where}: {path.name} was built for {', '.join(sorted(found))}, but board {board.name} "
            f"is {want}: rebuild it for {board.name}"
        )


def host_arch() -> str:
    """This machine's architecture as a board file names it."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, "arm" if machine.startswith("arm") else machine)


def publish(root: Path, board: Board, rel: str, artifact: Artifact) -> None:
    """A link to the latest binary of a source for people (a debugger, a flasher), named
    after the whole source name (a_test.c and a_test.cc never share one); runs use the
    cache entry itself."""
    link = root / board.name / "bin" / f"{rel}.elf"
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
        raise unusable(root, e, "build dir") from None
