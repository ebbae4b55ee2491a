"""Boost.Test: `BOOST_AUTO_TEST_CASE(name)` and `BOOST_FIXTURE_TEST_CASE(name, F)`, one item
per case named by its path below the master suite (`suite/name` inside
`BOOST_AUTO_TEST_SUITE(suite)`), as Boost.Test names it. Boost.Test's framework is compiled
into the binary from its header-only variant (`boost/test/included/unit_test.hpp`), whatever
the source was written for (the static or the shared library): no library to install for a
board, and a main where the source has none (harness/boosttest_*.cpp). Run with
`--catch_system_errors=no` (a crash ends the binary by its signal, as in every other format,
and charges the running case), `--log_level=test_suite` (each case's log starts and ends with
Boost.Test's own `Entering`/`Leaving` lines) and `--color_output=no`.

Every binary links our observer (harness/boosttest_observer.cpp, a `test_observer`
registered by a global fixture): it declares a per-run nonce and prints each case's start,
an exception's text, a skip and results_collector's verdict, stamped with it, so a test that
prints Boost.Test's lines (`*** No errors detected`) and leaves with `_exit(0)` reports
nothing. A failed check's text is Boost.Test's log line (`file(12): error: in "s/c": check
x == 5 has failed [4 != 5]`, read as `file:12: ...`): with the observer, the running case's
lines are its failure once the observer says it failed (an `expected_failures` decorator's
failures are the case's passing).

Boost.Test's framework needs C++ exceptions: the boards compile with -fno-exceptions, so a
project adds `cxxflags = ["-fexceptions"]` to ondevice.toml (the framework's source stops the
build saying so)."""

from __future__ import annotations

import re

from . import BUILTIN, HARNESS_DIR, Needs, has_main
from .directives import defined, included
from .discover import Case, code_of, line_at
from .hooked import HookedFormat, HookedStream
from .stream import Summary
from .verdicts import Outcome
from .wordnames import WordNamedStream, as_word

_EVENT = re.compile(
    r"\b(BOOST_AUTO_TEST_SUITE_END|BOOST_AUTO_TEST_SUITE|BOOST_FIXTURE_TEST_SUITE|BOOST_AUTO_TEST_CASE"
    r"|BOOST_FIXTURE_TEST_CASE)\s*\(\s*([A-Za-z_]\w*)?"
)
_MODULE = {"BOOST_TEST_MODULE", "BOOST_TEST_MAIN", "BOOST_AUTO_TEST_MAIN"}  # the source holds the init function
_DYNAMIC = {"BOOST_TEST_DYN_LINK", "BOOST_ALL_DYN_LINK"}  # written for the shared library
_INCLUDED = "boost/test/included/"  # the source compiles the framework itself

# a log line: `file(12): error: in "s/c": text`, `unknown location(0): fatal error: in "s/c": text`
_FAILURE = re.compile(r'^(.+?)\((\d+)\): ((?:fatal )?error): in "([^"]+)": (.*)$')
_CHECKPOINT = re.compile(r"^(.+?)\((\d+)\): last checkpoint")
_CONTEXT = "Failure occurred in a following context:"
_ENTERING = re.compile(r'(?:^|\): )Entering test (case|suite) "(.*)"$')
_LEAVING = re.compile(r'(?:^|\): )Leaving test (case|suite) "(.*)"(?:; testing time: \S+)?$')
_SKIPPED = re.compile(r'(?:^|\): )Test case "(.*)" is skipped because (.*)$')
_CLOSING = re.compile(r"^\*\*\* (?:No errors detected|\d+ failures? (?:is|are) detected)")
MAX_DETAIL = 10  # lines of a failure's context kept after its line


OBSERVER = HARNESS_DIR / "boosttest_observer.cpp"
FRAMEWORK = HARNESS_DIR / "boosttest_framework.cpp"
FRAMEWORK_DYN = HARNESS_DIR / "boosttest_framework_dyn.cpp"
RUNNER = HARNESS_DIR / "boosttest_runner.cpp"
MAIN = HARNESS_DIR / "boosttest_main.cpp"


