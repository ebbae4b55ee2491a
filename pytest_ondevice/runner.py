"""One build and one run per (board, binary), shared by all of its cases.

This is where the stages meet: board file -> build -> transport -> parser.
Builds start in the background as soon as collection ends; each binary runs
once, the first time one of its items needs a verdict, and the parsed result
is handed to every item of that binary.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from . import dirconfig, formats, toolchain, transports
from .board import Board, BoardRegistry
from .build import Artifact, Builder, BuildError, LinkError
from .devlog import DeviceLog
from .fleet import Device, Fleet
from .formats import NO_NEEDS, Needs
from .keys import TEST_PATTERNS
from .labgrid_places import Coordinator, PlaceError
from .lease import Lease, Leases
from .protocol import NEVER_STARTED, BinaryVerdicts, Outcome, RunEnd, Verdict
from .quarantine import Quarantine
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
    cases: tuple[str, ...]  # as the device prints them, in its run order
    lines: tuple[tuple[str, int], ...] = ()  # (case, line of its declaration)
    format: str = "tflm"  # the test harness (formats/): how it is run and its output read
    needs: Needs = NO_NEEDS  # what the harness links
    crate: Path | None = None  # a Rust crate's directory: built by cargo, not by us
    target: tuple[str, str] | None = None  # its test binary: (kind, cargo target name)

    @property
    def key(self) -> tuple[str, Path]:
        return (self.board.name, self.source)


@dataclass(frozen=True)
class Rerun:
    """An attempt cut short by an infrastructure error and run again (on the same device
    after a reconnect, or on another one): never hidden (terminal, JUnit, history)."""

    device: str
    cause: str
    log_path: Path | None
    binary_started: bool  # it broke while the binary ran: the binary may have done it

    def describe(self) -> str:
        log = f" (log: {self.log_path})" if self.log_path else ""
        return f"{self.device}: {self.cause}{log}"


@dataclass
class BinaryResult:
    verdicts: BinaryVerdicts | None = None
    build_error: str | None = None  # the binary's items fail with this
    infra_error: str | None = None  # the binary's items error with this
    log_path: Path | None = None
    end: RunEnd | None = None
    artifact: Artifact | None = None
    timeout: float | None = None
    device: Device | None = None  # where it ran (the last device tried)
    retried: list[str] | None = None  # "device: error" of the devices it failed on first
    reruns: list[Rerun] = field(default_factory=list)  # the attempts before this one, oldest first
    binary_started: bool = False  # the infra_error struck while the binary ran
    transient: bool = False  # the infra_error was a lost link (worth a fresh connection)


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
        )
        self._build_pool = ThreadPoolExecutor(max_workers=max(2, settings.jobs * 2))
        self._builds: dict[tuple[str, Path], Future] = {}
        self._runs: dict[tuple[str, Path], Future] = {}
        self._run_pools: dict[tuple[str, str], ThreadPoolExecutor] = {}  # (run|push, board)
        self._consumed: set[tuple[str, Path]] = set()
        self._transports: dict[str, Transport] = {}  # by device name
        self._open: dict[str, Future] = {}
        self.fleet = settings.fleet or Fleet([Device(b, b) for b in registry.names()])
        # the run's shared state; a session made without one (not by the plugin) has its own
        self._own_run_dir = None if settings.run_dir else tempfile.TemporaryDirectory(prefix="ondevice-run-")
        run_dir = settings.run_dir or Path(self._own_run_dir.name)
        # a fleet file's devices are leased across runs; a board's own device only among
        # this process's threads (xdist workers and other runs use it at once, as before)
        own_leases = run_dir / f"leases-{os.getpid()}"
        lease_root = settings.lease_dir if self.fleet.shared and settings.lease_dir else own_leases
        self.places = Coordinator(self.fleet.coordinator) if self.fleet.places else None
        self._addresses: dict[str, str | None] = {}  # a labgrid place's device: where it was last
        self.leases = Leases(lease_root, self._jobs_of, settings.who, settings.worker_index, self.places)
        self.quarantine = Quarantine(run_dir, self.fleet.quarantine_after)
        self.pushed = 0
        self.push_skipped = 0
        self._lock = threading.Lock()
        # read once per session: an edit between two runs in one process is seen
        self._dir_configs = functools.cache(dirconfig.load)
        self._config_paths = functools.cache(lambda d: dirconfig.find(d, self.settings.rootdir))
        self.runs = 0
        self.stopping = threading.Event()  # set at session end: queued and running runs stop

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

    def _cargo_binary(self, spec: BinarySpec) -> Artifact:
        from . import rustbuild  # cargo's modules only for a run that has a crate

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
        path = self._config_paths(source.parent)  # every caller names a file
        return self._dir_configs(path, source.parent.resolve(), self.settings.test_patterns)

    def timeout_for(self, spec: BinarySpec) -> float:
        """Per-file override, then --device-timeout, then ini, then the board's default."""
        file_timeout = self.dir_config(spec.source).for_file(spec.source).timeout
        for value in (file_timeout, self.settings.cli_timeout, self.settings.ini_timeout):
            if value is not None:
                return float(value)
        return spec.board.timeout or DEFAULT_TIMEOUT

    # -- running -------------------------------------------------------------
    def run_ahead(self, specs: list[BinarySpec]) -> None:
        """Queue every run now, in item order: the devices work while pytest reports.

        Each board gets its own queue, as many runs at a time as its devices take
        (`device_jobs` each, 1 by default: a device runs one binary at a time, so
        latency figures stay undisturbed)."""
        for spec in specs:
            self._result_future(spec)
        for spec in specs:  # a second queue pushes ahead of the runs (one device: we know where)
            if self._known_device(spec.board.name) is not None:
                self._pool("push", spec.board, 1).submit(self._prefetch, spec)

    def _pool(self, role: str, board: Board, workers: int) -> ThreadPoolExecutor:
        return self._started(self._run_pools, (role, board.name), lambda: ThreadPoolExecutor(max_workers=workers))

    def _jobs_of(self, device: Device) -> int:
        return device.jobs or self.registry.get(device.board).device_jobs

    def _prefetch(self, spec: BinarySpec) -> None:
        """Best effort: any error here is met again, and reported, by the run itself."""
        if self.stopping.is_set():
            return
        try:
            artifact = self._build_future(spec).result()
            transport = self._transport(self._known_device(spec.board.name))
        except Exception:
            return
        transport.prefetch(artifact.path, artifact.sha256)

    def _result_future(self, spec: BinarySpec) -> Future:
        slots = sum(self._jobs_of(d) for d in self.fleet.for_board(spec.board.name)) or 1
        pool = self._pool("run", spec.board, slots)
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
            artifact = self._intact(spec, self._build_future(spec).result())
            timeout = self.timeout_for(spec)
            data = self.dir_config(spec.source).for_file(spec.source).data
        except (CacheError, ConfigError) as e:
            # an unusable cache or build dir, a broken ondevice.toml: not the code's fault, so
            # the items are errors naming the file (never failures, never a false pass)
            return BinaryResult(infra_error=str(e))
        except LinkError as e:  # a file whose every case an #ifdef removed has nothing to link (no main)
            removed = self._compiled_out(spec, dict(spec.lines))
            if spec.cases and removed is not None and set(removed) >= set(spec.cases):
                return BinaryResult(
                    BinaryVerdicts(self._skips(spec, removed, " (every case of the file: nothing to run)"), {}, [])
                )
            return BinaryResult(build_error=str(e))
        except (BuildError, SizeError, toolchain.ToolchainError) as e:
            return BinaryResult(build_error=str(e))
        if data and spec.board.kind == "baremetal":  # a configuration error: never a test failure
            return BinaryResult(
                infra_error=f"{spec.rel} declares data files, but {spec.board.name} is bare metal and has no "
                "file system: embed the data in the binary (e.g. as a const array)"
            )
        if self.settings.build_only:
            return BinaryResult(artifact=artifact)
        return self._run_on_a_device(spec, artifact, timeout, data)

    def _intact(self, spec: BinarySpec, artifact: Artifact) -> Artifact:
        """The binary as the cache holds it now: one removed since its build (by hand; trims
        and cleans leave what a live session holds) is built again, never run as missing (a
        strike on the device) nor reported as the code's failure."""
        if spec.crate is not None or self.builder.intact(artifact):
            return artifact
        return self._build(spec)

    def _run_on_a_device(self, spec: BinarySpec, artifact: Artifact, timeout: float, data) -> BinaryResult:
        """Lease a device of the board and run there; after an infrastructure error, run
        again on another device of the board (fleet `retries` times at most).

        The device is struck for an error that was its own (see quarantine.py): K strikes
        and it is out for the rest of the run. A lost link, or an error while the binary
        ran, is asked of the device's health first. A binary whose runs broke off on two
        devices, each healthy right after, is the suspect: it errors, naming both, and
        moves no further."""
        devices = self.fleet.for_board(spec.board.name)
        failed: list[str] = []  # "device: error" of each device it could not run on
        earlier: list[Rerun] = []  # every attempt cut short, oldest first
        healthy_after: dict[str, str] = {}  # device -> error it met while healthy
        tried: set[str] = set()
        result = BinaryResult()
        for _ in range(1 + (self.fleet.retries if len(devices) > 1 else 0)):
            candidates = [d for d in devices if d.name not in tried and not self.quarantine.is_out(d.name)]
            if not candidates:
                if not failed:
                    return BinaryResult(infra_error=self.board_down(spec.board.name), artifact=artifact)
                break
            try:
                lease = self.leases.take(
                    candidates, self.settings.lease_timeout, self.stopping, self.settings.say, set(self._transports)
                )
            except PlaceError as e:  # that device's place is unusable: strike it, try another
                tried.add(e.device.name)
                failed.append(f"{e.device.name}: {e}")
                earlier.append(Rerun(e.device.name, str(e), None, False))
                result = BinaryResult(infra_error=str(e), artifact=artifact, device=e.device)
                self.quarantine.strike(e.device.name, str(e))
                continue
            except InfrastructureError as e:
                if not failed:
                    return BinaryResult(infra_error=str(e), artifact=artifact, reruns=earlier[:-1])
                failed.append(f"then no other device: {e}")
                break
            with lease:
                self._follow(lease.device)
                result = self._run_leased(spec, lease, artifact, timeout, data)
            earlier.extend(result.reruns)
            if result.infra_error is None:
                result.retried = failed or None  # the report says it ran here after these
                result.reruns = earlier
                return result
            name = lease.device.name
            tried.add(name)
            failed.append(f"{name}: {result.infra_error}")
            earlier.append(Rerun(name, result.infra_error, result.log_path, result.binary_started))
            health = self._health(lease.device) if result.binary_started or result.transient else False
            if health is False:  # the device's own: unreachable now, or refused before anything ran
                if self.quarantine.strike(name, result.infra_error):
                    self._forget_transport(lease.device)
            else:
                if health is None:  # cannot tell: counts once more than one binary met such errors there
                    self.quarantine.strike(name, result.infra_error, binary=f"{spec.board.name}:{spec.rel}")
                if result.binary_started:
                    healthy_after[name] = result.infra_error
                    if len(healthy_after) > 1:
                        self.quarantine.accuse(f"{spec.board.name}:{spec.rel}")
                        result.infra_error = _suspect(spec, healthy_after)
                        break
            if self.stopping.is_set():
                break
        result.reruns = earlier[:-1]  # the last attempt is the error itself
        if len(devices) > 1 and len(healthy_after) < 2:
            result.infra_error = f"tried on {len(tried)} device(s): " + "; ".join(failed)
        return result

    def _health(self, device: Device) -> bool | None:
        """After a lost link, or an error that struck while a binary ran: does the device
        still answer (a fresh connection, a command run)? Then it is not the device's fault.
        None: its transport cannot tell."""
        try:
            return self._transport(device).healthy()
        except Exception:
            return False

    def _follow(self, device: Device) -> None:
        """A labgrid place may be matched to another resource between leases: reconnect there."""
        if device.place is None:
            return
        with self._lock:
            before = self._addresses.get(device.name, device.address)
            self._addresses[device.name] = device.address
        if before != device.address:
            self._forget_transport(device)

    def board_down(self, board: str) -> str:
        """The one error of a board whose every device is quarantined."""
        parts = []
        for device in self.fleet.for_board(board):
            reasons = self.quarantine.reasons(device.name)
            last = reasons[-1] if reasons else "?"
            parts.append(f"{device.name} ({len(reasons)} infrastructure errors; last: {last})")
        return f"every device of board {board} is quarantined for the rest of this run: {', '.join(parts)}"

    def _run_leased(self, spec: BinarySpec, lease: Lease, artifact: Artifact, timeout: float, data) -> BinaryResult:
        """Deploy and run on one leased device; a dropped connection is reopened and run
        again, keeping the log of every attempt."""
        device = lease.device
        several = len(self.fleet.for_board(spec.board.name)) > 1
        logs = self.settings.build_root / spec.board.name / "logs"
        log_path = (logs / device.name if several else logs) / f"{spec.rel}.log"
        prefix = f"{spec.board.name}@{device.name}" if several else spec.board.name
        attempts = 1 + max(0, self.settings.retries)
        reruns: list[Rerun] = []
        lost = ""  # why the previous attempt was cut short
        harness = formats.named(spec.format)
        _remove_attempt_logs(log_path)
        for attempt in range(1, attempts + 1):
            parser = harness.parser(spec.cases)
            log = DeviceLog(log_path, prefix, parser.feed_line, self.live, self.settings.log_max)
            try:
                transport = self._transport(device)
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
                    reruns.append(Rerun(device.name, str(e), _keep_attempt_log(log_path, attempt), e.binary_started))
                    try:
                        self._transport(device).reopen()
                        continue
                    except InfrastructureError as again:
                        message = f"{lost}; then, reconnecting: {again}"
                        reruns.pop()
                if e.retryable:
                    self._forget_transport(device)
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
            self._skip_compiled_out(spec, verdicts)
            return BinaryResult(verdicts, None, None, log_path, end, artifact, timeout, device, reruns=reruns)
        raise AssertionError("unreachable")  # pragma: no cover

    def _skip_compiled_out(self, spec: BinarySpec, verdicts: BinaryVerdicts) -> None:
        """A case the device never started, after a normal end, is asked about: if the
        preprocessor removed it for this board (an #ifdef), it is skipped saying so."""
        if spec.crate is not None:  # a #[test] the binary lacks: removed by #[cfg] for this target
            for name, v in verdicts.cases.items():
                if v.outcome is Outcome.FAILED and v.message.startswith(NEVER_STARTED):
                    verdicts.cases[name] = Verdict(
                        Outcome.SKIPPED, f"not in the test binary for {spec.board.name} (left out by a #[cfg]?)"
                    )
            return
        never = {
            name: line
            for name, line in spec.lines
            if verdicts.cases.get(name) is not None and verdicts.cases[name].message.startswith(NEVER_STARTED)
        }
        removed = self._compiled_out(spec, never) if never else None
        if removed:  # None: cannot tell, the case stays "not run"
            verdicts.cases.update(self._skips(spec, removed))

    def _compiled_out(self, spec: BinarySpec, cases: dict[str, int]) -> dict[str, str] | None:
        """Which of these cases the preprocessor removes for the board, with the directive."""
        try:
            cfg = self.dir_config(spec.source)
            return self.builder.compiled_out(spec.board, toolchain.resolve(spec.board), cfg, spec.source, cases)
        except (BuildError, toolchain.ToolchainError, CacheError, ConfigError):
            return None

    @staticmethod
    def _skips(spec: BinarySpec, removed: dict[str, str], note: str = "") -> dict[str, Verdict]:
        return {
            name: Verdict(Outcome.SKIPPED, f"compiled out on {spec.board.name}: `{condition}`{note}")
            for name, condition in removed.items()
        }

    def _count_deploy(self, pushed: bool | None) -> None:
        with self._lock:
            self.runs += 1
            if pushed is True:
                self.pushed += 1
            elif pushed is False:
                self.push_skipped += 1

    def connect(self, boards: list[Board]) -> None:
        """Start connecting to a board's device now, while collection and build checks go on.

        A board of several devices connects to each when it first leases it: an xdist
        worker may never use most of them, and a handshake costs CPU the others need."""
        known = [(board, device) for board in boards if (device := self._known_device(board.name)) is not None]
        for board, device in known:  # here, not in the background: see Transport.import_libraries
            with contextlib.suppress(Exception):  # what is wrong with the table, open() reports
                transports.import_libraries(self.table_for(board, device)[0])
        for _, device in known:
            self._opening(device)

    def _known_device(self, board: str) -> Device | None:
        """A board's only device, when it is known before a lease (a labgrid place's
        address comes with the place)."""
        devices = self.fleet.for_board(board)
        return devices[0] if len(devices) == 1 and devices[0].place is None else None

    def _opening(self, device: Device) -> Future:
        return self._started(self._open, device.name, lambda: self._build_pool.submit(self._open_transport, device))

    def _transport(self, device: Device) -> Transport:
        """One open transport per device per session; a device that could not be reached stays so."""
        return self._opening(device).result()

    def _open_transport(self, device: Device) -> Transport:
        board = self.registry.get(device.board)
        table, where = self.table_for(board, device)
        transport = transports.create(board, table, where, self.settings.transport_options, self.settings.console)
        if self.stopping.is_set():
            transport.stop.set()
        transport.open()
        self._transports[device.name] = transport
        return transport

    def table_for(self, board: Board, device: Device | None = None) -> tuple[dict, str | None]:
        return device_table(board, device, self.fleet.shared)

    def check_addresses(self) -> None:
        """Every device's address is a form its board's transport takes: a usage error now,
        not an error on every item later."""
        for device in self.fleet.devices:
            if device.place is None:  # a place's address is known once it is acquired
                self.table_for(self.registry.get(device.board), device)

    def clock_for(self, board: Board, device: Device | None = None) -> Clock:
        device = device or next(iter(self.fleet.for_board(board.name)), None)
        return board.clock_for(self.table_for(board, device)[0])

    def _forget_transport(self, device: Device) -> None:
        with self._lock:
            self._open.pop(device.name, None)
        transport = self._transports.pop(device.name, None)
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
            {d: f.result() for d, f in self._open.items() if f.done() and not f.exception()}
        )
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()
        if self.places is not None:  # what an interrupted run still holds goes back
            self.places.close()
        self.builder.close(self.settings.cache_max_size)
        if self._own_run_dir is not None:
            self._own_run_dir.cleanup()


