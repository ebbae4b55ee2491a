"""The bookkeeping every harness parser shares, and the guarantees that come with it.

A format's parser reads its own lines and calls start/end/fail/summary; this class turns
that and how the process ended into verdicts a user can believe:

- a case with no verdict line fails: named as running when the binary crashed, hung or
  stopped printing, and "not run" when it never started;
- a crash, fault or timeout after every verdict, or an exit without the closing summary,
  or a summary or exit status that disagrees with the verdicts, fails every case that
  had not failed: the run as a whole is not trustworthy;
- a case announced twice, or given two verdicts, fails: its output cannot be attributed;
- memory is bounded: so many cases, so many failure and log lines per case;
- a run whose hook in the framework declares a nonce (`#ondevice nonce N`, see
  docs/protocol.md) is read by its stamped lines only: the test's printed lookalikes of
  the framework's lines are its log, and the closing line comes from that hook.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .casetracker import EXTENSION_PREFIX, MAX_CASES, MAX_LINE_CHARS, CaseRecord, CaseTracker, case_verdict
from .gcda import VERBS as GCDA_VERBS
from .verdicts import BinaryVerdicts, Outcome, RunEnd, Verdict

_NONCE = re.compile(r"[0-9a-f]{8,32}$")
_VERDICTS = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "skipped": Outcome.SKIPPED}
MAX_PROBLEMS = 20  # stamped binary-level problems kept
_SUMMARY_SAYS = "the closing summary says"
_FAILED_EXIT_0 = "a case failed, but the binary exited with code 0"


def _second_verdict(name: str, outcome: Outcome) -> str:
    return f"case {name} was given a second verdict ({outcome.value}): its output cannot be attributed"


@dataclass
class Summary:
    """The closing summary's counts; None where the format does not print one."""

    total: int | None = None
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None


