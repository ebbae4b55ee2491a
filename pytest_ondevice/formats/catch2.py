"""Catch2: `TEST_CASE("name", "[tags]")`, `SCENARIO("name")` (named `Scenario: name`) and
`TEST_CASE_METHOD(Fixture, "name")`, one item per case under the name the source gives it;
run by Catch2's own main unless the source has one (`CATCH_CONFIG_MAIN`, `CATCH_CONFIG_RUNNER`
or `main`). Run with `--durations yes`: each case's log ends with its time.

Every binary links our listener (harness/catch2_listener.cpp, `CATCH_REGISTER_LISTENER`): it
declares a per-run nonce and prints Catch2's events stamped with it, so a test that prints
Catch2's lines (`All tests passed`) and leaves with `_exit(0)` reports nothing. A case's
sections and generators run inside its one item: a failure names its section path. Cases
hidden by a tag (`[.]`, `[!hide]`) are reported skipped; `[!mayfail]` and `[!shouldfail]`
are passed or failed as Catch2 decides. A crash charges the running case (our main leaves out
Catch2's signal handlers; with a main of the source's own, Catch2's handler reports the fatal
error and our listener stays silent after it).

The text parser below reads a recorded stream without the listener's lines, as Catch2 v2's
and v3's console reporter print it with `--durations yes`: a case's time line ends it, the
failure block names it (a passing case prints nothing before its time: a crash is charged
to the first case in run order without a verdict), the totals close the run. It cannot tell
a `[!mayfail]` failure from a failure (the listener can)."""

from __future__ import annotations

import re

from . import BUILTIN, HARNESS_DIR, Needs
from .directives import has_own_main
from .discover import Case, code_of, line_at
from .hooked import HookedFormat, HookedStream
from .stream import Summary
from .verdicts import Outcome
from .wordnames import WordNamedStream, as_word, name_argument

_DECLARED = re.compile(r"\b(?:CATCH_)?(TEST_CASE_METHOD|TEST_CASE|SCENARIO)\s*\(")
_IMPLEMENTS = {"CATCH_CONFIG_MAIN", "CATCH_CONFIG_RUNNER"}  # the source holds Catch2's implementation
LISTENER = HARNESS_DIR / "catch2_listener.cpp"
MAIN = HARNESS_DIR / "catch2_main.cpp"

_RULE = re.compile(r"^-{20,}$")
_DOTS = re.compile(r"^\.{20,}$")
_DOUBLE_RULE = re.compile(r"^={20,}$")
_FAILED = re.compile(r"^(.+:\d+): FAILED:$")
_SKIPPED = re.compile(r"^(.+:\d+): SKIPPED:$")  # v3's SKIP()
_FATAL = "due to a fatal error condition:"
_DURATION = re.compile(r"^\d+\.\d+ s: (.*)$")
_TOTALS = re.compile(r"^test cases:\s*(\d+)(.*)$")
_COUNT = re.compile(r"\|\s*(\d+) (passed|failed as expected|failed|skipped)\b")
_ALL_PASSED = re.compile(r"^All tests passed \(\d+ assertions? in (\d+) test cases?\)$")
_NONE_RAN = re.compile(r"^No tests ran\b")


