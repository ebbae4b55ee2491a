"""pytest hooks: options, collection of C/C++ test sources, reports.

Without a board selected the plugin collects nothing and does nothing else, so
a repository's Python tests run exactly as before.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
from pathlib import Path

import pytest

from . import bench, store, toolchain
from .board import BoardRegistry
from .items import BASELINE_KEY, DeviceInfrastructureError, OnDeviceFile
from .runner import OnDeviceSession, Settings
from .schema import ConfigError

SESSION_KEY = pytest.StashKey[OnDeviceSession]()
DEFAULT_FILES = "*_test.c *_test.cc *_test.cpp"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ondevice", "pytest-ondevice: C/C++ tests on devices")
    group.addoption(
        "--board",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="build and run C/C++ tests for these boards (repeat or comma-separate)",
    )
    group.addoption(
        "--device",
        default=None,
        metavar="WHERE",
        help="where the board lives, overriding its board file (host alias, serial, ...)",
    )
    group.addoption(
        "--device-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="kill a test binary that runs longer than this (default: per board)",
    )
    group.addoption(
        "--device-log",
        choices=("off", "live"),
        default=None,
        help="'live' streams device output to the terminal, prefixed by board (as with -s)",
    )
    group.addoption(
        "--build-jobs",
        type=int,
        default=None,
        metavar="N",
        help="compiler processes to run at once (default: number of cores)",
    )
    group.addoption(
        "--bench-json",
        metavar="FILE",
        default=None,
        help="write every latency record (board, device, binary hash, toolchain, flags) to FILE as JSON",
    )
    group.addoption("--bench-save", metavar="NAME", default=None, help="store this run's latency records as NAME")
    group.addoption(
        "--bench-compare", metavar="NAME", default=None, help="compare latency records with the baseline NAME"
    )
    group.addoption(
        "--bench-fail",
        metavar="PCT",
        default="5%",
        help="with --bench-compare: fail a case whose bench got slower by more than PCT (default 5%%)",
    )
    group.addoption("--bench-only", action="store_true", help="run only the cases that use ONDEVICE_BENCH")
    group.addoption(
        "--bench-disable",
        action="store_true",
        help="build ONDEVICE_BENCH bodies to run once, as plain tests, with no measurement",
    )
    group.addoption(
        "--build-only",
        action="store_true",
        help="build every selected binary (size checks included) but run nothing",
    )
    group.addoption("--list-boards", action="store_true", help="list known boards and their status, then exit")
    parser.addini("ondevice_board", "default board(s) when --board is not given", default="")
    parser.addini("ondevice_files", "glob patterns of C/C++ test sources", default=DEFAULT_FILES)
    parser.addini("ondevice_timeout", "default device timeout in seconds", default="")
    parser.addini("ondevice_build_dir", "where device logs go (relative to the ini file)", default="")
    parser.addini(
        "ondevice_cache_dir",
        "the build cache, shared by checkouts (default: $ONDEVICE_CACHE_DIR, else ~/.cache/pytest-ondevice)",
        default="",
    )
    parser.addini("ondevice_cache_size", "trim the build cache to this size at session end (e.g. 5G)", default="5G")
    parser.addini("ondevice_retries", "extra attempts after a dropped device connection", default="1")
    parser.addini("ondevice_log_max", "keep this much of each device log file, head and tail (e.g. 8M)", default="8M")
    parser.addini("ondevice_renode", "the renode executable (default: $RENODE, then renode on PATH)", default="")
    parser.addini("ondevice_ssh_config", "an ssh_config file to use instead of ~/.ssh/config", default="")
    parser.addini(
        "ondevice_ssh_accept_new_host_keys",
        "trust the first host key a device offers (OpenSSH's accept-new); a changed key is still refused",
        type="bool",
        default=False,
    )
    parser.addini(
        "ondevice_boards",
        "directories with the project's own board files",
        type="paths",
        default=[],
    )


def selected_boards(config: pytest.Config) -> list[str]:
    raw = config.getoption("board") or [config.getini("ondevice_board")]
    names: list[str] = []
    for entry in raw:
        for name in entry.replace(",", " ").split():
            if name not in names:
                names.append(name)
    return names


def registry(config: pytest.Config) -> BoardRegistry:
    return BoardRegistry([Path(p) for p in config.getini("ondevice_boards")])


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("list_boards"):
        from .cli import print_boards

        return print_boards(registry(config))
    return None


def pytest_configure(config: pytest.Config) -> None:
    boards = selected_boards(config)
    if not boards:
        return
    config.pluginmanager.register(BenchReport(config), "ondevice-bench-report")
    config.stash[BASELINE_KEY] = _load_baseline(config)
    reg = registry(config)
    try:
        for name in boards:
            reg.get(name)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    ini_timeout = config.getini("ondevice_timeout")
    try:
        cache_size = store.parse_size(config.getini("ondevice_cache_size"))
    except ValueError as e:
        raise pytest.UsageError(f"ondevice_cache_size: {e}") from None
    try:
        log_max = store.parse_size(config.getini("ondevice_log_max"))
    except ValueError as e:
        raise pytest.UsageError(f"ondevice_log_max: {e}") from None
    settings = Settings(
        rootdir=config.rootpath,
        build_root=_ini_path(config, "ondevice_build_dir") or config.rootpath / ".ondevice" / "build",
        cache_dir=_ini_path(config, "ondevice_cache_dir", "ONDEVICE_CACHE_DIR") or store.default_dir(),
        cache_max_size=cache_size,
        log_max=log_max,
        jobs=config.getoption("build_jobs") or os.cpu_count() or 2,
        device=config.getoption("device"),
        cli_timeout=config.getoption("device_timeout"),
        ini_timeout=float(ini_timeout) if ini_timeout else None,
        build_only=config.getoption("build_only"),
        defines=("ONDEVICE_BENCH_DISABLE=1",) if config.getoption("bench_disable") else (),
        retries=int(config.getini("ondevice_retries")),
        transport_options=_transport_options(config),
    )
    live = None
    if config.getoption("device_log") == "live" or config.getoption("capture") == "no":
        live = _live_writer(config)
    try:
        session = config.stash[SESSION_KEY] = OnDeviceSession(settings, reg, live)
    except store.CacheError as e:
        raise pytest.UsageError(str(e)) from None
    if _runs_tests_here(config):  # connect while pytest collects and checks the build cache
        session.connect([reg.get(name) for name in boards])
    config.addinivalue_line("markers", "ondevice: a C/C++ test case run on a device")
    config.addinivalue_line("markers", "bench: a C/C++ test case that measures latency (ONDEVICE_BENCH)")


def _ini_path(config: pytest.Config, name: str, env: str | None = None) -> Path | None:
    """A directory option: the environment wins, a relative ini value is relative to the ini
    file (not to wherever pytest was started, which would make a second cache)."""
    value = (os.environ.get(env) if env else None) or config.getini(name)
    if not value:
        return None
    base = config.inipath.parent if config.inipath else config.rootpath
    return (base / os.path.expanduser(value)).resolve()


def _runs_tests_here(config: pytest.Config) -> bool:
    """False for --collect-only, --build-only and an xdist controller (its workers run the tests)."""
    if config.getoption("collectonly") or config.getoption("build_only"):
        return False
    is_controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    return not is_controller


def _transport_options(config: pytest.Config) -> dict:
    options: dict = {}
    if config.getini("ondevice_ssh_config"):
        options["ssh_config"] = str(config.rootpath / config.getini("ondevice_ssh_config"))
    if config.getini("ondevice_ssh_accept_new_host_keys"):
        options["accept_new_host_keys"] = True
    if config.getini("ondevice_renode"):
        options["renode"] = config.getini("ondevice_renode")
    return options


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


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    session = parent.config.stash.get(SESSION_KEY, None)
    if session is None:
        return None
    patterns = parent.config.getini("ondevice_files").split()
    if not any(fnmatch.fnmatch(file_path.name, p) for p in patterns):
        return None
    return OnDeviceFile.from_parent(parent, path=file_path)


def pytest_collection_finish(session: pytest.Session) -> None:
    ondevice = session.config.stash.get(SESSION_KEY, None)
    if ondevice is None or hasattr(session.config, "workerinput"):
        return  # xdist workers build on demand: they do not know their share yet
    specs = {}
    for item in session.items:
        spec = getattr(item, "spec", None)
        if spec is not None:
            specs[spec.key] = spec
    if session.config.getoption("collectonly"):
        return  # listing tests builds nothing
    ondevice.prebuild(list(specs.values()))
    if ondevice.live is None and _runs_tests_here(session.config):
        ondevice.run_ahead(list(specs.values()))  # live output stays in step with the items
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None and specs:
        ondevice.wait_for_builds(BuildProgress(tr, ondevice.builder))


class BuildProgress:
    """On a terminal, one line rewritten in place (done of asked, current file); in a CI log,
    a line every LOG_EVERY seconds and one at the end; nothing for a warm rerun."""

    QUIET_FOR = 2.0  # seconds: a build shorter than this shows nothing
    LOG_EVERY = 15.0  # seconds between lines in a CI log

    def __init__(self, tr, builder) -> None:
        self.tr = tr
        self.builder = builder
        self.started = time.monotonic()
        self.shown = False
        self.logged = -self.LOG_EVERY

    def __call__(self, finished: bool) -> None:
        done, asked, current = self.builder.progress()
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("bench_only", False):
        return
    keep = [i for i in items if i.get_closest_marker("bench") is not None]
    config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("bench") is None])
    items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.excinfo is not None and isinstance(call.excinfo.value, DeviceInfrastructureError):
        report.longrepr = str(call.excinfo.value)  # the cause, not a traceback of our plumbing
    return report


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    ondevice = config.stash.get(SESSION_KEY, None)
    if ondevice is None:
        return
    stats = ondevice.builder.stats
    if stats.compiled or stats.reused or stats.linked or stats.link_reused:
        deploy = ""
        if ondevice.pushed or ondevice.push_skipped:
            deploy = f"; {ondevice.pushed} pushed, {ondevice.push_skipped} already on the device"
        terminalreporter.write_line(
            f"ondevice build: {ondevice.builder.summary()}; {ondevice.runs} binaries run{deploy}; "
            f"logs in {ondevice.settings.build_root}"
        )


def bench_dir(config: pytest.Config) -> Path:
    return config.rootpath / ".ondevice" / "benchmarks"


def _load_baseline(config: pytest.Config) -> tuple[dict[str, dict], float] | None:
    name = config.getoption("bench_compare")
    if not name:
        return None
    try:
        threshold = bench.parse_threshold(config.getoption("bench_fail"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    path = bench_dir(config) / f"{name}.json"
    if not path.is_file():
        saved = sorted(p.stem for p in bench_dir(config).glob("*.json"))
        raise pytest.UsageError(
            f"--bench-compare={name}: no baseline {path} (saved: {', '.join(saved) or 'none'}; "
            f"store one with --bench-save={name})"
        )
    records = json.loads(path.read_text())["records"]
    return {bench.key(r): r for r in records}, threshold


class BenchReport:
    """Latency records from the reports (on an xdist controller they come from the workers):
    the end-of-run table and --bench-json."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[dict] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.rows.extend(json.loads(value) for name, value in report.user_properties if name == "ondevice_bench")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.rows:
            return
        terminalreporter.section("ondevice bench")
        for line in bench.table(self.rows):
            terminalreporter.write_line(line)
        path, name = self.config.getoption("bench_json"), self.config.getoption("bench_save")
        if not (path or name):
            return
        text = json.dumps(self._document(), indent=2) + "\n"
        if path:
            _write(Path(path), text)
            terminalreporter.write_line(f"bench records written to {path}")
        if name:
            saved = bench_dir(self.config) / f"{name}.json"
            _write(saved, text)
            terminalreporter.write_line(f"bench baseline saved as {name} ({saved})")

    def _document(self) -> dict:
        """The records with what produced them: device, and each board's toolchain and flags."""
        reg = registry(self.config)
        boards = {}
        for name in sorted({r["board"] for r in self.rows}):
            board = reg.get(name)
            try:
                tc = toolchain.resolve(board)
                compiler = {"kind": tc.kind, "cc": tc.description, "identity": tc.identity}
            except toolchain.ToolchainError as e:
                compiler = {"error": str(e)}
            boards[name] = {
                "clock_hz": board.clock_hz,
                "toolchain": compiler,
                "cflags": list(board.toolchain.cflags),
                "cxxflags": list(board.toolchain.cxxflags),
                "ldflags": list(board.toolchain.ldflags),
            }
        return {"device": self.config.getoption("device"), "boards": boards, "records": self.rows}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pytest_unconfigure(config: pytest.Config) -> None:
    ondevice = config.stash.get(SESSION_KEY, None)
    if ondevice is not None:
        ondevice.close()
