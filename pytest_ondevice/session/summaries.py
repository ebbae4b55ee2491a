"""A binary that ran more than once says so where people look: `N rerun` in pytest's
closing line and one line per attempt (device, cause, kept log), as pytest-rerunfailures
does; the JUnit properties and the history carry the same ("rerun", "flaky").

Read from the reports themselves, so an xdist controller shows its workers' reruns."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest


@dataclass
class _Binary:
    reruns: list[str]
    flaky: str | None
    outcomes: set[str] = field(default_factory=set)


class RerunSummary:
    def __init__(self) -> None:
        self.binaries: dict[tuple[str, str], _Binary] = {}  # (file, board) -> what its reports said

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = report.user_properties
        reruns = [value for name, value in props if name == "rerun"]
        if not reruns:
            return
        board = next((value for name, value in props if name == "board"), "")
        key = (report.nodeid.split("::", 1)[0], board)
        flaky = next((value for name, value in props if name == "flaky"), None)
        binary = self.binaries.setdefault(key, _Binary(reruns, flaky))
        if report.when == "call" or report.outcome != "passed":
            binary.outcomes.add(report.outcome)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.binaries:
            return
        terminalreporter.section("ondevice reruns", sep="-", yellow=True, bold=True)
        for (file, board), binary in self.binaries.items():
            ended = ", ".join(sorted(binary.outcomes)) or "no verdict"
            runs = len(binary.reruns) + 1
            terminalreporter.write_line(f"{file} on {board}: tried {runs} times; its cases' reports: {ended}")
            for rerun in binary.reruns:
                terminalreporter.write_line(f"  cut short on {rerun}", yellow=True)
            if binary.flaky:
                terminalreporter.write_line(f"  flaky, not clean: {binary.flaky}", yellow=True)
            # counted in pytest's closing line ("2 passed, 1 rerun"), one per extra attempt
            terminalreporter.stats.setdefault("rerun", []).extend(_Counted() for _ in binary.reruns)


class _Counted:
    count_towards_summary = True
