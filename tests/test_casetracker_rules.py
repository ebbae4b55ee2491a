"""What every parser shares (formats/casetracker.py), at rules no other test held when its
code was mutated: where a failure line says it failed, a failure line printed after its
case's verdict, and how long a failure line may be."""

from __future__ import annotations

from pytest_ondevice.formats.casetracker import MAX_LINE_CHARS, first_location
from pytest_ondevice.formats.tflm_parser import parse_bytes
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

SOME_FAILED = b"~~~SOME TESTS FAILED~~~\n"


def test_the_location_is_the_file_and_line_after_the_last_at():
    """The checked expression may hold " at " itself: the location follows the last one."""
    line = "value at index 3 == 4 failed at a_test.c:7"
    assert first_location([line]) == ("a_test.c", 7)
    out = f"Testing A\n{line}\n0/1 tests passed\n".encode() + SOME_FAILED
    verdict = parse_bytes([out], ["A"], RunEnd(exit_code=1)).cases["A"]
    assert (verdict.outcome, verdict.location) == (Outcome.FAILED, ("a_test.c", 7))


def test_a_failure_line_after_its_cases_failed_verdict_is_that_cases_and_the_tally_still_agrees():
    """A late line fails the case that just ended once more, not a second time in the tally:
    the case after it, which passed, keeps its verdict."""
    out = (
        b"[ RUN      ] S.A\nx failed at a.c:3\n[  FAILED  ] S.A\ny failed at a.c:4\n"
        b"[ RUN      ] S.B\n[       OK ] S.B\n1/2 tests passed\n" + SOME_FAILED
    )
    result = parse_bytes([out], ["S.A", "S.B"], RunEnd(exit_code=1))
    assert {n: v.outcome for n, v in result.cases.items()} == {"S.A": Outcome.FAILED, "S.B": Outcome.PASSED}
    assert result.cases["S.A"].message.splitlines() == ["x failed at a.c:3", "y failed at a.c:4"]
    assert result.problems == []


def test_a_failure_line_is_kept_to_its_first_500_characters():
    long = "x" * 3000 + " failed at a.c:1"
    out = f"Testing A\n{long}\n0/1 tests passed\n".encode() + SOME_FAILED
    verdict = parse_bytes([out], ["A"], RunEnd(exit_code=1)).cases["A"]
    assert MAX_LINE_CHARS == 500
    assert verdict.outcome is Outcome.FAILED and verdict.message == long[:500]
