"""How a session's binaries run, chosen once when collection ends (choose): three ways
behind one small protocol (Way), each falling back to the simplest for what it leaves.

    InProcess    each binary lives (life.py) in pytest's process when its first item asks
    Ahead        queued on each board's pool in item order: the devices work while pytest reports
    SideProcess  a local board's binaries, built and run in a forked process of their own
                 (sideprocess.py) while pytest reports the cases of those already run

pytest's side (session/activate.py) says what it allows: `ahead` (no live output, not an
xdist worker) and `aside` (no -x and the like, no conftest hooked around each test, no
scripted `device` test); the engine's settings and boards say the rest.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any, Protocol

from ..compiling import toolchain
from . import life, sideprocess
from .messages import Building, Built, Go, Progress, Say, Told
from .results import BinaryResult, Rerun
from .spec import BinarySpec

if TYPE_CHECKING:
    from .engine import Engine

FIRST_ALONE = 0.05  # seconds the side process checks its first binary before the others
COMPILER_SEEN = 0.005  # seconds a warm check may take before the side process asks whether a compiler runs
ProgressReport = Callable[[bool, Progress], None]


class Way(Protocol):
    def reach(self, spec: BinarySpec) -> None:
        """pytest has come to the binary's items."""

    def has_result(self, spec: BinarySpec) -> bool:
        """Whether asking for the result will neither wait nor run anything."""

    def result(self, spec: BinarySpec) -> BinaryResult:
        """The binary's result, run now if no one has run it."""

    def stop(self) -> None:
        """pytest runs no more items."""

    def note(self) -> str | None:
        """Why some binaries did not run the way chosen: said in the summary, never silent."""


def choose(
    engine: Engine,
    specs: list[BinarySpec],
    keep: set,
    *,
    ahead: bool,
    aside: bool,
    progress: Callable[[], ProgressReport],
) -> tuple[Way, list[BinarySpec]]:
    """The session's way, and the specs whose builds start in this process now (those in
    keep, whose cases may be skipped at run time, never run beside pytest)."""
    in_order = engine.fixtures.keys  # CTest's fixtures: run here, in item order, each when asked
    if ahead and aside and not in_order:
        side = SideProcess.started(engine, specs, keep, progress)
        if side is not None:
            engine.prebuild(side.here)
            return side, side.here
    engine.prebuild(specs)
    queued = [s for s in specs if engine.devices.runs_ahead(s.board) and s.key not in in_order] if ahead else []
    return (Ahead(engine, queued) if queued else InProcess(engine)), specs


