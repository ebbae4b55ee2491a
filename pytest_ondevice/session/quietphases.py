"""A case whose binary has already run reads its verdict in each phase and runs nothing
that could print or log; pytest's capture and log handlers around its phases cost a tenth
of a case (a 10,000-case host run: 1.3 s of 14). Such a case's phases run without them,
through pytest's own protocol, when nothing but the case itself is set up or torn down
in them: its file is set up already and the next item is in the same file (the last case
of a file may run a session fixture's teardown or a package's teardown_module). Never
when another plugin or a conftest hooks the phases, nor under --pdb, --trace,
--setup-show or --setup-only (the debugger and the fixture printer turn capture back on
for the phase they expect to be in), nor with -x, --maxfail or --stepwise (a failure
tears everything down in the failing case's teardown)."""

from __future__ import annotations

from typing import Any

import pytest

from ..config.options import stops_at_a_failure

# plugins of pytest's own that implement pytest_runtest_setup/call/teardown
BUILTIN_PHASE_PLUGINS = frozenset(
    {"runner", "skipping", "capturemanager", "logging-plugin", "threadexception", "unraisableexception", "nose"}
)
QUIET = ("capturemanager", "logging-plugin")  # what a settled case's phases go without
PHASES = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
QUIET_PHASES_KEY = pytest.StashKey["dict[str, Any] | None"]()
LOUD_OPTIONS = ("usepdb", "trace", "setupshow", "setuponly")


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


def quiet_callers(item: pytest.Item, nextitem: pytest.Item | None, verdict_in_hand: bool) -> dict[str, Any] | None:
    """The phase hooks item's phases may use without capture, or None (see the module's docstring)."""
    config = item.config
    callers = config.stash.get(QUIET_PHASES_KEY, None)
    if not verdict_in_hand or callers is None:
        return None
    if stops_at_a_failure(config) or any(config.getoption(name, False) for name in LOUD_OPTIONS):
        return None
    if nextitem is None or nextitem.parent is not item.parent:
        return None
    return callers if item.parent in item.session._setupstate.stack else None


class QuietPhases:
    """An item's hook proxy with the quiet phase hooks; every other hook is the item's own."""

    def __init__(self, ihook: Any, callers: dict[str, Any]) -> None:
        self._ihook = ihook
        self.__dict__.update(callers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ihook, name)
