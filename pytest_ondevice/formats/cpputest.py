"""CppUTest: `TEST(Group, Name)` / `IGNORE_TEST`, run verbosely (`-v`) so each case has a
start (`TEST(Group, Name)`) and an end (` - N ms`, on the same line or after the case's
own output). CppUTest runs a file's tests in reverse order of definition and exits with
the number of failures; a source without main gets CppUTest's usual one.

Every binary links our plugin (harness/cpputest_plugin.cpp): it declares a per-run nonce and
stamps each case's start and end (from the plugin's pre- and post-test actions) and the
closing line (after the framework returned), so a test that prints CppUTest's lines and
leaves with `_exit(0)` reports nothing. CppUTest's printed failure lines still give the
failure text (they can only fail the case they name). The text parser reads a recorded
stream without the plugin's lines."""

from __future__ import annotations

import re

from . import BUILTIN, HARNESS_DIR, Needs, declared_cases, has_main
from .discover import Case, code_of
from .hooked import HookedFormat, HookedStream
from .stream import Summary
from .verdicts import Outcome

_DECLARED = re.compile(r"\b(IGNORE_TEST|TEST)\s*\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*\)")
_START = re.compile(r"^(IGNORE_TEST|TEST)\((\w+), (\w+)\)")
_END = re.compile(r"(?:^| )- \d+ ms$")
_FAILURE = re.compile(r"(\S+:\d+): error: Failure in (?:IGNORE_)?TEST\((\w+), (\w+)\)")
_SUMMARY = re.compile(r"^(OK|Errors) \((.*)\)$")
_COUNT = re.compile(r"(\d+) (failures|tests|ran|checks|ignored|filtered out)\b")


PLUGIN = HARNESS_DIR / "cpputest_plugin.cpp"


class CppUTestParser(HookedStream):
    def __init__(self, order: tuple[str, ...] = (), nonce_expected: bool = False) -> None:
        super().__init__(order, nonce_expected)
        self._detail = False
        self._detail_of: str | None = None  # with a nonce: the case the failure text is about

    def unstamped(self, line: str) -> None:
        """With the plugin's verdicts, CppUTest's failure lines still say why (a memory
        leak is reported after the plugin's post-test action: it fails the case it names)."""
        m = _FAILURE.search(line)
        if m:
            self._detail_of = f"{m.group(2)}.{m.group(3)}"
            self.fail(f"{m.group(1)}: error: Failure in TEST({m.group(2)}, {m.group(3)})", self._detail_of)
        elif self._detail_of is not None and line.startswith("\t"):
            self.fail(line.strip(), self._detail_of)
        else:
            self._detail_of = None

    def line(self, line: str) -> None:
        m = _START.match(line)
        if m:
            self._detail = False
            record = self.start(f"{m.group(2)}.{m.group(3)}")
            if record is not None and m.group(1) == "IGNORE_TEST":
                record.skip_reason = "ignored in the source (IGNORE_TEST)"
            line = line[m.end() :]
        m = _FAILURE.search(line)
        if m:
            self._detail = True
            self.fail(f"{m.group(1)}: error: Failure in TEST({m.group(2)}, {m.group(3)})", f"{m.group(2)}.{m.group(3)}")
            return
        if self.current is not None and _END.search(line):
            self._detail = False
            record = self.current
            self.end(record.name, Outcome.SKIPPED if record.skip_reason else Outcome.PASSED, record.skip_reason)
            return
        target = self.current or self.last
        if self._detail and line.startswith("\t") and target is not None:
            target.add_failure(line.strip())
            return
        m = _SUMMARY.match(line)
        if m and self.current is None:
            counts = {k: int(n) for n, k in _COUNT.findall(m.group(2))}
            ran, ignored = counts.get("ran"), counts.get("ignored")
            failed = counts.get("failures", 0)
            self.close(Summary(total=None if ran is None else ran + (ignored or 0), failed=failed, skipped=ignored))


class CppUTest(HookedFormat):
    name = "cpputest"
    headers = BUILTIN["cpputest"].headers
    kinds = ("host", "linux")  # it needs an operating system (threads, files, a heap)
    run_args = ("-v",)
    parser_class = CppUTestParser

    def find_cases(self, text: str) -> list[Case]:
        return declared_cases(text, _DECLARED, lambda m: f"{m.group(2)}.{m.group(3)}", self.name)

    def device_order(self, cases: list[Case]) -> tuple[str, ...]:
        return tuple(c.name for c in reversed(cases))

    def needs(self, text: str) -> Needs:
        main = () if has_main(code_of(text)) else (HARNESS_DIR / "cpputest_main.cpp",)
        return Needs(pkg_config=("cpputest",), sources=(PLUGIN, *main), debian_package="libcpputest-dev")
