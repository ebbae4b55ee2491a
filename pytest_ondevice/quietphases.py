"""A case whose binary has already run reads its verdict in each phase and runs nothing
that could print or log; pytest's capture and log handlers around its phases cost a tenth
of a case (a 10,000-case host run: 1.3 s of 14). Such a case's phases run without them,
through pytest's own protocol, unless some plugin or conftest other than pytest's own
hooks the phases: its code is then captured as usual."""

from __future__ import annotations

from typing import Any

import pytest

# plugins of pytest's own that implement pytest_runtest_setup/call/teardown
BUILTIN_PHASE_PLUGINS = frozenset(
    {"runner", "skipping", "capturemanager", "logging-plugin", "threadexception", "unraisableexception", "nose"}
)
QUIET = ("capturemanager", "logging-plugin")  # what a settled case's phases go without
PHASES = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
QUIET_PHASES_KEY = pytest.StashKey["dict[str, Any] | None"]()


def phase_callers(config: pytest.Config) -> dict[str, Any] | None:
    """The phase hooks without capture and logging, or None when another plugin (a conftest
    too) hooks a phase. Decided once the run starts, when every conftest is registered."""
    pm = config.pluginmanager
    for name in PHASES:
        for impl in getattr(pm.hook, name).get_hookimpls():
            if pm.get_name(impl.plugin) not in BUILTIN_PHASE_PLUGINS:
                return None
    quiet = [plugin for plugin in map(pm.get_plugin, QUIET) if plugin is not None]
    return {name: pm.subset_hook_caller(name, quiet) for name in PHASES}


class QuietPhases:
    """An item's hook proxy with the quiet phase hooks; every other hook is the item's own."""

    def __init__(self, ihook: Any, callers: dict[str, Any]) -> None:
        self._ihook = ihook
        self.__dict__.update(callers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ihook, name)
