"""Keep labgrid's own pytest plugin out of runs that do not ask for it.

Installing labgrid (our `[labgrid]` extra) installs its pytest plugin, which pytest loads
into every run: about a second of imports at each start, a different default
`log_format`, live logging at -vv, and fixtures named `env`, `target` and `strategy`.
Our use of labgrid is its client API, which needs none of that. So unless the run asks
for labgrid's plugin (`--lg-env`/`LG_ENV`, any `--lg-*` option, or `-p labgrid`), it is
blocked: when our plugin is loaded first it is never imported; when pytest loaded it
first it is unregistered before any of its hooks runs, and the import cost is the only
trace (`-p no:labgrid` in addopts removes that too).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex

import pytest

NAME = "labgrid"  # its pytest11 entry point
PYTEST_LOG_FORMAT = "%(levelname)-8s %(name)s:%(filename)s:%(lineno)d %(message)s"  # pytest's default


def wanted(config: pytest.Config) -> bool:
    """Whether this run uses labgrid's pytest plugin itself."""
    if os.environ.get("LG_ENV"):
        return True
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]
    with contextlib.suppress(Exception):  # registered before the ini was read: the command line decides
        args += config.getini("addopts")
    args = [str(a) for a in args]
    for arg, following in itertools.pairwise([*args, ""]):  # each argument and the one after it (none: "")
        if arg.startswith("--lg-"):
            return True
        named = following if arg == "-p" else arg[2:] if arg.startswith("-p") else None
        if named in (NAME, "labgrid.pytestplugin"):
            return True
    return False


def keep_out(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    config = pluginmanager.get_plugin("pytestconfig")
    if config is None or pluginmanager.is_blocked(NAME) or wanted(config):
        return
    loaded = pluginmanager.get_plugin(NAME)
    pluginmanager.set_blocked(NAME)  # unregisters it if pytest loaded it before us
    if loaded is None:
        return
    # its addoption already ran: put pytest's own default back
    parser.addini("log_format", default=PYTEST_LOG_FORMAT, help="Default value for log messages")
    # pytest replays each plugin's registration to its fixture manager, made later, even
    # for a plugin since unregistered: forget labgrid's, or its fixtures stay visible
    history = getattr(pluginmanager.hook.pytest_plugin_registered, "_call_history", None)
    if isinstance(history, list):
        history[:] = [call for call in history if call[0].get("plugin") is not loaded]
