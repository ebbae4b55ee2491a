"""Rust's libtest (`cargo test` binaries): `#[test]` functions, run one at a time so that a
crash names the running test, their `test NAME ... ok` stream parsed line by line.

libtest prints `test NAME ... ` before a test runs and its verdict when it ends. The test's
own output (always with --nocapture; a C library's printf or an `Error:` from a test that
returns Err even without) lands in between, so a verdict is only *likely* when a line ends
in `ok`/`FAILED`: it is held until libtest's next structural line (the next test, the
failures section, the summary) confirms it, and the last one wins. A test that printed
"ok" and then failed is failed; output that stops after a verdict-like line is a crash
during that test. Failure text is the panic message (from `thread '…' panicked at` on,
the backtrace left to the log), printed before the verdict or in the `---- NAME stdout
----` block of the failures section; its `src/lib.rs:11:19` is the case's location.

All of that is text a test can print too (its own `test x ... ok`, a closing summary, then
`exit(0)`). So where the transport can bring a file back, libtest also writes its log file
(`--logfile`: `ok NAME`, `failed NAME`, `ignored NAME` as each test finishes, by libtest's
own hand): a pass or skip the output claims and the log file does not record is a failure."""

from __future__ import annotations

import re

from . import Format
from .casetracker import MAX_CASES
from .discover import Case
from .stream import CaseStream, Summary
from .verdicts import BinaryVerdicts, Outcome, RunEnd, Verdict

