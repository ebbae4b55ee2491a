"""One build and one run per (board, binary), shared by all of its cases.

This is where the stages meet: board file -> build -> transport -> parser.
Builds start in the background as soon as collection ends; each binary runs
once, the first time one of its items needs a verdict, and the parsed result
is handed to every item of that binary.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from . import dirconfig, toolchain, transports
from .board import Board, BoardRegistry
from .build import Artifact, Builder, BuildError
from .devlog import DeviceLog
from .keys import TEST_PATTERNS
from .protocol import NEVER_STARTED, BinaryVerdicts, Outcome, RunEnd, TestOutputParser, Verdict
from .schema import ConfigError
from .sizecheck import SizeError
from .store import CacheError
from .transports import Clock, InfrastructureError, Transport

DEFAULT_TIMEOUT = 60.0
T = TypeVar("T")


@dataclass(frozen=True)
class BinarySpec:
    board: Board
    source: Path
    rel: str  # source path relative to the project root, for output names
    cases: tuple[str, ...]
    lines: tuple[tuple[str, int], ...] = ()  # (case, line of its declaration)

    @property
    def key(self) -> tuple[str, Path]:
        return (self.board.name, self.source)


@dataclass
class BinaryResult:
    verdicts: BinaryVerdicts | None = None
    build_error: str | None = None  # the binary's items fail with this
    infra_error: str | None = None  # the binary's items error with this
    log_path: Path | None = None
    end: RunEnd | None = None
    artifact: Artifact | None = None
    timeout: float | None = None


@dataclass
class Settings:
    rootdir: Path
    build_root: Path
    jobs: int
    device: str | None = None
    console: str | None = None  # --console: another transport's console for the board's loader
    cli_timeout: float | None = None
    ini_timeout: float | None = None
    build_only: bool = False
    defines: tuple[str, ...] = ()  # for every compile this session
    retries: int = 1  # extra attempts after a dropped connection
    # the project's ini value of a transport option: (ini name, its kind) -> value or None
    transport_options: Callable[[str, str], Any] = lambda name, kind: None
    cache_dir: Path | None = None  # the shared build cache (default: per user)
    test_patterns: tuple[str, ...] = TEST_PATTERNS  # collected sources: never in a library
    cache_max_size: int | None = None  # trimmed to this at session end
    log_max: int | None = None  # bytes per device log file (head and tail kept; None: the default)


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
            settings.build_root, settings.jobs, settings.rootdir, settings.defines, settings.cache_dir
        )
        self._build_pool = ThreadPoolExecutor(max_workers=max(2, settings.jobs * 2))
        self._builds: dict[tuple[str, Path], Future] = {}
        self._runs: dict[tuple[str, Path], Future] = {}
        self._run_pools: dict[tuple[str, str], ThreadPoolExecutor] = {}  # (run|push, board)
        self._consumed: set[tuple[str, Path]] = set()
        self._transports: dict[str, Transport] = {}
        self._open: dict[str, Future] = {}
        self.pushed = 0
        self.push_skipped = 0
        self._lock = threading.Lock()
        self.runs = 0
        self.stopping = threading.Event()  # set at session end: queued and running runs stop

    # -- building ------------------------------------------------------------
    def prebuild(self, specs: list[BinarySpec]) -> None:
        """Start every build now, in parallel, so runs rarely wait for the compiler."""
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
        cfg = self.dir_config(spec.source)
        tc = toolchain.resolve(spec.board)
        return self.builder.binary(spec.board, tc, cfg, spec.source, spec.rel)

    def dir_config(self, source: Path) -> dirconfig.DirConfig:
        path = dirconfig.find(source, self.settings.rootdir)
        return dirconfig.load(path, source.parent.resolve(), self.settings.test_patterns)

    def timeout_for(self, spec: BinarySpec) -> float:
        """Per-file override, then --device-timeout, then ini, then the board's default."""
        file_timeout = self.dir_config(spec.source).for_file(spec.source).timeout
        for value in (file_timeout, self.settings.cli_timeout, self.settings.ini_timeout):
            if value is not None:
                return float(value)
        return spec.board.timeout or DEFAULT_TIMEOUT

    # -- running -------------------------------------------------------------
    def run_ahead(self, specs: list[BinarySpec]) -> None:
        """Queue every run now, in item order: the device works while pytest reports.

        Each board gets its own queue of `device_jobs` runs at a time (1 by default:
        a device runs one binary at a time, so latency figures stay undisturbed)."""
        for spec in specs:
            self._result_future(spec)
        for spec in specs:  # a second queue pushes ahead of the runs
            self._pool("push", spec.board, 1).submit(self._prefetch, spec)

    def _pool(self, role: str, board: Board, workers: int) -> ThreadPoolExecutor:
        return self._started(self._run_pools, (role, board.name), lambda: ThreadPoolExecutor(max_workers=workers))

    def _prefetch(self, spec: BinarySpec) -> None:
        """Best effort: any error here is met again, and reported, by the run itself."""
        if self.stopping.is_set():
            return
        try:
            artifact = self._build_future(spec).result()
            transport = self._transport(spec.board)
        except Exception:
            return
        transport.prefetch(artifact.path, artifact.sha256)

    def _result_future(self, spec: BinarySpec) -> Future:
        pool = self._pool("run", spec.board, spec.board.device_jobs)
        return self._started(self._runs, spec.key, lambda: pool.submit(self._build_and_run, spec))

    def result(self, spec: BinarySpec) -> tuple[BinaryResult, bool]:
        """The binary's result, and whether this is its first consumer (who reports extras)."""
        if spec.key in self._runs:
            result = self._runs[spec.key].result()
        else:  # not queued ahead (live output, xdist worker): run it here and now
            with self._lock:
                fut = self._runs.setdefault(spec.key, Future())
                owner = not fut.done() and not fut.running() and fut.set_running_or_notify_cancel()
            if owner:
                try:
                    fut.set_result(self._build_and_run(spec))
                except BaseException as e:
                    fut.set_exception(e)
            result = fut.result()
        with self._lock:
            fresh = spec.key not in self._consumed
            self._consumed.add(spec.key)
        return result, fresh

    def _build_and_run(self, spec: BinarySpec) -> BinaryResult:
        try:
            artifact = self._build_future(spec).result()
            timeout = self.timeout_for(spec)
            data = self.dir_config(spec.source).for_file(spec.source).data
        except (CacheError, ConfigError) as e:
            # an unusable cache or build dir, a broken ondevice.toml: not the code's fault, so
            # the items are errors naming the file (never failures, never a false pass)
            return BinaryResult(infra_error=str(e))
        except (BuildError, SizeError, toolchain.ToolchainError) as e:
            return BinaryResult(build_error=str(e))
        if data and spec.board.kind == "baremetal":  # a configuration error: never a test failure
            return BinaryResult(
                infra_error=f"{spec.rel} declares data files, but {spec.board.name} is bare metal and has no "
                "file system: embed the data in the binary (e.g. as a const array)"
            )
        if self.settings.build_only:
            return BinaryResult(artifact=artifact)
        log_path = self.settings.build_root / spec.board.name / "logs" / f"{spec.rel}.log"
        attempts = 1 + max(0, self.settings.retries)
        lost = ""  # why the previous attempt was cut short
        for attempt in range(1, attempts + 1):
            parser = TestOutputParser()
            log = DeviceLog(log_path, spec.board.name, parser.feed_line, self.live, self.settings.log_max)
            try:
                transport = self._transport(spec.board)
                deployed = transport.deploy(artifact.path, artifact.sha256, data)
                self._count_deploy(deployed.pushed)
                end = transport.run(deployed, [], timeout, log.feed)
            except InfrastructureError as e:
                log.close()
                message = f"{lost}; then, on attempt {attempt}: {e}" if lost else str(e)
                if e.retryable and attempt < attempts:  # a dropped connection: reconnect, run again
                    lost = str(e)
                    try:
                        self._transport(spec.board).reopen()
                        continue
                    except InfrastructureError as again:
                        message = f"{lost}; then, reconnecting: {again}"
                if e.retryable:
                    self._forget_transport(spec.board)
                return BinaryResult(infra_error=message, log_path=log_path, artifact=artifact)
            log.close(end)
            verdicts = parser.verdicts(list(spec.cases), end)
            self._skip_compiled_out(spec, verdicts)
            return BinaryResult(verdicts, None, None, log_path, end, artifact, timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    def _skip_compiled_out(self, spec: BinarySpec, verdicts: BinaryVerdicts) -> None:
        """A case the device never started, after a normal end, is asked about: if the
        preprocessor removed it for this board (an #ifdef), it is skipped saying so."""
        never = {
            name: line
            for name, line in spec.lines
            if verdicts.cases.get(name) is not None and verdicts.cases[name].message.startswith(NEVER_STARTED)
        }
        if not never:
            return
        cfg = self.dir_config(spec.source)
        try:
            removed = self.builder.compiled_out(spec.board, toolchain.resolve(spec.board), cfg, spec.source, never)
        except (BuildError, toolchain.ToolchainError, CacheError):
            return  # cannot tell: the case stays "not run"
        for name, condition in removed.items():
            verdicts.cases[name] = Verdict(Outcome.SKIPPED, f"compiled out on {spec.board.name}: `{condition}`")

    def _count_deploy(self, pushed: bool | None) -> None:
        with self._lock:
            self.runs += 1
            if pushed is True:
                self.pushed += 1
            elif pushed is False:
                self.push_skipped += 1

    def connect(self, boards: list[Board]) -> None:
        """Start connecting to every device now, while collection and build checks go on."""
        for board in boards:
            self._opening(board)

    def _opening(self, board: Board) -> Future:
        return self._started(self._open, board.name, lambda: self._build_pool.submit(self._open_transport, board))

    def _transport(self, board: Board) -> Transport:
        """One open transport per board per session; a device that could not be reached stays so."""
        return self._opening(board).result()

    def _open_transport(self, board: Board) -> Transport:
        table, device = self.table_for(board)
        transport = transports.create(board, table, device, self.settings.transport_options, self.settings.console)
        if self.stopping.is_set():
            transport.stop.set()
        transport.open()
        self._transports[board.name] = transport
        return transport

    def table_for(self, board: Board) -> tuple[dict, str | None]:
        """The board's [transport], or its [emulator] when the emulator's transport claims
        --device, with the device meant for it."""
        device = self.settings.device
        if device is None:
            return board.transport, None
        main = transports.load(board.transport["name"])
        emulator = transports.load(board.emulator["name"]) if board.emulator else None
        if emulator is not None and emulator.claims(device):
            return board.emulator or {}, None
        if main.claims(device):
            return board.transport, device
        forms = [*main.device_forms, *(emulator.device_forms if emulator else ())]
        accepted = f"accepted: {', '.join(forms)}" if forms else "it takes no --device"
        raise InfrastructureError(f"--device={device} names no device of board {board.name} ({main.name}); {accepted}")

    def clock_for(self, board: Board) -> Clock:
        return board.clock_for(self.table_for(board)[0])

    def _forget_transport(self, board: Board) -> None:
        with self._lock:
            self._open.pop(board.name, None)
        transport = self._transports.pop(board.name, None)
        if transport is not None:
            transport.close()

    def close(self) -> None:
        self.stopping.set()
        self.builder.stop()  # compilers still running are killed, none start
        for transport in list(self._transports.values()):
            transport.stop.set()  # a run still going (run-ahead, Ctrl-C) ends now
        for pool in self._run_pools.values():
            pool.shutdown(wait=True, cancel_futures=True)
        self._build_pool.shutdown(wait=True, cancel_futures=True)
        self._transports.update(  # opened in the background, never used
            {b: f.result() for b, f in self._open.items() if f.done() and not f.exception()}
        )
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()
        self.builder.close(self.settings.cache_max_size)
