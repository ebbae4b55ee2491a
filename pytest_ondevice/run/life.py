"""One binary's life, read top to bottom: built, placed on a device, deployed, run, its
output parsed into verdicts, with every retry it may take:

1. **rebuild** (`rebuilt_while_lost`, `_intact`): a cache entry that vanished while the
   binary was built is built again (LOST_RETRIES times, then a CacheError naming the
   culprit); a binary removed from the cache since its build is built again, never run as
   missing.
2. **reconnect** (`_on_leased`): a link lost while deploying or running is reopened and
   the binary run again on the same device (the `retries` setting), each attempt's log kept.
3. **next device** (`_on_a_device`): an infrastructure error on one device of a fleet runs
   it on another (the fleet's `retries`), under failover.py's rule of strikes, health
   checks and suspects.
4. **here, after the side process died** while running it: ways.py hands that attempt in
   as `earlier`, shown first among the reruns.

Each step calls into the stage that owns the work (compiling, farm, transports, formats);
the session's shared parts (builder, devices, counters) are the Engine's (engine.py).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import formats
from ..compiling import cmake, compiledout, elf, toolchain
from ..compiling.builder import Artifact, BuildError, EntryLost, LinkError
from ..compiling.linking import hashed
from ..compiling.sizecheck import SizeError
from ..compiling.store import CacheError
from ..config.schema import ConfigError
from ..config.settings import Settings
from ..farm.labgrid_places import PlaceError
from ..farm.lease import Lease
from ..formats.devlog import DeviceLog, keep_attempt_log, remove_attempt_logs
from ..formats.parser import Parser, complete_parser
from ..formats.verdicts import RunEnd
from ..transports import InfrastructureError
from . import fixtures
from .failover import Failover
from .results import BinaryResult, BuildFailed, Built, InfraError, Ran, Rerun
from .spec import BinarySpec
from .unusable import device_unusable, skip_all

if TYPE_CHECKING:
    from .engine import Engine


@dataclass(frozen=True)
class Beside:
    """What goes to the device with a binary, and the environment it runs in."""

    files: tuple[Path, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    libraries: tuple[Path, ...] = ()  # the project's shared libraries: beside it, or where they are

    def pushed(self, in_place: bool) -> tuple[Path, ...]:
        return () if in_place else (*self.files, *self.libraries)

    def environment(self, in_place: bool) -> tuple[tuple[str, str], ...]:
        """CTest's environment, and the loader told where the libraries are."""
        if not self.libraries:
            return self.env
        where = ":".join(dict.fromkeys(str(lib.parent) for lib in self.libraries)) if in_place else "."
        return (*self.env, ("LD_LIBRARY_PATH", where))


NONCE_LINE_SYMBOL = "ondevice_nonce_line"  # micro_test.h's
LOST_RETRIES = 2  # rebuilds of a binary whose cache entries keep vanishing, before an error


def live(engine: Engine, spec: BinarySpec, earlier: tuple[Rerun, ...] = ()) -> BinaryResult:
    """The binary's result: built (by the time it is asked for, usually already), then run
    on the first device of its board that can, its output read into verdicts."""
    if (why := engine.fixtures.before(spec, engine.way.result)) is not None:  # CTest's fixtures
        return fixtures.not_run(spec, why)
    if spec.ctest is not None and spec.ctest.data and spec.board.kind == "baremetal":
        built: tuple[Artifact, float, Beside] | BinaryResult = _no_files(spec, spec.ctest.data)
    else:
        built = _ready(engine, spec, lambda: _intact(engine, spec, engine.build_future(spec).result()))
    if not isinstance(built, tuple):
        result: BinaryResult = built
    elif built[2].files and spec.board.kind == "baremetal" and spec.ctest is None:  # a configuration error
        result = _no_files(spec, built[2].files)
    elif engine.settings.build_only:
        result = Built(artifact=built[0])
    else:
        result = _on_a_device(engine, spec, *built)
    return replace(result, reruns=(*earlier, *result.reruns)) if earlier else result


