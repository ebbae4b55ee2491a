"""Shared helpers: a pytester project with the plugin configured for a throwaway build dir."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

# A suite started with SIGINT ignored (under nohup, or as a background job of a shell
# without job control) hands that on to every process it starts, and the tests of Ctrl-C
# (bisect's, labgrid's) then sent a signal nobody could receive: restored, a child gets
# what a terminal's Ctrl-C reaches
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The plugin's run-time modules, imported before any in-process run: pytester drops the
# modules a run imported, and a later run importing only some of them again holds two
# copies of an exception class (runner's SizeError is not build's: a size-check failure
# became a setup traceback, depending on which tests an xdist worker ran first).
import pytest_ondevice.compiling.rustbuild  # a run imports it only when it has a crate
import pytest_ondevice.session.activate  # noqa: F401

# pyOCD imports the importlib_metadata backport (--list-boards asks the SWD transport); a
# run that imports it first leaves, once pytester drops it, importlib.metadata finding no
# distribution at all: the next in-process run loads no plugin and rejects --board
with contextlib.suppress(ImportError):
    import importlib_metadata  # noqa: F401

# matplotlib (the nightly report's charts), for the same reason: a test that renders a report
# after an in-process run found it dropped, and its native parts cannot be imported twice
with contextlib.suppress(ImportError):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# a user's project, run only from the installed wheel (test_installed_wheel.py), never as ours
collect_ignore = ["user_project"]


class Project:
    """A pytester directory holding C/C++ test sources, run with --board; board files a
    test writes under boards/ are found."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.path = pytester.path
        self.use_cache(self.path / "_cache")

    def use_cache(self, cache: Path) -> None:
        """The build cache's directory: the project's own, or one that several tests share
        (a framework compiled once for all of them)."""
        self.pytester.makeini(
            f"""
            [pytest]
            ondevice_build_dir = {self.path / "_build"}
            ondevice_cache_dir = {cache}
            ondevice_boards = boards
            """
        )

    def write(self, name: str, text: str) -> Path:
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    def copy_examples(self, *suites: str) -> Path:
        """examples/kernels (8 cases) by default; name others, e.g. "gemm", to add them."""
        dest = self.path / "examples"
        for suite in ("kernels", *suites):
            shutil.copytree(EXAMPLES / suite, dest / suite, ignore=shutil.ignore_patterns("__pycache__"))
        return dest

    def run(self, *args: str, board: str = "host") -> pytest.RunResult:
        return self.pytester.runpytest(f"--board={board}", "-p", "no:cacheprovider", *QUIET, *args)


# Unrelated plugins that may be installed on a developer's machine cost ~1 s per
# in-process run; blocking a plugin that is not installed is harmless.
QUIET = ("-p", "no:benchmark", "-p", "no:hypothesispytest")


def private_tmpdir(where: Path, env: dict | None = None) -> dict:
    """The environment for a pytest run a test may kill: its temp files (the run dir) go
    under where, not into the machine's temp dir, where a killed run cannot remove them."""
    tmp = Path(where) / ".tmp"
    tmp.mkdir(exist_ok=True)
    return {**(os.environ if env is None else env), "TMPDIR": str(tmp)}


@pytest.fixture(autouse=True)
def _no_thread_outlives_its_test():
    """The plugin forks its side process (a local board's runs) only from a process of one
    thread. A thread a test leaves running would send every later in-process run down the
    other path, and the suite would test what a user's runs never take (a model's sizes
    went missing from the side process's summary while the suite stayed green)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while (left := [t for t in threading.enumerate() if t not in before and t.is_alive()]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.02)
    assert not left, f"threads still running after the test: {', '.join(t.name for t in left)}"


@pytest.fixture
def project(pytester: pytest.Pytester) -> Project:
    return Project(pytester)


def case_outcomes(result) -> dict[str, str]:
    """{case: PASSED|FAILED|SKIPPED|ERROR} from a -v run's item lines (the binary item: "binary")."""
    import re

    found = {}
    for line in result.outlines:
        m = re.search(r"::(\S.*?)\[[^\[\]\s]+\] (PASSED|FAILED|SKIPPED|ERROR)", line)  # doctest's names have spaces
        if m:
            found[m.group(1)] = m.group(2)
    return found


def assert_built(result, count: int) -> None:
    """--build-only: the closing line counts built items ("3 built"), and nothing else."""
    outcomes = result.parseoutcomes()
    assert outcomes.pop("built", 0) == count and not outcomes, result.stdout.str()


def build_report(result) -> dict[str, int]:
    """The figures of the plugin's "ondevice build: ..." line."""
    import re

    line = next(x for x in result.outlines if x.startswith("ondevice build:"))
    numbers = map(int, re.findall(r"(\d+) (?:compiled|reused|linked)", line))
    return dict(zip(("compiled", "reused", "linked", "link_reused"), numbers, strict=True))
