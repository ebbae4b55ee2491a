"""The session plugin, registered when a board is selected: settings from options and
ini, collection of C/C++ test sources, the build before the first test, reports."""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

from ..compiling import store
from ..compiling.builder import BuildStats
from ..config import assemble
from ..config.keys import BASELINE_KEY, SESSION_KEY, fleet_path, selected_boards
from ..config.options import check_device_option, registry, stops_at_a_failure
from ..config.schema import ConfigError
from ..config.settings import Settings
from ..farm import fleet as fleet_mod
from ..farm import labgrid_places, rundir
from ..farm.fleet import Fleet
from ..farm.lease import identity
from ..records.benchreport import BenchReport, load_baseline
from ..run.engine import Engine
from ..run.fixtures import FixtureGate
from ..run.life import cmake_build_dir, coverage_data
from ..transports import InfrastructureError
from .cmake import CMakeFile, cmake_source
from .cmake import project_of as cmake_project
from .items import FOUND_AT_RUN, DeviceInfrastructureError, OnDeviceFile, OnDeviceItem, RustFile
from .quietphases import QUIET_PHASES_KEY, phase_callers
from .summaries import RerunSummary, skip_lines

# While binaries run, the threads that start them and read their output wake for each
# exit and each chunk of output, and then wait for the interpreter lock, which the main
# thread (pytest reporting the cases before) gives up only every 5 ms by default. 1,000
# cases of 100 host binaries, 8 runs each way: 1.40 s (median) at 5 ms, 1.33 s at 1 ms;
# 0.5 ms spread the runs from 1.18 to 1.75 s (the threads then contend for the lock).
RUN_SWITCH_INTERVAL = 0.001
SWITCH_INTERVAL_KEY = pytest.StashKey[float]()


def activate(config: pytest.Config) -> None:
    """Build the session from options and ini; register the hooks that use it."""
    boards = selected_boards(config)
    config.pluginmanager.register(BenchReport(config), "ondevice-bench-report")
    config.stash[BASELINE_KEY] = load_baseline(config)
    reg = registry(config)
    fleet = fleet_for(config, boards, reg)
    try:
        for name in boards:
            reg.get(name)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    project = cmake_project(config)  # a CMake table with a typo stops the run here, naming the file and key
    walked = [Path(a).resolve() for a in config.args]
    if (
        project is not None
        and config.args_source != pytest.Config.ArgsSource.ARGS
        and not any(project.source.is_relative_to(a) for a in walked)
    ):
        config.args.append(str(project.source / "CMakeLists.txt"))  # outside what pytest walks
    worker = getattr(config, "workerinput", {}).get("workerid")  # "gw0", ... on an xdist worker
    try:
        settings = assemble.settings(
            config,
            fleet=fleet,
            run_dir=_run_dir(config),
            default_cache_dir=store.default_dir(),
            who=identity(worker),
            worker_index=int(worker[2:]) if worker and worker[2:].isdigit() else 0,
            say=_say(config),
        )
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    live = None
    if config.getoption("device_log") == "live" or config.getoption("capture") == "no":
        live = _live_writer(config)
    try:
        session = config.stash[SESSION_KEY] = Engine(settings, reg, live)
    except store.CacheError as e:
        raise pytest.UsageError(str(e)) from None
    config.add_cleanup(session.close)  # closed at unconfigure; this is for a usage error below
    if settings.coverage:
        _start_coverage(config, session)
    try:
        session.devices.check_addresses()
    except InfrastructureError as e:
        raise pytest.UsageError(str(e)) from None
    if _builds_here(config):
        session.ask_compilers([reg.get(name) for name in boards])
    if _runs_tests_here(config):  # connect while pytest collects and checks the build cache
        session.devices.connect([reg.get(name) for name in boards])
        config.stash[SWITCH_INTERVAL_KEY] = sys.getswitchinterval()
        sys.setswitchinterval(RUN_SWITCH_INTERVAL)
    config.pluginmanager.register(OnDevicePlugin(), "ondevice-session")
    if not hasattr(config, "workerinput"):  # the controller shows what workers report
        config.pluginmanager.register(RerunSummary(), "ondevice-reruns")
    history = config.getoption("history")
    if history and not hasattr(config, "workerinput"):  # the controller records what workers report
        from ..records.recorder import HistoryRecorder

        config.pluginmanager.register(
            HistoryRecorder(config, config.invocation_params.dir / history), "ondevice-history"
        )
    config.addinivalue_line("markers", "ondevice: a C/C++ test case run on a device")
    config.addinivalue_line("markers", "bench: a C/C++ test case that measures latency (ONDEVICE_BENCH)")


