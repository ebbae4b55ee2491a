"""pkg-config per board: a prebuilt cross library is found, never rebuilt.

For a cross board pkg-config must look only at that board's .pc files (PKG_CONFIG_LIBDIR,
not the host's), prefix their paths with the board's sysroot (PKG_CONFIG_SYSROOT_DIR) and
be told that cross use is intended (PKG_CONFIG_ALLOW_CROSS) — the lesson of every cross
build that silently linked the host's library."""

from __future__ import annotations

import os
import shlex
import subprocess

from ..config.board import Board
from ..config.dirconfig import BuildFlags, DirConfig
from .toolchain import ToolchainError


class PkgConfigError(ToolchainError):
    """A library (or pkg-config itself) missing for a board: the machine's set-up, not the
    code under test, so the binary's items are errors naming what to install, never failures."""


def flags_for(board: Board, cfg: DirConfig, packages: tuple[str, ...] | None = None, hint: str = "") -> BuildFlags:
    """The compile and link flags of packages (default: the directory's pkg_config; a test
    harness names its own), for this board; hint: what to install when one is missing."""
    packages = cfg.pkg_config if packages is None else packages
    if not packages:
        return BuildFlags()
    extra = [str((cfg.root / p.format(board=board.name, arch=board.arch)).resolve()) for p in cfg.pkg_config_path]
    env = environment(board, extra)
    argv = ["pkg-config", "--static", *packages]
    try:
        cflags = _run([*argv, "--cflags"], env)
        libs = _run([*argv, "--libs"], env)
    except FileNotFoundError:
        raise PkgConfigError("pkg-config not found: apt-get install pkgconf") from None
    except subprocess.CalledProcessError as e:
        where = env.get("PKG_CONFIG_LIBDIR", env.get("PKG_CONFIG_PATH", ""))
        raise PkgConfigError(
            f"{_asker(cfg, packages)}pkg-config found no {' '.join(packages)} for board {board.name} "
            f"(searched {where or 'the default path'}): {e.stderr.strip()}" + (f"\n{hint}" if hint else "")
        ) from None
    return BuildFlags(
        cflags=tuple(cflags),
        cxxflags=tuple(cflags),
        ldflags=tuple(x for x in libs if not x.startswith("-l")),
        libs=tuple(x[2:] for x in libs if x.startswith("-l")),
    )


def environment(board: Board, extra: list[str]) -> dict[str, str]:
    """pkg-config's environment for this board (extra: .pc directories searched first), for
    our own calls and for a Rust crate's build script."""
    env = dict(os.environ, PKG_CONFIG_ALLOW_CROSS="1")
    if board.kind == "host":
        env["PKG_CONFIG_PATH"] = ":".join([*extra, *filter(None, [os.environ.get("PKG_CONFIG_PATH")])])
    else:  # only the board's own .pc files: never the host's
        env["PKG_CONFIG_LIBDIR"] = ":".join([*extra, *filter(None, [board.toolchain.pkg_config_libdir])])
        env.pop("PKG_CONFIG_PATH", None)
        if board.toolchain.sysroot:
            env["PKG_CONFIG_SYSROOT_DIR"] = board.toolchain.sysroot
    return env


def _run(argv: list[str], env: dict[str, str]) -> list[str]:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return shlex.split(out)


def merged(base: BuildFlags, more: BuildFlags) -> BuildFlags:
    return BuildFlags(*(getattr(base, f) + getattr(more, f) for f in BuildFlags.__dataclass_fields__))


def _asker(cfg: DirConfig, packages: list[str] | tuple[str, ...]) -> str:
    """Who asked for the packages: the ondevice.toml that names them, or none (a harness's own)."""
    return f"{cfg.path}: " if cfg.path is not None and set(packages) <= set(cfg.pkg_config) else ""