def _suspect(spec: BinarySpec, errors: dict[str, str]) -> str:
    names = " and ".join(errors)
    each = "; ".join(f"{device}: {error}" for device, error in errors.items())
    return (
        f"{spec.rel} is the suspect, not the devices: it broke off on {names}, each of which answered a health "
        f"check right after ({each}). It was not moved to another device, and no device was struck for it"
    )


def _attempt_log(log_path: Path, attempt: int) -> Path:
    return log_path.with_name(f"{log_path.name.removesuffix('.log')}.attempt{attempt}.log")


def _keep_attempt_log(log_path: Path, attempt: int) -> Path | None:
    """An attempt's log, kept under its own name before the next attempt writes the log."""
    kept = _attempt_log(log_path, attempt)
    try:
        os.replace(log_path, kept)
    except OSError:
        return None
    return kept


def _remove_attempt_logs(log_path: Path) -> None:
    """Another session's attempt logs of this binary would be read as this one's."""
    with contextlib.suppress(OSError):
        for old in log_path.parent.glob(f"{glob.escape(log_path.name.removesuffix('.log'))}.attempt*.log"):
            old.unlink()


def device_table(board: Board, device: Device | None, from_fleet: bool = False) -> tuple[dict, str | None]:
    """The board's [transport], or its [emulator] when the emulator's transport claims the
    device's address, with the address meant for it."""
    where = device.address if device is not None else None
    if where is None:
        return board.transport, None
    main = transports.load(board.transport["name"])
    emulator = transports.load(board.emulator["name"]) if board.emulator else None
    if emulator is not None and emulator.claims(where):
        return board.emulator or {}, None
    if main.claims(where):
        return board.transport, where
    forms = [*main.device_forms, *(emulator.device_forms if emulator else ())]
    accepted = f"accepted: {', '.join(forms)}" if forms else "it takes no --device"
    named = f"device {device.name}'s address " if from_fleet else "--device="
    raise InfrastructureError(f"{named}{where} names no device of board {board.name} ({main.name}); {accepted}")