def _no_files(spec: BinarySpec, data: tuple[Path, ...]) -> InfraError:
    """A test that reads files, on a board with no file system: an error naming the test
    and its files, whether the build would link (newlib has no open()) or not."""
    files = ", ".join(str(d) for d in data)
    who = f"CTest test {', '.join(spec.ctest.tests)}" if spec.ctest is not None else spec.rel
    return InfraError(
        message=f"{who} reads files ({files}), but {spec.board.name} is bare metal and has no file "
        "system: embed the data in the binary (e.g. as a const array), or run it on a Linux board"
    )


# -- 1. build -------------------------------------------------------------------------------
def build(engine: Engine, spec: BinarySpec) -> Artifact:
    """Compile and link (or cargo-build) the binary into the store: run ahead on the
    engine's build pool as soon as collection ends."""
    if spec.crate is not None:
        return _cargo_binary(engine, spec)
    if spec.ctest is not None:
        return _cmake_binary(engine, spec)
    tc = toolchain.resolve(spec.board)
    cfg = engine.dir_config(spec.source)
    return rebuilt_while_lost(
        engine, lambda: engine.builder.binary(spec.board, tc, cfg, spec.source, spec.rel, spec.needs)
    )


def rebuilt_while_lost(engine: Engine, build: Callable[[], Artifact]) -> Artifact:
    """Retry 1a: a cache entry that vanished while the binary was built (another process
    removed it) is forgotten and built again, LOST_RETRIES times; then the error names the
    culprit, an infrastructure error of the store, never the code's."""
    for _ in range(LOST_RETRIES):
        try:
            return build()
        except EntryLost:
            engine.builder.forget_vanished()
    try:
        return build()
    except EntryLost as e:
        raise engine.builder.vanishing(e) from None


def _cargo_binary(engine: Engine, spec: BinarySpec) -> Artifact:
    from ..compiling import rustbuild  # cargo's modules only for a run that has a crate

    crate, board = spec.crate, spec.board
    assert crate is not None and spec.target is not None
    built = engine.builder.once(
        ("cargo", board.name, crate),
        lambda: rustbuild.binaries(
            engine.builder, board, engine.dir_config(crate / "Cargo.toml"), crate, engine.settings.build_root
        ),
    )
    path = built.get(spec.target)
    if path is None:
        kind, name = spec.target
        made = ", ".join(f"{k} {n}" for k, n in built) or "none"
        raise BuildError(f"cargo built no test binary for the {kind} target {name} of {crate} (it built: {made})")
    return rustbuild.artifact(path)


def cmake_build_dir(engine: Engine, board_name: str, project: cmake.CMakeProject) -> Path:
    """A board's own build tree of the project, under the plugin's build dir."""
    key = hashlib.sha256(str(project.source).encode()).hexdigest()[:12]
    return engine.settings.build_root / board_name / "cmake" / f"{project.source.name}-{key}"


def _cmake_binary(engine: Engine, spec: BinarySpec) -> Artifact:
    """The project configured and built for the board once per session (CMake's own
    incremental build), then this test's executable, verified by its content hash."""
    run, board = spec.ctest, spec.board
    assert run is not None
    _, failed = _configured(engine, spec)
    if run.target in failed or not run.executable.is_file():
        why = failed.get(run.target) or failed.get("") or "CMake built no such file"
        raise cmake.CMakeError(
            f"CTest lists {', '.join(run.tests)}, whose executable {run.executable} (target {run.target}) "
            f"CMake did not build for {board.name}:\n{why}"
        )
    return hashed(run.executable)


def _configured(engine: Engine, spec: BinarySpec) -> tuple[cmake.Configured, dict[str, str]]:
    """The board's tree of the project, configured and built once a session: at collection,
    or here in a process that did not collect (an xdist worker's side process)."""
    run, board = spec.ctest, spec.board
    assert run is not None

    def configured_and_built() -> tuple[cmake.Configured, dict[str, str]]:
        where = cmake_build_dir(engine, board.name, run.project)
        return cmake.configured_and_built(run.project, board, toolchain.resolve(board), where, engine.settings.jobs)

    return engine.builder.once(("cmake", board.name, run.project.source), configured_and_built)


