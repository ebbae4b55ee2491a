"""Unity (ThrowTheSwitch): one line per case *after* it ran, `FILE:LINE:NAME:PASS`,
`...:FAIL: message` or `...:IGNORE: message`, then a rule, `N Tests F Failures I Ignored`
and `OK` or `FAIL`.

Unity prints no start line, so the run order comes from the source: its `RUN_TEST(test_x)`
calls, else its `void test_x(void)` functions. When the binary dies, the running case is
the first one in that order without a verdict. The user's main sets the exit status
(usually `return UNITY_END();`, the failure count).

A case's verdict line is text the case itself can print: one that printed its own PASS line
and then crashed passed, and the crash went to the next case. On host and Linux boards our
runtime (boards/runtime/host) declares a nonce in a Unity binary and, when it crashes,
prints the name Unity itself holds for the running case, stamped
(`#ondevice N crashed-in NAME`): that case fails whatever it printed, and a verdict line of
a case after it cannot be its own. A bare-metal runtime's fault line names it too
(`... case=NAME`; without a nonce: a test could blame another case, and the run still fails)."""

from __future__ import annotations

import re
from dataclasses import replace

from . import BUILTIN, HARNESS_DIR, NO_NEEDS, Format, Needs, has_main
from .discover import Case, code_of, line_at
from .lines import BoundedLines
from .stream import CaseStream, Summary
from .verdicts import BinaryVerdicts, Outcome, RunEnd, Verdict

_RUN_TEST = re.compile(r"\bRUN_TEST\s*\(\s*([A-Za-z_]\w*)\s*[,)]")
# a test function as Unity's generate_test_runner.rb finds one (its default prefixes); a
# static one is not (a runner in another file could not call it)
_FUNCTION = re.compile(r"(?<!static )\bvoid\s+((?:test|spec|should)\w*)\s*\(\s*(?:void)?\s*\)\s*\{")
_HOOKS = {  # what a generated runner calls when the file defines it (else: a stub, or nothing)
    "SETUP": re.compile(r"\bvoid\s+setUp\s*\("),
    "TEARDOWN": re.compile(r"\bvoid\s+tearDown\s*\("),
    "SUITE_SETUP": re.compile(r"\bvoid\s+suiteSetUp\s*\("),
    "SUITE_TEARDOWN": re.compile(r"\bint\s+suiteTearDown\s*\(\s*int\b"),
}
RUNNER = HARNESS_DIR / "unity_runner.c"
_VERDICT = re.compile(r"([^\s:][^:]*):(\d+):([A-Za-z_]\w*):(PASS|FAIL|IGNORE)(?::\s?(.*))?$")
_RULE = re.compile(r"^-{10,}$")
_FAULT_CASE = re.compile(r" case=(\S+)$")  # the case Unity was running, named by a fault line
_TALLY = re.compile(r"^(\d+) Tests (\d+) Failures (\d+) Ignored\s*$")


class Unity(Format):
    name = "unity"
    headers = BUILTIN["unity"].headers

    def find_cases(self, text: str) -> list[Case]:
        code = code_of(text)
        pattern = _RUN_TEST if _RUN_TEST.search(code) else _FUNCTION
        cases: dict[str, Case] = {}
        for m in pattern.finditer(code):
            cases.setdefault(m.group(1), Case(m.group(1), line_at(code, m.start()), self.name))
        if pattern is _RUN_TEST:  # the item points at the test's definition, not its call
            for m in _FUNCTION.finditer(code):
                if m.group(1) in cases:
                    cases[m.group(1)] = Case(m.group(1), line_at(code, m.start()), self.name)
        return list(cases.values())

    def parser(self, order: tuple[str, ...]) -> UnityParser:
        return UnityParser(order)

    def needs(self, text: str) -> Needs:
        """A file without a main of its own gets ours (formats/harness/unity_runner.c),
        running its test functions in source order, as Unity's runner generator would."""
        code = code_of(text)
        if has_main(code):
            return NO_NEEDS
        tests = "".join(f"X({c.name},{c.line})" for c in self.find_cases(text))
        hooks = [f"ONDEVICE_UNITY_HAS_{name}={int(bool(p.search(code)))}" for name, p in _HOOKS.items()]
        return Needs(sources=(RUNNER,), defines=(f"ONDEVICE_UNITY_TESTS(X)={tests}", *hooks))


