"""The rules every harness parser shares (formats/stream.py), at their edges: what a user
reads when a case is announced twice, given two verdicts, never ended, or when the run's
end, its closing summary and its nonce do not tell one story. Fed as GoogleTest's and
CppUTest's printed lines, their hooks' stamped lines, and a third party's format."""

from __future__ import annotations

import re

from test_formats import CPPUTEST_TEXT, GTEST_TEXT, outcomes, parse, stamped

from pytest_ondevice.formats.casetracker import MAX_CASES
from pytest_ondevice.formats.gtest import GoogleTest
from pytest_ondevice.formats.stream import CaseStream, Summary
from pytest_ondevice.formats.verdicts import NEVER_STARTED, NOT_CLOSED, Outcome, RunEnd, Verdict

NONCE = b"#ondevice nonce 0123456789abcdef\n"
CLOSING = b"[==========] %d tests from 1 test suite ran. (0 ms total)\n[  PASSED  ] %d tests.\n"


def gtest_run(*cases: str, closing: bool = True) -> bytes:
    """GoogleTest's printed lines for cases that pass, then its closing summary."""
    text = b"".join(f"[ RUN      ] {c}\n[       OK ] {c} (0 ms)\n".encode() for c in cases)
    return text + (CLOSING % (len(cases), len(cases)) if closing else b"")


# -- a case announced twice, given two verdicts, or never ended ------------------


def test_a_case_announced_three_times_says_so_and_fails():
    v = parse(GTEST_TEXT, gtest_run("A.One", "A.One", "A.One"), ["A.One"], RunEnd(exit_code=None))
    assert v.cases["A.One"].outcome is Outcome.FAILED
    assert v.cases["A.One"].message == (
        "case A.One was announced 3 times: a test may have printed its start line, "
        "or two cases share the name, so this output cannot be attributed"
    )
    assert v.problems == []  # the closing summary counted every run of it


def test_a_case_started_while_another_runs_ends_that_one_without_a_verdict():
    stream = (
        b"[ RUN      ] A.One\n[ RUN      ] A.Two\n[       OK ] A.Two (0 ms)\n" + CLOSING % (2, 1) + b" 1 FAILED TEST\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.One", "A.Two"], RunEnd(exit_code=1))
    assert outcomes(v) == {"A.One": "failed", "A.Two": "passed"}
    assert v.cases["A.One"].message == "no verdict: case A.Two started before this one ended"


def test_a_second_verdict_is_named_with_its_outcome():
    stream = b"[ RUN      ] A.X\n[       OK ] A.X (0 ms)\n[  FAILED  ] A.X (0 ms)\n" + CLOSING % (1, 1)
    v = parse(GTEST_TEXT, stream, ["A.X"], RunEnd(exit_code=0))
    assert v.cases["A.X"].message == "case A.X was given a second verdict (failed): its output cannot be attributed"


def test_the_closing_line_while_a_case_runs_ends_it_without_a_verdict():
    stream = NONCE + stamped("case A.One", "summary cases=1")
    v = parse(GoogleTest(), stream, ["A.One"], RunEnd(exit_code=1))
    assert v.cases["A.One"].outcome is Outcome.FAILED
    assert v.cases["A.One"].message == "no verdict: the closing summary began while this case was running"


def test_a_case_line_printed_after_the_closing_summary_leaves_that_case_without_a_verdict():
    # an atexit handler printed CppUTest's start line again: no verdict followed it
    stream = b"TEST(G, A) - 0 ms\n\nOK (1 tests, 1 ran, 1 checks, 0 ignored, 0 filtered out, 0 ms)\n\nTEST(G, A)"
    v = parse(CPPUTEST_TEXT, stream, ["G.A"], RunEnd(exit_code=0))
    assert v.cases["G.A"].outcome is Outcome.FAILED
    assert v.cases["G.A"].message == "no verdict: output ended while this case was running"


# -- failure lines outside the running case --------------------------------------


def test_a_failure_printed_after_a_verdict_fails_the_case_that_just_ended():
    # a suite's TearDownTestSuite fails after its last case's [ OK ]
    stream = (
        b"[ RUN      ] A.X\n[       OK ] A.X (0 ms)\nx_test.cc:5: Failure\n"
        b"[==========] 1 test from 1 test suite ran. (0 ms total)\n[  PASSED  ] 0 tests.\n 1 FAILED TEST\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.X"], RunEnd(exit_code=1))
    assert v.cases["A.X"].outcome is Outcome.FAILED
    assert v.cases["A.X"].message == "x_test.cc:5: Failure"
    assert v.cases["A.X"].location == ("x_test.cc", 5)
    assert v.problems == []


