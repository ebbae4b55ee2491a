"""What every line parser shares: the cases seen, the running one, whose log a line is,
and how the cases' records become verdicts once the run has ended.

Both kinds of parser build on it: the TFLM parser (tflm_parser.py) and CaseStream
(stream.py), the base of the other formats'. Memory is bounded here: so many cases, so
many failure lines per case, so many characters a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .benchline import BenchRecord
from .crashline import CrashWatch
from .gcda import GcdaReceiver
from .lines import BoundedLines
from .parser import ParserBase
from .verdicts import NEVER_STARTED, NO_VERDICT, NOT_CLOSED, BinaryVerdicts, Outcome, RunEnd, Verdict

EXTENSION_PREFIX = "#ondevice "  # our lines: the header's, a hook's, a runtime's

MAX_CASES = 10_000
MAX_FAILURE_LINES = 40
MAX_LINE_CHARS = 500

# "... failed at FILE:LINE (A vs B)", "FAIL: ... at FILE:LINE", "FILE:LINE: Failure"; FILE may hold spaces
_LOCATION = re.compile(r"(?: at |^)(.+?):(\d+)(?: \(.*\)|: Failure)?$")
_ANY_LOCATION = re.compile(r"([\w./+-]+\.[A-Za-z]\w*):(\d+)\b")


@dataclass
class CaseRecord:
    """What the device printed about one case (over every run of that name)."""

    name: str
    outcome: Outcome | None = None
    failures: list[str] = field(default_factory=list)
    skip_reason: str = ""
    log: BoundedLines = field(default_factory=lambda: BoundedLines(head=20, tail=80))
    dropped_failures: int = 0
    starts: int = 0  # how often the device announced it: more than once is a duplicate or a forgery
    failed_runs: int = 0  # of those starts, how many ended failed (for the tally)
    seen_at_start: int = 0  # failure lines before the running start: a duplicate's run fails by its own

    def add_failure(self, line: str) -> None:
        if len(self.failures) < MAX_FAILURE_LINES:
            self.failures.append(line[:MAX_LINE_CHARS])
        else:
            self.dropped_failures += 1

    def finish(self, outcome: Outcome) -> None:
        """End the running start of this case with outcome (a failure line makes it FAILED)."""
        if len(self.failures) + self.dropped_failures > self.seen_at_start:
            outcome = Outcome.FAILED
        if outcome is Outcome.FAILED and self.outcome is not Outcome.FAILED:
            self.failed_runs += 1
        self.outcome = outcome

    @property
    def failed(self) -> bool:
        return bool(self.failures) or self.outcome is Outcome.FAILED


class CaseTracker(ParserBase):
    """What every line parser shares: the cases seen, the running one, and whose log a line is."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.cases: dict[str, CaseRecord] = {}
        self.current: CaseRecord | None = None  # the running case: its outcome is None until it ends
        self.last: CaseRecord | None = None  # the case that ended most recently
        self.dropped_cases = 0  # cases beyond MAX_CASES, counted, not kept
        self.counts = GcdaReceiver()  # --ondevice-coverage on bare metal: gcov's counts, stamped
        self.crashes = CrashWatch()  # the host runtime's `#ondevice crash` line

    def feed_line(self, raw: str) -> None:
        line = raw.rstrip()
        before = self.current
        self.line(line)
        owner = self.current or before  # a case's log runs from its start line to its end line
        if owner is not None:
            owner.log.append(line)

    def line(self, line: str) -> None:
        raise NotImplementedError

    def _finish(self, outcome: Outcome) -> None:
        record = self.current
        if record is not None:
            record.finish(outcome)
            self.last = record
        self.current = None

    # -- verdicts ------------------------------------------------------------
    @staticmethod
    def _fail_the_rest(verdicts: dict[str, Verdict], why: str) -> None:
        """A binary-level problem: no case that had not failed may pass."""
        for name, v in verdicts.items():
            if v.outcome is not Outcome.FAILED:
                verdicts[name] = Verdict(Outcome.FAILED, why, None, v.log)

    @staticmethod
    def _fail_unattributable(verdicts: dict[str, Verdict], reasons: dict[str, str]) -> None:
        for name, reason in reasons.items():
            v = verdicts[name]
            verdicts[name] = Verdict(Outcome.FAILED, "\n".join(x for x in (reason, v.message) if x), v.location, v.log)

    def _settle(
        self,
        expected: list[str],
        verdicts: dict[str, Verdict],
        end: RunEnd,
        closed: bool,
        problems: list[str],
        benches: dict[str, list[BenchRecord]],
        running: str | None = None,
    ) -> BinaryVerdicts:
        """Every case the source declares gets a verdict: its own, else why it has none."""
        if self.dropped_cases:
            problems.append(f"{self.dropped_cases} more cases were printed than the parser keeps")
        abnormal = end.abnormal()
        cases: dict[str, Verdict] = {}
        for name in expected:
            if name in verdicts:
                cases[name] = verdicts[name]
            elif abnormal:
                cases[name] = Verdict(Outcome.FAILED, f"not run: {abnormal} before this case")
            elif not closed:
                cases[name] = Verdict(Outcome.FAILED, NOT_CLOSED + exit_note(end))
            else:
                cases[name] = Verdict(Outcome.FAILED, NEVER_STARTED)
        wanted = set(expected)
        unknown = {n: v for n, v in verdicts.items() if n not in wanted}
        self.counts.close()
        crash = self.crashes.of(end, running)
        return BinaryVerdicts(cases, unknown, problems, benches, self.counts.files, self.counts.problems, crash)


def case_verdict(record: CaseRecord, running: bool, abnormal: str | None) -> Verdict:
    """One case's verdict from its lines: running when the output stopped is a failure
    naming why; a failure line fails it whatever its verdict line said."""
    log = record.log.text()
    location = first_location(record.failures)
    failures = list(record.failures)
    if record.dropped_failures:
        failures.append(f"... {record.dropped_failures} more failure lines")
    if running:
        reason = f"{abnormal} while this case was running" if abnormal else NO_VERDICT
        return Verdict(Outcome.FAILED, "\n".join([*failures, reason]), location, log)
    if record.outcome is Outcome.FAILED or record.failures:
        return Verdict(Outcome.FAILED, "\n".join(failures) or "failed on device", location, log)
    if record.outcome is Outcome.SKIPPED:
        return Verdict(Outcome.SKIPPED, record.skip_reason, None, log)
    return Verdict(Outcome.PASSED, "", None, log)


def exit_note(end: RunEnd) -> str:
    """A failed exit status, for a message that says the output ended early."""
    if end.exit_code not in (None, 0):
        return f"; the binary exited with code {end.exit_code}"
    return ""


def first_location(failures: list[str]) -> tuple[str, int] | None:
    """file:line of the first failure line that names one (TFLM's forms first, then any
    `path.ext:LINE` as GoogleTest, CppUTest, Unity and Rust panics print it)."""
    for line in failures:
        m = _LOCATION.search(line[line.rindex(" at ") :] if " at " in line else line)
        if m:
            return m.group(1), int(m.group(2))
    for line in failures:
        m = _ANY_LOCATION.search(line)
        if m:
            return m.group(1), int(m.group(2))
    return None
