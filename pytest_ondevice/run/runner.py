"""One build and one run per (board, binary), shared by all of its cases: the binary's
life, each step a call into the stage that owns it.

    plan and build (build.py, cargo)  ->  lease a device (placement.py, devices.py)
    ->  deploy and run (transports)  ->  parse (formats)  ->  verdicts (items.py)

Builds start in the background as soon as collection ends; each binary runs once, the
first time one of its items needs a verdict, and the parsed result is handed to every
item of that binary.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, TypeVar

from .. import formats
from ..compiling import compiledout, elf, toolchain
from ..compiling.builder import Artifact, Builder, BuildError, LinkError
from ..compiling.sizecheck import SizeError
from ..compiling.store import CacheError
from ..config import dirconfig
from ..config.board import Board, BoardRegistry
from ..config.schema import ConfigError
from ..config.settings import Settings
from ..farm.devices import Devices
from ..farm.lease import Lease
from ..formats.devlog import DeviceLog, keep_attempt_log, remove_attempt_logs
from ..transports import InfrastructureError
from . import sideruns
from .binary import BinaryResult, BinarySpec, Rerun
from .failover import run_on_a_device
from .unusable import device_unusable, skip_all

DEFAULT_TIMEOUT = 60.0
BUILDING, BUILT, GO = "building", "built", "go"  # what the side process tells of its builds
SAY = "say"  # and a line for the person watching (waiting for a device's lease), said at once
FIRST_ALONE = 0.05  # seconds the side process checks its first binary before the others
COMPILER_SEEN = 0.005  # seconds a warm check may take before the side process asks whether a compiler runs
CACHE_COUNTS = ("hits", "misses", "damaged", "uncached", "untrusted")  # the build store's, in the summary
NONCE_LINE_SYMBOL = "ondevice_nonce_line"  # micro_test.h's
T = TypeVar("T")


def _new_keys(now: dict[str, list[str]], before: dict[str, list[str]]) -> dict[str, list[str]]:
    """What the side process built or reused that this process had not counted."""
    return {kind: sorted(set(keys) - set(before.get(kind, ()))) for kind, keys in now.items()}


def coverage_data(settings: Settings) -> Path:
    """Where this session's gcov counts and the notes' whereabouts go (every xdist worker's)."""
    return settings.build_root / "coverage-data"


@functools.lru_cache(maxsize=4096)
def built_with_our_header(artifact: Artifact) -> bool:
    """Whether micro_test.h's marker symbol is in the binary (looked up once per build)."""
    return elf.defines_symbol(artifact.path, NONCE_LINE_SYMBOL)


class OnDeviceSession:
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
            coverage_data(settings) if settings.coverage else None,
            settings.test_patterns,
        )
        self._build_pool = ThreadPoolExecutor(max_workers=max(2, settings.jobs * 2))
        self._builds: dict[tuple[str, Path], Future] = {}
        self._runs: dict[tuple[str, Path], Future] = {}  # queued ahead on a thread
        self._here: dict[tuple[str, Path], Future] = {}  # run when first read
        self._side: sideruns.SideRuns | None = None
        self._side_progress: Callable[[], Callable[[bool, tuple[int, int, str]], None]] = lambda: lambda *a: None
        self._side_going = False  # pytest may go on to the items: told by the side process
        self._side_built: set[tuple[str, Path]] = set()  # the binaries it has built or checked
        self._run_pools: dict[tuple[str, str], ThreadPoolExecutor] = {}  # (run|push, board)
        self._consumed: set[tuple[str, Path]] = set()
        self.stopping = threading.Event()  # set at session end: queued and running runs stop
        self._closed = False
        # the run's shared state; a session made without one (not by the plugin) has its own
        self._own_run_dir = None if settings.run_dir else tempfile.TemporaryDirectory(prefix="ondevice-run-")
        run_dir = settings.run_dir or Path(self._own_run_dir.name)
        self.devices = Devices(settings, registry, run_dir, self._build_pool, self.stopping)
        if settings.coverage:
            self.devices.coverage = (self.builder.coverage_strip, coverage_data(settings))
        self.pushed = 0
        self.push_skipped = 0
        self._lock = threading.Lock()
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

    # -- building ------------------------------------------------------------
    def prebuild(self, specs: list[BinarySpec]) -> None:
        """Start every build now, in parallel, so runs rarely wait for the compiler."""
        for spec in specs:
            if spec.crate is None:
                with contextlib.suppress(ConfigError):  # reported by the build itself
                    self.builder.plan(spec.board, self.dir_config(spec.source), spec.source, spec.needs)
        for spec in specs:
            self._build_future(spec)

    def wait_for_builds(self, report: Callable[[bool], None], every: float = 0.25) -> None:
        """Block until every started build is done, calling report(False) now and then and
        report(True) at the end: a long cold build shows its progress, and its time is
        spent here, not charged to the first test."""
        futures = list(self._builds.values())
        while not all(f.done() for f in futures):
            wait(futures, timeout=every)
            report(False)
        report(True)

    def _build_future(self, spec: BinarySpec) -> Future:
        return self._started(self._builds, spec.key, lambda: self._build_pool.submit(self._build, spec))

    def _started(self, table: dict[Any, T], key: object, start: Callable[[], T]) -> T:
        """What table holds for key, or what start() makes: each future and pool exists once."""
        with self._lock:
            fut = table.get(key)
            if fut is None:
                fut = table[key] = start()
            return fut

    def _build(self, spec: BinarySpec) -> Artifact:
        if spec.crate is not None:
            return self._cargo_binary(spec)
        cfg = self.dir_config(spec.source)
        tc = toolchain.resolve(spec.board)
        return self.builder.binary(spec.board, tc, cfg, spec.source, spec.rel, spec.needs)

    def build_source(self, board: Board, source: Path) -> Artifact:
        """A program a scripted test builds (device.build): the board's toolchain, runtime and
        flags, through the same store as the test binaries."""
        root = self.settings.rootdir
        rel = str(source.relative_to(root)) if source.is_relative_to(root) else source.name
        return self.builder.binary(board, toolchain.resolve(board), self.dir_config(source), source, rel)

    def _cargo_binary(self, spec: BinarySpec) -> Artifact:
        from ..compiling import rustbuild  # cargo's modules only for a run that has a crate

        crate, board = spec.crate, spec.board
        assert crate is not None and spec.target is not None
        built = self.builder.once(
            ("cargo", board.name, crate),
            lambda: rustbuild.binaries(
                self.builder, board, self.dir_config(crate / "Cargo.toml"), crate, self.settings.build_root
            ),
        )
        path = built.get(spec.target)
        if path is None:
            kind, name = spec.target
            made = ", ".join(f"{k} {n}" for k, n in built) or "none"
            raise BuildError(f"cargo built no test binary for the {kind} target {name} of {crate} (it built: {made})")
        return rustbuild.artifact(path)

    def dir_config(self, source: Path) -> dirconfig.DirConfig:
        return self._dir_configs(source.parent)  # every caller names a file

    def timeout_for(self, spec: BinarySpec) -> float:
        """Per-file override, then --device-timeout, then ini, then the board's default."""
        file_timeout = self.dir_config(spec.source).for_file(spec.source).timeout
        for value in (file_timeout, self.settings.cli_timeout, self.settings.ini_timeout):
            if value is not None:
                return float(value)
        return spec.board.timeout or DEFAULT_TIMEOUT

    # -- running -------------------------------------------------------------

    # -- running -------------------------------------------------------------
    def run_ahead(self, specs: list[BinarySpec]) -> None:
        """Queue every run now, in item order: the devices work while pytest reports.

        Each board gets its own queue, as many runs at a time as its devices take
        (`device_jobs` each, 1 by default: a device runs one binary at a time, so
        latency figures stay undisturbed)."""
        boards = {spec.board.name: spec.board for spec in specs}
        ahead = {name: self.devices.runs_ahead(board) for name, board in boards.items()}
        specs = [spec for spec in specs if ahead[spec.board.name]]  # the others run when read
        for spec in specs:
            self._result_future(spec)
        for spec in specs:  # a second queue pushes ahead of the runs (one device: we know where)
            if self.devices.known_device(spec.board.name) is not None:
                self._pool("push", spec.board, 1).submit(self._prefetch, spec)

    def _pool(self, role: str, board: Board, workers: int) -> ThreadPoolExecutor:
        return self._started(self._run_pools, (role, board.name), lambda: ThreadPoolExecutor(max_workers=workers))

    def _prefetch(self, spec: BinarySpec) -> None:
        """Best effort: any error here is met again, and reported, by the run itself."""
        if self.stopping.is_set():
            return
        try:
            artifact = self._build_future(spec).result()
            transport = self.devices.transport(self.devices.known_device(spec.board.name))
        except Exception:
            return
        transport.prefetch(artifact.path, artifact.sha256)

    def _result_future(self, spec: BinarySpec) -> Future:
        slots = sum(self.devices.jobs_of(d) for d in self.devices.for_board(spec.board.name)) or 1
        pool = self._pool("run", spec.board, slots)
        return self._started(self._runs, spec.key, lambda: pool.submit(self._build_and_run, spec))

    def run_aside(
        self, specs: list[BinarySpec], keep: set, progress: Callable[[], Callable[[bool, tuple[int, int, str]], None]]
    ) -> list[BinarySpec]:
        """A local board's binaries, checked or built and run in item order in a forked
        process of their own (sideruns.py) while pytest reports the cases of those already
        run; the specs left to this process are returned (those whose keys are in keep, or
        all). Forked before any build, so this process has no thread of ours to lose in the
        fork. pytest waits for the builds only while a compiler runs, with a progress()
        line, never for the check of a warm cache. Not for runs a feature keeps in this
        process's memory (coverage counts), nor beside runs ahead on threads."""
        if not specs or self.settings.coverage or not self.settings.side_process or self._side is not None:
            return specs
        if self._builds or self._run_pools or any(self.devices.runs_ahead(s.board) for s in specs):
            return specs
        aside = [s for s in specs if s.key not in keep]
        if len(aside) < 2:  # one binary: nothing to run while pytest reports, and a fork to pay (12 ms)
            return specs
        self._build_pool.shutdown(wait=True)  # no thread of its own yet; none may start now
        for board in {s.board.name: s.board for s in aside}.values():  # asked early: read once, here
            with contextlib.suppress(toolchain.ToolchainError):  # the build reports it
                toolchain.resolve(board)
        built = self.builder.stats.exported()
        later: list[Callable[[], None]] = []  # in the side process: the others' builds, once the first has run

        def run(spec: BinarySpec) -> BinaryResult:
            try:
                return self._build_and_run(spec)
            finally:
                while later:
                    later.pop()()

        self._side = sideruns.start(
            aside,
            run,
            self._counters,
            self._stop_runs,
            self._new_threads,
            self._side_counted,
            end=lambda: (
                _new_keys(self.builder.stats.exported(), built),
                self.builder.store.hand_over(),
                self.builder.model_sizes,
            ),
            on_end=self._side_ended,
            prepare=lambda tell: self._prepare_aside(aside, tell, later),
            on_told=self._said,
        )
        self._new_threads()
        if self._side is None:
            return specs
        self._side_progress = progress
        self._await_side(lambda: self._side_going)
        if not self._side_going:  # it ended before its builds were done: they are built here, now
            return specs
        return [s for s in specs if s.key in keep]

    def _said(self, told: tuple) -> bool:
        """A line the side process would have written to the terminal: written here, as it
        arrives (its own terminal writer's output would be lost under capture, or break a line)."""
        if told[0] != SAY:
            return False
        if self.settings.say is not None:
            self.settings.say(told[2])
        return True

    def _side_ended(self, end: tuple) -> None:
        """The side process's last word: its builds' keys and the sizes of the models it
        compiled, for the summary; and the cache entries it held and staging dirs it left,
        which this process holds and removes."""
        keys, handed, model_sizes = end
        self.builder.stats.merge(keys)
        self.builder.model_sizes.update(model_sizes)
        self.builder.store.take_over(*handed)

    def _await_side(self, until: Callable[[], bool], done: Callable[[], bool] = lambda: False) -> None:
        """Read what the side process tells of its builds until until(), showing their progress."""
        side = self._side
        assert side is not None
        report = self._side_progress()
        latest = (0, 0, "")

        def heard(told: tuple) -> bool:
            nonlocal latest
            latest = self._heard(told)
            if until():
                report(True, latest)
                return True
            report(False, latest)
            return False

        if not until() and not done():
            side.wait_prepared(heard, done)

    def _heard(self, told: tuple) -> tuple[int, int, str]:
        """One message of the side process's builds filed; its progress figures returned."""
        kind, key, progress = told
        if kind == GO:
            self._side_going = True
        elif kind == BUILT:
            self._side_built.add(key)
        return progress

    def _catch_up(self, side: sideruns.SideRuns) -> None:
        """File what the side process has told of its builds since last asked, without waiting."""
        for told in side.told():
            self._heard(told)

    def _prepare_aside(self, specs: list[BinarySpec], tell: Callable[[tuple], None], later: list) -> None:
        """In the side process: every build started, and pytest told of each binary built,
        and when it may go on to the items (GO): at once for a warm cache (the first binary
        checked within FIRST_ALONE and no compiler run), else once every build is done, with
        the progress meanwhile (the runs wait for them too). Later, pytest waits between two
        items for a binary not built yet (its source changed): a build is never part of a
        test's time. cargo is not counted in tools_started: a session with a crate waits for
        all its builds."""
        if self.settings.say is not None:  # the lease's "waiting for a device" line, in pytest's process
            self.settings.say = lambda line: tell((SAY, None, line))

        def told_when_built(spec: BinarySpec) -> Future:
            fut = self._build_future(spec)
            fut.add_done_callback(lambda _: tell((BUILT, spec.key, self.builder.progress())))
            return fut

        # pytest waits for the first binary, and for its run: both go alone, as four threads
        # checking at once take three times as long each (the interpreter lock); the others
        # start once it has run, or after FIRST_ALONE (a slow binary delays no compile long)
        first = told_when_built(specs[0])
        wait([first], timeout=FIRST_ALONE)
        cargo = any(s.crate is not None for s in specs)
        started = threading.Lock()

        def start_the_others() -> list[Future]:
            if not started.acquire(blocking=False):
                return []  # started already
            if going:
                check_in_order(specs[1:])
                return []
            self.prebuild(specs)  # the progress line's total, known up front (half a second at 10,000 binaries)
            futures = [first, *map(told_when_built, specs[1:])]
            threading.Thread(target=watch, args=(futures,), daemon=True).start()
            return futures

        def check_in_order(rest: list[BinarySpec]) -> None:
            """A warm cache's checks are the interpreter's work alone: one at a time, in item
            order, each ahead of the run that needs it, on one thread that takes turns with the
            runs (their binaries' output is waited for without the lock). Four at once took
            three times as long each and held back the runs: pytest waited 5-8 ms for the
            second binary of a session. The first check that runs a compiler (a changed
            source) starts all the rest at once, as a cold build does, as soon as it runs."""
            try:
                for i, spec in enumerate(rest):
                    fut = told_when_built(spec)
                    while not wait([fut], timeout=COMPILER_SEEN).done and not self.builder.tools_started:
                        pass
                    if self.builder.tools_started:  # the rest with it, not after it
                        for other in rest[i + 1 :]:
                            told_when_built(other)
                        return
            except RuntimeError:  # its pool is shut: the side process is stopping
                return

        def watch(futures: list[Future]) -> None:
            try:
                while not all(f.done() for f in futures):  # as the runs wait for them
                    tell((BUILDING, None, self.builder.progress()))
                    wait(futures, timeout=0.25)
            finally:  # never leave pytest waiting: the runs report any error
                tell((GO, None, self.builder.progress()))

        going = not cargo and self.builder.tools_started == 0 and first.done()
        if going:
            tell((GO, None, self.builder.progress()))
            later.append(lambda: threading.Thread(target=start_the_others, daemon=True).start())  # the runs go on
            timer = threading.Timer(FIRST_ALONE, start_the_others)
            timer.daemon = True
            timer.start()
        else:  # a cold build: the runs start once every build is done, as pytest's items do
            wait(start_the_others())

    def reach(self, spec: BinarySpec) -> None:
        """pytest has come to the binary's items: the side process may run the next few. A
        binary it has not built yet (its source changed) is waited for here, between two
        items, never in one."""
        side = self._side
        if side is None or not side.reach(spec.key):
            return
        self._catch_up(side)
        if spec.key not in self._side_built and not side.ready(spec.key) and not side.runs_here(spec.key):
            self._await_side(lambda: spec.key in self._side_built, lambda: side.ready(spec.key))
        if side.runs_here(spec.key):  # it stopped before this one: built here, still before the case
            with contextlib.suppress(Exception):  # an error is the case's to report, when it asks
                self._build_future(spec).result()

    def stop_aside(self) -> None:
        """pytest runs no more items: nothing more runs beside it, and what ran is counted
        before the summary."""
        if self._side is not None:
            self._side.stop()

    def _new_threads(self) -> None:
        """Pools and locks of this process's own: after the fork, in both processes."""
        self._build_pool = ThreadPoolExecutor(max_workers=max(2, self.settings.jobs * 2))
        self.devices.use_pool(self._build_pool)
        self._lock = threading.Lock()

    def _stop_runs(self) -> None:
        self.stopping.set()
        self.builder.stop()  # the side process's compilers too
        self.devices.stop()

    def _counters(self) -> tuple[int, ...]:
        """What a run or a build counts that the summary shows: the side process sends each change."""
        cache = self.builder.store.stats
        return (self.runs, self.pushed, self.push_skipped, *(getattr(cache, name) for name in CACHE_COUNTS))

    def _side_counted(self, delta: tuple[int, ...]) -> None:
        with self._lock:
            self.runs += delta[0]
            self.pushed += delta[1]
            self.push_skipped += delta[2]
        for name, n in zip(CACHE_COUNTS, delta[3:], strict=True):
            self.builder.store.stats.count(name, n)

    def side_note(self) -> str | None:
        """Why some binaries ran in pytest's own process after all: said in the summary."""
        return self._side.note() if self._side is not None else None

    def _aside(self, spec: BinarySpec) -> sideruns.SideRuns | None:
        side = self._side
        return side if side is not None and side.holds(spec.key) else None

    def has_result(self, spec: BinarySpec) -> bool:
        """Whether the binary's result is in hand: asking for it will not wait, nor run anything."""
        side = self._aside(spec)
        if side is not None:
            return side.ready(spec.key)
        fut = self._runs.get(spec.key) or self._here.get(spec.key)
        return fut is not None and fut.done()

    def result(self, spec: BinarySpec) -> tuple[BinaryResult, bool]:
        """The binary's result, and whether this is its first consumer (who reports extras)."""
        side = self._aside(spec)
        records: list[logging.LogRecord] = []
        if side is not None:
            result, records = side.outcome(spec.key)
        elif spec.key in self._runs:
            result = self._runs[spec.key].result()
        else:
            result = sideruns.RUN_HERE
        # not queued ahead (live output, xdist worker), or handed back by the side process: run it here and now
        if result is sideruns.RUN_HERE:
            result = self._run_here(spec)
        with self._lock:
            fresh = spec.key not in self._consumed
            self._consumed.add(spec.key)
        for record in records:  # what the side process logged while it ran the binary, in this item's capture
            logging.getLogger(record.name).handle(record)
        return result, fresh

    def _run_here(self, spec: BinarySpec) -> BinaryResult:
        with self._lock:
            fut = self._here.setdefault(spec.key, Future())
            owner = not fut.done() and not fut.running() and fut.set_running_or_notify_cancel()
        if owner:
            try:
                result = self._build_and_run(spec)
                side = self._aside(spec)
                if side is not None and side.lost(spec.key):  # a rerun, never silent
                    device = result.device.name if result.device is not None else spec.board.name
                    self._catch_up(side)  # its last word on what it had built
                    doing = "running" if spec.key in self._side_built else "building"
                    why = f"{side.reason}, while it was {doing} this binary beside pytest"
                    result.reruns.insert(0, Rerun(device, why, None, doing == "running"))
                fut.set_result(result)
            except BaseException as e:
                fut.set_exception(e)
        return fut.result()

    def _build_and_run(self, spec: BinarySpec) -> BinaryResult:
        built = self._built(spec, lambda: self._intact(spec, self._build_future(spec).result()))
        if isinstance(built, BinaryResult):
            return built
        artifact, timeout, data = built
        if data and spec.board.kind == "baremetal":  # a configuration error: never a test failure
            return BinaryResult(
                infra_error=f"{spec.rel} declares data files, but {spec.board.name} is bare metal and has no "
                "file system: embed the data in the binary (e.g. as a const array)"
            )
        if self.settings.build_only:
            return BinaryResult(artifact=artifact)
        return run_on_a_device(
            spec,
            artifact,
            self.devices,
            lambda lease: self._run_leased(spec, lease, artifact, timeout, data),
            self.stopping,
        )

    def _built(self, spec: BinarySpec, build: Callable[[], Artifact]) -> tuple[Artifact, float, Any] | BinaryResult:
        """The binary with its timeout and data files, or the result that says why there is none."""
        try:
            artifact = build()
            timeout = self.timeout_for(spec)
            data = self.dir_config(spec.source).for_file(spec.source).data
        except (CacheError, ConfigError, toolchain.ToolchainError) as e:
            # an unusable cache or build dir, a broken ondevice.toml, no compiler (or CUDA
            # toolkit) for the board: not the code's fault, so the items are errors naming the
            # file or the package (never failures, never a false pass)
            return BinaryResult(infra_error=str(e))
        except LinkError as e:  # a file whose every case an #ifdef removed has nothing to link (no main)
            skipped = compiledout.all_compiled_out(self.builder, spec, lambda: self.dir_config(spec.source))
            return BinaryResult(skipped) if skipped is not None else BinaryResult(build_error=str(e))
        except (BuildError, SizeError) as e:
            return BinaryResult(build_error=str(e))
        return artifact, timeout, data

    def _intact(self, spec: BinarySpec, artifact: Artifact) -> Artifact:
        """The binary as the cache holds it now: one removed since its build (by hand; trims
        and cleans leave what a live session holds) is built again, never run as missing (a
        strike on the device) nor reported as the code's failure."""
        return artifact if self._rechecked(spec, artifact) else self._build(spec)

    def _rechecked(self, spec: BinarySpec, artifact: Artifact) -> bool:
        """Whether the cache still holds the binary as built: a stat once its digest is known
        (remembered per inode and times), so asking again after the wait for a device is cheap."""
        return spec.crate is not None or self.builder.intact(artifact)

    def _run_leased(self, spec: BinarySpec, lease: Lease, artifact: Artifact, timeout: float, data) -> BinaryResult:
        """Deploy and run on one leased device; a dropped connection is reopened and run
        again, keeping the log of every attempt."""
        device = lease.device
        if not self._rechecked(spec, artifact):  # removed by hand while the binary waited for a device
            built = self._built(spec, lambda: self._intact(spec, artifact))
            if isinstance(built, BinaryResult):
                return built
            artifact = built[0]
        several = len(self.devices.for_board(spec.board.name)) > 1
        logs = self.settings.build_root / spec.board.name / "logs"
        log_path = (logs / device.name if several else logs) / f"{spec.rel}.log"
        prefix = f"{spec.board.name}@{device.name}" if several else spec.board.name
        attempts = 1 + max(0, self.settings.retries)
        reruns: list[Rerun] = []
        lost = ""  # why the previous attempt was cut short
        harness = formats.named(spec.format)
        remove_attempt_logs(log_path)
        for attempt in range(1, attempts + 1):
            parser = harness.parser(spec.cases)
            if hasattr(parser, "ours"):  # our header's binary: only its nonce-stamped run is believed
                parser.ours = built_with_our_header(artifact)
            log = DeviceLog(log_path, prefix, parser.feed_line, self.live, self.settings.log_max)
            try:
                transport = self.devices.transport(device)
                deployed = transport.deploy(artifact.path, artifact.sha256, data)
                self._count_deploy(deployed.pushed)
                record = transport.run_file(deployed) if harness.record_args else None
                end = transport.run(deployed, harness.args(record), timeout, log.feed)
                if record is not None:
                    parser.framework_record(transport.read_run_file(record, formats.MAX_RECORD_BYTES))
            except InfrastructureError as e:
                log.close()
                message = f"{lost}; then, on attempt {attempt}: {e}" if lost else str(e)
                started = e.binary_started or any(r.binary_started for r in reruns)
                if e.retryable and attempt < attempts:  # a dropped connection: reconnect, run again
                    lost = str(e)
                    reruns.append(Rerun(device.name, str(e), keep_attempt_log(log_path, attempt), e.binary_started))
                    try:
                        self.devices.transport(device).reopen()
                        continue
                    except InfrastructureError as again:
                        message = f"{lost}; then, reconnecting: {again}"
                        reruns.pop()
                if e.retryable:
                    self.devices.forget(device)
                return BinaryResult(
                    infra_error=message,
                    log_path=log_path,
                    artifact=artifact,
                    device=device,
                    reruns=reruns,
                    binary_started=started,
                    transient=e.retryable,
                )
            log.close(end)
            verdicts = parser.verdicts(list(spec.cases), end)
            unusable = device_unusable(parser, end, spec.board)
            if unusable and device.name != spec.board.name:  # a fleet's device: name it
                unusable = f"on device {device.name}: {unusable}"
            if unusable and getattr(parser, "unavailable", None) and self.settings.no_gpu == "skip":
                return BinaryResult(skip_all(spec, unusable), None, None, log_path, end, artifact)
            if unusable:  # decided from what the test cannot write: the device's, not the code's
                return BinaryResult(
                    infra_error=unusable,
                    log_path=log_path,
                    artifact=artifact,
                    device=device,
                    reruns=reruns,
                )
            if self.settings.coverage and spec.board.kind == "baremetal":
                from ..records import coverage  # a run with --ondevice-coverage only

                coverage.keep_sent(
                    coverage_data(self.settings), spec.board.name, spec.rel, verdicts.counts, verdicts.count_problems
                )
            compiledout.skip_compiled_out(self.builder, spec, lambda: self.dir_config(spec.source), verdicts)
            return BinaryResult(verdicts, None, None, log_path, end, artifact, timeout, device, reruns=reruns)
        raise AssertionError("unreachable")  # pragma: no cover

    def _count_deploy(self, pushed: bool | None) -> None:
        with self._lock:
            self.runs += 1
            if pushed is True:
                self.pushed += 1
            elif pushed is False:
                self.push_skipped += 1

    def ask_compilers(self, boards: list[Board]) -> None:
        """Each board's compiler is asked its version now, while pytest collects."""
        for board in boards:
            toolchain.ask_early(board)

    def close(self) -> None:
        """Once: at unconfigure, or as the config's cleanup when configuring stopped at a
        usage error after the session was made."""
        if self._closed:
            return
        self._closed = True
        self.stopping.set()
        self.builder.stop()  # compilers still running are killed, none start
        self.devices.stop()  # a run still going (run-ahead, Ctrl-C) ends now
        if self._side is not None:
            self._side.stop()  # before the transports close: its run ends, then it exits
        for pool in self._run_pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._build_pool.shutdown(wait=True, cancel_futures=True)
        toolchain.forget_early()  # after the builds: none may read it now
        self.devices.close()
        self.builder.close(self.settings.cache_max_size)
        if self._own_run_dir is not None:
            self._own_run_dir.cleanup()