def test_a_failure_line_naming_a_case_that_never_ran_fails_no_other():
    stream = (
        b"TEST(G, A) - 0 ms\nc.cpp:9: error: Failure in TEST(G, Ghost)\n\n"
        b"OK (1 tests, 1 ran, 1 checks, 0 ignored, 0 filtered out, 0 ms)\n"
    )
    v = parse(CPPUTEST_TEXT, stream, ["G.A"], RunEnd(exit_code=0))
    assert outcomes(v) == {"G.A": "passed"}
    assert v.problems == []


# -- how the run ended, the closing summary and the verdicts ---------------------


def test_a_crash_after_the_closing_summary_fails_every_case_and_says_so():
    v = parse(GTEST_TEXT, gtest_run("A.One"), ["A.One"], RunEnd(signal="SIGABRT"))
    why = "every case that ran printed its verdict, but then the binary crashed: killed by SIGABRT"
    assert v.cases["A.One"].message == why
    assert v.problems == [why]


def test_an_exit_without_the_closing_summary_names_the_exit_code_when_it_was_not_0():
    said = {}
    for code in (0, 1, 3, None):
        v = parse(GTEST_TEXT, gtest_run("A.One", closing=False), ["A.One", "A.Two"], RunEnd(exit_code=code))
        said[code] = v.cases["A.One"].message
        assert v.cases["A.Two"].message == NOT_CLOSED + (f"; the binary exited with code {code}" if code else "")
    assert said == {
        0: "the binary ended without its closing summary",
        1: "the binary ended without its closing summary (exit code 1)",
        3: "the binary ended without its closing summary (exit code 3)",
        None: "the binary ended without its closing summary",
    }


