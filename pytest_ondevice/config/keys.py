"""What the entry-point plugin and the nodes share, importing nothing heavy (no cycle)."""

from __future__ import annotations

from typing import Any

import pytest

TEST_PATTERNS = ("*_test.c", "*_test.cc", "*_test.cpp", "*_test.cu")  # collected by default (ini ondevice_files)
CUDA_SUFFIX = ".cu"  # a CUDA source: built by nvcc, for boards with [cuda] archs
SESSION_KEY = pytest.StashKey[Any]()  # the Engine (run/engine.py), imported only when used
# --bench-compare: the baseline's records by bench key, and the slowdown threshold in %
BASELINE_KEY = pytest.StashKey["tuple[dict[str, dict], float] | None"]()
BUILT = "ondevice_built"  # --build-only: the user property of an item whose binary was built (its path)


def selected_boards(config: pytest.Config) -> list[str]:
    """--board (or the ini's), else every board of the --fleet file."""
    found = config.stash.get(BOARDS_KEY, None)
    if found is not None:
        return found
    raw = config.getoption("board") or [config.getini("ondevice_board")]
    names: list[str] = []
    for entry in raw:
        for name in entry.replace(",", " ").split():
            if name not in names:
                names.append(name)
    fleet = fleet_path(config)
    if not names and fleet:
        from ..farm.fleet import load
        from .schema import ConfigError

        try:
            names = load(fleet).boards()
        except ConfigError as e:
            raise pytest.UsageError(str(e)) from None
    config.stash[BOARDS_KEY] = names
    return names


BOARDS_KEY = pytest.StashKey[list[str]]()


def fleet_path(config: pytest.Config):
    """--fleet, relative to where pytest was started."""
    value = config.getoption("fleet", None)
    return config.invocation_params.dir / value if value else None


# the user property of a scripted test whose device failed it (an error, not a failure)
INFRASTRUCTURE_PROPERTY = "ondevice_infrastructure"
# a scripted test that met a configuration or toolchain error: an error too, not the device's
SETUP_PROPERTY = "ondevice_setup_error"
