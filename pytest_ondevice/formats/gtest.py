"""GoogleTest: `TEST(Suite, Name)` / `TEST_F`, run by gtest's own main unless the source
has one.

Every binary links our event listener (harness/gtest_listener.cpp): it declares a per-run
nonce and prints the framework's own events stamped with it, so a test that prints gtest's
lines (`[       OK ]`, `[  PASSED  ]`) and leaves with `_exit(0)` reports nothing; the
`[ RUN      ]` ... `[       OK ]` text is then each case's log. The text parser below
reads a recorded stream without the listener's lines (a crash stops gtest at `[ RUN      ]`
and writes no XML report, so the stream is the only witness); parameterised and typed
tests print names the source scan cannot know, and are reported as cases the device ran."""

from __future__ import annotations

import re

from . import BUILTIN, HARNESS_DIR, Needs, declared_cases, has_main
from .discover import Case, code_of
from .hooked import HookedFormat, HookedStream
from .stream import Summary
from .verdicts import Outcome

_DECLARED = re.compile(r"\bTEST(?:_F)?\s*\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*\)")
# markers may follow a test's own output that had no newline: searched, anchored at the end
_RUN = re.compile(r"\[ RUN      \] (\S+)$")
_VERDICT = re.compile(r"\[ {7}OK \] (\S+) \(\d+ ms\)$|\[  (FAILED|SKIPPED)  ?\] (\S+) \(\d+ ms\)$")
_DISABLED = re.compile(r"^\[ DISABLED \] (\S+)$")
_FAILURE = re.compile(r"(\S+:\d+): Failure$")
_SKIPPED_AT = re.compile(r"(\S+:\d+): Skipped$")
_RAN = re.compile(r"^\[==========\] (\d+) tests? from \d+ test (?:suites?|cases?) ran\.")
_PASSED = re.compile(r"^\[  PASSED  \] (\d+) tests?\.$")
_SKIPPED_COUNT = re.compile(r"^\[  SKIPPED \] (\d+) tests?, listed below:$")
_FAILED_COUNT = re.compile(r"^ ?(\d+) FAILED TESTS?$")


LISTENER = HARNESS_DIR / "gtest_listener.cpp"


class GoogleTestParser(HookedStream):
    def __init__(self, order: tuple[str, ...] = (), nonce_expected: bool = False) -> None:
        super().__init__(order, nonce_expected)
        self._detail = False  # the lines after "FILE:LINE: Failure" are its message
        self._skip_reason: list[str] | None = None
        self._closing: Summary | None = None
        self._disabled = 0

    def line(self, line: str) -> None:
        if self._closing is not None:
            self._summary_line(line)
            return
        m = _RUN.search(line)
        if m:
            self._detail = False
            self.start(m.group(1))
            return
        m = _VERDICT.search(line)
        if m:
            self._detail = False
            name = m.group(1) or m.group(3)
            outcome = {None: Outcome.PASSED, "FAILED": Outcome.FAILED, "SKIPPED": Outcome.SKIPPED}[m.group(2)]
            if outcome is Outcome.PASSED and self.current is not None and self.current.failures:
                self.current.add_failure("the device printed [       OK ] after a failure")
            reason = " ".join(self._skip_reason or []) or "skipped on device (GTEST_SKIP)"
            self._skip_reason = None
            self.end(name, outcome, reason)
            return
        m = _DISABLED.match(line)
        if m and self.current is None:
            self._disabled += 1
            self.once(m.group(1), Outcome.SKIPPED, "disabled in the source (DISABLED_ prefix)")
            return
        m = _RAN.match(line)
        if m and self.current is None:
            disabled = self._disabled
            self._closing = Summary(total=int(m.group(1)) + disabled, failed=0, skipped=disabled)
            self.close(self._closing)
            return
        self._case_text(line)

    def _case_text(self, line: str) -> None:
        m = _FAILURE.search(line)
        if m:
            self._detail = True
            self.fail(f"{m.group(1)}: Failure")
            return
        m = _SKIPPED_AT.search(line)
        if m and self.current is not None:
            self._skip_reason = [f"{m.group(1)}:"]
            return
        if self._skip_reason is not None and len(self._skip_reason) < 5:
            self._skip_reason.append(line.strip())
        elif self._detail and self.current is not None:
            self.current.add_failure(line)

    def _summary_line(self, line: str) -> None:
        closing = self._closing
        assert closing is not None
        m = _PASSED.match(line)
        if m:
            closing.passed = int(m.group(1))
            return
        m = _SKIPPED_COUNT.match(line)
        if m:
            closing.skipped = int(m.group(1)) + self._disabled
            return
        m = _FAILED_COUNT.match(line)
        if m:
            closing.failed = int(m.group(1))


class GoogleTest(HookedFormat):
    name = "gtest"
    headers = BUILTIN["gtest"].headers
    kinds = ("host", "linux")  # it needs an operating system (threads, files, a heap)
    run_args = ("--gtest_color=no",)
    parser_class = GoogleTestParser

    def find_cases(self, text: str) -> list[Case]:
        return declared_cases(text, _DECLARED, lambda m: f"{m.group(1)}.{m.group(2)}", self.name)

    def needs(self, text: str) -> Needs:
        package = "gtest" if has_main(code_of(text)) else "gtest_main"
        return Needs(pkg_config=(package,), sources=(LISTENER,), debian_package="libgtest-dev")
