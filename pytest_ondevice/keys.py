"""What the entry-point plugin and the nodes share, importing nothing heavy (no cycle)."""

from __future__ import annotations

from typing import Any

import pytest

TEST_PATTERNS = ("*_test.c", "*_test.cc", "*_test.cpp")  # collected by default (ini ondevice_files)
SESSION_KEY = pytest.StashKey[Any]()  # the OnDeviceSession (runner.py), imported only when used
# --bench-compare: the baseline's records by bench key, and the slowdown threshold in %
BASELINE_KEY = pytest.StashKey["tuple[dict[str, dict], float] | None"]()


def selected_boards(config: pytest.Config) -> list[str]:
    raw = config.getoption("board") or [config.getini("ondevice_board")]
    names: list[str] = []
    for entry in raw:
        for name in entry.replace(",", " ").split():
            if name not in names:
                names.append(name)
    return names
