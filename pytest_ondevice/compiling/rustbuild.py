"""A Rust crate's test binaries for a board: `cargo test --no-run` with the board's Rust
target and linker, and the crate's C library (ondevice.toml `sources` + `provides`) built
by us for the board and offered to its build script through pkg-config.

Cargo keeps its own cache (one target dir per board and crate under the build dir): we
add no rebuild. The C library's archive and .pc file are rewritten only when their
content changes, so cargo's `rerun-if-changed` on them relinks exactly when it must."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config.board import Board
from ..config.dirconfig import DirConfig
from . import cargo, pkgconfig, toolchain
from .builder import Artifact, Builder, BuildError
from .linking import hashed


def binaries(
    builder: Builder, board: Board, cfg: DirConfig, crate: Path, build_root: Path
) -> dict[tuple[str, str], Path]:
    """(kind, target name) -> test binary, built once per session per board and crate."""
    if board.kind != "host" and not board.toolchain.rust_target:
        raise cargo.CargoSetupError(
            f'board {board.name} names no Rust target: add rust_target = "TRIPLE" to the [toolchain] '
            f"of {board.path} (see `rustc --print target-list`)"
        )
    tag = f"{crate.name}-{hashlib.sha256(str(crate).encode()).hexdigest()[:10]}"
    env = {}
    if cfg.provides:
        env = pkgconfig.environment(
            board, [str(_offer_library(builder, board, cfg, cfg.provides, build_root / board.name / "pkgconfig" / tag))]
        )
    linker = f"{board.toolchain.gnu}-gcc" if board.kind != "host" and board.toolchain.gnu else None
    try:
        return cargo.build(
            crate,
            board.toolchain.rust_target if board.kind != "host" else None,
            linker,
            build_root / board.name / "cargo" / tag,
            env,
            builder.jobs,
        )
    except cargo.CargoSetupError:
        raise  # an error of the setup, not of the crate: its tests error, naming the fix
    except cargo.CargoError as e:
        raise BuildError(str(e)) from None


def artifact(path: Path) -> Artifact:
    return hashed(path)


def _offer_library(builder: Builder, board: Board, cfg: DirConfig, provides: str, where: Path) -> Path:
    """lib<name>.a and <provides>.pc in `where`, for the crate's build script: the library
    built from `sources`, with the directory's models compiled ahead of time in it
    (`provides`: the directory's `provides`, the library's name)."""
    if not cfg.sources and not cfg.models:
        raise BuildError(
            f"{cfg.path}: 'provides' names a library, but neither 'sources' nor [models] gives it anything"
        )
    archive, model_dirs = builder.offered_archive(board, toolchain.resolve(board), cfg)
    lib = provides.replace("-", "_")
    flags = cfg.flags_for(board.name, board.kind)
    dirs = (*flags.include_dirs, *model_dirs)  # NAME_model.h of each model, for bindings
    cflags = " ".join([*(f"-I{d}" for d in dirs), *(f"-D{d}" for d in flags.defines)])
    pc = (
        f"Name: {provides}\nDescription: built by pytest-ondevice from {cfg.path} for {board.name}\n"
        f"Version: 0\nCflags: {cflags}\nLibs: -L{where} -l{lib}\n"
    )
    where.mkdir(parents=True, exist_ok=True)
    _write_if_changed(where / f"lib{lib}.a", archive.read_bytes())
    _write_if_changed(where / f"{provides}.pc", pc.encode())
    return where


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