class BoostTestParser(HookedStream, WordNamedStream):
    def __init__(self, order: tuple[str, ...] = (), nonce_expected: bool = False) -> None:
        super().__init__(order, nonce_expected)
        self._suites: list[str] = []  # the text mode's open suites
        self._told: list[str] = []  # the running case's failure lines, until the observer's verdict
        self._detail_of: str | None = None  # the case whose failure line came last (its context follows)

    # -- with the observer: Boost.Test's log lines are the failure's text ------------
    def unstamped(self, line: str) -> None:
        """The running case's log lines that tell a failure, kept until the observer's end
        says whether it failed (an expected_failures case fails its checks and passes). An
        exception's `unknown location` line is left to the observer's own."""
        record = self.current
        m = _FAILURE.match(line)
        if m:
            mine = record is not None and record.name == as_word(m.group(4)) and m.group(1) != "unknown location"
            self._detail_of = record.name if mine and record is not None else None
            if mine:
                self._keep(_located(m))
            return
        if self._detail_of is not None and (line.strip() == _CONTEXT or line.startswith((" ", "\t"))):
            self._keep(line.strip())  # the failure's context
            return
        self._detail_of = None

    def _keep(self, text: str) -> None:
        if len(self._told) < MAX_DETAIL * 4:
            self._told.append(text)

    def _stamped(self, body: str) -> None:
        kind, _, rest = body.partition(" ")
        name, _, verdict = rest.partition(" ")
        if kind == "end" and self.current is not None and self.current.name == name and self.summary is None:
            if verdict == "failed":
                for text in self._told:
                    self.fail(text, name)
            self._told = []
        elif kind == "case":
            self._told, self._detail_of = [], None
        super()._stamped(body)

    # -- without it: Boost.Test's log at --log_level=test_suite ------------------------
    def line(self, line: str) -> None:
        m = _ENTERING.search(line)
        if m:
            self._detail_of = None
            if m.group(1) == "suite":
                self._suites.append(m.group(2))
            else:
                self.start(as_word("/".join([*self._suites, m.group(2)])))
            return
        m = _LEAVING.search(line)
        if m:
            self._detail_of = None
            if m.group(1) == "suite":
                if self._suites:
                    self._suites.pop()
            elif self.current is not None:
                self.end(self.current.name, Outcome.PASSED)
            return
        m = _SKIPPED.search(line)
        if m and self.current is None:
            self.once(as_word(m.group(1)), Outcome.SKIPPED, f"skipped: {m.group(2)}")
            return
        m = _FAILURE.match(line)
        if m:
            self._detail_of = as_word(m.group(4))
            self.fail(_located(m), self._detail_of)
            return
        m = _CHECKPOINT.match(line)
        if m and self._detail_of is not None:
            self.fail(f"{m.group(1)}:{m.group(2)}{line[m.end(2) + 1 :]}", self._detail_of)
            return
        if self._detail_of is not None and (line.strip() == _CONTEXT or line.startswith((" ", "\t"))):
            self.fail(line.strip(), self._detail_of)
            return
        self._detail_of = None
        if _CLOSING.match(line) and self.current is None:
            self.close(Summary())


class BoostTest(HookedFormat):
    name = "boosttest"
    headers = BUILTIN["boosttest"].headers
    kinds = ("host", "linux")  # it needs an operating system (exceptions, streams, signals)
    run_args = ("--catch_system_errors=no", "--log_level=test_suite", "--color_output=no")
    parser_class = BoostTestParser

    def find_cases(self, text: str) -> list[Case]:
        code = code_of(text)
        cases: dict[str, Case] = {}
        suites: list[str] = []
        for m in _EVENT.finditer(code):
            kind, name = m.group(1), m.group(2)
            if kind == "BOOST_AUTO_TEST_SUITE_END":
                if suites:
                    suites.pop()
            elif name is None:
                continue
            elif kind.endswith("_SUITE"):
                suites.append(name)
            else:
                full = "/".join([*suites, name])
                cases.setdefault(full, Case(full, line_at(code, m.start()), self.name))
        return list(cases.values())

    def needs(self, text: str) -> Needs:
        """Our observer, and what the source lacks of the framework, its init function and main."""
        headers, macros = included(text), defined(text)
        main = has_main(code_of(text))
        if any(h.startswith(_INCLUDED) for h in headers):
            extra: tuple = ()  # it compiles the framework (and defines its module or main)
        elif macros & _DYNAMIC and (macros & _MODULE or main):
            extra = (FRAMEWORK_DYN,)  # unit_test.hpp or the source defines main, as for the shared library
        elif macros & _MODULE:
            extra = (FRAMEWORK, RUNNER)  # the static library's main, calling the source's init function
        elif main:
            extra = (FRAMEWORK,)
        else:
            extra = (FRAMEWORK, MAIN)
        return Needs(sources=(OBSERVER, *extra), debian_package="libboost-test-dev")


def _located(m: re.Match[str]) -> str:
    """A log line's `file(12): error: in "s/c": text` as `file:12: error: in "s/c": text`."""
    return f'{m.group(1)}:{m.group(2)}: {m.group(3)}: in "{m.group(4)}": {m.group(5)}'
