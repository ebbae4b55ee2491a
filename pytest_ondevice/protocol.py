"""Streaming parser for TFLM test output (v1 and v2) and how a run ended.

The parser sees one line at a time and never holds more than a bounded amount
per case. `verdicts()` then combines what was printed with how the process
ended, because neither alone is trustworthy: a pass string followed by a crash
is not a pass, and a clean exit without a closing summary is not a pass either.
The protocol is documented in docs/protocol.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum

from .bench import BenchRecord, BenchRecordError, parse_record
from .lines import BoundedLines

PASS_MAGIC = "~~~ALL TESTS PASSED~~~"
MAX_BENCHES_PER_CASE = 100
FAIL_MAGIC = "~~~SOME TESTS FAILED~~~"
EXTENSION_PREFIX = "#ondevice "

MAX_CASES = 10_000
MAX_FAILURE_LINES = 40
MAX_LINE_CHARS = 500

_V1_START = re.compile(r"Testing (\S+)$")
_V1_TALLY = re.compile(r"(\d+)/(\d+) tests passed$")
_V1_FAILURE = re.compile(r" failed at .+:\d+(?: \(|$)|^FAIL: ")
_V2_RUN = re.compile(r"\[ RUN      \] (\S+)$")
_V2_OK = re.compile(r"\[       OK \] (\S+)")
_V2_FAILED = re.compile(r"\[  FAILED  \] (?!\d+ tests?[,.])(\S+)")
_V2_SKIPPED = re.compile(r"\[  SKIPPED \] (?!\d+ tests?[,.])(\S+)")
_V2_SUMMARY = re.compile(r"\[==========\] (\d+) tests? ran")
_V2_FAILURE = re.compile(r"^.+:\d+: Failure$")
# "... failed at FILE:LINE (A vs B)", "FAIL: ... at FILE:LINE", "FILE:LINE: Failure"; FILE may hold spaces
_LOCATION = re.compile(r"(?: at |^)(.+?):(\d+)(?: \(.*\)|: Failure)?$")


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass
class RunEnd:
    """How the program on the device ended, as the transport saw it."""

    exit_code: int | None = None  # None: the transport cannot know (e.g. a bare UART)
    signal: str | None = None  # "SIGSEGV"
    fault: str | None = None  # a CPU fault the bare-metal runtime or the emulator reported
    timed_out: float | None = None  # the timeout in seconds, when it struck
    duration: float = 0.0
    clock: str = ""  # which clock the timeout counted, when not the wall clock ("virtual time")

    def abnormal(self) -> str | None:
        if self.timed_out is not None:
            return f"timed out after {self.timed_out:g}s" + (f" of {self.clock}" if self.clock else "")
        if self.fault:
            return f"fault: {self.fault}"
        if self.signal:
            return f"crashed: killed by {self.signal}"
        return None


@dataclass
class CaseRecord:
    """What the device printed about one case."""

    name: str
    outcome: Outcome | None = None
    failures: list[str] = field(default_factory=list)
    skip_reason: str = ""
    log: BoundedLines = field(default_factory=lambda: BoundedLines(head=20, tail=80))
    dropped_failures: int = 0

    def add_failure(self, line: str) -> None:
        if len(self.failures) < MAX_FAILURE_LINES:
            self.failures.append(line[:MAX_LINE_CHARS])
        else:
            self.dropped_failures += 1

    @property
    def failed(self) -> bool:
        return bool(self.failures) or self.outcome is Outcome.FAILED


@dataclass
class Verdict:
    """The outcome a pytest item reports, with the message a user reads."""

    outcome: Outcome
    message: str = ""
    location: tuple[str, int] | None = None  # file:line of the first failure
    log: str = ""


@dataclass
class BinaryVerdicts:
    cases: dict[str, Verdict]
    unknown: dict[str, Verdict]  # printed by the device but not found in the source
    problems: list[str]  # binary-level remarks (tally mismatch, overflow)
    benches: dict[str, list[BenchRecord]] = field(default_factory=dict)  # per case


class TestOutputParser:
    """A line-at-a-time state machine over TFLM v1/v2 output plus our extension lines."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.cases: dict[str, CaseRecord] = {}
        self.current: CaseRecord | None = None
        self.magic: str | None = None  # PASS_MAGIC or FAIL_MAGIC when seen
        self.tally: tuple[int, int] | None = None  # v1 "N/M tests passed"
        self.v2_ran: int | None = None  # v2 "[==========] N tests ran."
        self.fault: str | None = None
        self.extension_lines: list[str] = []
        self.benches: dict[str, list[BenchRecord]] = {}
        self.dropped_cases = 0
        self._in_failure_block = False

    # -- feeding -----------------------------------------------------------
    def feed_line(self, raw: str) -> None:
        line = raw.rstrip()
        before = self.current
        self._feed(line)
        owner = self.current or before  # a case's log runs from its start line to its end line
        if owner is not None:
            owner.log.append(line)

    def _feed(self, line: str) -> None:
        stripped = line.lstrip()
        if not stripped:
            return
        if self._in_failure_block:
            if line[:1].isspace() and self.current is not None:
                self.current.add_failure(line)
                return
            self._in_failure_block = False
        if "~~~" in stripped and (PASS_MAGIC in stripped or FAIL_MAGIC in stripped):
            self._magic(stripped)
            return
        first = stripped[0]
        if first == "[":
            self._v2(stripped)
        elif first == "T" and stripped.startswith("Testing "):
            m = _V1_START.match(stripped)
            if m:
                self._start(m.group(1), closes_previous=True)
                return
        elif first == "#" and stripped.startswith(EXTENSION_PREFIX):
            self._extension(stripped[len(EXTENSION_PREFIX) :])
            return
        elif first.isdigit() and stripped.endswith("tests passed"):
            m = _V1_TALLY.match(stripped)
            if m:
                self._close_current()
                self.tally = (int(m.group(1)), int(m.group(2)))
                return
        if self.current is not None and self.current.outcome is None:
            if _V1_FAILURE.search(stripped):
                self.current.add_failure(stripped)
            elif _V2_FAILURE.match(stripped):
                self.current.add_failure(stripped)
                self._in_failure_block = True

    def _magic(self, line: str) -> None:
        self._close_current()
        self.magic = FAIL_MAGIC if FAIL_MAGIC in line else PASS_MAGIC

    def _v2(self, line: str) -> None:
        m = _V2_RUN.match(line)
        if m:
            self._start(m.group(1), closes_previous=False)
            return
        closing = self.v2_ran is not None
        for pattern, outcome in (
            (_V2_OK, Outcome.PASSED),
            (_V2_FAILED, Outcome.FAILED),
            (_V2_SKIPPED, Outcome.SKIPPED),
        ):
            m = pattern.match(line)
            if m:
                if not closing:  # after the summary, [  FAILED  ] lines only list names
                    self._end(m.group(1), outcome)
                return
        m = _V2_SUMMARY.match(line)
        if m:
            self._close_current()
            self.v2_ran = int(m.group(1))

    def _extension(self, body: str) -> None:
        verb, _, rest = body.partition(" ")
        if verb == "skip":
            if self.current is not None and self.current.outcome is None:
                self.current.skip_reason = rest.strip()[:MAX_LINE_CHARS] or "skipped on device"
        elif verb == "fault":
            self.fault = rest.strip()[:MAX_LINE_CHARS]
            if self.current is not None:
                self.current.add_failure(f"fault: {self.fault}")
        elif verb == "bench":
            self._bench(rest)
        elif verb == "exit":  # the runtime's exit status: the transport's to read (RunEnd)
            pass
        elif len(self.extension_lines) < 1000:  # bench and future verbs, kept for later stages
            self.extension_lines.append(body[:MAX_LINE_CHARS])

    def _bench(self, body: str) -> None:
        """A latency record belongs to the running case; a broken one fails it, naming why."""
        owner = self.current.name if self.current is not None else ""
        try:
            record = parse_record(body)
        except BenchRecordError as e:
            if self.current is not None:
                self.current.add_failure(str(e))
            return
        records = self.benches.setdefault(owner, [])
        if len(records) < MAX_BENCHES_PER_CASE:
            records.append(record)

    # -- case bookkeeping ----------------------------------------------------
    def _start(self, name: str, closes_previous: bool) -> None:
        if closes_previous:
            self._close_current()
        elif self.current is not None and self.current.outcome is None:
            self.current.add_failure("no verdict: the next case started before this one ended")
            self.current.outcome = Outcome.FAILED
        record = self.cases.get(name)
        if record is None:
            if len(self.cases) >= MAX_CASES:
                self.dropped_cases += 1
                self.current = None
                return
            record = self.cases[name] = CaseRecord(name)
        record.outcome = None
        self.current = record
        self._in_failure_block = False

    def _end(self, name: str, outcome: Outcome) -> None:
        record = self.cases.get(name)
        if record is None:
            return
        if outcome is Outcome.SKIPPED and not record.skip_reason:
            record.skip_reason = "skipped on device"
        record.outcome = Outcome.FAILED if record.failures else outcome
        if outcome is Outcome.PASSED and record.failures:
            record.add_failure("the device printed [       OK ] after a failure")
        if record is self.current:
            self.current = None
        self._in_failure_block = False

    def _close_current(self) -> None:
        """v1 prints no per-case end line: a case ends when the next begins."""
        record = self.current
        if record is not None and record.outcome is None:
            if record.failures:
                record.outcome = Outcome.FAILED
            elif record.skip_reason:
                record.outcome = Outcome.SKIPPED
            else:
                record.outcome = Outcome.PASSED
        self.current = None
        self._in_failure_block = False

    # -- verdicts ------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the closing summary or magic string was printed."""
        return self.magic is not None or self.tally is not None or self.v2_ran is not None

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        if self.fault and not end.fault:
            end = replace(end, fault=self.fault)
        abnormal = end.abnormal()
        running = self.current.name if self.current and self.current.outcome is None else None
        problems: list[str] = []
        verdicts: dict[str, Verdict] = {}
        for name, record in self.cases.items():
            verdicts[name] = self._case_verdict(record, name == running, abnormal)
        disagreement = self._disagreement(end, verdicts)
        if disagreement:
            problems.append(disagreement)
            for name, v in verdicts.items():
                if v.outcome is not Outcome.FAILED:
                    verdicts[name] = Verdict(Outcome.FAILED, disagreement, None, v.log)
        if self.dropped_cases:
            problems.append(f"{self.dropped_cases} more cases were printed than the parser keeps")

        wanted = set(expected)
        cases: dict[str, Verdict] = {}
        for name in expected:
            if name in verdicts:
                cases[name] = verdicts[name]
            elif abnormal:
                cases[name] = Verdict(Outcome.FAILED, f"not run: {abnormal} before this case")
            elif not self.closed:
                cases[name] = Verdict(
                    Outcome.FAILED,
                    "not run: no verdict (output ended without the closing summary)" + _exit_note(end),
                )
            else:
                cases[name] = Verdict(
                    Outcome.FAILED,
                    "not run: the device never started this case "
                    "(is it compiled out, or registered under another name?)",
                )
        unknown = {n: v for n, v in verdicts.items() if n not in wanted}
        return BinaryVerdicts(cases, unknown, problems, self.benches)

    def _case_verdict(self, record: CaseRecord, running: bool, abnormal: str | None) -> Verdict:
        log = record.log.text()
        location = _first_location(record.failures)
        failures = list(record.failures)
        if record.dropped_failures:
            failures.append(f"... {record.dropped_failures} more failure lines")
        if running:
            if abnormal:
                reason = f"{abnormal} while this case was running"
            else:
                reason = "no verdict: output ended while this case was running"
            return Verdict(Outcome.FAILED, "\n".join([*failures, reason]), location, log)
        if record.outcome is Outcome.FAILED or record.failures:
            return Verdict(Outcome.FAILED, "\n".join(failures) or "failed on device", location, log)
        if record.outcome is Outcome.SKIPPED:
            return Verdict(Outcome.SKIPPED, record.skip_reason, None, log)
        return Verdict(Outcome.PASSED, "", None, log)

    def _disagreement(self, end: RunEnd, verdicts: dict[str, Verdict]) -> str | None:
        """Exit status, magic string and tallies must tell the same story."""
        any_failed = any(v.outcome is Outcome.FAILED for v in verdicts.values())
        if self.magic == PASS_MAGIC:
            if end.signal or end.fault or end.timed_out is not None:
                return f"{PASS_MAGIC} was printed, but then the binary {end.abnormal()}"
            if end.exit_code not in (0, None):
                return f"{PASS_MAGIC} was printed, but the binary exited with code {end.exit_code}"
            if any_failed:
                return f"{PASS_MAGIC} was printed, but a case reported a failure"
        if self.magic == FAIL_MAGIC and end.exit_code == 0:
            return f"{FAIL_MAGIC} was printed, but the binary exited with code 0"
        if self.tally is not None:
            passed, total = self.tally
            parsed_pass = sum(v.outcome is not Outcome.FAILED for v in verdicts.values())
            if total != len(verdicts) or passed != parsed_pass:
                return (
                    f"the device reports {passed}/{total} tests passed, but its output shows "
                    f"{parsed_pass}/{len(verdicts)}"
                )
            if self.magic is None:
                return "the tally was printed without ~~~ALL TESTS PASSED~~~/~~~SOME TESTS FAILED~~~"
        if self.v2_ran is not None:
            if self.v2_ran != len(verdicts):
                return f"the device reports {self.v2_ran} tests ran, but its output shows {len(verdicts)}"
            if not any_failed and self.magic != PASS_MAGIC:
                return f"no case failed, but {PASS_MAGIC} was not printed"
            if any_failed and end.exit_code == 0:
                return "a case failed, but the binary exited with code 0"
        return None


def _exit_note(end: RunEnd) -> str:
    if end.exit_code not in (None, 0):
        return f"; the binary exited with code {end.exit_code}"
    return ""


def _first_location(failures: list[str]) -> tuple[str, int] | None:
    for line in failures:
        m = _LOCATION.search(line[line.rindex(" at ") :] if " at " in line else line)
        if m:
            return m.group(1), int(m.group(2))
    return None


def parse_bytes(chunks: list[bytes], expected: list[str], end: RunEnd) -> BinaryVerdicts:
    """Convenience for tests and simple callers: parse a whole recorded stream."""
    from .lines import LineSplitter

    parser = TestOutputParser()
    splitter = LineSplitter()
    for chunk in chunks:
        for line in splitter.feed(chunk):
            parser.feed_line(line)
    for line in splitter.close():
        parser.feed_line(line)
    return parser.verdicts(expected, end)
