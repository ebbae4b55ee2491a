"""Makes the "vendor" libraries this example links, for the boards selected, when missing.

In a real project they come from the vendor (or from your model compiler); here a script
in the repo stands in for that, so the example runs from a fresh clone."""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent


def pytest_configure(config) -> None:
    from pytest_ondevice.compiling.toolchain import ToolchainError
    from pytest_ondevice.plugin import selected_boards

    spec = importlib.util.spec_from_file_location("make_vendor_lib", HERE / "make_vendor_lib.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    from pytest_ondevice.config.board import BoardRegistry
    from pytest_ondevice.config.schema import ConfigError

    registry = BoardRegistry([Path(p) for p in config.getini("ondevice_boards")])  # the project's boards too
    for board in selected_boards(config):
        if not (HERE / "vendor" / board / "libvendor.a").is_file():
            with contextlib.suppress(ToolchainError, ConfigError):  # the test's own build reports it
                maker.build(board, registry=registry)
