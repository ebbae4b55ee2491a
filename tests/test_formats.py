"""The harness formats' parsers and case finders, from real transcripts (GoogleTest 1.12 and
CppUTest 4.0 as Debian builds them; Unity's documented lines), fed in odd chunks."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

from pytest_ondevice import formats
from pytest_ondevice.formats.casetracker import MAX_FAILURE_LINES
from pytest_ondevice.formats.cpputest import CppUTest, CppUTestParser
from pytest_ondevice.formats.gtest import GoogleTest, GoogleTestParser
from pytest_ondevice.formats.lines import LineSplitter
from pytest_ondevice.formats.parser import Parser, complete_parser
from pytest_ondevice.formats.unity import Unity
from pytest_ondevice.formats.verdicts import BinaryVerdicts, Outcome, RunEnd, Verdict

GTEST = b"""Running main() from ./googletest/src/gtest_main.cc
[==========] Running 4 tests from 2 test suites.
[----------] Global test environment set-up.
[----------] 3 tests from Math
[ RUN      ] Math.Adds
[       OK ] Math.Adds (0 ms)
[ RUN      ] Math.Fails
hello no newlineg_test.cc:4: Failure
Expected equality of these values:
  5
  2 + 2
    Which is: 4
custom
[  FAILED  ] Math.Fails (0 ms)
[ RUN      ] Math.Skips
g_test.cc:5: Skipped
not today
[  SKIPPED ] Math.Skips (0 ms)
[ DISABLED ] Math.DISABLED_Later
[----------] 3 tests from Math (0 ms total)

[----------] 1 test from Other
[ RUN      ] Other.Crash
"""
GTEST_END = b"""[       OK ] Other.Crash (0 ms)
[----------] 1 test from Other (0 ms total)

[----------] Global test environment tear-down
[==========] 4 tests from 2 test suites ran. (0 ms total)
[  PASSED  ] 2 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] Math.Skips
[  FAILED  ] 1 test, listed below:
[  FAILED  ] Math.Fails

 1 FAILED TEST
  YOU HAVE 1 DISABLED TEST

"""
GTEST_NAMES = ["Math.Adds", "Math.Fails", "Math.Skips", "Math.DISABLED_Later", "Other.Crash"]

CPPUTEST = b"""TEST(Grp, Crash) - 0 ms
IGNORE_TEST(Grp, Later) - 0 ms
TEST(Grp, Fails)chatter
c_test.cpp:7: error: Failure in TEST(Grp, Fails)
\texpected <5>
\tbut was  <4>
\tdifference starts at position 0 at: <          4         >
\t                                               ^

 - 0 ms
TEST(Grp, Passes) - 0 ms

Errors (1 failures, 4 tests, 3 ran, 2 checks, 1 ignored, 0 filtered out, 0 ms)

"""
CPPUTEST_NAMES = ["Grp.Crash", "Grp.Later", "Grp.Fails", "Grp.Passes"]

UNITY = b"""setting up
u_test.c:10:test_passes:PASS
u_test.c:6:test_fails:FAIL: Expected 5 Was 4
u_test.c:7:test_ignored:IGNORE: not on this board
u_test.c:12:test_last:PASS