def test_a_case_missing_from_a_complete_run_was_never_started():
    v = parse(GTEST_TEXT, gtest_run("A.One"), ["A.One", "A.Gone"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.One": "passed", "A.Gone": "failed"}
    assert v.cases["A.Gone"].message == NEVER_STARTED


def test_every_case_passed_but_the_exit_status_says_otherwise():
    v = parse(GTEST_TEXT, gtest_run("A.One"), ["A.One"], RunEnd(exit_code=1))
    assert v.cases["A.One"].message == "every case passed, but the binary exited with code 1"


def test_a_fault_line_is_the_running_cases_headline_unless_the_transport_saw_one():
    stream = b"[ RUN      ] A.One\nboom\n#ondevice fault HardFault pc=0x10\n"
    v = parse(GTEST_TEXT, stream, ["A.One", "A.Two"], RunEnd(exit_code=None))
    assert v.cases["A.One"].message == "fault: HardFault pc=0x10 while this case was running"
    assert v.cases["A.One"].log == "[ RUN      ] A.One\nboom\n#ondevice fault HardFault pc=0x10"
    assert v.cases["A.Two"].message == "not run: fault: HardFault pc=0x10 before this case"
    told = parse(GTEST_TEXT, stream, ["A.One"], RunEnd(fault="Lockup"))
    assert told.cases["A.One"].message == "fault: Lockup while this case was running"
    bare = parse(GTEST_TEXT, b"[ RUN      ] A.One\n#ondevice fault\n", ["A.One"], RunEnd(exit_code=None))
    assert bare.cases["A.One"].message == "fault: fault while this case was running"


def test_more_cases_than_the_parser_keeps_are_counted_as_a_problem():
    names = [f"S.C{i}" for i in range(MAX_CASES + 2)]
    v = parse(GTEST_TEXT, gtest_run(*names, closing=False), names[:1], RunEnd(exit_code=0), chunk=1 << 20)
    assert v.problems[-1] == "2 more cases were printed than the parser keeps"
    assert len(v.unknown) == MAX_CASES - 1


# -- the hook's nonce and its stamped lines ---------------------------------------

NOT_BELIEVED = (
    "a second nonce, or one after the cases had begun, was printed: the test printed "
    "pytest-ondevice's own lines, so none of this run's verdicts can be believed"
)


def test_a_nonce_after_the_cases_began_or_not_one_the_hook_makes_is_not_believed():
    late = b"[ RUN      ] A.One\n" + NONCE + b"[       OK ] A.One (0 ms)\n" + CLOSING % (1, 1)
    malformed = b"#ondevice nonce not-hex\n" + gtest_run("A.One")
    for stream in (late, malformed):
        v = parse(GTEST_TEXT, stream, ["A.One"], RunEnd(exit_code=None))
        assert v.cases["A.One"].message == NOT_BELIEVED
        assert v.problems == [NOT_BELIEVED]


def test_a_second_nonce_after_a_tests_own_text_on_that_line_is_not_believed():
    stream = NONCE + stamped("case A.One") + b"chatter #ondevice nonce ffffffffffffffff\n"
    v = parse(GoogleTest(), stream + stamped("end A.One passed", "summary cases=1"), ["A.One"], RunEnd(exit_code=0))
    assert v.cases["A.One"].message == NOT_BELIEVED


def test_a_run_without_the_hooks_nonce_is_not_believed():
    v = parse(GoogleTest(), gtest_run("A.One"), ["A.One"], RunEnd(exit_code=0))
    assert v.cases["A.One"].message == (
        "the run printed no nonce: pytest-ondevice's hook in the test framework did not run "
        "(the binary left before its framework started?), so its printed lines cannot be believed"
    )


def test_lines_stamped_with_another_nonce_move_nothing():
    stream = NONCE + stamped("case A.One") + b"#ondevice ffffffffffffffff end A.One passed\n"
    v = parse(GoogleTest(), stream, ["A.One"], RunEnd(exit_code=0))
    assert v.cases["A.One"].message == "no verdict: output ended while this case was running"
    assert v.cases["A.One"].log == "#ondevice ffffffffffffffff end A.One passed"


def test_a_cases_log_is_its_printed_lines_without_the_hooks_own():
    stream = NONCE + stamped("case A.One") + b"hello\nchatter#ondevice 0123456789abcdef end A.One passed\n"
    v = parse(GoogleTest(), stream + stamped("summary cases=1"), ["A.One"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.One": "passed"}
    assert v.cases["A.One"].log == "hello\nchatter"


def test_stamped_verdicts_without_text_still_say_what_happened():
    fails = ("case A.Fails", "fail A.Fails", "end A.Fails failed")
    skips = ("case A.Told", "skip A.Told", "end A.Told skipped", "case A.Quiet", "end A.Quiet skipped")
    stream = NONCE + stamped(*fails, *skips, "summary cases=3")
    v = parse(GoogleTest(), stream, ["A.Fails", "A.Told", "A.Quiet"], RunEnd(exit_code=1))
    assert outcomes(v) == {"A.Fails": "failed", "A.Told": "skipped", "A.Quiet": "skipped"}
    assert [v.cases[n].message for n in ("A.Fails", "A.Told", "A.Quiet")] == [
        "failed on device",
        "skipped on device",
        "skipped on device",
    ]


def test_the_hooks_binary_level_problems_are_kept_up_to_twenty():
    stream = NONCE + stamped(*(f"problem p{i}" for i in range(25)), "case A.One", "end A.One passed", "summary cases=1")
    v = parse(GoogleTest(), stream, ["A.One"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.One": "passed"}
    assert v.problems == [f"p{i}" for i in range(20)]


# -- a third party's format: one line per case, after it ran ---------------------


class _Tap(CaseStream):
    """`ok NAME` / `not ok NAME` / `ok NAME # SKIP` after each case, `done` at the end; like
    Unity, it names as running the first case of the run order without a verdict."""

    def line(self, line: str) -> None:
        m = re.match(r"(not )?ok (\w+)( # SKIP)?$", line)
        if m:
            self.once(m.group(2), Outcome.FAILED if m.group(1) else Outcome.SKIPPED if m.group(3) else Outcome.PASSED)
        elif line == "done":
            self.close(Summary())

    def running(self, expected: list[str]) -> str | None:
        ended = {n for n, r in self.cases.items() if r.outcome is not None}
        return next((n for n in self.order if n not in ended and self.summary is None), None)


def tap(text: str, expected: list[str], end: RunEnd):
    parser = _Tap(tuple(expected))
    for line in text.splitlines():
        parser.feed_line(line)
    return parser.verdicts(expected, end)


def test_a_format_whose_summary_has_no_counts_passes_a_complete_run():
    v = tap("ok one\nnot ok two\nok three # SKIP\ndone\n", ["one", "two", "three"], RunEnd(exit_code=1))
    assert outcomes(v) == {"one": "passed", "two": "failed", "three": "skipped"}
    assert v.cases["three"].message == "skipped on device"
    assert v.problems == []


def test_a_format_without_start_lines_names_the_case_it_was_in_when_the_output_ended():
    v = tap("ok one\nok one\nstarting two\n", ["one", "two", "three"], RunEnd(exit_code=0))
    assert v.cases["one"].message == "case one was given a second verdict (passed): its output cannot be attributed"
    assert v.cases["two"] == Verdict(Outcome.FAILED, "no verdict: output ended while this case was running", None, "")
    assert v.cases["three"].message == NOT_CLOSED
