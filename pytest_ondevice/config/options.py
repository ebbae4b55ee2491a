"""The few settings read straight from pytest's configuration by several parts of a run
(the board registry, directory options): one place, below everything that reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .board import BoardRegistry


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