class Catch2Parser(HookedStream, WordNamedStream):
    silent_start = "Catch2 prints no start line: the first case in run order without a verdict"

    def __init__(self, order: tuple[str, ...] = (), nonce_expected: bool = False) -> None:
        super().__init__(order, nonce_expected)
        self._header: list[str] | None = None  # a failure block's heading: its name lines
        self._reading: str | None = None  # the block after "FILE:LINE: FAILED:" or "SKIPPED:"
        self._skip_reason: list[str] = []  # the running case's, from its SKIPPED block (v3)
        self._fatal = False  # Catch2's signal handler spoke: the binary is dying
        self._closing = False  # after the double rule: the totals

    def line(self, line: str) -> None:
        if self._fatal:  # Catch2 still ends the case and the run before it re-raises the signal
            if self._reading is not None and line.strip():
                self.fail(line)  # the signal's name
            else:
                self._reading = None
            return
        if self._header is not None:
            self._heading(line)
            return
        if _RULE.match(line):
            self._header = []
            return
        if not line.strip():
            self._reading = None
            return
        if self._reading is not None:
            self._message(line)
            return
        m = _FAILED.match(line)
        if m:
            self._reading = "failure"
            self.fail(f"{m.group(1)}: FAILED:")
            return
        m = _SKIPPED.match(line)
        if m and self.current is not None:
            self._reading = "skip"
            self._skip_reason = [f"{m.group(1)}:"]
            return
        m = _DURATION.match(line)
        if m:
            self._ended(as_word(m.group(1)))
            return
        if _DOUBLE_RULE.match(line):
            self._closing = True
            return
        if self._closing and self.current is None:
            self._totals(line)

    def _heading(self, line: str) -> None:
        """The lines between two rules: the case's name, then its section path, indented."""
        assert self._header is not None
        if not _RULE.match(line):
            if len(self._header) < 20:
                self._header.append(line)
            return
        names = [x for x in self._header if not x.startswith("  ")]
        self._header = None
        if not names:
            return
        word = as_word(" ".join(n.strip() for n in names))
        if self.current is not None and self.current.name == word:
            return  # another failure of the running case (another leaf section)
        if self.current is None and self.last is not None and self.last.name == word:
            return  # Catch2 v3 times a case once per leaf section: it is still that one
        self.start(word)

    def _message(self, line: str) -> None:
        if _DOTS.match(line):
            return
        if self._reading == "skip":
            if line.strip() != "explicitly with message:" and len(self._skip_reason) < 5:
                self._skip_reason.append(line.strip())
            return
        if line.strip() == _FATAL:
            self._fatal = True
        self.fail(line)

    def _ended(self, word: str) -> None:
        """A time line: the end of the case of that name (a section's is only the log)."""
        record = self.current
        if record is not None and record.name == word:
            reason = " ".join(self._skip_reason)
            self._skip_reason = []
            self.end(word, Outcome.SKIPPED if reason else Outcome.PASSED, reason)
        elif record is None and self.last is not None and self.last.name == word:
            return  # timed again after another leaf section of it (v3)
        elif word in self.order or word in self.cases:
            self.start(word)
            self.end(word, Outcome.PASSED)

    def _totals(self, line: str) -> None:
        m = _TOTALS.match(line)
        if m:
            counts = {kind: int(n) for n, kind in _COUNT.findall(m.group(2))}
            # a [!mayfail] failure looks like any other here: the failed count is not checked then
            failed = None if "failed as expected" in counts else counts.get("failed", 0)
            self.close(Summary(total=int(m.group(1)), failed=failed, skipped=counts.get("skipped")))
            return
        m = _ALL_PASSED.match(line)
        if m:
            self.close(Summary(total=int(m.group(1)), failed=0))
        elif _NONE_RAN.match(line):
            self.close(Summary(total=0))


class Catch2(HookedFormat):
    name = "catch2"
    headers = BUILTIN["catch2"].headers
    kinds = ("host", "linux")  # it needs an operating system (streams, a heap)
    run_args = ("--durations", "yes")
    parser_class = Catch2Parser

    def find_cases(self, text: str) -> list[Case]:
        code = code_of(text)
        cases: dict[str, Case] = {}
        for m in _DECLARED.finditer(code):
            name = name_argument(text, code, m.end(), m.group(1) == "TEST_CASE_METHOD")
            if name is None:
                continue
            if m.group(1) == "SCENARIO":
                name = "Scenario: " + name
            cases.setdefault(name, Case(name, line_at(code, m.start()), self.name))
        return list(cases.values())

    def needs(self, text: str) -> Needs:
        sources = (LISTENER,) if has_own_main(text, _IMPLEMENTS) else (LISTENER, MAIN)
        return Needs(sources=sources, debian_package="catch2")