def _beside(engine: Engine, spec: BinarySpec) -> Beside:
    """What goes with the binary: its directory's data files; for a CTest test, the files
    it reads and the project's shared libraries, with the loader told to look beside it,
    and CTest's environment."""
    run = spec.ctest
    if run is None:
        return Beside(engine.dir_config(spec.source).for_file(spec.source).data)
    libraries = tuple(lib for lib in _configured(engine, spec)[0].shared_libraries() if lib.is_file())
    return Beside(run.data, run.env, libraries)


def _ready(
    engine: Engine, spec: BinarySpec, build: Callable[[], Artifact]
) -> tuple[Artifact, float, Beside] | BinaryResult:
    """The binary with its timeout and what goes with it, or the result that says why there is none."""
    try:
        artifact = build()
        timeout = (spec.ctest and spec.ctest.timeout) or engine.timeout_for(spec)
        beside = _beside(engine, spec)
    except (CacheError, ConfigError, toolchain.ToolchainError, cmake.CMakeError) as e:
        # an unusable cache or build dir, a broken ondevice.toml, no compiler (or CUDA
        # toolkit) for the board: not the code's fault, so the items are errors naming the
        # file or the package (never failures, never a false pass)
        return InfraError(message=str(e))
    except LinkError as e:  # a file whose every case an #ifdef removed has nothing to link (no main)
        skipped = compiledout.all_compiled_out(engine.builder, spec, lambda: engine.dir_config(spec.source))
        return Ran(verdicts=skipped) if skipped is not None else BuildFailed(message=str(e))
    except (BuildError, SizeError) as e:
        return BuildFailed(message=str(e))
    return artifact, timeout, beside


def _intact(engine: Engine, spec: BinarySpec, artifact: Artifact) -> Artifact:
    """The binary as the cache holds it now: one removed since its build (by hand; trims
    and cleans leave what a live session holds) is built again, never run as missing (a
    strike on the device) nor reported as the code's failure."""
    return artifact if _rechecked(engine, spec, artifact) else build(engine, spec)


def _rechecked(engine: Engine, spec: BinarySpec, artifact: Artifact) -> bool:
    """Whether the cache still holds the binary as built: a stat once its digest is known
    (remembered per inode and times), so asking again after the wait for a device is cheap."""
    return spec.crate is not None or engine.builder.intact(artifact)


# -- 3. place: the next device --------------------------------------------------------------
def _on_a_device(engine: Engine, spec: BinarySpec, artifact: Artifact, timeout: float, beside: Beside) -> BinaryResult:
    """The result on the first device of the board that could run the binary."""
    fleet = Failover(spec, engine.devices)
    last: InfraError | None = None
    for _ in range(fleet.tries):
        candidates = fleet.candidates()
        if not candidates:
            if last is None:
                return fleet.nowhere(artifact)
            break
        try:
            lease = engine.devices.lease(candidates)
        except PlaceError as e:  # that device's place is unusable: strike it, try another
            last = fleet.place_unusable(e, artifact)
            continue
        except InfrastructureError as e:
            if last is None:
                return InfraError(message=str(e), artifact=artifact)
            fleet.no_lease(e)
            break
        with lease:
            engine.devices.follow(lease.device)
            result = _on_leased(engine, spec, lease, artifact, timeout, beside)
        if not isinstance(result, InfraError):
            return fleet.ran(result)
        suspect = fleet.judge(lease.device, result)
        last = suspect or result
        if suspect is not None or engine.stopping.is_set():  # the suspect moves no further
            break
    assert last is not None
    return fleet.gave_up(last)