def _start_coverage(config: pytest.Config, session: Engine) -> None:
    """A fresh count directory (the controller's; workers share it), and where an
    instrumented program on this machine writes its counts (libgcov reads GCOV_PREFIX)."""
    from ..records.coverage import CoverageReport

    data = coverage_data(session.settings)
    if not hasattr(config, "workerinput"):
        shutil.rmtree(data, ignore_errors=True)
        out = config.getoption("ondevice_coverage_dir")
        where = Path(out) if out else config.rootpath / "ondevice-coverage"
        boards = [session.registry.get(name) for name in selected_boards(config)]
        unmeasured = {b.name: _not_covered(session, b) for b in boards if b.kind == "baremetal"}
        unmeasured = {name: why for name, why in unmeasured.items() if why}
        patterns = session.settings.test_patterns
        filters = tuple(config.getoption("ondevice_coverage_filter") or ())
        report = CoverageReport(data, config.rootpath, where, patterns, unmeasured, filters)
        config.pluginmanager.register(report, "ondevice-coverage")
    data.mkdir(parents=True, exist_ok=True)
    config.pluginmanager.register(
        _Environment({"GCOV_PREFIX": str(data), "GCOV_PREFIX_STRIP": str(session.builder.coverage_strip)}),
        "ondevice-coverage-env",
    )


def _not_covered(session: Engine, board) -> str:
    """Why a bare-metal board's code is not instrumented ("" when it is)."""
    from ..compiling.toolchain import ToolchainError

    try:
        if session.builder.covered(board):
            return ""
    except ToolchainError:  # no toolchain: its binaries are errors that name the package
        return ""
    return "on bare metal only GCC's builds send their counts home; this board builds with another compiler"


class _Environment:
    """Variables the programs this session starts on this machine inherit, for the
    session only: pytest's own environment is as it was once the session ends."""

    def __init__(self, values: dict[str, str]) -> None:
        self.before = {name: os.environ.get(name) for name in values}
        os.environ.update(values)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        for name, value in self.before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def fleet_for(config: pytest.Config, boards: list[str], reg) -> Fleet:
    """The devices of this run: the --fleet file's (of the selected boards), else one per board."""
    path = fleet_path(config)
    try:
        if path is None:
            if config.getoption("fleet_tag"):
                raise ConfigError("--fleet-tag selects devices of a fleet: give the fleet file with --fleet=FILE")
            check_device_option(config.getoption("device"), boards, reg)
            return fleet_mod.implicit(boards, config.getoption("device"))
        if config.getoption("device"):
            raise ConfigError(f"--device and --fleet together: {path} says where each device is")
        fleet = fleet_mod.select(fleet_mod.load(path, reg.names()), boards, config.getoption("fleet_tag"))
        if fleet.places and not labgrid_places.installed():
            first = fleet.places[0]
            raise ConfigError(
                f"{path}: device '{first.name}' is leased through labgrid place '{first.place}', and labgrid "
                f"is not installed: {labgrid_places.INSTALL}"
            )
        return fleet
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None


def _run_dir(config: pytest.Config) -> Path:
    """This run's shared state: made by the controller, handed to each xdist worker."""
    given = getattr(config, "workerinput", {}).get("ondevice_run_dir")
    if given:
        return Path(given)
    rundir.sweep()  # what sessions killed outright left
    run_dir = rundir.RunDir()
    config.stash[RUN_DIR_KEY] = run_dir.path
    # a cleanup, not an unconfigure hook: it runs too when configuring stops at a usage error
    config.add_cleanup(run_dir.remove)
    return run_dir.path


RUN_DIR_KEY = pytest.StashKey[Path]()