-----------------------
4 Tests 1 Failures 1 Ignored \nFAIL
"""
UNITY_NAMES = ["test_passes", "test_fails", "test_ignored", "test_last"]


def parse(fmt, stream: bytes, expected: list[str], end: RunEnd, chunk: int = 7):
    parser = fmt.parser(tuple(expected))
    splitter = LineSplitter()
    for i in range(0, len(stream), chunk):
        for line in splitter.feed(stream[i : i + chunk]):
            parser.feed_line(line)
    for line in splitter.close():
        parser.feed_line(line)
    return parser.verdicts(expected, end)


def outcomes(verdicts) -> dict[str, str]:
    return {name: v.outcome.value for name, v in verdicts.cases.items()}


# -- GoogleTest ------------------------------------------------------------------


class _GoogleTestText(GoogleTest):
    """gtest's printed lines alone: a recorded stream without our listener's."""

    def parser(self, order: tuple[str, ...]) -> GoogleTestParser:
        return GoogleTestParser(order)


GTEST_TEXT = _GoogleTestText()


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_gtest_each_case_its_own_verdict(chunk):
    v = parse(GTEST_TEXT, GTEST + GTEST_END, GTEST_NAMES, RunEnd(exit_code=1), chunk)
    assert outcomes(v) == {
        "Math.Adds": "passed",
        "Math.Fails": "failed",
        "Math.Skips": "skipped",
        "Math.DISABLED_Later": "skipped",
        "Other.Crash": "passed",
    }
    assert v.problems == []
    fails = v.cases["Math.Fails"]
    assert fails.location == ("newlineg_test.cc", 4) or fails.location[1] == 4
    assert "Which is: 4" in fails.message and "custom" in fails.message
    assert v.cases["Math.Skips"].message == "g_test.cc:5: not today"
    assert "DISABLED_" in v.cases["Math.DISABLED_Later"].message


def test_gtest_crash_names_the_running_case_and_the_rest_did_not_run():
    v = parse(GTEST_TEXT, GTEST, [*GTEST_NAMES, "Other.After"], RunEnd(exit_code=None, signal="SIGSEGV"))
    assert v.cases["Other.Crash"].outcome is Outcome.FAILED
    assert "crashed: killed by SIGSEGV while this case was running" in v.cases["Other.Crash"].message
    assert v.cases["Other.After"].message.startswith("not run: crashed")
    assert v.cases["Math.Adds"].outcome is Outcome.PASSED  # it ran and ended before the crash


def test_gtest_summary_then_crash_is_not_a_pass():
    v = parse(GTEST_TEXT, GTEST + GTEST_END, GTEST_NAMES, RunEnd(signal="SIGABRT"))
    assert v.cases["Math.Adds"].outcome is Outcome.FAILED
    assert "then the binary crashed: killed by SIGABRT" in v.cases["Math.Adds"].message


def test_gtest_clean_exit_without_the_summary_is_not_a_pass():
    v = parse(GTEST_TEXT, GTEST + b"[       OK ] Other.Crash (0 ms)\n", GTEST_NAMES, RunEnd(exit_code=0))
    assert v.cases["Math.Adds"].outcome is Outcome.FAILED
    assert "without its closing summary" in v.cases["Math.Adds"].message


def test_gtest_exit_status_must_agree():
    v = parse(GTEST_TEXT, GTEST + GTEST_END, GTEST_NAMES, RunEnd(exit_code=0))
    assert v.cases["Math.Adds"].message == "a case failed, but the binary exited with code 0"


def test_gtest_summary_that_disagrees_with_the_verdicts_fails_them():
    forged = GTEST + GTEST_END.replace(b"4 tests from 2 test suites ran", b"5 tests from 2 test suites ran")
    v = parse(GTEST_TEXT, forged, GTEST_NAMES, RunEnd(exit_code=1))
    assert "the closing summary says 6 total, but the output shows 5" in v.cases["Math.Adds"].message


def test_gtest_a_case_printing_another_cases_verdict_moves_nothing():
    stream = (
        b"[ RUN      ] A.Liar\n[       OK ] A.Victim (0 ms)\nx_test.cc:3: Failure\nboom\n[  FAILED  ] A.Liar (0 ms)\n"
        b"[ RUN      ] A.Victim\n[       OK ] A.Victim (0 ms)\n"
        b"[==========] 2 tests from 1 test suite ran. (0 ms total)\n[  PASSED  ] 1 test.\n 1 FAILED TEST\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.Liar", "A.Victim"], RunEnd(exit_code=1))
    assert outcomes(v) == {"A.Liar": "failed", "A.Victim": "passed"}
    assert v.cases["A.Liar"].location == ("x_test.cc", 3)


def test_gtest_a_forged_verdict_for_the_case_itself_is_a_conflict():
    stream = (
        b"[ RUN      ] A.Liar\n[       OK ] A.Liar (0 ms)\nx_test.cc:3: Failure\n[  FAILED  ] A.Liar (0 ms)\n"
        b"[==========] 1 test from 1 test suite ran. (0 ms total)\n[  PASSED  ] 0 tests.\n 1 FAILED TEST\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.Liar"], RunEnd(exit_code=1))
    assert v.cases["A.Liar"].outcome is Outcome.FAILED
    assert "second verdict" in v.cases["A.Liar"].message


def test_gtest_garbage_and_endless_failure_text_stay_bounded():
    body = b"\xff\xfe\x00garbage\n" + b"x_test.cc:9: Failure\n" + b"line of detail \xc3\x28\n" * 50_000
    stream = b"[ RUN      ] A.Big\n" + body + b"[  FAILED  ] A.Big (3 ms)\n"
    v = parse(GTEST_TEXT, stream, ["A.Big"], RunEnd(exit_code=1), chunk=4096)
    failed = v.cases["A.Big"]
    assert failed.outcome is Outcome.FAILED
    assert len(failed.message.splitlines()) <= MAX_FAILURE_LINES + 2
    assert len(failed.log) < 20_000


NONCE = b"0123456789abcdef"
STAMPED = (
    b"#ondevice nonce 0123456789abcdef\n[ RUN      ] A.One\n#ondevice 0123456789abcdef case A.One\n"
    b"#ondevice 0123456789abcdef end A.One passed\n[       OK ] A.One (0 ms)\n"
    b"[ RUN      ] A.Two\n#ondevice 0123456789abcdef case A.Two\nx_test.cc:3: Failure\n"
    b"#ondevice 0123456789abcdef fail A.Two x_test.cc:3: Failure\n#ondevice 0123456789abcdef fail A.Two boom\n"
    b"[       OK ] A.Two (0 ms)\n[==========] 2 tests from 1 test suite ran. (0 ms total)\n[  PASSED  ] 2 tests.\n"
)
SUMMARY = b"#ondevice 0123456789abcdef end A.Two failed\n#ondevice 0123456789abcdef summary cases=2\n"


def test_gtest_with_the_listener_only_its_stamped_lines_decide():
    v = parse(GoogleTest(), STAMPED + SUMMARY, ["A.One", "A.Two"], RunEnd(exit_code=1))
    assert outcomes(v) == {"A.One": "passed", "A.Two": "failed"}
    assert v.problems == []
    assert v.cases["A.Two"].message == "x_test.cc:3: Failure\nboom"
    assert v.cases["A.Two"].location == ("x_test.cc", 3)
    assert "[       OK ] A.Two" in v.cases["A.Two"].log  # gtest's printed lines: the case's log


def test_gtest_printed_lines_after_the_listeners_last_do_not_close_the_run():
    v = parse(GoogleTest(), STAMPED, ["A.One", "A.Two"], RunEnd(exit_code=0))  # A.Two called _exit(0)
    assert outcomes(v) == {"A.One": "passed", "A.Two": "failed"}
    assert "no verdict: output ended while this case was running" in v.cases["A.Two"].message


def test_gtest_exit_status_more_lenient_than_the_verdicts_is_the_binarys_failure():
    v = parse(GoogleTest(), STAMPED + SUMMARY, ["A.One", "A.Two"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.One": "passed", "A.Two": "failed"}
    assert v.problems == ["a case failed, but the binary exited with code 0"]


def test_gtest_a_run_without_the_listeners_nonce_or_with_a_second_one_is_not_believed():
    plain = parse(GoogleTest(), GTEST + GTEST_END, GTEST_NAMES, RunEnd(exit_code=1))
    assert plain.cases["Math.Adds"].outcome is Outcome.FAILED
    assert "printed no nonce" in plain.cases["Math.Adds"].message
    assert any("printed no nonce" in p for p in plain.problems)
    second = STAMPED.replace(b"[ RUN      ] A.Two\n", b"[ RUN      ] A.Two\n#ondevice nonce ffffffffffffffff\n")
    v = parse(GoogleTest(), second + SUMMARY, ["A.One", "A.Two"], RunEnd(exit_code=1))
    assert v.cases["A.One"].outcome is Outcome.FAILED
    assert "a second nonce" in v.cases["A.One"].message


def test_gtest_a_suite_level_failure_fails_the_case_that_already_ended():
    late = STAMPED + SUMMARY.replace(
        b"#ondevice 0123456789abcdef summary",
        b"#ondevice 0123456789abcdef fail A.One TearDownTestSuite of A failed:\n#ondevice 0123456789abcdef summary",
    )
    v = parse(GoogleTest(), late, ["A.One", "A.Two"], RunEnd(exit_code=1))
    assert outcomes(v) == {"A.One": "failed", "A.Two": "failed"}
    assert "TearDownTestSuite of A failed" in v.cases["A.One"].message


# -- CppUTest --------------------------------------------------------------------


class _CppUTestText(CppUTest):
    """CppUTest's printed lines alone: a recorded stream without our plugin's."""

    def parser(self, order: tuple[str, ...]) -> CppUTestParser:
        return CppUTestParser(order)


CPPUTEST_TEXT = _CppUTestText()


@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_cpputest_each_case_its_own_verdict(chunk):
    v = parse(CPPUTEST_TEXT, CPPUTEST, CPPUTEST_NAMES, RunEnd(exit_code=1), chunk)
    assert outcomes(v) == {"Grp.Crash": "passed", "Grp.Later": "skipped", "Grp.Fails": "failed", "Grp.Passes": "passed"}
    assert v.problems == []
    fails = v.cases["Grp.Fails"]
    assert fails.location == ("c_test.cpp", 7)
    assert "expected <5>" in fails.message and "but was  <4>" in fails.message
    assert "chatter" in fails.log


def test_cpputest_crash_names_the_running_case():
    v = parse(CPPUTEST_TEXT, b"TEST(Grp, Crash) - 0 ms\nTEST(Grp, Fails)", CPPUTEST_NAMES, RunEnd(signal="SIGSEGV"))
    assert "crashed: killed by SIGSEGV while this case was running" in v.cases["Grp.Fails"].message
    assert v.cases["Grp.Crash"].outcome is Outcome.PASSED
    assert v.cases["Grp.Passes"].message.startswith("not run: crashed")


def test_cpputest_exit_code_is_the_failure_count():
    v = parse(CPPUTEST_TEXT, CPPUTEST, CPPUTEST_NAMES, RunEnd(exit_code=0))
    assert v.cases["Grp.Passes"].outcome is Outcome.FAILED
    ok = CPPUTEST.replace(b"Errors (1 failures", b"Errors (2 failures")
    v = parse(CPPUTEST_TEXT, ok, CPPUTEST_NAMES, RunEnd(exit_code=2))
    assert "the closing summary says 2 failed, but the output shows 1" in v.cases["Grp.Passes"].message


def test_cpputest_runs_in_reverse_order_of_definition():
    src = """
    TEST_GROUP(G) {};
    TEST(G, First) {}
    // TEST(G, Commented) {}
    IGNORE_TEST(G, Second) {}
    TEST(G, Third) {}
    """
    fmt = CppUTest()
    cases = fmt.find_cases(src)
    assert [(c.name, c.line) for c in cases] == [("G.First", 3), ("G.Second", 5), ("G.Third", 6)]
    assert fmt.device_order(cases) == ("G.Third", "G.Second", "G.First")


# -- Unity -----------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 9, 4096])
def test_unity_each_case_its_own_verdict(chunk):
    v = parse(Unity(), UNITY, UNITY_NAMES, RunEnd(exit_code=1), chunk)
    want = {"test_passes": "passed", "test_fails": "failed", "test_ignored": "skipped", "test_last": "passed"}
    assert outcomes(v) == want
    assert v.cases["test_fails"].location == ("u_test.c", 6)
    assert "Expected 5 Was 4" in v.cases["test_fails"].message
    assert v.cases["test_ignored"].message == "not on this board"
    assert "setting up" in v.cases["test_passes"].log  # printed before its verdict line


def test_unity_crash_names_the_next_case_in_run_order():
    stream = UNITY.split(b"u_test.c:7")[0] + b"about to dereference\n"
    v = parse(Unity(), stream, UNITY_NAMES, RunEnd(signal="SIGSEGV"))
    crashed = v.cases["test_ignored"]
    assert crashed.outcome is Outcome.FAILED
    assert "crashed: killed by SIGSEGV while this case was running" in crashed.message
    assert "about to dereference" in crashed.log
    assert v.cases["test_last"].message.startswith("not run: crashed")
    assert v.cases["test_fails"].outcome is Outcome.FAILED


def test_unity_tally_must_agree():
    v = parse(Unity(), UNITY.replace(b"1 Failures", b"0 Failures"), UNITY_NAMES, RunEnd(exit_code=0))
    assert "the closing summary says 0 failed" in v.cases["test_passes"].message


def test_unity_cases_come_from_run_test_in_call_order():
    src = """
    #include "unity.h"
    void test_b(void) { TEST_ASSERT(1); }
    void test_a(void) { TEST_ASSERT(1); }
    void helper_not_a_test(void) {}
    int main(void) { UNITY_BEGIN(); RUN_TEST(test_a); RUN_TEST(test_b); return UNITY_END(); }
    """
    cases = Unity().find_cases(src)
    assert [(c.name, c.line) for c in cases] == [("test_a", 4), ("test_b", 3)]
    no_runner = Unity().find_cases("void test_x(void) {}\nvoid test_y(void)\n{\n}\n")
    assert [c.name for c in no_runner] == ["test_x", "test_y"]


# -- choosing the format ---------------------------------------------------------


@pytest.mark.parametrize(
    "text, name",
    [
        ("#include <gtest/gtest.h>\n", "gtest"),
        ('#include "gmock/gmock.h"\n', "gtest"),
        ("#include <CppUTest/TestHarness.h>\n", "cpputest"),
        ('#include "unity.h"\n', "unity"),
        ('#include "micro_test.h"\n', "tflm"),
        ("int x;\n", "tflm"),
        ('// #include "unity.h"\n#include "micro_test.h"\n', "tflm"),
        # a directive may be indented (inside #if) and spaced after its `#`: C allows both
        ("#ifdef HOST\n  #include <gtest/gtest.h>\n#endif\n", "gtest"),
        ('# include "unity.h"\n', "unity"),
        ("#\tinclude <CppUTest/TestHarness.h>\n", "cpputest"),
    ],
)
def test_format_is_told_from_the_included_header(text, name):
    assert formats.for_source(text).name == name


def test_declared_format_wins_and_an_unknown_one_names_the_file():
    assert formats.for_source("#include <gtest/gtest.h>\n", "unity").name == "unity"
    with pytest.raises(formats.FormatError, match=r"ondevice.toml: unknown test format 'gtests'; known: .*gtest"):
        formats.for_source("", "gtests", "ondevice.toml")


def test_a_third_party_format_under_one_of_our_names_is_never_loaded(monkeypatch):
    """Ours cannot be shadowed: a plug-in registering `gtest` is passed over unloaded, so
    one that is broken fails nothing (a TFLM source asks the entry points for its header)."""
    broken = EntryPoint("gtest", "no_such_plugin_module:GoogleTest", formats.GROUP)
    monkeypatch.setattr(formats, "entry_points", lambda group: [broken] if group == formats.GROUP else [])
    formats.known.cache_clear()
    try:
        assert formats.known()["gtest"] is GoogleTest
        assert formats.for_source("int main(void) { return 0; }\n").name == "tflm"  # no header of ours
        with pytest.raises(formats.FormatError, match=r"unknown test format 'tap'"):
            formats.named("tap")
    finally:
        formats.known.cache_clear()


UNITY_NONCE = b"#ondevice nonce 0123456789abcdef\n"
UNITY_EXIT = b"#ondevice 0123456789abcdef exit-in test_last\n"


def test_unity_with_the_runtimes_nonce_a_tally_that_disagrees_still_fails_every_case():
    # the runtime stamps only where Unity was: the verdict lines and the tally stay text
    forged = UNITY_NONCE + UNITY.replace(b"1 Failures", b"0 Failures") + UNITY_EXIT
    v = parse(Unity(), forged, UNITY_NAMES, RunEnd(exit_code=0))
    assert "the closing summary says 0 failed" in v.cases["test_passes"].message


def test_unity_with_the_runtimes_nonce_and_its_closing_line_keeps_each_verdict():
    v = parse(Unity(), UNITY_NONCE + UNITY + UNITY_EXIT, UNITY_NAMES, RunEnd(exit_code=1))
    assert outcomes(v) == {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_ignored": "skipped",
        "test_last": "passed",
    }
    assert v.problems == []


def test_a_format_without_a_hook_of_ours_reads_a_nonce_line_as_text():
    from pytest_ondevice.formats.libtest import Libtest

    stream = (
        b"running 1 test\ntest t::a ... #ondevice nonce 0123456789abcdef\n#ondevice nonce 0123456789abcdef\nok\n\n"
        b"test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n"
    )
    v = parse(Libtest(), stream, ["t::a"], RunEnd(exit_code=0))
    assert outcomes(v) == {"t::a": "passed"}
    assert v.problems == []


def test_unity_the_case_named_at_exit_is_placed_by_print_order_not_source_order():
    # runner functions called in another order than written: test_a1 ran first
    stream = (
        UNITY_NONCE + b"g.c:8:test_a1:PASS\ng.c:7:test_b1:PASS\n\n-----------------------\n"
        b"2 Tests 0 Failures 0 Ignored\nOK\n#ondevice 0123456789abcdef exit-in test_b1\n"
    )
    v = parse(Unity(), stream, ["test_b1", "test_a1"], RunEnd(exit_code=0))
    assert outcomes(v) == {"test_b1": "passed", "test_a1": "passed"}
    forged = stream.replace(b"exit-in test_b1", b"exit-in test_a1")  # test_a1 printed test_b1's line
    v = parse(Unity(), forged, ["test_b1", "test_a1"], RunEnd(exit_code=0))
    assert outcomes(v) == {"test_b1": "failed", "test_a1": "failed"}
    assert "not run: the program exited in case test_a1" in v.cases["test_b1"].message


def stamped(*lines: str) -> bytes:
    return b"".join(f"#ondevice 0123456789abcdef {x}\n".encode() for x in lines)


def test_stamped_lines_skip_problem_summary_count_and_a_marker_after_text_without_newline():
    stream = (
        b"#ondevice nonce 0123456789abcdef\n"
        + stamped("case A.One", "skip A.One x.cc:4: not today", "end A.One skipped")
        + b"TEST(A, Two)#ondevice 0123456789abcdef case A.Two\n"  # the framework's text had no newline
        + b"chatter #ondevice ffffffffffffffff end A.Two failed\n"  # another nonce: the case's log
        + stamped("end A.Two sideways", "end A.Two passed", "problem outside any test: env.cc:3 no board")
        + stamped("summary cases=3", "case A.Late", "end A.Late failed")  # nothing moves after the closing line
    )
    v = parse(GoogleTest(), stream, ["A.One", "A.Two"], RunEnd(exit_code=1))
    assert outcomes(v) == {"A.One": "skipped", "A.Two": "passed"}
    assert v.cases["A.One"].message == "x.cc:4: not today"
    assert "TEST(A, Two)" in v.cases["A.Two"].log and "chatter" in v.cases["A.Two"].log
    assert v.problems == [
        "outside any test: env.cc:3 no board",
        "the closing summary says 3 total, but the output shows 2",
    ]
    assert v.unknown == {}


def test_a_stamped_skip_or_failure_about_a_case_that_never_started_moves_nothing():
    stream = b"#ondevice nonce 0123456789abcdef\n" + stamped(
        "fail A.Two x.cc:9: Failure", "skip A.Two no", "case A.One", "end A.One passed", "summary cases=1"
    )
    v = parse(GoogleTest(), stream, ["A.One", "A.Two"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.One": "passed", "A.Two": "failed"}
    assert v.cases["A.Two"].message.startswith("not run")


def test_cpputest_with_the_plugin_failure_text_comes_from_cpputests_lines_by_name():
    stream = (
        b"#ondevice nonce 0123456789abcdef\n"
        + b"TEST(G, Leaks)#ondevice 0123456789abcdef case G.Leaks\n"
        + stamped("end G.Leaks passed")
        + b"c.cpp:5: error: Failure in TEST(G, Leaks)\n\tMemory leak(s) found.\nnot detail\n\tnot detail either\n"
        + b"TEST(G, Fine)#ondevice 0123456789abcdef case G.Fine\n"
        + stamped("end G.Fine passed", "summary cases=2")
        + b"Errors (1 failures, 2 tests, 2 ran, 0 checks, 0 ignored, 0 filtered out, 0 ms)\n"
    )
    v = parse(CppUTest(), stream, ["G.Leaks", "G.Fine"], RunEnd(exit_code=1))
    assert outcomes(v) == {"G.Leaks": "failed", "G.Fine": "passed"}
    assert v.cases["G.Leaks"].message == "c.cpp:5: error: Failure in TEST(G, Leaks)\nMemory leak(s) found."
    assert v.cases["G.Leaks"].location == ("c.cpp", 5)
    assert v.problems == []


def test_a_fault_line_is_the_headline_of_the_running_harness_case():
    stream = b"u.c:3:test_passes:PASS\nsetting up\n\r\n#ondevice fault UsageFault (UNDEFINSTR) pc=0x00000158\r\n"
    v = parse(Unity(), stream, ["test_passes", "test_fails"], RunEnd(exit_code=3))
    assert outcomes(v) == {"test_passes": "passed", "test_fails": "failed"}
    assert v.cases["test_fails"].message.startswith(
        "fault: UsageFault (UNDEFINSTR) pc=0x00000158 while this case was running"
    )


def test_gtest_and_cpputest_binaries_link_our_hook_and_their_runs_must_declare_its_nonce():
    from pytest_ondevice.formats.cpputest import PLUGIN
    from pytest_ondevice.formats.gtest import LISTENER

    assert GoogleTest().needs("TEST(A, B) {}").sources == (LISTENER,)
    assert GoogleTest().needs("int main(int c, char **v) {}").pkg_config == ("gtest",)
    assert CppUTest().needs("TEST(A, B) {}").sources == (PLUGIN, PLUGIN.with_name("cpputest_main.cpp"))
    assert CppUTest().needs("int main(int c, char **v) {}").sources == (PLUGIN,)
    assert all(p.is_file() for p in (LISTENER, PLUGIN, PLUGIN.with_name("cpputest_main.cpp")))
    v = parse(CppUTest(), CPPUTEST, CPPUTEST_NAMES, RunEnd(exit_code=1))  # its printed lines alone
    assert {x.outcome for x in v.cases.values()} == {Outcome.FAILED}
    assert "printed no nonce" in v.cases["Grp.Passes"].message


def test_a_tflm_source_imports_no_other_format_and_each_header_still_picks_its_own():
    """Our formats are known by their headers without importing them: a run of TFLM tests
    loads none of the other four (3 ms a run)."""
    probe = (
        "import sys\n"
        "from pytest_ondevice import formats\n"
        "assert formats.for_source('#include \"micro_test.h\"\\n').name == 'tflm'\n"
        "print(sorted(m for m in sys.modules if m.startswith('pytest_ondevice.formats.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    loaded = {m.rsplit(".", 1)[1] for m in ast.literal_eval(out)}
    assert loaded.isdisjoint({"gtest", "cpputest", "unity", "libtest"}), loaded
    for header, name in [
        ("gtest/gtest.h", "gtest"),
        ("gmock/gmock.h", "gtest"),
        ("CppUTest/TestHarness.h", "cpputest"),
        ("unity.h", "unity"),
        ("micro_test.h", "tflm"),
    ]:
        assert formats.for_source(f"#include <{header}>\n").name == name
    assert formats.for_source("int main(void) { return 0; }\n").name == "tflm"


@pytest.mark.parametrize("name", sorted(formats.BUILTIN))
def test_every_builtin_parser_has_all_the_runner_reads_and_sets(name):
    """The runner reads and sets them plainly, never asking whether they are there."""
    parser = formats.named(name).parser(("a",))
    assert isinstance(parser, Parser)
    assert complete_parser(parser) is parser
    assert (parser.ours, parser.nonce, parser.unavailable, parser.missing_library) == (False, None, None, None)
    parser.ours = True


class BareParser:
    """A third party's parser as the API once asked: feed_line and verdicts, nothing else."""

    def __init__(self, record: bool = False) -> None:
        self.lines: list[str] = []
        self.records: list[bytes | None] = []
        if record:
            self.framework_record = self.records.append

    def feed_line(self, raw):
        self.lines.append(raw)

    def verdicts(self, expected, end):
        return BinaryVerdicts({n: Verdict(Outcome.PASSED) for n in expected}, {}, list(self.lines))


def test_a_parser_with_only_feed_line_and_verdicts_is_completed_with_the_defaults():
    bare = BareParser()
    parser = complete_parser(bare)
    assert parser is not bare
    assert isinstance(parser, Parser)
    parser.ours = True  # our header's marker in a third party's binary: nothing of theirs reads it
    parser.feed_line("ok one")
    parser.framework_record(b"ignored")  # it has none: the printed lines decide
    v = parser.verdicts(["one"], RunEnd(exit_code=0))
    assert (v.cases["one"].outcome, v.problems) == (Outcome.PASSED, ["ok one"])
    assert (parser.nonce, parser.unavailable, parser.missing_library) == (None, None, None)
    assert not hasattr(bare, "ours")


def test_a_completed_parser_keeps_its_own_framework_record():
    bare = BareParser(record=True)
    complete_parser(bare).framework_record(b"ok one\n")
    assert bare.records == [b"ok one\n"]