class CaseStream(CaseTracker):
    """Base of the harness parsers: subclasses implement line()."""

    exit_counts_failures = True  # the harness's main sets the exit status (not the user's)
    hook = False  # a hook of ours in the binary may declare a nonce: else a nonce line is text
    hook_verdicts = True  # ... and its stamped lines carry the verdicts (not only a crash's case)
    nonce_expected = False  # that hook is linked into every binary: a run without a nonce is forged

    def __init__(self, order: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.order = order  # the run order the source declares (for a format without start lines)
        self.summary: Summary | None = None
        self.conflicts: dict[str, str] = {}  # case -> why its output cannot be attributed
        self.nonce: str | None = None  # declared by our hook: then only stamped lines count
        self.untrusted: str | None = None  # why the run's stamped lines cannot be believed
        self.stamped_problems: list[str] = []  # the hook's binary-level remarks
        self.fault: str | None = None  # `#ondevice fault TEXT` from a bare-metal runtime

    # -- our own lines -------------------------------------------------------
    def feed_line(self, raw: str) -> None:
        line = raw.rstrip()
        if self.our_line(line):
            return
        if self.nonce is not None:  # the framework's lookalike lines are the running case's log
            if self.current is not None:
                self.current.log.append(line)
            self.unstamped(line)
            return
        super().feed_line(line)

    def unstamped(self, line: str) -> None:
        """A line the hook did not stamp, in a run with a nonce: a format may read failure
        text from it (it can only fail a case, never end or pass one)."""

    def our_line(self, line: str) -> bool:
        """`#ondevice` lines: a nonce, a marker stamped with it, a fault. True when consumed.
        A marker may follow the framework's text that had no newline (CppUTest's `TEST(G, N)`
        is flushed before the test runs): the text before it is the running case's log."""
        at = line.find(EXTENSION_PREFIX)
        if at < 0:
            return False
        verb, _, rest = line[at + len(EXTENSION_PREFIX) :].partition(" ")
        if at and verb not in (self.nonce, "nonce"):
            return False
        before = self.current
        if verb == "nonce" and self.hook:
            self._declare(rest.strip())
            return True
        if verb == "fault":  # a bare-metal runtime's, the last thing it prints: the headline
            self.fault = rest.strip()[:MAX_LINE_CHARS] or "fault"
            return False
        if verb == "crash":  # the host runtime's, at a fatal signal: where it struck (the log keeps it)
            self.crashes.line(rest)
            return False
        if self.nonce is None or verb != self.nonce:
            return False
        self._stamped(rest)  # not the case's log: its failure lines say it in the message
        owner = self.current or before
        if at and owner is not None:
            owner.log.append(line[:at])
        return True

    def _declare(self, nonce: str) -> None:
        """The first nonce of a run, before any case, is the hook's; any other is a forgery."""
        if self.nonce is None and not self.cases and _NONCE.match(nonce):
            self.nonce = nonce
        elif nonce != self.nonce:
            self.untrusted = self.untrusted or (
                "a second nonce, or one after the cases had begun, was printed: the test printed "
                "pytest-ondevice's own lines, so none of this run's verdicts can be believed"
            )

    def _stamped(self, body: str) -> None:
        """The hook's markers: `case NAME`, `fail NAME TEXT`, `skip NAME TEXT`,
        `end NAME passed|failed|skipped`, `problem TEXT`, `summary cases=N`."""
        kind, _, rest = body.partition(" ")
        name, _, text = rest.partition(" ")
        if self.summary is not None:
            return  # after the closing line nothing moves a verdict
        if kind == "case" and name:
            self.start(name)
        elif kind == "fail" and name in self.cases:
            self.fail(text or "failed on device", name)
        elif kind == "skip" and name in self.cases:
            self.cases[name].skip_reason = text[:MAX_LINE_CHARS] or "skipped on device"
        elif kind == "end" and text in _VERDICTS:
            self.end(name, _VERDICTS[text])
        elif kind == "problem" and len(self.stamped_problems) < MAX_PROBLEMS:
            self.stamped_problems.append(rest[:MAX_LINE_CHARS])
        elif kind in GCDA_VERBS:
            self.counts.line(kind, rest)
        elif kind == "summary":
            counts = dict(p.partition("=")[::2] for p in rest.split())
            cases = counts.get("cases", "")
            self.close(Summary(total=int(cases) if cases.isdigit() else None))

    # -- what subclasses call ------------------------------------------------
    def start(self, name: str) -> CaseRecord | None:
        if self.current is not None:
            self.current.add_failure(f"no verdict: case {name} started before this one ended")
            self._finish(Outcome.FAILED)
        record = self.cases.get(name)
        if record is None:
            if len(self.cases) >= MAX_CASES:
                self.dropped_cases += 1
                return None
            record = self.cases[name] = CaseRecord(name)
        elif self.summary is None:
            self.conflicts[name] = (
                f"case {name} was announced {record.starts + 1} times: a test may have printed its start line, "
                "or two cases share the name, so this output cannot be attributed"
            )
        record.starts += 1
        record.outcome = None
        record.seen_at_start = len(record.failures) + record.dropped_failures
        self.current = record
        return record

    def end(self, name: str, outcome: Outcome, reason: str = "") -> None:
        """A verdict line: it ends the running case of that name. A verdict about a case that
        already has one is a conflict: a test may have printed it."""
        record = self.current
        if record is None or record.name != name:
            done = self.cases.get(name)
            if done is not None and done.outcome is not None:
                self.conflicts[name] = _second_verdict(name, outcome)
            return
        if outcome is Outcome.SKIPPED:
            record.skip_reason = reason or record.skip_reason or "skipped on device"
        self._finish(outcome)

    def fail(self, text: str, name: str | None = None) -> None:
        """A failure line: the named case's (when the format names it), else the running one's."""
        record = self.cases.get(name) if name else self.current
        if record is None and name is None:
            record = self.last  # printed right after its verdict: still that case's
        if record is None:
            return
        record.add_failure(text)
        if record is not self.current and record.outcome is not None:
            record.finish(Outcome.FAILED)

    def once(self, name: str, outcome: Outcome, reason: str = "") -> CaseRecord | None:
        """A format that prints one line per case, after it ran (Unity): start and end at once."""
        done = self.cases.get(name)
        if done is not None and done.outcome is not None:
            self.conflicts[name] = _second_verdict(name, outcome)
            return done
        record = self.start(name)
        self.end(name, outcome, reason)
        return record

    def close(self, summary: Summary) -> None:
        if self.current is not None:
            self.current.add_failure("no verdict: the closing summary began while this case was running")
            self._finish(Outcome.FAILED)
        self.summary = summary

    # -- verdicts ------------------------------------------------------------
    def running(self, expected: list[str]) -> str | None:
        """The case that was running when the output stopped."""
        return self.current.name if self.current is not None else None

    def running_note(self) -> tuple[str, str]:
        """For a running case that printed no start line: how it was told, and its output."""
        return "", ""

    def first_without_verdict(self, expected: list[str]) -> str | None:
        """The first case in run order (the source's, else expected) without a verdict: the
        running one, for a format that prints nothing of a case before its verdict."""
        ended = {n for n, r in self.cases.items() if r.outcome is not None}
        return next((n for n in self.order or tuple(expected) if n not in ended), None)

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        if self.fault and not end.fault:
            end = replace(end, fault=self.fault)
        abnormal = end.abnormal()
        running = self.running(expected)
        verdicts = {name: case_verdict(record, name == running, abnormal) for name, record in self.cases.items()}
        if running is not None and running not in verdicts:  # a format without start lines
            note, log = self.running_note()
            what = abnormal or "no verdict: output ended"
            verdicts[running] = Verdict(Outcome.FAILED, f"{what} while this case was running{note}", None, log)
        self._fail_unattributable(verdicts, self.conflicts)
        problems = list(self.stamped_problems)
        untrusted = self.untrusted
        if untrusted is None and self.nonce_expected and self.nonce is None:
            untrusted = (
                "the run printed no nonce: pytest-ondevice's hook in the test framework did not run "
                "(the binary left before its framework started?), so its printed lines cannot be believed"
            )
        if untrusted:
            problems.append(untrusted)
            self._fail_the_rest(verdicts, untrusted)
        problem = self._disagreement(end, verdicts, running)
        if problem:
            problems.append(problem)
            if not self._lenient(problem):
                self._fail_the_rest(verdicts, problem)
        return self._settle(expected, verdicts, end, self.summary is not None, problems, {}, running)

    def _disagreement(self, end: RunEnd, verdicts: dict[str, Verdict], running: str | None) -> str | None:
        """How the process ended, the closing summary and the verdicts must tell one story."""
        abnormal = end.abnormal()
        if abnormal and running is None and verdicts:
            return f"every case that ran printed its verdict, but then the binary {abnormal}"
        if abnormal:
            return None  # the running case and the cases after it say so
        failed = sum(v.outcome is Outcome.FAILED for v in verdicts.values())
        if self.summary is None:
            if verdicts and running is None:
                return "the binary ended without its closing summary" + (
                    f" (exit code {end.exit_code})" if end.exit_code not in (None, 0) else ""
                )
            return None
        counted = self._counted(verdicts)
        for field, said in vars(self.summary).items():
            if said is not None and said != counted[field]:
                return f"{_SUMMARY_SAYS} {said} {field}, but the output shows {counted[field]}"
        if end.exit_code not in (None, 0) and not failed:
            return f"every case passed, but the binary exited with code {end.exit_code}"
        if self.exit_counts_failures and failed and end.exit_code == 0:
            return _FAILED_EXIT_0
        return None

    def _lenient(self, problem: str) -> bool:
        """With verdicts from the framework's hook, a summary or an exit status more lenient
        than they are is the binary's failure alone: each case keeps its own verdict."""
        return self.hook_verdicts and self.nonce is not None and problem.startswith((_SUMMARY_SAYS, _FAILED_EXIT_0))

    def _counted(self, verdicts: dict[str, Verdict]) -> dict[str, int]:
        """What the output showed, in the closing summary's terms (before any verdict was
        failed for a conflict; a format may count otherwise)."""
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for record in self.cases.values():
            if record.outcome is not None:
                outcome = Outcome.FAILED if record.failed else record.outcome
                counts[outcome.value] += max(1, record.starts)
        counts["total"] = sum(counts.values())
        return counts