class InProcess:
    """Each binary lives in pytest's process when its first item asks; a second reader
    (another thread) waits for the same result."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._here: dict[tuple, Future] = {}

    def reach(self, spec: BinarySpec) -> None:
        pass

    def has_result(self, spec: BinarySpec) -> bool:
        fut = self._here.get(spec.key)
        return fut is not None and fut.done()

    def result(self, spec: BinarySpec) -> BinaryResult:
        return self.run_here(spec)

    def run_here(self, spec: BinarySpec, earlier: Callable[[], tuple[Rerun, ...]] = tuple) -> BinaryResult:
        with self.engine.lock:
            fut = self._here.setdefault(spec.key, Future())
            owner = not fut.done() and not fut.running() and fut.set_running_or_notify_cancel()
        if owner:
            try:
                fut.set_result(life.live(self.engine, spec, earlier()))
            except BaseException as e:
                fut.set_exception(e)
        return fut.result()

    def stop(self) -> None:
        pass

    def note(self) -> str | None:
        return None


class Ahead(InProcess):
    """Every run queued now, in item order, on its board's pool: as many at a time as the
    board's devices take (`device_jobs` each, 1 by default: a device runs one binary at a
    time, so latency figures stay undisturbed). A second queue pushes ahead of the runs
    where the device is known before a lease. The others run when read."""

    def __init__(self, engine: Engine, specs: list[BinarySpec]) -> None:
        super().__init__(engine)
        self._runs: dict[tuple, Future] = {}
        devices = engine.devices
        for spec in specs:
            slots = sum(devices.jobs_of(d) for d in devices.for_board(spec.board.name)) or 1
            self._runs[spec.key] = engine.pool("run", spec.board, slots).submit(life.live, engine, spec)
        for spec in specs:
            if devices.known_device(spec.board.name) is not None:
                engine.pool("push", spec.board, 1).submit(self._prefetch, spec)

    def _prefetch(self, spec: BinarySpec) -> None:
        """Best effort: any error here is met again, and reported, by the run itself."""
        engine = self.engine
        if engine.stopping.is_set():
            return
        try:
            artifact = engine.build_future(spec).result()
            transport = engine.devices.transport(engine.devices.known_device(spec.board.name))  # type: ignore[arg-type]
        except Exception:
            return
        transport.prefetch(artifact.path, artifact.sha256)

    def has_result(self, spec: BinarySpec) -> bool:
        fut = self._runs.get(spec.key)
        return fut.done() if fut is not None else super().has_result(spec)

    def result(self, spec: BinarySpec) -> BinaryResult:
        fut = self._runs.get(spec.key)
        return fut.result() if fut is not None else super().result(spec)


class SideProcess(InProcess):
    """A local board's binaries, checked or built and run in item order in a forked process
    of their own while pytest reports the cases of those already run. Forked before any
    build, so this process has no thread of ours to lose in the fork. pytest waits for the
    builds only while a compiler runs, with a progress line, never for the check of a warm
    cache. What the process hands back (it stopped, or died) runs here, as a rerun when it
    was running then."""

    @classmethod
    def started(
        cls, engine: Engine, specs: list[BinarySpec], keep: set, progress: Callable[[], ProgressReport]
    ) -> SideProcess | None:
        """Not for runs a feature keeps in this process's memory (coverage counts), nor
        beside runs ahead on threads, nor for a single binary (nothing to run while pytest
        reports, and a fork to pay: 12 ms)."""
        settings = engine.settings
        if not specs or settings.coverage or not settings.side_process or engine.started_anything:
            return None
        if any(engine.devices.runs_ahead(s.board) for s in specs):
            return None
        aside = [s for s in specs if s.key not in keep]
        if len(aside) < 2:
            return None
        way = cls(engine, specs, aside, keep, progress)
        return way if way.side is not None else None

    def __init__(
        self,
        engine: Engine,
        specs: list[BinarySpec],
        aside: list[BinarySpec],
        keep: set,
        progress: Callable[[], ProgressReport],
    ) -> None:
        super().__init__(engine)
        self._aside = aside
        self._going = False  # pytest may go on to the items: told by the side process
        self._built: set[tuple] = set()  # the binaries it has built or checked
        self._later: list[Callable[[], None]] = []  # in the side process: the others' builds, once the first ran
        self._progress = progress
        engine.build_pool.shutdown(wait=True)  # no thread of its own yet; none may start now
        for board in {s.board.name: s.board for s in aside}.values():  # asked early: read once, here
            with contextlib.suppress(toolchain.ToolchainError):  # the build reports it
                toolchain.resolve(board)
        self._built_before = engine.builder.stats.exported()
        self.side = sideprocess.start(aside, _InChild(self), _InParent(self))
        engine.new_threads()
        self.here = specs
        if self.side is None:
            return
        self._await(lambda: self._going)
        if self._going:  # else it ended before its builds were done: they are built here, now
            self.here = [s for s in specs if s.key in keep]

    # -- what pytest's process hears ----------------------------------------------------------
    def _await(self, until: Callable[[], bool], done: Callable[[], bool] = lambda: False) -> None:
        """Read what the side process tells of its builds until until(), showing their progress."""
        side = self.side
        assert side is not None
        report = self._progress()
        latest: Progress = (0, 0, "")

        def heard(told: Told) -> bool:
            nonlocal latest
            latest = self._heard(told)
            if until():
                report(True, latest)
                return True
            report(False, latest)
            return False

        if not until() and not done():
            side.wait_prepared(heard, done)

    def _heard(self, told: Told) -> Progress:
        """One message of the side process's builds filed; its progress figures returned."""
        match told:
            case Go():
                self._going = True
            case Built(key):
                self._built.add(key)
        assert not isinstance(told, Say)  # said as it arrives (_InParent.said)
        return told.progress

    def _catch_up(self) -> None:
        """File what the side process has told of its builds since last asked, without waiting."""
        assert self.side is not None
        for told in self.side.told():
            self._heard(told)

    # -- the Way --------------------------------------------------------------------------------
    def reach(self, spec: BinarySpec) -> None:
        """The side process may run the next few. A binary it has not built yet (its source
        changed) is waited for here, between two items, never in one."""
        side = self.side
        if side is None or not side.reach(spec.key):
            return
        self._catch_up()
        if spec.key not in self._built and not side.ready(spec.key) and not side.runs_here(spec.key):
            self._await(lambda: spec.key in self._built, lambda: side.ready(spec.key))
        if side.runs_here(spec.key):  # it stopped before this one: built here, still before the case
            with contextlib.suppress(Exception):  # an error is the case's to report, when it asks
                self.engine.build_future(spec).result()

    def has_result(self, spec: BinarySpec) -> bool:
        side = self.side
        if side is not None and side.holds(spec.key):
            return side.ready(spec.key)
        return super().has_result(spec)

    def result(self, spec: BinarySpec) -> BinaryResult:
        side = self.side
        if side is None or not side.holds(spec.key):
            return super().result(spec)
        result, records = side.outcome(spec.key)
        if result is sideprocess.RUN_HERE:  # handed back: it stopped, or died, before this one
            result = self.run_here(spec, lambda: self._lost(spec))
        for record in records:  # what the side process logged while it ran the binary, in this item's capture
            logging.getLogger(record.name).handle(record)
        return result

    def _lost(self, spec: BinarySpec) -> tuple[Rerun, ...]:
        """The attempt the side process was making at this binary when it died: a rerun,
        never silent."""
        side = self.side
        assert side is not None
        if not side.lost(spec.key):
            return ()
        self._catch_up()  # its last word on what it had built
        doing = "running" if spec.key in self._built else "building"
        known = self.engine.devices.known_device(spec.board.name)
        why = f"{side.reason}, while it was {doing} this binary beside pytest"
        return (Rerun(known.name if known else spec.board.name, why, None, doing == "running"),)

    def stop(self) -> None:
        if self.side is not None:
            self.side.stop()

    def note(self) -> str | None:
        return self.side.note() if self.side is not None else None

    # -- in the side process ----------------------------------------------------------------------
    def run_aside(self, spec: BinarySpec) -> Any:
        try:
            return life.live(self.engine, spec)
        finally:
            while self._later:
                self._later.pop()()

    def prepare(self, tell: Callable[[Told], None]) -> None:
        """Every build started, and pytest told of each binary built, and when it may go on
        to the items (Go): at once for a warm cache (the first binary checked within
        FIRST_ALONE and no compiler run), else once every build is done, with the progress
        meanwhile (the runs wait for them too). Later, pytest waits between two items for a
        binary not built yet (its source changed): a build is never part of a test's time.
        cargo is not counted in tools_started: a session with a crate waits for all its builds."""
        engine, specs, builder = self.engine, self._aside, self.engine.builder
        if engine.settings.say is not None:  # the lease's "waiting for a device" line, in pytest's process
            engine.settings.say = lambda line: tell(Say(line))

        def told_when_built(spec: BinarySpec) -> Future:
            fut = engine.build_future(spec)
            fut.add_done_callback(lambda _: tell(Built(spec.key, builder.progress())))
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
            engine.prebuild(specs)  # the progress line's total, known up front (half a second at 10,000 binaries)
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
                    while not wait([fut], timeout=COMPILER_SEEN).done and not builder.tools_started:
                        pass
                    if builder.tools_started:  # the rest with it, not after it
                        for other in rest[i + 1 :]:
                            told_when_built(other)
                        return
            except RuntimeError:  # its pool is shut: the side process is stopping
                return

        def watch(futures: list[Future]) -> None:
            try:
                while not all(f.done() for f in futures):  # as the runs wait for them
                    tell(Building(builder.progress()))
                    wait(futures, timeout=0.25)
            finally:  # never leave pytest waiting: the runs report any error
                tell(Go(builder.progress()))

        going = not cargo and builder.tools_started == 0 and first.done()
        if going:
            tell(Go(builder.progress()))
            self._later.append(lambda: threading.Thread(target=start_the_others, daemon=True).start())  # the runs go on
            timer = threading.Timer(FIRST_ALONE, start_the_others)
            timer.daemon = True
            timer.start()
        else:  # a cold build: the runs start once every build is done, as pytest's items do
            wait(start_the_others())

    def handover(self) -> tuple[dict[str, list[str]], Any, dict]:
        """The side process's last word: its builds' keys and the sizes of the models it
        compiled, for the summary; and the cache entries it held and staging dirs it left,
        which pytest's process holds and removes."""
        builder = self.engine.builder
        now = builder.stats.exported()
        keys = {kind: sorted(set(k) - set(self._built_before.get(kind, ()))) for kind, k in now.items()}
        return keys, builder.store.hand_over(), builder.model_sizes

    def take_over(self, handover: tuple[dict[str, list[str]], Any, dict]) -> None:
        keys, handed, model_sizes = handover
        builder = self.engine.builder
        builder.stats.merge(keys)
        builder.model_sizes.update(model_sizes)
        builder.store.take_over(*handed)


class _InChild:
    """The side process's part (sideprocess.Child)."""

    def __init__(self, way: SideProcess) -> None:
        self.way = way

    def after_fork(self) -> None:
        self.way.engine.new_threads()

    def prepare(self, tell: Callable[[Told], None]) -> None:
        self.way.prepare(tell)

    def run(self, spec: BinarySpec) -> Any:
        return self.way.run_aside(spec)

    def counters(self) -> tuple[int, ...]:
        return self.way.engine.counters()

    def stop(self) -> None:
        self.way.engine.stop_runs()

    def handover(self) -> Any:
        return self.way.handover()


class _InParent:
    """pytest's process's part (sideprocess.Parent)."""

    def __init__(self, way: SideProcess) -> None:
        self.way = way

    def counted(self, delta: tuple[int, ...]) -> None:
        self.way.engine.add_counts(delta)

    def ended(self, handover: Any) -> None:
        self.way.take_over(handover)

    def said(self, line: str) -> None:
        say = self.way.engine.settings.say
        if say is not None:
            say(line)