IGNORED = "#[ignore] in the source (run with --include-ignored)"
MAX_PANIC_LINES = 20  # failure lines kept per case from its panic message
MAX_BLOCK_PREFIX = 10  # lines of a failures block kept before its panic (its failure text if none)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RUNNING = re.compile(r"^running (\d+) tests?$")
_START = re.compile(r"^test (\S+)( - should panic)? \.\.\.(?: (.*))?$")
_FIRST_VERDICT = re.compile(r"^ignored(?:, (.+))?$")
_VERDICT = re.compile(r"(ok|FAILED)$")
_FRAME = re.compile(r"^\s+(?:\d+: |at )\S")  # a backtrace's line (`3: crate::tests::is_ok`): never a verdict
_PANIC = re.compile(r"thread '[^']*'(?: \(\d+\))? panicked at |^Error: |^note: test did not panic")
_NOISE = re.compile(r"^note: (?:run with `RUST_BACKTRACE|Some details are omitted)")
_BACKTRACE = re.compile(r"^stack backtrace:$")
_BLOCK = re.compile(r"^---- (\S+) stdout ----$")
_SUMMARY = re.compile(r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured")
_WHERE = re.compile(r"([^\s',]+\.rs):(\d+):\d+")
_RUST_LIBRARY = re.compile(r"/rustc[-/]|/library/(?:std|core|alloc|test)/")  # a panic inside std: not the test's
# a line of libtest's log file: `ok NAME`, `failed NAME`, `failed: WHY NAME`, `ignored: WHY NAME`,
# `failed (time out) NAME`, then ` <TIME>` with --report-time; the name is the last word
_RECORD = re.compile(r"^(ok|failed|ignored)(?:[:( ].*)? (\S+)$")
_RECORD_TIME = re.compile(r" <[^<>]*>$")
_RECORDED = {"ok": Outcome.PASSED, "failed": Outcome.FAILED, "ignored": Outcome.SKIPPED}
MAX_DISAGREEING_NAMED = 5


class Libtest(Format):
    name = "libtest"
    kinds = ("host", "linux")  # libtest needs std: an operating system
    # one test at a time, its output and panic inline: a crash names the running test and
    # loses neither its output nor an earlier failure's message (printed at the end otherwise);
    # no colours on a pseudo-terminal (a console may run the binary on one)
    run_args = ("--test-threads=1", "--nocapture", "--color=never")
    # deprecated in recent Rust (a warning on stderr) but, the only output libtest writes apart
    # from stdout; a libtest without it fails the run with "Unrecognized option"
    record_args = ("--logfile", "{file}")

    def find_cases(self, text: str) -> list[Case]:
        """The file's #[test] functions, named by their module path within this file."""
        from .rustsrc import scan  # a C/C++ run never needs the Rust scanner

        return [Case(t.name, t.line, self.name) for t in scan(text).tests]

    def device_order(self, cases: list[Case]) -> tuple[str, ...]:
        return tuple(sorted(c.name for c in cases))  # libtest runs its tests sorted by name

    def parser(self, order: tuple[str, ...]) -> LibtestParser:
        return LibtestParser(order)


def ignored_cases(text: str) -> dict[str, str]:
    """The file's #[ignore]d tests and why (the attribute's reason, else IGNORED)."""
    from .rustsrc import scan

    return {t.name: t.ignore_reason or IGNORED for t in scan(text).tests if t.ignored}


class LibtestParser(CaseStream):
    exit_counts_failures = True  # libtest exits 101 when a test failed

    def __init__(self, order: tuple[str, ...] = ()) -> None:
        super().__init__(order)
        self._planned: int | None = None  # "running N tests"
        self._verdict: tuple[Outcome, str] | None = None  # the running case's likely verdict
        self._panic: list[str] = []  # the running case's failure text, kept if it fails
        self._collecting = False
        self._section = ""  # "" (tests), "failures", "names", "other" (successes), "done"
        self._block: str | None = None  # the case whose failures block is being read
        self._prefix: list[str] = []  # that block's lines before its panic
        self._block_panicked = False
        self._blocked: set[str] = set()  # cases whose block was read (a second one is output)
        self._where: dict[str, tuple[str, int]] = {}  # case -> its panic's file:line
        self._cut_short = False  # verdicts() noted what an early end left unsaid
        self._record: dict[str, Outcome] | None = None  # libtest's log file, when it was brought back
        self._record_missing = False  # the transport could bring it back, and libtest wrote none

    def feed_line(self, raw: str) -> None:
        super().feed_line(_ANSI.sub("", raw))

    def line(self, line: str) -> None:
        if self._section == "done":
            return
        if self.current is None and self._section:
            self._report_line(line)
            return
        m = _START.match(line)
        if m and (self.current is None or self._verdict is not None):
            self._confirm()
            record = self.start(m.group(1))
            rest = m.group(3) or ""
            ignored = _FIRST_VERDICT.match(rest)
            if ignored and record is not None:  # not run: nothing can have come in between
                self.end(record.name, Outcome.SKIPPED, ignored.group(1) or IGNORED)
            elif rest:
                self._test_output(rest)
            return
        structural = _SUMMARY.match(line) or line in ("failures:", "successes:")
        if structural and (self.current is None or self._verdict is not None):
            self._confirm()
            self._report_line(line)
            return
        if self.current is not None:
            self._test_output(line)
            return
        m = _RUNNING.match(line)
        if m and self._planned is None and not self.cases:
            self._planned = int(m.group(1))

    def _test_output(self, text: str) -> None:
        """A line printed while a case runs: its output, its panic, perhaps its verdict."""
        m = None if _FRAME.match(text) else _VERDICT.search(text)
        if m:
            self._verdict = (Outcome.PASSED if m.group(1) == "ok" else Outcome.FAILED, "")
            text = text[: m.start()]
        self._panic_text(text, self._panic)

    def _panic_text(self, text: str, into: list[str]) -> bool:
        """Keep a line of a panic message (from its first line to the backtrace); True when
        the line began one."""
        m = _PANIC.search(text)
        if m:
            self._collecting = True
            text = text[m.start() :]
        if not self._collecting or not text.strip() or _NOISE.match(text):
            return m is not None
        if _BACKTRACE.match(text):
            self._collecting = False
        elif len(into) < MAX_PANIC_LINES:
            into.append(text)
        return m is not None

    def _confirm(self) -> None:
        """libtest went on: the running case's last verdict-like line was its verdict."""
        record, verdict = self.current, self._verdict
        self._verdict, panic, self._panic, self._collecting = None, self._panic, [], False
        if record is None or verdict is None:
            return
        outcome, reason = verdict
        if outcome is Outcome.FAILED:
            for text in panic:
                self.fail(text)
            self._locate(record.name, panic)
        self.end(record.name, outcome, reason)

    def _report_line(self, line: str) -> None:
        """After the tests: the failures blocks, the list of failed names, the summary."""
        m = _SUMMARY.match(line)
        if m:
            self._end_block()
            passed, failed, ignored, measured = map(int, m.groups())
            total = self._planned if self._planned is not None and not self.dropped_cases else None
            if total is not None:
                total -= measured
            self.close(Summary(total=total, passed=passed, failed=failed, skipped=ignored))
            self._section = "done"
            return
        if line in ("failures:", "successes:"):
            self._end_block()
            if line == "successes:":
                self._section = "other"
            else:  # the first header opens the blocks, the second the list of names
                self._section = "failures" if self._section in ("", "other") else "names"
            return
        if self._section != "failures":
            return
        m = _BLOCK.match(line)
        record = self.cases.get(m.group(1)) if m else None
        if m and record is not None and record.failed and m.group(1) not in self._blocked:
            self._end_block()
            self._block = m.group(1)
            self._blocked.add(self._block)
            record.log.append(line)
            return
        if self._block is not None:
            self.cases[self._block].log.append(line)
            before = len(self._panic)
            if self._panic_text(line, self._panic) or self._block_panicked:
                self._block_panicked = True
            elif len(self._panic) == before and line.strip() and len(self._prefix) < MAX_BLOCK_PREFIX:
                self._prefix.append(line)

    def _end_block(self) -> None:
        """A block's failure text: its panic message, else all it said (e.g. "note: test did
        not panic as expected")."""
        name, panic = self._block, self._panic if self._block_panicked else self._prefix
        self._block, self._panic, self._prefix, self._collecting, self._block_panicked = None, [], [], False, False
        if name is None:
            return
        for text in panic:
            self.fail(text, name)
        self._locate(name, panic)

    def _locate(self, name: str, lines: list[str]) -> None:
        """The case's failure location: the first `file.rs:LINE:COL` not in Rust's own library."""
        if name in self._where:
            return
        for text in lines:
            for m in _WHERE.finditer(text):
                if not _RUST_LIBRARY.search(m.group(1)):
                    self._where[name] = (m.group(1), int(m.group(2)))
                    return

    def framework_record(self, data: bytes | None) -> None:
        """libtest's log file (None: it wrote none), which decides what the output claimed."""
        self._record = {}
        self._record_missing = data is None
        for line in (data or b"").decode("utf-8", "replace").splitlines():
            m = _RECORD.match(_RECORD_TIME.sub("", line))
            if m and len(self._record) < MAX_CASES:
                self._record[m.group(2)] = _RECORDED[m.group(1)]

    def _check_record(self, result: BinaryVerdicts) -> None:
        """A pass or skip the output claims must be in libtest's log file too; a failure stands."""
        if self._record is None:
            return
        disagree = []
        for verdicts in (result.cases, result.unknown):
            for name, v in verdicts.items():
                said = self._record.get(name)
                if v.outcome is Outcome.FAILED or said is v.outcome:
                    continue
                if said is not None:
                    why = f"libtest's log file records it {said.value}, but the output says {v.outcome.value}"
                elif self._record_missing:
                    why = f"the output says {v.outcome.value}, but libtest wrote no log file (--logfile)"
                else:
                    why = f"the output says {v.outcome.value}, but libtest's log file records no verdict for it"
                verdicts[name] = Verdict(
                    Outcome.FAILED, f"{why}: those lines were printed by a test, not by libtest", None, v.log
                )
                disagree.append(name)
        if disagree:
            named = ", ".join(disagree[:MAX_DISAGREEING_NAMED]) + (
                ", …" if len(disagree) > MAX_DISAGREEING_NAMED else ""
            )
            result.problems.append(
                f"the output claims verdicts libtest's log file does not record ({named}): a test printed "
                "libtest's lines (then left early?)"
            )

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        if self.summary is None and not self._cut_short:
            self._cut_short = True
            for record in self.cases.values():
                if record.outcome is Outcome.FAILED and not record.failures:
                    record.add_failure("FAILED: libtest says why after the last test; the output ended before")
        if self.current is not None and self._verdict is not None:
            outcome, self._verdict = self._verdict[0].value, None
            self.current.add_failure(
                f"the output stopped after a line ending in a verdict ({outcome}) but before libtest went on: "
                "the test's own output or its verdict, then the binary died"
            )
        if self.current is not None and self._panic:
            for text in self._panic:
                self.current.add_failure(text)
            self._locate(self.current.name, self._panic)
            self._panic = []
        result = super().verdicts(expected, end)
        for verdicts in (result.cases, result.unknown):  # ours: the generic one reads "'msg', file:L" wrong
            for name, v in verdicts.items():
                if v.outcome is Outcome.FAILED:
                    v.location = self._where.get(name)
        self._check_record(result)
        return result