def _say(config: pytest.Config):
    """A line for the person at the terminal (on an xdist worker: its stderr, which xdist shows)."""
    if hasattr(config, "workerinput"):

        def to_stderr(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        return to_stderr
    return _live_writer(config)


def own_dirs(rootpath: Path, settings: Settings, boards: list[str]) -> frozenset[Path]:
    """The dirs the plugin makes in its build dir and cache (a board's objects, binaries and
    logs, the coverage counts, the store's entries, the leases), as given and resolved;
    never the build or cache dir itself, which may be set to a dir that holds tests, and
    never the tree's root or a dir above it."""
    made: list[Path | None] = [settings.build_root / name for name in boards]
    made += [coverage_data(settings), settings.build_root / "cache", settings.lease_dir]
    if settings.cache_dir is not None:
        made.append(settings.cache_dir / store.LAYOUT)
    root = rootpath.resolve()
    found: set[Path] = set()
    for d in made:
        if d is None:
            continue
        real = d.resolve()
        if real != root and not root.is_relative_to(real):
            found.update((d, real))
    return frozenset(found)


CONFTEST_HOOKS = (
    "pytest_runtest_protocol",
    "pytest_runtest_logstart",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_logfinish",
)


def _conftest_prepares(config: pytest.Config) -> bool:
    """A conftest hooked around each test may prepare what a binary reads (a file, a
    server) when its case comes: no binary runs ahead of its case then."""
    pm = config.pluginmanager
    for name in CONFTEST_HOOKS:
        for impl in getattr(pm.hook, name).get_hookimpls():
            if Path(getattr(impl.plugin, "__file__", None) or "x").name == "conftest.py":
                return True
    return False


def _runs_tests_here(config: pytest.Config) -> bool:
    """False for --collect-only, --build-only and an xdist controller (its workers run the tests)."""
    return not config.getoption("build_only") and _builds_here(config)


def _builds_here(config: pytest.Config) -> bool:
    """False for --collect-only and an xdist controller (its workers build): distributing,
    as xdist itself decides it (`-n N`, or `--tx` with `--dist`)."""
    if config.getoption("collectonly"):
        return False
    distributing = getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))
    return not (distributing and not hasattr(config, "workerinput"))


def _live_writer(config: pytest.Config):
    def write(line: str) -> None:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        capman = config.pluginmanager.get_plugin("capturemanager")
        if tr is None:
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(line)
        else:
            tr.write_line(line)

    return write


def _quiet(finished: bool, progress: tuple[int, int, str] | None = None) -> None:
    """No terminal: no progress line."""


class BuildProgress:
    """On a terminal, one line rewritten in place (done of asked, current file); in a CI log,
    a line every LOG_EVERY seconds and one at the end; nothing for a warm rerun."""

    QUIET_FOR = 2.0  # seconds: a build shorter than this shows nothing
    LOG_EVERY = 15.0  # seconds between lines in a CI log

    def __init__(self, tr, builder) -> None:
        self.tr = tr
        self.builder = builder  # its progress(), unless the side process's builds tell theirs
        self.started = time.monotonic()
        self.shown = False
        self.logged = -self.LOG_EVERY

    def __call__(self, finished: bool, progress: tuple[int, int, str] | None = None) -> None:
        done, asked, current = progress or self.builder.progress()
        elapsed = time.monotonic() - self.started
        if not self.shown and (finished or elapsed < self.QUIET_FOR):
            return
        if finished:
            line = f"ondevice: {asked} objects built or checked in {elapsed:.0f} s"
            if self.tr.isatty():
                self.tr.rewrite(line, erase=True)
                self.tr.write_line("")
            else:
                self.tr.write_line(line)
        elif self.tr.isatty():
            self.tr.rewrite(f"ondevice: building {done} of {asked} objects ({current})"[:119], erase=True)
        elif elapsed - self.logged >= self.LOG_EVERY:
            self.tr.write_line(f"ondevice: building, {done} of {asked} objects so far ({current})")
            self.logged = elapsed
        self.shown = True


SCRIPTED_FIXTURES = frozenset({"device", "device_factory"})
RUN_MAY_NOT_COME = frozenset({"skip", "skipif", "xfail"})  # xfail(run=False) never runs


