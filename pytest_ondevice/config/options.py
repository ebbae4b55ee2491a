"""The few settings read straight from pytest's configuration by several parts of a run
(the board registry, directory options): one place, below everything that reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .board import BoardRegistry
from .schema import ConfigError


def registry(config: pytest.Config) -> BoardRegistry:
    """Our board files and the project's (ini `ondevice_boards`)."""
    return BoardRegistry([Path(p) for p in config.getini("ondevice_boards")])


def ini_path(config: pytest.Config, name: str, env: str | None = None) -> Path | None:
    """A directory option: the environment wins, a relative ini value is relative to the ini
    file (not to wherever pytest was started, which would make a second cache)."""
    value = (os.environ.get(env) if env else None) or config.getini(name)
    if not value:
        return None
    base = config.inipath.parent if config.inipath else config.rootpath
    return (base / os.path.expanduser(value)).resolve()


def stops_at_a_failure(config: pytest.Config) -> bool:
    """-x, --maxfail, --stepwise: a failure may end the session in its own teardown."""
    return bool(config.getoption("maxfail", 0) or config.getoption("stepwise", False))


def check_device_option(values: list[str], boards: list[str], reg: BoardRegistry) -> None:
    """--device=WHERE for every board of a matrix, where only some boards take WHERE (the
    `qemu` of `--board=host,rpi --device=qemu`): a usage error naming them and the
    --device=BOARD=WHERE that places them alone, not "board host takes no --device"."""
    placed = {v.partition("=")[0] for v in values if v.partition("=")[0] in boards}
    others = [b for b in boards if b not in placed]
    for where in (v for v in values if v.partition("=")[0] not in boards):
        takers = [b for b in others if _takes(reg, b, where)]
        if not takers or len(takers) == len(others):
            continue  # none takes it: said as before, naming the forms each board takes
        refused = [b for b in others if b not in takers]
        fix = " ".join(f"--device={b}={where}" for b in takers)
        raise ConfigError(
            f"--device={where} names a device of board {', '.join(takers)} only, and board "
            f"{', '.join(refused)} takes no such --device: to place {'it' if len(takers) == 1 else 'them'} "
            f"alone, write {fix}"
        )


def _takes(reg: BoardRegistry, board_name: str, where: str) -> bool:
    """Whether the board's transport, or its emulator's, claims the address (as a run decides)."""
    from .. import transports

    try:
        board = reg.get(board_name)
        tables = [t for t in (board.transport, board.emulator) if t]
        return any(transports.load(t["name"]).claims(where) for t in tables)
    except (ConfigError, transports.InfrastructureError, KeyError):
        return False  # a board that cannot be read says so itself, later
