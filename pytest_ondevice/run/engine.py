"""What one session's binaries share: the builder and its pool, the devices, the counters
the summary shows, and the way they run (ways.py), chosen once when collection ends.

Builds start in the background as soon as collection ends; each binary lives once
(life.py), and its result is handed to every item of that binary."""

from __future__ import annotations

import contextlib
import functools
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

from ..compiling import toolchain
from ..compiling.builder import Artifact, Builder
from ..config import dirconfig
from ..config.board import Board, BoardRegistry
from ..config.schema import ConfigError
from ..config.settings import Settings
from ..farm.devices import Devices
from . import life, ways
from .fixtures import FixtureGate
from .messages import Progress
from .results import BinaryResult
from .spec import BinarySpec

DEFAULT_TIMEOUT = 60.0
CACHE_COUNTS = ("hits", "misses", "damaged", "uncached", "untrusted")  # the build store's, in the summary
T = TypeVar("T")


class Engine:
    def __init__(
        self,
        settings: Settings,
        registry: BoardRegistry,
        live: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.live = live
        self.builder = Builder(
            settings.build_root,
            settings.jobs,
            settings.rootdir,
            settings.defines,
            settings.cache_dir,
            settings.cache_shared,
            life.coverage_data(settings) if settings.coverage else None,
            settings.test_patterns,
        )
        self.build_pool = ThreadPoolExecutor(max_workers=max(2, settings.jobs * 2))
        self._builds: dict[tuple, Future] = {}
        self._pools: dict[tuple[str, str], ThreadPoolExecutor] = {}  # (run|push, board)
        self._consumed: set[tuple] = set()
        self.way: ways.Way = ways.InProcess(self)  # until start() chooses
        self.fixtures = FixtureGate([])  # CTest's, among the session's binaries
        self.stopping = threading.Event()  # set at session end: queued and running runs stop
        self._closed = False
        # the run's shared state; a session made without one (not by the plugin) has its own
        self._own_run_dir = None if settings.run_dir else tempfile.TemporaryDirectory(prefix="ondevice-run-")
        run_dir = settings.run_dir or Path(self._own_run_dir.name)  # type: ignore[union-attr]
        self.devices = Devices(settings, registry, run_dir, self.build_pool, self.stopping)
        if settings.coverage:
            self.devices.coverage = (self.builder.coverage_strip, life.coverage_data(settings))
        self.pushed = 0
        self.push_skipped = 0
        self.lock = threading.Lock()
        # read once per session: an edit between two runs in one process is seen
        self._dir_configs = functools.cache(
            lambda d: dirconfig.load(
                dirconfig.find(d, self.settings.rootdir), d.resolve(), self.settings.test_patterns, self._board_names
            )
        )
        self.runs = 0

    @functools.cached_property
    def _board_names(self) -> frozenset[str]:
        return frozenset(self.registry.names())

    # -- the session's start ---------------------------------------------------------------
    def start(
        self,
        specs: list[BinarySpec],
        keep: set,
        *,
        ahead: bool,
        aside: bool,
        progress: Callable[[], Callable[[bool, Progress], None]],
    ) -> list[BinarySpec]:
        """Choose how the binaries run (ways.choose) and start their builds; the specs
        built in this process are returned (pytest waits for those before the first case)."""
        self.fixtures = FixtureGate(specs)
        self.way, here = ways.choose(self, specs, keep, ahead=ahead, aside=aside, progress=progress)
        return here

    def prebuild(self, specs: list[BinarySpec]) -> None:
        """Start every build now, in parallel, so runs rarely wait for the compiler."""
        for spec in specs:
            if spec.crate is None:
                with contextlib.suppress(ConfigError):  # reported by the build itself
                    self.builder.plan(spec.board, self.dir_config(spec.source), spec.source, spec.needs)
        for spec in specs:
            self.build_future(spec)

    def wait_for_builds(self, report: Callable[[bool], None], every: float = 0.25) -> None:
        """Block until every started build is done, calling report(False) now and then and
        report(True) at the end: a long cold build shows its progress, and its time is
        spent here, not charged to the first test."""
        futures = list(self._builds.values())
        while not all(f.done() for f in futures):
            wait(futures, timeout=every)
            report(False)
        report(True)

    def build_future(self, spec: BinarySpec) -> Future:
        return self.started(self._builds, spec.key, lambda: self.build_pool.submit(life.build, self, spec))

    def started(self, table: dict[Any, T], key: object, start: Callable[[], T]) -> T:
        """What table holds for key, or what start() makes: each future and pool exists once."""
        with self.lock:
            fut = table.get(key)
            if fut is None:
                fut = table[key] = start()
            return fut

    def pool(self, role: str, board: Board, workers: int) -> ThreadPoolExecutor:
        return self.started(self._pools, (role, board.name), lambda: ThreadPoolExecutor(max_workers=workers))

    @property
    def started_anything(self) -> bool:
        """Whether a build or a run has started: a fork now could lose a thread's lock."""
        return bool(self._builds or self._pools)

    def build_source(self, board: Board, source: Path) -> Artifact:
        """A program a scripted test builds (device.build): the board's toolchain, runtime and
        flags, through the same store as the test binaries."""
        root = self.settings.rootdir
        rel = str(source.relative_to(root)) if source.is_relative_to(root) else source.name
        tc, cfg = toolchain.resolve(board), self.dir_config(source)
        return life.rebuilt_while_lost(self, lambda: self.builder.binary(board, tc, cfg, source, rel))

    def dir_config(self, source: Path) -> dirconfig.DirConfig:
        return self._dir_configs(source.parent)  # every caller names a file

    def timeout_for(self, spec: BinarySpec) -> float:
        """Per-file override, then --device-timeout, then ini, then the board's default."""
        file_timeout = self.dir_config(spec.source).for_file(spec.source).timeout
        for value in (file_timeout, self.settings.cli_timeout, self.settings.ini_timeout):
            if value is not None:
                return float(value)
        return spec.board.timeout or DEFAULT_TIMEOUT

    def ask_compilers(self, boards: list[Board]) -> None:
        """Each board's compiler is asked its version now, while pytest collects."""
        for board in boards:
            toolchain.ask_early(board)

    # -- what the items ask ----------------------------------------------------------------
    def reach(self, spec: BinarySpec) -> None:
        """pytest has come to the binary's items."""
        self.way.reach(spec)

    def has_result(self, spec: BinarySpec) -> bool:
        """Whether the binary's result is in hand: asking for it will not wait, nor run anything."""
        return self.way.has_result(spec)

    def result(self, spec: BinarySpec) -> tuple[BinaryResult, bool]:
        """The binary's result, and whether this is its first consumer (who reports extras)."""
        result = self.way.result(spec)
        with self.lock:
            fresh = spec.key not in self._consumed
            self._consumed.add(spec.key)
        return result, fresh

    def stop_aside(self) -> None:
        """pytest runs no more items: nothing more runs beside it, and what ran is counted
        before the summary."""
        self.way.stop()

    def side_note(self) -> str | None:
        """Why some binaries ran in pytest's own process after all: said in the summary."""
        return self.way.note()

    # -- counters ----------------------------------------------------------------------------
    def count_deploy(self, pushed: bool | None) -> None:
        with self.lock:
            self.runs += 1
            if pushed is True:
                self.pushed += 1
            elif pushed is False:
                self.push_skipped += 1

    def counters(self) -> tuple[int, ...]:
        """What a run or a build counts that the summary shows: the side process sends each change."""
        cache = self.builder.store.stats
        return (self.runs, self.pushed, self.push_skipped, *(getattr(cache, name) for name in CACHE_COUNTS))

    def add_counts(self, delta: tuple[int, ...]) -> None:
        with self.lock:
            self.runs += delta[0]
            self.pushed += delta[1]
            self.push_skipped += delta[2]
        for name, n in zip(CACHE_COUNTS, delta[3:], strict=True):
            self.builder.store.stats.count(name, n)

    # -- threads and the end -------------------------------------------------------------------
    def new_threads(self) -> None:
        """Pools and locks of this process's own: after the fork, in both processes."""
        self.build_pool = ThreadPoolExecutor(max_workers=max(2, self.settings.jobs * 2))
        self.devices.use_pool(self.build_pool)
        self.lock = threading.Lock()

    def stop_runs(self) -> None:
        self.stopping.set()
        self.builder.stop()  # the side process's compilers too
        self.devices.stop()

    def close(self) -> None:
        """Once: at unconfigure, or as the config's cleanup when configuring stopped at a
        usage error after the session was made."""
        if self._closed:
            return
        self._closed = True
        self.stop_runs()  # compilers still running are killed, none start; a run still going ends now
        self.way.stop()  # before the transports close: the side process's run ends, then it exits
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self.build_pool.shutdown(wait=True, cancel_futures=True)
        toolchain.forget_early()  # after the builds: none may read it now
        self.devices.close()
        self.builder.close(self.settings.cache_max_size)
        if self._own_run_dir is not None:
            self._own_run_dir.cleanup()
