"""doctest: `TEST_CASE("name")`, `TEST_CASE_FIXTURE(Fixture, "name")` and `SCENARIO("name")`
(named `  Scenario: name`, as doctest names it), one item per case, named `SUITE/NAME` inside
`TEST_SUITE("SUITE") { ... }` or after `TEST_SUITE_BEGIN("SUITE")`, `NAME` outside one; run by
doctest's own main unless the source has one (`DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN`,
`DOCTEST_CONFIG_IMPLEMENT` or `main`). Run with `--duration=true`: each case's log ends with
its time.

Every binary links our listener (harness/doctest_listener.cpp, `REGISTER_LISTENER`): it
declares a per-run nonce and prints doctest's events stamped with it, so a test that prints
doctest's lines (`[doctest] Status: SUCCESS!`) and leaves with `_exit(0)` reports nothing. A
case's subcases run inside its one item: a failure names its subcase path. `doctest::skip()`
cases are reported skipped; `may_fail`, `should_fail` and `expected_failures` pass or fail
as doctest decides. A crash charges the running case (our main leaves out doctest's signal
handlers; with a main of the source's own, doctest's handler reports the crash and our
listener stays silent after it).

The text parser below reads a recorded stream without the listener's lines, as doctest 2.4's
console reporter prints it with `--duration=true`: each case's heading (`TEST SUITE:`,
`TEST CASE:`) starts it, its time line ends it (a case prints both when it ends, or its
heading at its first failure: a crash is charged to the first case in run order without a
verdict), the totals close the run. It cannot tell a `may_fail` failure from a failure, and
does not see `doctest::skip()` cases."""

from __future__ import annotations

import re

from . import BUILTIN, HARNESS_DIR, Needs
from .directives import has_own_main
from .discover import Case, code_of, line_at
from .hooked import HookedFormat, HookedStream
from .stream import Summary
from .verdicts import Outcome
from .wordnames import WordNamedStream, as_word, name_argument

_EVENT = re.compile(
    r"\b(?:DOCTEST_)?(TEST_SUITE_BEGIN|TEST_SUITE_END|TEST_SUITE|TEST_CASE_FIXTURE|TEST_CASE|SCENARIO)\s*\(|[{}]"
)
_IMPLEMENTS = {"DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN", "DOCTEST_CONFIG_IMPLEMENT"}  # the source holds doctest's
LISTENER = HARNESS_DIR / "doctest_listener.cpp"
MAIN = HARNESS_DIR / "doctest_main.cpp"

_SEPARATOR = re.compile(r"^={20,}$")
_SUITE = re.compile(r"^TEST SUITE: (.*)$")
_CASE = re.compile(r"^TEST CASE:  (.*)$")
_SCENARIO = re.compile(r"^  Scenario: ")
_FAILURE = re.compile(r"^(.+:\d+): (?:ERROR|FATAL ERROR): ")
_CRASHED = ": test case CRASHED: "
_MARKED_FAILED = re.compile(r"^(?:Should have failed but didn't|Didn't fail exactly \d+ times)")
_DURATION = re.compile(r"^\d+\.\d+ s: (.*)$")
_TOTALS = re.compile(r"^\[doctest\] test cases:\s*(\d+) \|")


class DoctestParser(HookedStream, WordNamedStream):
    silent_start = "doctest prints a passing case's lines when it ends: the first case in run order without one"

    def __init__(self, order: tuple[str, ...] = (), nonce_expected: bool = False) -> None:
        super().__init__(order, nonce_expected)
        self._heading: list[str] | None = None  # the lines after a separator, to a blank line
        self._detail = False  # the indented lines after a failure are its message
        self._fatal = False  # doctest's signal handler spoke: the binary is dying

    def line(self, line: str) -> None:
        if self._fatal:
            return  # doctest still ends the case and the run before it re-raises the signal
        if self._heading is not None:
            self._read_heading(line)
            return
        if _SEPARATOR.match(line):
            self._detail = False
            self._heading = []
            return
        if self._detail and line.startswith("  "):
            self.fail(line)
            return
        self._detail = False
        if _FAILURE.match(line):
            self._detail = True
            self.fail(line)
            self._fatal = _CRASHED in line
            return
        if _MARKED_FAILED.match(line):  # after the case's time line: it failed all the same
            self.fail(line)
            return
        m = _DURATION.match(line)
        if m and self.current is not None:
            self.end(self.current.name, Outcome.PASSED)

    def _read_heading(self, line: str) -> None:
        """`FILE:LINE:`, `TEST SUITE: S`, `TEST CASE:  NAME` (or `  Scenario: NAME`), the
        subcase path, a blank line; or the totals after the last separator."""
        assert self._heading is not None
        m = _TOTALS.match(line)
        if m:
            self._heading = None
            if self.current is None:
                self.close(Summary(total=int(m.group(1))))
            return
        if line.strip():
            if len(self._heading) < 20:
                self._heading.append(line)
            return
        suite, name = "", None
        for entry in self._heading:
            if m := _SUITE.match(entry):
                suite = m.group(1)
            elif m := _CASE.match(entry):
                name = m.group(1)
            elif _SCENARIO.match(entry) and name is None:
                name = entry
        self._heading = None
        if name is None:
            return
        word = as_word(f"{suite}/{name}" if suite else name)
        if self.current is None or self.current.name != word:
            self.start(word)


class Doctest(HookedFormat):
    name = "doctest"
    headers = BUILTIN["doctest"].headers
    kinds = ("host", "linux")  # it needs an operating system (streams, a heap)
    run_args = ("--duration=true",)
    parser_class = DoctestParser

    def find_cases(self, text: str) -> list[Case]:
        code = code_of(text)
        cases: dict[str, Case] = {}
        depth = 0
        blocks: list[tuple[str, int]] = []  # TEST_SUITE("s") { ... }: its name and its brace's depth
        opening: str | None = None  # a TEST_SUITE whose brace is next
        begun = ""  # TEST_SUITE_BEGIN's, until TEST_SUITE_END
        for m in _EVENT.finditer(code):
            kind = m.group(1)
            if kind is None:  # a brace
                if m.group(0) == "{":
                    depth += 1
                    if opening is not None:
                        blocks.append((opening, depth))
                        opening = None
                else:
                    if blocks and blocks[-1][1] == depth:
                        blocks.pop()
                    depth -= 1
                continue
            if kind == "TEST_SUITE_END":
                begun = ""
                continue
            name = name_argument(text, code, m.end(), kind == "TEST_CASE_FIXTURE")
            if name is None:
                continue
            if kind == "TEST_SUITE":
                opening = name
            elif kind == "TEST_SUITE_BEGIN":
                begun = name
            else:
                if kind == "SCENARIO":
                    name = "  Scenario: " + name
                suite = blocks[-1][0] if blocks else begun
                full = f"{suite}/{name}" if suite else name
                cases.setdefault(full, Case(full, line_at(code, m.start()), self.name))
        return list(cases.values())

    def needs(self, text: str) -> Needs:
        sources = (LISTENER,) if has_own_main(text, _IMPLEMENTS) else (LISTENER, MAIN)
        return Needs(sources=sources, debian_package="doctest-dev")
