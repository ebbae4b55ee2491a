"""What a session is asked to do: built once from pytest's options and ini (config/assemble.py),
read by the run engine (run/engine.py, run/life.py) and the farm (farm/devices.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .keys import TEST_PATTERNS

if TYPE_CHECKING:  # a type only: the fleet file is read by the farm
    from ..farm.fleet import Fleet


@dataclass
class Settings:
    rootdir: Path
    build_root: Path
    jobs: int
    fleet: Fleet | None = None  # the devices of each board (default: one per board, its board file's)
    run_dir: Path | None = None  # this run's shared state (quarantine), the same for every xdist worker
    lease_dir: Path | None = None  # where a fleet file's devices are leased, across runs
    lease_timeout: float | None = None  # give up waiting for a busy device after this (None: wait)
    who: str = "this run"  # the lease holder, as a waiting run names it
    worker_index: int = 0  # an xdist worker's number (gw3: 3)
    say: Callable[[str], None] | None = None  # a line for the person watching (waiting for a lease)
    console: str | None = None  # --console: another transport's console for the board's loader
    cli_timeout: float | None = None
    ini_timeout: float | None = None
    build_only: bool = False
    defines: tuple[str, ...] = ()  # for every compile this session
    retries: int = 1  # extra attempts after a dropped connection
    # the project's ini value of a transport option: (ini name, its kind) -> value or None
    transport_options: Callable[[str, str], Any] = lambda name, kind: None
    cache_dir: Path | None = None  # the shared build cache (default: per user)
    cache_shared: bool | None = None  # trust its group's members' entries (None: $ONDEVICE_CACHE_SHARED)
    test_patterns: tuple[str, ...] = TEST_PATTERNS  # collected sources: never in a library
    cache_max_size: int | None = None  # trimmed to this at session end
    log_max: int | None = None  # bytes per device log file (head and tail kept; None: the default)
    coverage: bool = False  # --ondevice-coverage: instrumented builds, counts brought back
    side_process: bool = True  # ondevice_side_process: a local board's binaries run in a process beside pytest
    no_gpu: str = "error"  # --ondevice-no-gpu: a CUDA binary's cases on a device without a GPU