class OnDevicePlugin:
    """The hooks of a session with a board: registered by activate(), so a plain pytest run
    never calls them."""

    def __init__(self) -> None:
        self.workers: list[dict[str, int]] = []  # xdist controller: figures from each worker
        self.objects = BuildStats()  # xdist controller: the objects the workers compiled and reused
        self.nodes_down: list = []
        self.own_dirs: frozenset[Path] | None = None
        self.errors_shown: ErrorsShown | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """What the plugin made in its build dir and cache, when they are inside the tree
        (objects, binaries, logs, entries), is never a test: walking it costs collection
        time that grows with every build (50,000 files for a 1,000-binary suite)."""
        if self.own_dirs is None:
            ondevice = config.stash[SESSION_KEY]
            self.own_dirs = own_dirs(config.rootpath, ondevice.settings, ondevice.registry.names(include_abstract=True))
        return True if collection_path in self.own_dirs else None

    def pytest_report_header(self, config: pytest.Config) -> str | None:
        """Where a CMake project is built, per board: its logs and trees are there."""
        project = cmake_project(config)
        engine = config.stash.get(SESSION_KEY, None)
        if project is None or engine is None:
            return None
        trees = ", ".join(str(cmake_build_dir(engine, b, project)) for b in selected_boards(config))
        return f"ondevice: CMake project {project.source}, built in {trees}"

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        session = parent.config.stash.get(SESSION_KEY, None)
        if session is None:
            return None
        if file_path.suffix == ".rs":
            return RustFile.collector(parent, file_path) if parent.config.getini("ondevice_cargo") else None
        project = cmake_project(parent.config)
        if project is not None and file_path.is_relative_to(project.source):  # the project's: CTest lists them
            if file_path == project.source / "CMakeLists.txt":
                return CMakeFile.from_parent(parent, path=file_path)
            if parent.session.isinitpath(file_path):  # named on the command line (a node id of ours)
                return cmake_source(parent, file_path)
            return None
        patterns = parent.config.getini("ondevice_files").split()
        if not any(fnmatch.fnmatch(file_path.name, p) for p in patterns):
            return None
        return OnDeviceFile.from_parent(parent, path=file_path)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        ondevice = session.config.stash.get(SESSION_KEY, None)
        if ondevice is None:
            return
        # The items and all collection made live to the end, as what was imported does (see
        # plugin._freeze_imported_objects, whose cleanup gives both back): out of the collector's
        # way, so no full collection of the run, nor pytest's at exit, walks them again. Before
        # the fork below, as the gc docs advise: the side process's collections skip them too.
        gc.freeze()
        specs = {}
        marked = set()  # binaries with a case that may not run: they run when read, never ahead
        on_device = False  # a scripted test leases the board's device itself
        for item in session.items:
            spec = getattr(item, "spec", None)
            if spec is None:
                on_device = on_device or bool(SCRIPTED_FIXTURES.intersection(getattr(item, "fixturenames", ())))
                continue
            marks = {m.name for m in item.iter_markers()}
            if "skip" not in marks:  # skipped: never built
                specs[spec.key] = spec
            if marks & RUN_MAY_NOT_COME:
                marked.add(spec.key)
        if hasattr(session.config, "workerinput"):  # xdist workers build on demand: they do not know their share yet
            ondevice.fixtures = FixtureGate(list(specs.values()))  # a fixture's tests are one worker's (scheduling)
            return
        if session.config.getoption("collectonly"):
            return  # listing tests builds nothing
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return  # pytest stops before the first test: nothing to build or run for
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        here = ondevice.start(  # the way the binaries run (run/ways.py): decided once, here
            list(specs.values()),
            marked,
            ahead=ondevice.live is None and _runs_tests_here(session.config),  # live output stays in step
            # under -x and the like, no binary after the failure that stops the session may have run
            aside=not on_device and not stops_at_a_failure(session.config) and not _conftest_prepares(session.config),
            progress=lambda: BuildProgress(tr, ondevice.builder) if tr else _quiet,
        )
        if tr is not None and here:  # built in pytest's own process
            ondevice.wait_for_builds(BuildProgress(tr, ondevice.builder))

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not config.getoption("bench_only", False):
            return
        keep = [i for i in items if i.get_closest_marker("bench") is not None]
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("bench") is None])
        items[:] = keep

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        session.config.stash[QUIET_PHASES_KEY] = phase_callers(session.config)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        """After an item, the items its binary's run showed beyond the collected cases. An
        xdist worker may report only the item it was given: the controller reports them."""
        if isinstance(item, OnDeviceItem):
            item.config.stash[SESSION_KEY].reach(item.spec)
            item.decide_phases(nextitem)
        result = yield
        if isinstance(item, OnDeviceItem):
            item.phases_done()
        config = item.config
        for found in item.stash.get(FOUND_AT_RUN, ()):
            reports = runtestprotocol(found, nextitem=nextitem, log=False)
            if hasattr(config, "workeroutput"):
                serial = [config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports]
                config.workeroutput.setdefault("ondevice_found", []).extend(serial)
                continue
            found.ihook.pytest_runtest_logstart(nodeid=found.nodeid, location=found.location)
            for report in reports:
                found.ihook.pytest_runtest_logreport(report=report)
            found.ihook.pytest_runtest_logfinish(nodeid=found.nodeid, location=found.location)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if call.excinfo is not None and isinstance(call.excinfo.value, DeviceInfrastructureError):
            # the cause, not a traceback of our plumbing; in full once, not on every item it stops
            report.longrepr = self._errors_shown(item.config).text(item.nodeid, str(call.excinfo.value))
        return report

    def _errors_shown(self, config: pytest.Config) -> ErrorsShown:
        if self.errors_shown is None:
            session = config.stash.get(SESSION_KEY, None)
            self.errors_shown = ErrorsShown(session.settings.run_dir if session is not None else None)
        return self.errors_shown

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        ondevice = session.config.stash.get(SESSION_KEY, None)
        if ondevice is not None:  # before the summary: what ran beside pytest is counted
            ondevice.stop_aside()
        if ondevice is not None and ondevice.settings.coverage:  # before the report reads them
            ondevice.devices.collect_counts()
            report = session.config.pluginmanager.get_plugin("ondevice-coverage")
            if report is not None:  # the controller's: written now, for the history to keep
                report.finish()
        if ondevice is not None and hasattr(session.config, "workeroutput"):  # an xdist worker
            session.config.workeroutput["ondevice_build"] = _numbers(ondevice)
            session.config.workeroutput["ondevice_objects"] = ondevice.builder.stats.exported()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist controller: every worker shares this run's state (quarantined devices)."""
        node.workerinput["ondevice_run_dir"] = str(node.config.stash[RUN_DIR_KEY])

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        """`-n` without --dist: cases go to workers by binary, never half a binary each."""
        if config.getvalue("dist") != "load":
            return None
        from ..farm.scheduling import BinaryScheduling
        from .cmake import xdist_scope

        return BinaryScheduling(config, log, xdist_scope(config))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """xdist controller: each worker's build figures, for one report line, and the items
        its binaries' runs showed beyond the collected cases."""
        if node in self.nodes_down:  # xdist says so twice for a worker that was interrupted
            return
        self.nodes_down.append(node)
        output = getattr(node, "workeroutput", {})
        numbers = output.get("ondevice_build")
        if numbers:
            self.workers.append(numbers)
            self.objects.merge(output.get("ondevice_objects", {}))
        hook = node.config.hook
        for data in output.get("ondevice_found", ()):
            hook.pytest_runtest_logreport(report=hook.pytest_report_from_serializable(config=node.config, data=data))

    def pytest_terminal_summary(self, terminalreporter, config: pytest.Config) -> None:
        ondevice = config.stash.get(SESSION_KEY, None)
        if ondevice is None:
            return
        if self.workers:  # objects counted once across workers; the rest summed
            total = {k: sum(w.get(k, 0) for w in self.workers) for k in self.workers[0]}
            line = _summary(total, ondevice.settings.build_root, self.objects, len(self.workers))
        else:
            line = _summary(_numbers(ondevice), ondevice.settings.build_root, ondevice.builder.stats)
        if line:
            terminalreporter.write_line(line)
        for text in _model_lines(ondevice):
            terminalreporter.write_line(text)
        if "s" not in terminalreporter.reportchars:  # -rs lists them already, one by one
            skipped = skip_lines(terminalreporter.stats.get("skipped", []))
            if skipped:
                terminalreporter.section("ondevice: not run, and why", sep="-", bold=True)
                for text in skipped:
                    terminalreporter.write_line(text)
        note = ondevice.side_note()
        if note:
            terminalreporter.write_line(f"ondevice: {note}", yellow=True)
        out = ondevice.devices.quarantine.out()
        if out:
            terminalreporter.section("ondevice quarantine", sep="-", yellow=True, bold=True)
            for device, reasons in out.items():
                terminalreporter.write_line(
                    f"{device}: set aside after {len(reasons)} infrastructure errors; last: {reasons[-1]}"
                )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        ondevice = config.stash.get(SESSION_KEY, None)
        if ondevice is not None:
            ondevice.close()
        before = config.stash.get(SWITCH_INTERVAL_KEY, None)
        if before is not None:
            sys.setswitchinterval(before)


