"""The pytest entry point: options only, until a board is selected.

Without a board (no --board, no ondevice_board in the ini) this module is all that is
imported and nothing is collected or built, so a repository's Python tests run exactly
as before and start as fast; with one, the session plugin in session/activate.py is registered.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from .config.keys import BUILT, TEST_PATTERNS, selected_boards
from .farm import labgrid_plugin

DEFAULT_FILES = " ".join(TEST_PATTERNS)
# the `device` fixture and the `board` marker: there with or without a board (a scripted
# test without one is skipped, saying how to select one); it imports nothing heavy
pytest_plugins = ["pytest_ondevice.scripted.fixtures"]

__all__ = ["selected_boards"]


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    labgrid_plugin.keep_out(parser, pluginmanager)  # at our registration: before labgrid's, if we can
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
        action="append",
        default=[],
        metavar="[BOARD=]WHERE",
        help="where the board lives, overriding its board file (host alias, serial, ...); BOARD=WHERE places "
        "one board of several",
    )
    group.addoption(
        "--fleet",
        default=None,
        metavar="FILE",
        help="a fleet file (TOML) of devices: each board's binaries are spread over its devices, leased across runs",
    )
    group.addoption(
        "--fleet-tag",
        action="append",
        default=[],
        metavar="TAG",
        help="use only the fleet's devices with this tag (repeat: all of them)",
    )
    group.addoption(
        "--lease-timeout",
        type=_seconds_option,
        default=None,
        metavar="SECONDS",
        help="give up waiting for a fleet device another run holds after this long (default: wait)",
    )
    group.addoption(
        "--history",
        metavar="FILE",
        default=None,
        help="append this run (outcomes, devices, binary hashes, latency) to the SQLite FILE, for "
        "`pytest-ondevice report`",
    )
    group.addoption(
        "--console",
        default=None,
        metavar="KIND:WHERE",
        help="read the output through another transport's console, with the board's loader (a serial port: see "
        "the transport pages: pytest-ondevice docs transports/index)",
    )
    group.addoption(
        "--device-timeout",
        type=_seconds_option,
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
        type=_jobs_option,
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
        "--ondevice-no-gpu",
        choices=("error", "skip"),
        default="error",
        help="a CUDA binary on a device without a usable GPU or driver: its cases are errors (default), "
        "or skips, for a fleet where only some devices have one (pytest-ondevice docs cuda)",
    )
    group.addoption(
        "--ondevice-coverage",
        action="store_true",
        help="build with gcov instrumentation, bring the counts back from the devices and write a coverage "
        "report (gcovr): a summary here, coverage.xml (Cobertura) and HTML (pytest-ondevice docs coverage)",
    )
    group.addoption(
        "--ondevice-coverage-dir",
        metavar="DIR",
        help="where the coverage report goes (default: ondevice-coverage/ under the rootdir)",
    )
    group.addoption(
        "--ondevice-coverage-filter",
        metavar="REGEX",
        action="append",
        default=[],
        help="report only the source files matching REGEX (gcovr's --filter, relative to the rootdir; "
        "repeatable), e.g. 'tensorflow/lite/micro/kernels/fully_connected'",
    )
    group.addoption(
        "--build-only",
        action="store_true",
        help="build every selected binary (size checks included) but run nothing",
    )
    group.addoption(
        "--strict-reruns",
        action="store_true",
        default=False,
        help="a case that passed only after its binary was run again (after a dropped connection, or on "
        "another device) is an error, not a pass (ini: ondevice_strict_reruns)",
    )
    group.addoption("--list-boards", action="store_true", help="list known boards and their status, then exit")
    group.addoption(
        "--ondevice-doctor",
        action="store_true",
        help="check the selected boards' toolchains and every device of the fleet, then exit (pytest-ondevice doctor)",
    )
    parser.addini("ondevice_board", "default board(s) when --board is not given", default="")
    parser.addini("ondevice_files", "glob patterns of C/C++ test sources", default=DEFAULT_FILES)
    parser.addini(
        "ondevice_cmake",
        "a CMake project (its source dir, relative to the ini file) whose CTest tests run on the boards",
        default="",
    )
    parser.addini(
        "ondevice_cmake_cache", "cache variables of the CMake project: NAME=VALUE, one a line", type="linelist"
    )
    parser.addini("ondevice_cmake_targets", "the CMake targets to build (default: all)", type="args")
    parser.addini("ondevice_cmake_labels", "run only the CTest tests with one of these labels", type="args")
    parser.addini("ondevice_cmake_exclude_labels", "leave out the CTest tests with one of these labels", type="args")
    parser.addini(
        "ondevice_cargo", "collect the #[test]s of Rust crates (directories with Cargo.toml)", type="bool", default=True
    )
    parser.addini("ondevice_timeout", "default device timeout in seconds", default="")
    parser.addini("ondevice_build_dir", "where device logs go (relative to the ini file)", default="")
    parser.addini(
        "ondevice_cache_dir",
        "the build cache, shared by checkouts (default: $ONDEVICE_CACHE_DIR, else ~/.cache/pytest-ondevice)",
        default="",
    )
    parser.addini("ondevice_cache_size", "trim the build cache to this size at session end (e.g. 5G)", default="5G")
    parser.addini(
        "ondevice_cache_shared",
        "the build cache is shared by the members of its (setgid) directory's group: use their entries "
        "(default: $ONDEVICE_CACHE_SHARED, else only this account's)",
        type="bool",
        default=None,
    )
    parser.addini("ondevice_retries", "extra attempts after a dropped device connection", default="1")
    parser.addini(
        "ondevice_strict_reruns",
        "a pass that needed a rerun is an error (as --strict-reruns)",
        type="bool",
        default=False,
    )
    parser.addini(
        "ondevice_side_process",
        "run a local board's binaries in a process beside pytest's, which reports meanwhile "
        "(false: in pytest's own, when each case is reached)",
        type="bool",
        default=True,
    )
    parser.addini("ondevice_log_max", "keep this much of each device log file, head and tail (e.g. 8M)", default="8M")
    for ini, transport in _transport_ini():
        parser.addini(ini, f"an option of the {transport} transport (see its board-file keys)", default="")
    parser.addini(
        "ondevice_boards",
        "directories with the project's own board files",
        type="paths",
        default=[],
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("list_boards"):
        from .commands.cli import print_boards
        from .config.options import registry

        return print_boards(registry(config))
    if config.getoption("ondevice_doctor"):
        from .commands.doctor import run

        try:
            return run(config)
        except pytest.UsageError as e:
            print(f"doctor: {e}")
            return pytest.ExitCode.USAGE_ERROR
    return None


def pytest_configure(config: pytest.Config) -> None:
    if not selected_boards(config):
        return  # a plain pytest run: nothing of ours is imported, collected or built
    from .session.activate import activate
    from .session.interrupts import Interrupts

    _check_ini_numbers(config)
    interrupts = Interrupts()
    config.stash[INTERRUPTS_KEY] = interrupts
    activate(config)
    config.pluginmanager.register(interrupts, "ondevice-interrupts")
    interrupts.install()  # SIGTERM and SIGHUP end the run as Ctrl-C does: nothing left running
    _freeze_imported_objects(config)


def pytest_report_header(config: pytest.Config) -> str | None:
    """A project set up for us but run without a board collects none of its device tests:
    said at the top, so that "collected 0 items" is not a riddle."""
    if selected_boards(config) or not (config.getini("ondevice_cmake") or _has_cmake_table(config)):
        return None
    return (
        "ondevice: no board selected, so ondevice_cmake's tests are not collected: "
        "--board=host runs them here (ondevice_board in the ini makes it the default)"
    )


def _has_cmake_table(config: pytest.Config) -> bool:
    toml = (config.inipath.parent if config.inipath else config.rootpath) / "ondevice.toml"
    try:
        return toml.is_file() and "[cmake]" in toml.read_text(errors="replace")
    except OSError:
        return False


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    """--build-only: an item whose binary was built counts as built ("12 built"), neither
    passed (nothing ran) nor skipped (nothing was left out)."""
    if report.when == "call" and report.passed and any(name == BUILT for name, _ in report.user_properties):
        return "built", "b", ("BUILT", {"green": True})
    return None


def _freeze_imported_objects(config: pytest.Config) -> None:
    """What pytest, our plugin and their imports have made so far lives for the whole run:
    out of the collector's way (gc.freeze), so neither the run's automatic collections nor
    pytest's full collections at exit (two, to report unraisable exceptions) walk it again.
    That walk was 60-90 ms of a 1.2 s run over a network. Given back after pytest's last collection:
    our cleanup is registered before pytest's own (this hook runs before its plugins')."""
    import gc

    gc.freeze()
    config.add_cleanup(gc.unfreeze)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Last of all (this plugin was registered first): after the session has closed."""
    interrupts = config.stash.get(INTERRUPTS_KEY, None)
    if interrupts is not None:
        interrupts.restore()


