"""Verdicts that are not the code's alone, over the runs of a history: flaky cases (a
binary that both passed and failed, a pass that came only after a rerun) and each device's
infrastructure trouble (errors, binaries moved elsewhere, attempts cut short there)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from .failmessage import is_traceback
from .history import History, Result


@dataclass
class Flaky:
    nodeid: str
    case_name: str
    board: str | None
    binary_sha256: str  # "" when the results named no binary
    passed: int
    failed: int
    last: str
    after_rerun: int = 0  # passes that came only after a rerun (or that the run called flaky)
    reruns: tuple[str, ...] = ()  # what those reruns were: "device: cause", latest first, each once


def flaky(history: History) -> list[Flaky]:
    """Cases whose verdict is not the code's alone: on the very same binary both passed and
    failed (the code did not change, the verdict did), or passed only after a rerun (an
    attempt cut short and run again: never a clean pass, even if every run passed)."""
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    order = {run.id: i for i, run in enumerate(history.runs)}
    # only the cases that failed on a known binary or passed after a rerun can be flaky: a farm's
    # window holds hundreds of thousands of clean passes, not looked at one by one
    failed_cases = {r.nodeid for r in history.results if r.outcome == "failed" and r.binary_sha256}
    unclean_cases = {r.nodeid for r in history.results if r.outcome == "passed" and (r.reruns or r.flaky)}
    maybe = failed_cases | unclean_cases
    for r in history.results:
        if r.nodeid in maybe and r.outcome in ("passed", "failed") and (r.binary_sha256 or not r.clean):
            groups[(r.nodeid, r.binary_sha256 or "")].append(r)
    found = []
    for (nodeid, sha), rs in groups.items():
        rs.sort(key=lambda r: order[r.run_id])
        outcomes = [r.outcome for r in rs]
        unclean = [r for r in rs if r.outcome == "passed" and not r.clean]
        flipped = bool(sha) and "passed" in outcomes and "failed" in outcomes
        if flipped or unclean:
            why = [*(r.flaky for r in unclean if r.flaky), *(c for r in unclean for c in r.reruns)]
            causes = tuple(dict.fromkeys(reversed(why)))  # latest first, each once
            passed, failed = outcomes.count("passed"), outcomes.count("failed")
            case = Flaky(nodeid, rs[0].case_name, rs[0].board, sha, passed, failed, outcomes[-1], len(unclean), causes)
            found.append(case)
    return sorted(found, key=lambda f: (-f.failed, -f.after_rerun, f.nodeid))


@dataclass
class DeviceStats:
    device: str
    board: str | None
    passed: int = 0
    failed: int = 0
    errors: int = 0  # results that were infrastructure errors on this device
    retried_away: int = 0  # binaries that had to move to another device after an error here
    cut_short: int = 0  # attempts here that were cut short and run again (here or elsewhere): reruns naming it
    last_error: str = ""
    last_error_run: int = -1  # index in the window
    test_errors: int = 0  # errors of a test's own code here (a Python traceback: a fixture's, a teardown's)

    @property
    def pass_rate(self) -> float | None:
        """The tests' verdicts here: which tests the device drew, not how healthy it is."""
        ran = self.passed + self.failed
        return self.passed / ran * 100 if ran else None

    @property
    def attempts(self) -> int:
        """Case attempts this device got: each verdict or error here, and each attempt that
        ended in trouble here and went on elsewhere or ran again."""
        return self.passed + self.failed + self.errors + self.test_errors + self.retried_away + self.cut_short

    @property
    def trouble(self) -> int:
        """Attempts the device or its link spoiled: errors, binaries moved away, attempts cut short."""
        return self.errors + self.retried_away + self.cut_short

    @property
    def trouble_rate(self) -> float | None:
        """The device's health: its trouble, in % of the attempts it got (None: it got none)."""
        return self.trouble / self.attempts * 100 if self.attempts else None


_RETRIED = re.compile(r"(?:^|; )(\S+): ")


def _retried_devices(text: str, known: set[str]) -> list[str]:
    """The devices in a "dev: error; dev2: error" note. Errors may hold "; word: " too, so
    after the first (a device by construction) only names seen as devices count."""
    names = _RETRIED.findall(text)
    return [n for i, n in enumerate(names) if n in known or (i == 0 and text.startswith(f"{n}: "))]


def devices(history: History) -> list[DeviceStats]:
    """Per device, over the window: verdicts, infrastructure errors, binaries moved elsewhere."""
    stats: dict[str, DeviceStats] = {}
    order = {run.id: i for i, run in enumerate(history.runs)}
    known = {r.device for r in history.results if r.device}
    boards_with_devices = {r.board for r in history.results if r.device and r.device != r.board}
    for r in sorted(history.results, key=lambda r: order[r.run_id]):
        if r.board is None:
            continue  # a plain Python test
        if r.device is None and r.board in boards_with_devices:
            continue  # never reached a device of the fleet: not a device's pass rate (the failures list it)
        name = r.device or r.board
        s = stats.setdefault(name, DeviceStats(name, r.board))
        if r.outcome == "passed":
            s.passed += 1
        elif r.outcome == "failed":
            s.failed += 1
        elif r.outcome == "error" and is_traceback(r.message or ""):
            s.test_errors += 1  # a fixture's or teardown's own exception: the test's code, not the device
        elif r.outcome == "error":
            s.errors += 1
            s.last_error, s.last_error_run = (r.message or "").strip(), order[r.run_id]
        for other in _retried_devices(r.retried_after or "", known):
            o = stats.setdefault(other, DeviceStats(other, r.board))
            o.retried_away += 1
            o.last_error, o.last_error_run = r.retried_after or "", order[r.run_id]
        for cause in r.reruns:  # "device: cause"
            where = cause.split(": ", 1)[0]
            o = stats.setdefault(where, DeviceStats(where, r.board))
            o.cut_short += 1
            o.last_error, o.last_error_run = cause, order[r.run_id]
    return sorted(stats.values(), key=lambda s: (s.board or "", s.device))
