"""The TFLM format's streaming parser: TFLM's test output (v1 and v2) with our header's
markers (micro_test.h), and how the run ended.

The parser sees one line at a time and never holds more than a bounded amount
per case. `verdicts()` then combines what was printed with how the process
ended, because neither alone is trustworthy: a pass string followed by a crash
is not a pass, and a clean exit without a closing summary is not a pass either.
The protocol is documented in docs/protocol.md.

Text a test prints must never move a verdict to another case. Our header opens
every run with a per-run nonce (`#ondevice nonce N`) and stamps its own case and
summary markers with it; once a run has declared one, only stamped markers
start or end a case or open the closing summary, and lookalike lines are log.
Output without a nonce (TFLM's own headers) is parsed by its usual markers, and
a start that the source does not explain (a case started more often than it is
declared, or before its turn) fails the cases it may have confused.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from itertools import pairwise

from .benchline import BenchRecord, BenchRecordError, parse_record, rss_record, stack_record
from .casetracker import EXTENSION_PREFIX, MAX_CASES, MAX_LINE_CHARS, CaseRecord, CaseTracker, case_verdict, exit_note
from .gcda import VERBS as GCDA_VERBS
from .lines import LineSplitter
from .verdicts import BinaryVerdicts, Outcome, RunEnd, Verdict

PASS_MAGIC = "~~~ALL TESTS PASSED~~~"
MAX_BENCHES_PER_CASE = 100
FAIL_MAGIC = "~~~SOME TESTS FAILED~~~"

_NONCE = re.compile(r"[0-9a-f]{8,32}$")
_STAMPED_END = re.compile(r"(\S+) (passed|failed|skipped)")
_STACK = re.compile(r"(\S+) (\d{1,12})(?: limit=(\d{1,12}))?(?: (overflow|beyond))?")
_V1_START = re.compile(r"Testing (\S+)$")
_LOADER_MISSING = re.compile(r"error while loading shared libraries: ([^:\s]{1,200}): cannot open shared object file")
MAX_UNAVAILABLE = 400
NO_NONCE = (
    "the binary was built with pytest-ondevice's micro_test.h, but its output never declared the run's nonce: "
    "nothing it printed came from our header's main (did code run before main, print a verdict and exit?)"
)
_V1_TALLY = re.compile(r"(\d+)/(\d+) tests passed$")
_V1_FAILURE = re.compile(r" failed at .+:\d+(?: \(|$)|^FAIL: ")
_V2_RUN = re.compile(r"\[ RUN      \] (\S+)$")
_V2_OK = re.compile(r"\[       OK \] (\S+)")
_V2_FAILED = re.compile(r"\[  FAILED  \] (?!\d+ tests?[,.])(\S+)")
_V2_SKIPPED = re.compile(r"\[  SKIPPED \] (?!\d+ tests?[,.])(\S+)")
_V2_SUMMARY = re.compile(r"\[==========\] (\d+) tests? ran")
_V2_FAILURE = re.compile(r"^.+:\d+: Failure$")


@dataclass(frozen=True)
class Start:
    """One case start as printed: which case, after which, and by which marker."""

    name: str
    before: str | None  # the case that was running (or last ended) when it started
    v1: bool  # by `Testing NAME`: v1 runs its cases in source order


class TestOutputParser(CaseTracker):
    """A line-at-a-time state machine over TFLM v1/v2 output plus our extension lines."""

    def __init__(self) -> None:
        super().__init__()
        self.magic: str | None = None  # PASS_MAGIC or FAIL_MAGIC when seen
        self.tally: tuple[int, int] | None = None  # v1 "N/M tests passed"
        self.v2_ran: int | None = None  # v2 "[==========] N tests ran."
        self.fault: str | None = None
        self.nonce: str | None = None  # declared by our header's first line: only stamped markers count
        self.in_summary = False  # nonce mode: after the stamped summary marker
        self.starts: list[Start] = []
        self.benches: dict[str, list[BenchRecord]] = {}
        self.peak_rss: int | None = None  # a hosted binary's, sent before its summary
        self.overflowed: set[str] = set()  # cases only the runtime's stack watch failed
        self.ours = False  # the binary was built with our header (its marker is in the ELF): a run must declare a nonce
        self.unavailable: str | None = None  # the device cannot run this binary (no usable GPU)
        self.gpu: str | None = None  # the GPU a CUDA binary ran on, as it named it
        self.missing_library: str | None = None  # a library the device's loader did not find
        self._in_failure_block = False

    # -- feeding -----------------------------------------------------------
    def line(self, line: str) -> None:
        stripped = line.lstrip()
        if not stripped:
            return
        if self._in_failure_block:
            if line[:1].isspace() and self.current is not None:
                self.current.add_failure(line)
                return
            self._in_failure_block = False
        if stripped.startswith(EXTENSION_PREFIX):
            self._extension(stripped[len(EXTENSION_PREFIX) :])
        elif self.nonce is None:
            self._feed_marker(stripped)
        elif self.in_summary:
            self._feed_summary(stripped)
        else:
            self._feed_failure(stripped)

    def _feed_marker(self, line: str) -> None:
        """Output without a nonce: TFLM's own markers, the closing ones only between cases."""
        if self.missing_library is None and not self.cases and (m := _LOADER_MISSING.search(line)):
            self.missing_library = m.group(1)  # the loader's, before main (exit 127): see runner
        if PASS_MAGIC in line or FAIL_MAGIC in line:
            if self.current is None:  # printed inside a case body, it is that case's log
                self._magic(line)
            return
        if line.startswith("["):
            self._v2(line)
            return
        m = _V1_START.match(line)
        if m:
            self._close_current()
            self._start(m.group(1), v1=True)
            return
        m = _V1_TALLY.match(line)
        if m:  # v1 has no end-of-case line: the tally ends the last case
            self._close_current()
            self.tally = (int(m.group(1)), int(m.group(2)))
            return
        self._feed_failure(line)

    def _feed_summary(self, line: str) -> None:
        """Nonce mode, after the stamped summary marker: the closing lines."""
        if PASS_MAGIC in line or FAIL_MAGIC in line:
            self._magic(line)
            return
        m = _V1_TALLY.match(line) or _V2_SUMMARY.match(line)
        if m is None:
            return
        if m.re is _V1_TALLY:
            self.tally = (int(m.group(1)), int(m.group(2)))
        else:
            self.v2_ran = int(m.group(1))

    def _feed_failure(self, line: str) -> None:
        """A failure line belongs to the running case; between cases, to the one that just
        ended: a case whose verdict line was printed early still fails by its own lines."""
        block = _V2_FAILURE.match(line) is not None  # v2's indented lines that follow belong to it
        if not block and not _V1_FAILURE.search(line):
            return
        if self.current is not None:
            self.current.add_failure(line)
            self._in_failure_block = block
        elif self.last is not None:
            self.last.add_failure(line)
            self.last.finish(Outcome.FAILED)

    def _magic(self, line: str) -> None:
        self._close_current()
        self.magic = FAIL_MAGIC if FAIL_MAGIC in line else PASS_MAGIC

    def _v2(self, line: str) -> None:
        m = _V2_RUN.match(line)
        if m:
            self._fail_unfinished("no verdict: the next case started before this one ended")
            self._start(m.group(1))
            return
        for pattern, outcome in (
            (_V2_OK, Outcome.PASSED),
            (_V2_FAILED, Outcome.FAILED),
            (_V2_SKIPPED, Outcome.SKIPPED),
        ):
            m = pattern.match(line)
            if m:  # the list of failed names after the summary changes nothing: no case runs
                self._end(m.group(1), outcome)
                return
        m = _V2_SUMMARY.match(line)
        if m and self.current is None:  # inside a case body it is that case's log
            self.v2_ran = int(m.group(1))
            return
        self._feed_failure(line)

    def _extension(self, body: str) -> None:
        verb, _, rest = body.partition(" ")
        if verb == "nonce":
            if self.nonce is None and not self.starts and _NONCE.match(rest.strip()):
                self.nonce = rest.strip()
        elif self.nonce is not None and verb == self.nonce:
            self._stamped(rest)
        elif verb == "skip":
            if self.current is not None:
                self.current.skip_reason = rest.strip()[:MAX_LINE_CHARS] or "skipped on device"
        elif verb == "fault":  # the running case's headline (verdicts): said once
            self.fault = rest.strip()[:MAX_LINE_CHARS]
        elif verb == "crash":
            self.crashes.line(rest)
        elif verb == "bench":
            self._bench(rest)
        elif self.nonce is None and verb == "stack":  # the runtime's casewatch.c, after the verdict line
            self._runtime_stack(rest.strip())
        elif self.nonce is None and verb in GCDA_VERBS:  # the runtime's coverage.c, at exit
            self.counts.line(verb, rest)
        # other verbs (`exit N`, the transport's to read) are log

    def _stamped(self, body: str) -> None:
        """Our header's own markers: `case NAME`, `end NAME passed|failed|skipped`, `summary`."""
        kind, _, rest = body.partition(" ")
        if kind == "case" and rest and not self.in_summary:
            self._fail_unfinished("no verdict: the next case started before this one ended")
            self._start(rest.strip())
        elif kind == "end":
            m = _STAMPED_END.fullmatch(rest.strip())
            record = self.current
            if m and record is not None and record.name == m.group(1):
                self._finish(self._skipped(record, Outcome(m.group(2))))
        elif kind == "summary":
            self._fail_unfinished("no verdict: the closing summary began while this case was running")
            self.in_summary = True
        elif kind == "stack":
            self._stack(rest.strip())
        elif kind in GCDA_VERBS:
            self.counts.line(kind, rest)
        elif kind == "rss" and rest.strip().isdigit() and len(rest.strip()) < 19:
            self.peak_rss = int(rest.strip())
        elif kind == "unavailable" and not self.cases:  # the header's check, before any case
            self.unavailable = rest.strip()[:MAX_UNAVAILABLE]
        elif kind == "gpu":
            self.gpu = rest.strip()[:MAX_UNAVAILABLE]

    def _stack(self, body: str) -> None:
        """`NAME BYTES [limit=L] [overflow|beyond]`: how deep the running case went below
        main's frame, kept as a record of the case (unit bytes). Past the bottom of the stack
        or over its own limit, the header has failed the case on the device already."""
        m = _STACK.fullmatch(body)
        record = self.current
        if m is None or record is None or record.name != m.group(1):
            return
        self._keep_stack(record, int(m.group(2)), m.group(4) or "")

    def _keep_stack(self, record: CaseRecord, used: int, edge: str) -> None:
        records = self.benches.setdefault(record.name, [])
        if len(records) < MAX_BENCHES_PER_CASE:
            records.append(stack_record(record.name, used, beyond=edge == "beyond"))

    def _runtime_stack(self, body: str) -> None:
        """`NAME BYTES [overflow]` from a bare-metal runtime watching a harness that has no
        markers of ours (TFLM's own header): printed after the case's verdict line, so it
        belongs to the case that just ended; an overflow fails it."""
        m = _STACK.fullmatch(body)
        record = self.current if self.current is not None else self.last
        if m is None or m.group(3) or record is None or record.name != m.group(1):
            return
        used, edge = int(m.group(2)), m.group(4) or ""
        self._keep_stack(record, used, edge)
        if edge == "overflow":
            if not record.failed:
                self.overflowed.add(record.name)
            record.add_failure(
                f"stack overflow: the case reached the last 256 bytes of the stack ({used} bytes from its top)"
            )
            if record.outcome is not None:
                record.finish(Outcome.FAILED)

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
    def _start(self, name: str, v1: bool = False) -> None:
        before = self.current or self.last
        if self.closed:  # a summary before this start was not the closing one
            self.magic = self.tally = self.v2_ran = None
        record = self.cases.get(name)
        if record is None:
            if len(self.cases) >= MAX_CASES:  # the case before was ended by whoever called
                self.dropped_cases += 1
                return
            record = self.cases[name] = CaseRecord(name)
        if len(self.starts) < MAX_CASES:
            self.starts.append(Start(name, before.name if before is not None else None, v1))
        record.starts += 1
        record.outcome = None
        record.seen_at_start = len(record.failures) + record.dropped_failures
        self.current = record

    def _end(self, name: str, outcome: Outcome) -> None:
        """A v2 verdict line ends the running case; about any other case it is log, except
        that the case which just ended may still be failed by its own late verdict."""
        record = self.current if self.current is not None and self.current.name == name else None
        if record is None:
            if self.last is not None and self.last.name == name and outcome is Outcome.FAILED:
                self.last.finish(Outcome.FAILED)
            return
        if outcome is Outcome.PASSED and record.failures:
            record.add_failure("the device printed [       OK ] after a failure")
        self._finish(self._skipped(record, outcome))

    @staticmethod
    def _skipped(record: CaseRecord, outcome: Outcome) -> Outcome:
        """A skip without a reason line still says it was skipped."""
        if outcome is Outcome.SKIPPED:
            record.skip_reason = record.skip_reason or "skipped on device"
        return outcome

    def _fail_unfinished(self, reason: str) -> None:
        if self.current is not None:
            self.current.add_failure(reason)  # a failure line: the case ends failed
            self._close_current()

    def _close_current(self) -> None:
        """v1 prints no per-case end line: a case ends when the next begins."""
        record = self.current
        if record is not None:
            self._finish(Outcome.SKIPPED if record.skip_reason else Outcome.PASSED)

    # -- verdicts ------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the closing summary or magic string was printed."""
        return self.magic is not None or self.tally is not None or self.v2_ran is not None

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        if self.fault and not end.fault:
            end = replace(end, fault=self.fault)
        abnormal = end.abnormal()
        running = self.current.name if self.current is not None else None
        problems: list[str] = []
        verdicts: dict[str, Verdict] = {}
        for name, record in self.cases.items():
            verdicts[name] = case_verdict(record, name == running, abnormal)
        disagreement = self._disagreement(end, verdicts)
        if self.ours and self.nonce is None:  # nothing of what it printed came from our header
            disagreement = f"{disagreement}; {NO_NONCE}" if disagreement else NO_NONCE + exit_note(end)
        if disagreement:
            problems.append(disagreement)
            self._fail_the_rest(verdicts, disagreement)
        self._fail_unattributable(verdicts, self._unattributable(expected))
        if self.peak_rss is not None and expected:  # the binary's: carried by its first case
            self.benches.setdefault(expected[0], []).append(rss_record(self.peak_rss))
        return self._settle(expected, verdicts, end, self.closed, problems, self.benches, running)

    def _unattributable(self, expected: list[str]) -> dict[str, str]:
        """Cases whose output cannot be told from another's, with why.

        A name started more often than the source declares it is a duplicate (stamped
        markers, or as often as declared) or a start printed by a test; without a nonce,
        a v1 start before its turn in source order is one too. A printed start also takes
        the lines of the case that was running, so that case cannot be judged either."""
        declared = Counter(expected)
        order = {name: i for i, name in enumerate(dict.fromkeys(expected))}
        before: dict[str, list[str]] = {}  # name -> the cases running when it started
        for s in self.starts:
            if s.before not in (None, s.name):
                before.setdefault(s.name, []).append(s.before)
        reasons: dict[str, str] = {}
        for name, record in self.cases.items():
            if record.starts < 2:
                continue
            if self.nonce is not None or record.starts <= declared[name]:
                reasons[name] = (
                    f"case {name} ran {record.starts} times: more than one case in this file has "
                    "this name, and their results cannot be told apart; give each a unique name"
                )
                continue
            times = {0: "is not declared in the source", 1: "is declared once"}
            reasons[name] = (
                f"case {name} was started {record.starts} times but "
                f"{times.get(declared[name], f'is declared {declared[name]} times')}: "
                f"a case may have printed 'Testing {name}', so this output cannot be attributed"
            )
            for running in before.get(name, []):
                reasons.setdefault(running, _printed_start(name))
        if self.nonce is None:
            v1 = [s for s in self.starts if s.v1 and s.name in order]
            for s, nxt in pairwise(v1):
                if order[s.name] > order[nxt.name]:
                    reasons.setdefault(
                        s.name,
                        f"case {s.name} started before its turn in the source (before {nxt.name}): "
                        f"a case may have printed 'Testing {s.name}', so this output cannot be attributed",
                    )
                    if s.before is not None:
                        reasons.setdefault(s.before, _printed_start(s.name))
        return {n: r for n, r in reasons.items() if n in self.cases}

    def _disagreement(self, end: RunEnd, verdicts: dict[str, Verdict]) -> str | None:
        """Exit status, magic string and tallies must tell the same story (a case failed here
        for a stack overflow the device could not see is not the device's story)."""
        any_failed = any(v.outcome is Outcome.FAILED for n, v in verdicts.items() if n not in self.overflowed)
        if self.magic == PASS_MAGIC:
            if end.signal or end.fault or end.timed_out is not None:
                return f"{PASS_MAGIC} was printed, but then the binary {end.abnormal()}"
            if end.exit_code not in (0, None):
                return f"{PASS_MAGIC} was printed, but the binary exited with code {end.exit_code}"
            if any_failed:
                return f"{PASS_MAGIC} was printed, but a case reported a failure"
        if self.magic == FAIL_MAGIC and end.exit_code == 0:
            return f"{FAIL_MAGIC} was printed, but the binary exited with code 0"
        runs = sum(r.starts for r in self.cases.values())
        if self.tally is not None:
            passed, total = self.tally
            parsed_pass = sum(r.starts - r.failed_runs for r in self.cases.values())
            if total != runs or passed != parsed_pass:
                return f"the device reports {passed}/{total} tests passed, but its output shows {parsed_pass}/{runs}"
            if self.magic is None:
                return "the tally was printed without ~~~ALL TESTS PASSED~~~/~~~SOME TESTS FAILED~~~"
        if self.v2_ran is not None:
            if self.v2_ran != runs:
                return f"the device reports {self.v2_ran} tests ran, but its output shows {runs}"
            if not any_failed and self.magic != PASS_MAGIC:
                return f"no case failed, but {PASS_MAGIC} was not printed"
            if any_failed and end.exit_code == 0:
                return "a case failed, but the binary exited with code 0"
        return None


def _printed_start(name: str) -> str:
    return (
        f"while this case was running, the output announced case {name} (did it print "
        f"'Testing {name}'?): its later lines were charged to {name}, so this case cannot be judged"
    )


def parse_bytes(chunks: list[bytes], expected: list[str], end: RunEnd) -> BinaryVerdicts:
    """Convenience for tests and simple callers: parse a whole recorded stream."""
    parser = TestOutputParser()
    splitter = LineSplitter()
    for chunk in chunks:
        for line in splitter.feed(chunk):
            parser.feed_line(line)
    for line in splitter.close():
        parser.feed_line(line)
    return parser.verdicts(expected, end)
