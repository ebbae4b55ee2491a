"""The terminal summaries pytest does not write itself.

Reruns: a binary that ran more than once says so where people look: `N rerun` in pytest's
closing line and one line per attempt (device, cause, kept log), as pytest-rerunfailures
does; the JUnit properties and the history carry the same ("rerun", "flaky"). Read from the
reports themselves, so an xdist controller shows its workers' reruns.

Skips: what did not run, and why, in one line per reason: pytest shows skip reasons only
with -rs, and a board that cannot run a format (GoogleTest or Rust on bare metal) skips many
items for the same few reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

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
        reruns = [str(value) for name, value in props if name == "rerun"]
        if not reruns:
            return
        board = next((str(value) for name, value in props if name == "board"), "")
        key = (report.nodeid.split("::", 1)[0], board)
        flaky = next((str(value) for name, value in props if name == "flaky"), None)
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


MAX_REASONS = 10  # lines shown; the rest are counted in one


def skip_lines(skipped: list[Any]) -> list[str]:
    """One line per reason, the most frequent first ("15 skipped: Rust tests need std: …")."""
    reasons = Counter(_reason(report) for report in skipped if getattr(report, "skipped", False))
    if not reasons:
        return []
    ranked = reasons.most_common()
    width = len(str(ranked[0][1]))
    lines = [f"{count:>{width}} skipped: {reason}" for reason, count in ranked[:MAX_REASONS]]
    rest = sum(count for _, count in ranked[MAX_REASONS:])
    if rest:
        lines.append(f"{rest:>{width}} skipped for {len(ranked) - MAX_REASONS} other reasons (-rs lists every one)")
    return lines


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")
