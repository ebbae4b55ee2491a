"""A session's Settings, assembled from pytest's options and ini in one place. What other
stages find (the fleet, this run's shared dir, the lease holder's name, where a line for
the person watching goes) is handed in by the session (session/activate.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .options import ini_path
from .schema import ConfigError
from .settings import Settings

if TYPE_CHECKING:
    from ..farm.fleet import Fleet

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def settings(
    config: pytest.Config,
    *,
    fleet: Fleet,
    run_dir: Path,
    default_cache_dir: Path,
    who: str,
    worker_index: int,
    say: Callable[[str], None] | None,
) -> Settings:
    """Every option and ini value a session reads; a ConfigError names the ini key."""
    cache_dir = ini_path(config, "ondevice_cache_dir", "ONDEVICE_CACHE_DIR") or default_cache_dir
    ini_timeout = config.getini("ondevice_timeout")
    return Settings(
        rootdir=config.rootpath,
        build_root=ini_path(config, "ondevice_build_dir") or config.rootpath / ".ondevice" / "build",
        cache_dir=cache_dir,
        cache_shared=config.getini("ondevice_cache_shared"),  # None: from $ONDEVICE_CACHE_SHARED
        cache_max_size=_size(config, "ondevice_cache_size"),
        test_patterns=tuple(config.getini("ondevice_files").split()),
        log_max=_size(config, "ondevice_log_max"),
        coverage=config.getoption("ondevice_coverage"),
        side_process=config.getini("ondevice_side_process"),
        no_gpu=config.getoption("ondevice_no_gpu"),
        jobs=config.getoption("build_jobs") or os.cpu_count() or 2,
        fleet=fleet,
        run_dir=run_dir,
        lease_dir=fleet.lease_dir or cache_dir / "leases",
        lease_timeout=config.getoption("lease_timeout"),
        who=who,
        worker_index=worker_index,
        say=say,
        console=config.getoption("console"),
        cli_timeout=config.getoption("device_timeout"),
        ini_timeout=float(ini_timeout) if ini_timeout else None,
        build_only=config.getoption("build_only"),
        defines=("ONDEVICE_BENCH_DISABLE=1",) if config.getoption("bench_disable") else (),
        retries=int(config.getini("ondevice_retries")),
        transport_options=transport_options(config),
    )


def parse_size(text: str) -> int:
    """'5G', '500M', '2048K' or bytes, as ccache -M takes them."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (value[:-1], value[-1]) if value[-1:] in SIZE_UNITS else (value, "")
    try:
        size = int(float(number) * SIZE_UNITS[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (write e.g. 5G or 500M)") from None
    if size <= 0:
        raise ValueError(f"must be more than 0: {text!r}")
    return size


def _size(config: pytest.Config, name: str) -> int:
    try:
        return parse_size(config.getini(name))
    except ValueError as e:
        raise ConfigError(f"{name}: {e}") from None


def transport_options(config: pytest.Config) -> Callable[[str, str], Any]:
    """The project's ini value for a transport option, as its declaration reads it (None:
    not set). Asked only for the transports a board uses: loading all of them costs ~40 ms."""

    def value(name: str, kind: str) -> Any:
        try:
            raw = config.getini(name)
        except ValueError:  # a third-party transport's ini key that pytest was not told of
            return None
        if raw in ("", None):
            return None
        if kind == "path":
            return str(config.rootpath / raw)
        if kind == "bool":
            return str(raw).strip().lower() in ("1", "true", "yes", "on")
        return raw

    return value