INTERRUPTS_KEY = pytest.StashKey[Any]()  # interrupts.Interrupts, imported only with a board


def _seconds_option(text: str) -> float:
    """--device-timeout: 0, a negative, nan or inf would never (or always) strike."""
    from .config.schema import seconds

    try:
        return seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _jobs_option(text: str) -> int:
    """--build-jobs: 0 or fewer would build nothing, and wait forever."""
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return jobs


def _check_ini_numbers(config: pytest.Config) -> None:
    """The numeric ini options, checked before use: a usage error naming the option and the
    ini file, not an INTERNALERROR traceback."""
    from .config.schema import seconds

    where = f" in {config.inipath}" if config.inipath else ""
    timeout = config.getini("ondevice_timeout")
    if timeout:
        try:
            seconds(timeout)
        except ValueError as e:
            raise pytest.UsageError(f"ondevice_timeout{where}: {e}") from None
    retries = config.getini("ondevice_retries")
    try:
        ok = int(retries) >= 0
    except ValueError:
        ok = False
    if not ok:
        raise pytest.UsageError(
            f"ondevice_retries{where}: must be a whole number of extra attempts >= 0, not {retries!r}"
        )


def _transport_ini() -> list[tuple[str, str]]:
    """(ini name, transport) for every transport option a project may set in its ini file.

    Read from our own distribution's entry points (group pytest_ondevice.ini): pytest
    must know ini names before it reads the file, and loading every transport (or scanning
    every installed distribution) would charge each pytest run in the repo ~40 ms (~5 ms)."""
    from .config import own_metadata

    return [
        (ep.name, ep.value.rsplit(":", 1)[0].rsplit(".", 1)[-1])
        for ep in own_metadata.entry_points("pytest_ondevice.ini")
    ]