class UnityParser(CaseStream):
    exit_counts_failures = False  # the user's main decides
    hook = True  # the host runtime: a nonce, and the case Unity ran at a crash and at the exit
    hook_verdicts = False  # the verdict lines and the summary are still Unity's printed text

    def __init__(self, order: tuple[str, ...] = ()) -> None:
        super().__init__(order)
        self._pending = BoundedLines(head=20, tail=80)  # output of the case that is running now
        self._after_rule = False
        self.crashed_in: str | None = None  # the runtime's word: Unity's running case at a crash
        self.exited_in: str | None = None  # ... and when the program exited (its closing line)
        self._printed: dict[str, int] = {}  # case -> place of its verdict line in print order
        self._exit_blamed = False  # the program reached exit() in a case, then hung or was killed

    def _stamped(self, body: str) -> None:
        """Our runtime stamps two lines in a Unity run: the case Unity was running at a crash
        and at the exit."""
        kind, _, name = body.partition(" ")
        name = name.strip()[:200]
        if kind == "crashed-in" and name and self.summary is None and self.crashed_in is None:
            self.crashed_in = name
        elif kind == "exit-in" and name and self.exited_in is None:
            self.exited_in = name

    def line(self, line: str) -> None:
        m = _VERDICT.search(line)
        if m and self.summary is None:
            self._after_rule = False
            where, name, verdict, message = f"{m.group(1)}:{m.group(2)}", m.group(3), m.group(4), m.group(5) or ""
            outcome = {"PASS": Outcome.PASSED, "FAIL": Outcome.FAILED, "IGNORE": Outcome.SKIPPED}[verdict]
            record = self.cases.get(name)
            fresh = record is None or record.outcome is None
            record = self.once(name, outcome, message or "ignored in the source (TEST_IGNORE)")
            if record is not None and fresh:
                self._printed.setdefault(name, len(self._printed))
                self._take_pending(record, line)
                if outcome is Outcome.FAILED:
                    record.add_failure(f"{where}: {message}" if message else f"{where}: FAIL")
                    record.finish(Outcome.FAILED)
            return
        if _RULE.match(line):
            self._after_rule = True
            return
        m = _TALLY.match(line)
        if m and self._after_rule:
            total, failed, ignored = map(int, m.groups())
            self.close(Summary(total=total, failed=failed, skipped=ignored))

    def feed_line(self, raw: str) -> None:
        """A case's output comes before its verdict line: held until that line names it."""
        line = raw.rstrip()
        if self.our_line(line):
            return
        verdict = self.summary is None and _VERDICT.search(line) is not None
        self.line(line)
        if not verdict and self.summary is None and line:
            self._pending.append(line)

    def _take_pending(self, record, verdict_line: str) -> None:
        record.log.absorb(self._pending)
        record.log.append(verdict_line)
        self._pending = BoundedLines(head=20, tail=80)

    def running(self, expected: list[str]) -> str | None:
        """The case Unity was running at a crash, else the first case in the source's run
        order without a verdict, unless the output reached the closing summary."""
        if self.summary is not None:
            return None
        if self.crashed_in is not None:
            return self.crashed_in
        if self._exit_blamed:
            return self.exited_in
        return self.first_without_verdict(expected)

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        if self.fault and not end.fault:
            end = replace(end, fault=self.fault)
        m = _FAULT_CASE.search(self.fault or "")
        if m and self.crashed_in is None and self.summary is None:  # a bare-metal runtime's word
            self.crashed_in = m.group(1)
        if self.nonce is not None and self.exited_in is None and not end.abnormal() and self.untrusted is None:
            self.untrusted = (
                "the binary ended without the runtime's closing line: a test left with _exit(), "
                "so the lines before cannot be believed"
            )
        abnormal = end.abnormal()
        # exit() in a case, then a hang or a kill on the way out (a destructor): still that case's
        exited = self.exited_in not in (None, "-")
        self._exit_blamed = exited and abnormal is not None and self.crashed_in is None and self.summary is None
        result = super().verdicts(expected, end)
        if self.crashed_in is not None and abnormal:
            why = f"not run: {abnormal} in case {self.crashed_in}, before this case"
            self._printed_by(result, self._after(self.crashed_in, expected), why)
        elif self.exited_in is not None and (not abnormal or self._exit_blamed):
            why = f"not run: the program exited in case {self.exited_in}, before this case"
            if self._printed_by(result, self._after(self.exited_in, expected), why):
                v = result.cases.get(self.exited_in) or result.unknown.get(self.exited_in)
                table = result.cases if self.exited_in in result.cases else result.unknown
                then = f", then {abnormal}" if abnormal else ""
                table[self.exited_in] = Verdict(
                    Outcome.FAILED,
                    f"the program exited while this case was running (exit() in the test?){then}, after printing "
                    "the verdict lines of the cases after it",
                    None,
                    v.log if v is not None else self._pending.text(),
                )
        if self.exited_in in result.cases and self.summary is None and self.crashed_in is None:
            # the program ended in (or right after) this case, before Unity's summary: its
            # verdict line may be its own print, so it is not believed
            v = result.cases[self.exited_in]
            if v.outcome is not Outcome.FAILED:
                result.cases[self.exited_in] = Verdict(
                    Outcome.FAILED,
                    "the program exited while this case was running (exit() in the test?), before Unity's "
                    "closing summary: its verdict line is not believed",
                    None,
                    v.log,
                )
        return result

    def _after(self, name: str, expected: list[str]) -> list[str]:
        """The cases whose verdict lines Unity cannot have printed when it was still in case
        `name`: those printed after its own line; without one (it never finished), those after
        it in the source's run order."""
        if name in self._printed:
            return [n for n, i in self._printed.items() if i > self._printed[name]]
        order = list(self.order or expected)
        return order[order.index(name) + 1 :] if name in order else []

    @staticmethod
    def _printed_by(result: BinaryVerdicts, names: list[str], why: str) -> bool:
        """Those cases' verdict lines were printed by the case Unity was in: they fail
        (`why`, "its verdict line was another case's"). True when any had passed or skipped."""
        found = False
        for name in names:
            table = result.cases if name in result.cases else result.unknown
            v = table.get(name)
            if v is not None and v.outcome is not Outcome.FAILED:
                table[name] = Verdict(Outcome.FAILED, f"{why} (its verdict line was another case's)", None, v.log)
                found = True
        return found

    def running_note(self) -> tuple[str, str]:
        if self.crashed_in is not None:
            return " (Unity's running case when it crashed)", self._pending.text()
        return " (Unity prints no start line: the first case in run order without a verdict)", self._pending.text()