class ErrorsShown:
    """An infrastructure error in full at the first item it stops, and at every later item
    (of any binary) a line pointing there: an unreachable device's 300-character message
    was repeated on each of its items. Which item was first is agreed through the run dir,
    so xdist workers show it once too; each item is still an error of its own."""

    HEAD = 100  # characters of the message kept in the pointer

    def __init__(self, run_dir: Path | None) -> None:
        self.dir = run_dir / "errors-shown" if run_dir is not None else None
        self.first: dict[str, str] = {}  # message -> the item that showed it (this process)

    def text(self, nodeid: str, message: str) -> str:
        first = self._first(nodeid, message)
        if first == nodeid:
            return message
        return f"{self.gist(message)} (the same error as {first}: shown there in full)"

    @classmethod
    def gist(cls, message: str) -> str:
        """The message up to its first clause's end (". ", "; ", " ("), at most HEAD characters."""
        text = " ".join(message.split())
        ends = [i for i in (text.find(mark, 20) for mark in (". ", "; ", " (")) if 0 < i <= cls.HEAD]
        if ends:
            return text[: min(ends)] + " ..."
        return text if len(text) <= cls.HEAD else text[: cls.HEAD].rsplit(" ", 1)[0] + " ..."

    def _first(self, nodeid: str, message: str) -> str:
        if message not in self.first:
            self.first[message] = self._claim(nodeid, message)
        return self.first[message]

    def _claim(self, nodeid: str, message: str) -> str:
        """The item that shows the message in full: this one, unless another process claimed
        it first (a file named by the message, linked whole into place: never read half written)."""
        if self.dir is None:
            return nodeid
        path = self.dir / hashlib.sha256(message.encode(errors="replace")).hexdigest()[:32]
        mine = path.with_suffix(f".{os.getpid()}")
        try:
            self.dir.mkdir(exist_ok=True)
            mine.write_text(nodeid)
            os.link(mine, path)
        except FileExistsError:
            with contextlib.suppress(OSError):
                return path.read_text(errors="replace")
        except OSError:  # the run dir is gone or not writable: shown in full, never lost
            pass
        finally:
            with contextlib.suppress(OSError):
                mine.unlink(missing_ok=True)
        return nodeid


