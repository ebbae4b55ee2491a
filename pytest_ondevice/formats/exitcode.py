"""A test whose output follows no framework we read: one case, decided by how the binary
ended, as CTest decides it (exit status 0 passes; WILL_FAIL turns that around, but a crash
or a timeout never passes). What it printed is the case's log."""

from __future__ import annotations

from collections import deque

from . import Format
from .discover import Case
from .parser import ParserBase
from .verdicts import BinaryVerdicts, Outcome, RunEnd, Verdict

TAIL_LINES = 40  # of the output, shown with a failure
LINE_MAX = 1000  # characters kept of one line


class ExitCode(Format):
    name = "exitcode"
    headers = ()
    kinds = ("host", "linux", "baremetal")
    will_fail = False

    def find_cases(self, text: str) -> list[Case]:
        return []  # its one case is named after the test that runs it

    def parser(self, order: tuple[str, ...]) -> ExitCodeParser:
        return ExitCodeParser(order[0] if order else "test", self.will_fail)


class ExitCodeWillFail(ExitCode):
    """CTest's WILL_FAIL: the test passes when the binary exits with a status other than 0."""

    name = "exitcode_will_fail"
    will_fail = True


class ExitCodeParser(ParserBase):
    def __init__(self, case: str, will_fail: bool) -> None:
        self.case = case
        self.will_fail = will_fail
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def feed_line(self, raw: str) -> None:
        self.tail.append(raw.rstrip("\r\n")[:LINE_MAX])

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        log = "\n".join(self.tail)
        abnormal = end.abnormal()
        if abnormal is not None:  # a crash or a timeout: never a pass, WILL_FAIL or not
            verdict = Verdict(Outcome.FAILED, f"the test {abnormal}", log=log)
        elif end.exit_code is None:
            verdict = Verdict(Outcome.FAILED, "the transport cannot tell the exit status: no verdict", log=log)
        elif (end.exit_code == 0) != self.will_fail:
            verdict = Verdict(Outcome.PASSED, log=log)
        else:
            expected_status = "a status other than 0 (WILL_FAIL)" if self.will_fail else "0"
            verdict = Verdict(
                Outcome.FAILED, f"the test exited with status {end.exit_code}, expected {expected_status}", log=log
            )
        return BinaryVerdicts({self.case: verdict}, {}, [])