# -- 2. deploy and run: reconnect -----------------------------------------------------------
def _on_leased(
    engine: Engine, spec: BinarySpec, lease: Lease, artifact: Artifact, timeout: float, beside: Beside
) -> BinaryResult:
    """Deploy and run on one leased device; a dropped connection is reopened and run
    again, keeping the log of every attempt."""
    device = lease.device
    if not _rechecked(engine, spec, artifact):  # removed by hand while the binary waited for a device
        built = _ready(engine, spec, lambda: _intact(engine, spec, artifact))
        if not isinstance(built, tuple):
            return built
        artifact = built[0]
    several = len(engine.devices.for_board(spec.board.name)) > 1
    logs = engine.settings.build_root / spec.board.name / "logs"
    log_path = (logs / device.name if several else logs) / f"{spec.rel}.log"
    prefix = f"{spec.board.name}@{device.name}" if several else spec.board.name
    attempts = 1 + max(0, engine.settings.retries)
    reruns: list[Rerun] = []
    lost = ""  # why the previous attempt was cut short
    harness = formats.named(spec.format)
    remove_attempt_logs(log_path)
    for attempt in range(1, attempts + 1):
        parser = complete_parser(harness.parser(spec.cases))
        parser.ours = built_with_our_header(artifact)  # our header's binary: only its nonce-stamped run is believed
        log = DeviceLog(log_path, prefix, parser.feed_line, engine.live, engine.settings.log_max)
        try:
            transport = engine.devices.transport(device)
            # a CTest test on this machine runs where CTest runs it: what it reads is there
            in_place = spec.ctest is not None and spec.ctest.cwd is not None and transport.runs_here
            deployed = transport.deploy(artifact.path, artifact.sha256, beside.pushed(in_place))
            engine.count_deploy(deployed.pushed)
            args = list(spec.ctest.args) if spec.ctest is not None else []  # as CTest runs it
            if in_place:
                deployed = replace(deployed, cwd=str(spec.ctest.cwd))  # type: ignore[union-attr]
            if env := beside.environment(in_place):
                deployed = replace(deployed, env=env)
            record = transport.run_file(deployed) if harness.record_args else None
            end = transport.run(deployed, [*args, *harness.args(record)], timeout, log.feed)
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
                    engine.devices.transport(device).reopen()
                    continue
                except InfrastructureError as again:
                    message = f"{lost}; then, reconnecting: {again}"
                    reruns.pop()
            if e.retryable:
                engine.devices.forget(device)
            return InfraError(
                message=message,
                log_path=log_path,
                artifact=artifact,
                device=device,
                reruns=tuple(reruns),
                binary_started=started,
                transient=e.retryable,
            )
        log.close(end)
        return _verdicts(engine, spec, parser, end, Ran(
            verdicts=parser.verdicts(list(spec.cases), end),
            artifact=artifact, log_path=log_path, end=end, timeout=timeout, device=device, reruns=tuple(reruns),
        ))  # fmt: skip
    raise AssertionError("unreachable")  # pragma: no cover


# -- parse: the verdicts ---------------------------------------------------------------------
def _verdicts(engine: Engine, spec: BinarySpec, parser: Parser, end: RunEnd, ran: Ran) -> BinaryResult:
    """What the run's output says, unless it says the device could not run the binary at
    all (decided from what the test cannot write: the device's fault, not the code's)."""
    device = ran.device
    assert device is not None
    unusable = device_unusable(parser, end, spec.board)
    if unusable and device.name != spec.board.name:  # a fleet's device: name it
        unusable = f"on device {device.name}: {unusable}"
    if unusable and parser.unavailable and engine.settings.no_gpu == "skip":
        return Ran(verdicts=skip_all(spec, unusable), artifact=ran.artifact, log_path=ran.log_path, end=end)
    if unusable:
        return InfraError(
            message=unusable, log_path=ran.log_path, artifact=ran.artifact, device=device, reruns=ran.reruns
        )
    verdicts = ran.verdicts
    if engine.settings.coverage and spec.board.kind == "baremetal":
        from ..records import coverage  # a run with --ondevice-coverage only

        where = coverage_data(engine.settings)
        coverage.keep_sent(where, spec.board.name, spec.rel, verdicts.counts, verdicts.count_problems)
    compiledout.skip_compiled_out(engine.builder, spec, lambda: engine.dir_config(spec.source), verdicts)
    return ran


def coverage_data(settings: Settings) -> Path:
    """Where this session's gcov counts and the notes' whereabouts go (every xdist worker's)."""
    return settings.build_root / "coverage-data"


@functools.lru_cache(maxsize=4096)
def built_with_our_header(artifact: Artifact) -> bool:
    """Whether micro_test.h's marker symbol is in the binary (looked up once per build)."""
    return elf.defines_symbol(artifact.path, NONCE_LINE_SYMBOL)