def _numbers(ondevice: Engine) -> dict[str, int]:
    cache = ondevice.builder.store.stats
    return {
        "damaged": cache.damaged,
        "uncached": cache.uncached,
        "untrusted": cache.untrusted,
        "runs": ondevice.runs,
        "pushed": ondevice.pushed,
        "push_skipped": ondevice.push_skipped,
    }


def _model_lines(ondevice: Engine) -> list[str]:
    """What each model compiled ahead of time takes on its board, beside the board's limits."""

    def size(n: int) -> str:
        return f"{n:,} B".replace(",", " ")

    lines = []
    for (board_name, model), taken in sorted(ondevice.builder.model_sizes.items()):
        memory = ondevice.registry.get(board_name).memory
        limits = [f"{what} {size(value)}" for what, value in (("flash", memory.flash), ("RAM", memory.ram)) if value]
        line = (
            f"ondevice model {model} on {board_name}: kernels {size(taken.text)} of code, weights "
            f"{size(taken.constants)} (flash), buffers {size(taken.ram)} of RAM"
        )
        lines.append(line + (f"; the board has {', '.join(limits)}" if limits else ""))
    return lines


def _summary(n: dict[str, int], logs: Path, objects: BuildStats, workers: int = 0) -> str | None:
    """The "ondevice build:" line: what was compiled and reused, run and pushed."""
    if not any(objects.keys.values()):
        return None
    build = objects.summary(n["damaged"], n["uncached"], n.get("untrusted", 0))
    deploy = ""
    if n["pushed"] or n["push_skipped"]:
        deploy = f"; {n['pushed']} pushed, {n['push_skipped']} already on the device"
    by = f" (by {workers} workers)" if workers else ""
    runs = f"{n['runs']} binar{'y' if n['runs'] == 1 else 'ies'} run"
    return f"ondevice build: {build}; {runs}{deploy}{by}; logs in {logs}"
