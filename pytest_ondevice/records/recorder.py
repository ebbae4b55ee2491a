"""--history's pytest side: what a session's reports said, test by test, turned into the
records of one run, appended to the history file (records/history.py) at the session's end."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ..config.keys import INFRASTRUCTURE_PROPERTY, SETUP_PROPERTY
from .failmessage import MESSAGE_MAX, failure_text
from .history import Bench, Coverage, HistoryError, Result, Run, append, connect


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_state(root: Path) -> tuple[str | None, bool | None]:
    """(HEAD, dirty) of the repository holding root; (None, None) outside one or without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
        if head.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return head.stdout.strip() or None, dirty


def case_name(nodeid: str, board: str | None) -> str:
    """The case as its source names it: after the last '::', without our '[board]' suffix."""
    name = nodeid.rsplit("::", 1)[-1]
    suffix = f"[{board}]"
    if board and name.endswith(suffix):
        name = name[: -len(suffix)]
    return name


class _Test:
    """What the reports of one nodeid said, phase by phase."""

    def __init__(self) -> None:
        self.phases: dict[str, str] = {}  # when -> passed/failed/skipped
        self.message: str | None = None
        self.duration = 0.0
        self.props: dict[str, str] = {}
        self.reruns: list[str] = []  # "device: cause", one per extra attempt
        self.benches: list[dict] = []

    def outcome(self) -> str:
        if self.phases.get("setup") == "failed" or self.phases.get("collect") == "failed":
            return "error"
        if self.phases.get("call") == "failed":  # a scripted test's lost device: an error, as the terminal says
            return "error" if INFRASTRUCTURE_PROPERTY in self.props or SETUP_PROPERTY in self.props else "failed"
        if self.phases.get("teardown") == "failed":
            return "error"
        if "skipped" in self.phases.values():
            return "skipped"
        return "passed"


def _message(report) -> str:
    """The exception first: a scripted test's traceback opens with a fixture's locals."""
    return failure_text(report, MESSAGE_MAX)


class Reports:
    """What a session's reports said, test by test, and the records a run appends from them:
    the --history plugin's, and benchmarks/history_scale.py's (a night without a session)."""

    def __init__(self) -> None:
        self.tests: dict[str, _Test] = {}

    def note(self, report, when: str) -> None:
        """One phase's report (setup, call, teardown; collect for a source that failed to collect)."""
        test = self.tests.setdefault(report.nodeid, _Test())
        test.phases[when] = report.outcome
        test.duration += getattr(report, "duration", 0.0) or 0.0
        if report.outcome != "passed" and test.message is None:
            test.message = _message(report)
        reruns = []
        for name, value in getattr(report, "user_properties", ()):
            if name == "ondevice_bench":
                if when == "call":
                    test.benches.append(json.loads(value))
            elif name == "rerun":
                reruns.append(str(value))
            else:
                test.props[name] = str(value)
        if len(reruns) > len(test.reruns):  # each phase's report carries the item's properties so far
            test.reruns = reruns

    def records(self) -> tuple[list[Result], list[Bench]]:
        """Each test's result, and its latency and memory records."""
        results, benches = [], []
        for nodeid, test in self.tests.items():
            board = test.props.get("board")
            name = case_name(nodeid, board)
            device = test.props.get("device")
            sha = test.props.get("binary_sha256")
            outcome = test.outcome()
            message = None if outcome == "passed" else test.message
            results.append(
                Result(
                    nodeid=nodeid,
                    case_name=name,
                    board=board,
                    device=device,
                    binary_sha256=sha,
                    outcome=outcome,
                    duration=test.duration,
                    message=message,
                    retried_after=test.props.get("retried_after"),
                    reruns=test.reruns,
                    flaky=test.props.get("flaky"),
                )
            )
            for record in test.benches:
                benches.append(
                    Bench(
                        nodeid=nodeid,
                        case_name=name,
                        board=board,
                        device=record.get("device_name") or device,
                        binary_sha256=sha,
                        name=record["name"],
                        unit=record["unit"],
                        median=record["median"],
                        min=record["min"],
                        max=record["max"],
                        us=record.get("us"),
                        deterministic=bool(record.get("deterministic")),
                        record=record,
                        variant=record.get("variant") or "plain",
                    )
                )
        return results, benches


class HistoryRecorder:
    """The plugin --history registers on the controller: gathers every report, appends the
    run at the end of the session."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = Path(path)
        self.started = now()
        self.reports = Reports()
        self.written: int | None = None
        self.failure: str | None = None
        try:  # now, not at the end: a wrong file is a usage error before anything is built
            connect(self.path).close()
        except HistoryError as e:
            raise pytest.UsageError(f"--history: {e}") from None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.note(report, report.when)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:  # a source that cannot be collected: an error of its own
            self.reports.note(report, "collect")

    @pytest.hookimpl(trylast=True)  # after the session's own end: the coverage report is written
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        rev, dirty = git_state(self.config.rootpath)
        run = Run(
            started=self.started,
            finished=now(),
            git_rev=rev,
            git_dirty=dirty,
            host=socket.gethostname(),
            args=list(self.config.invocation_params.args),
            exitstatus=int(exitstatus),
        )
        try:
            self.written = append(self.path, run, *self.reports.records(), self._coverage())
        except (HistoryError, sqlite3.Error) as e:
            self.failure = str(e)

    def _coverage(self) -> list[Coverage]:
        """--ondevice-coverage's figures, per board and all together, whole and per file."""
        report = self.config.pluginmanager.get_plugin("ondevice-coverage")
        if report is None:
            return []
        report.finish()
        rows = []
        for board, measured in report.figures.items():
            for file, figures in [(None, measured.total), *measured.files.items()]:
                rows.append(Coverage(board, file, **vars(figures)))
        return rows

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.failure:
            terminalreporter.write_line(f"ondevice history: this run was NOT recorded: {self.failure}", red=True)
        elif self.written is not None:
            terminalreporter.write_line(f"ondevice history: run {self.written} appended to {self.path}")
