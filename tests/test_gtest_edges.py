"""GoogleTest's format at its edges: the cases a source declares, what its binaries link,
and its printed lines: a case's own output, failure text, skip reasons, disabled cases and
the closing summary's counts."""

from __future__ import annotations

import pytest
from test_formats import GTEST_TEXT, outcomes, parse

from pytest_ondevice.formats.gtest import GoogleTest
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

RAN = b"[==========] %d tests from 1 test suite ran. (0 ms total)\n"


def test_cases_are_suite_dot_name_at_their_first_declaration():
    src = """
    #include <gtest/gtest.h>
    TEST(Math, Adds) {}
    // TEST(Math, Commented) {}
    TEST_F( Fixture ,  Works ) {}
    TEST(Math, Adds) {}
    TYPED_TEST(Typed, NotFound) {}
    """
    cases = GoogleTest().find_cases(src)
    assert [(c.name, c.line, c.style) for c in cases] == [("Math.Adds", 3, "gtest"), ("Fixture.Works", 5, "gtest")]


def test_a_binary_links_gtest_main_and_our_listener_and_runs_without_colour_on_an_os():
    needs = GoogleTest().needs("TEST(A, B) {}")
    assert needs.pkg_config == ("gtest_main",)
    assert [p.name for p in needs.sources] == ["gtest_listener.cpp"]
    assert needs.debian_package == "libgtest-dev"
    assert GoogleTest.run_args == ("--gtest_color=no",)  # the parser reads plain text
    assert GoogleTest.kinds == ("host", "linux")  # not bare metal: it needs threads, files, a heap


def test_a_cases_own_output_and_a_verdict_it_prints_for_another_case_do_not_fail_it():
    stream = (
        b"[ RUN      ] A.Chatty\nsome output\n\tindented output\n[       OK ] A.Other (0 ms)\nmore output\n"
        b"[       OK ] A.Chatty (0 ms)\n[       OK ] A.Stray (0 ms)\n"
        b"[ RUN      ] A.Other\n[       OK ] A.Other (0 ms)\n" + RAN % 2 + b"[  PASSED  ] 2 tests.\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.Chatty", "A.Other"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.Chatty": "passed", "A.Other": "passed"}
    assert v.problems == []
    assert "some output\n\tindented output" in v.cases["A.Chatty"].log


def test_a_failures_message_is_its_lines_and_an_ok_after_it_is_named():
    stream = (
        b"[ RUN      ] A.F\nx_test.cc:4: Failure\nExpected: 1\n[  FAILED  ] A.F (0 ms)\n"
        b"[ RUN      ] A.G\nx_test.cc:5: Failure\nboom\n[       OK ] A.G (0 ms)\n"
    )
    v = parse(
        GTEST_TEXT, stream + RAN % 2 + b"[  PASSED  ] 0 tests.\n 2 FAILED TESTS\n", ["A.F", "A.G"], RunEnd(exit_code=1)
    )
    assert v.cases["A.F"].message == "x_test.cc:4: Failure\nExpected: 1"
    assert v.cases["A.F"].location == ("x_test.cc", 4)
    assert v.cases["A.G"].message == "x_test.cc:5: Failure\nboom\nthe device printed [       OK ] after a failure"
    assert v.problems == []


def test_skip_reasons_default_and_stop_after_four_lines():
    stream = (
        b"[ RUN      ] A.S\n[  SKIPPED ] A.S (0 ms)\n"
        b"[ RUN      ] A.L\ng_test.cc:9: Skipped\nl1\nl2\nl3\nl4\nl5\nl6\n[  SKIPPED ] A.L (0 ms)\n"
        + RAN % 2
        + b"[  PASSED  ] 0 tests.\n[  SKIPPED ] 2 tests, listed below:\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.S", "A.L"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.S": "skipped", "A.L": "skipped"}
    assert v.cases["A.S"].message == "skipped on device (GTEST_SKIP)"
    assert v.cases["A.L"].message == "g_test.cc:9: l1 l2 l3 l4"
    assert v.problems == []


def test_disabled_cases_count_in_a_passing_summary():
    stream = (
        b"[ RUN      ] A.One\n[       OK ] A.One (0 ms)\n[ DISABLED ] A.DISABLED_X\n[ DISABLED ] A.DISABLED_Y\n"
        + RAN % 1
        + b"[  PASSED  ] 1 test.\n\n  YOU HAVE 2 DISABLED TESTS\n"
    )
    v = parse(GTEST_TEXT, stream, ["A.One", "A.DISABLED_X", "A.DISABLED_Y"], RunEnd(exit_code=0))
    assert outcomes(v) == {"A.One": "passed", "A.DISABLED_X": "skipped", "A.DISABLED_Y": "skipped"}
    assert v.cases["A.DISABLED_Y"].message == "disabled in the source (DISABLED_ prefix)"
    assert v.problems == []


CASES = b"[ RUN      ] A.P\n[       OK ] A.P (0 ms)\n[ RUN      ] A.S\n[  SKIPPED ] A.S (0 ms)\n"
CASES_F = CASES + b"[ RUN      ] A.F\nx_test.cc:3: Failure\n[  FAILED  ] A.F (0 ms)\n"
SKIPPED_1 = b"[  SKIPPED ] 1 test, listed below:\n"


@pytest.mark.parametrize(
    "stream, said",
    [
        (CASES + RAN % 2 + b"[  PASSED  ] 2 tests.\n" + SKIPPED_1, "2 passed, but the output shows 1"),
        (
            CASES + RAN % 2 + b"[  PASSED  ] 1 test.\n[  SKIPPED ] 2 tests, listed below:\n",
            "2 skipped, but the output shows 1",
        ),
        (
            CASES_F + RAN % 3 + b"[  PASSED  ] 1 test.\n" + SKIPPED_1 + b" 2 FAILED TESTS\n",
            "2 failed, but the output shows 1",
        ),
    ],
    ids=["passed", "skipped", "failed"],
)
def test_each_count_of_the_closing_summary_must_agree(stream, said):
    v = parse(GTEST_TEXT, stream, ["A.P", "A.S"], RunEnd(exit_code=None))
    assert v.cases["A.P"].outcome is Outcome.FAILED
    assert v.problems == [f"the closing summary says {said}"]
    honest = stream.replace(b"2 tests.", b"1 test.").replace(b"2 tests,", b"1 test,").replace(b"2 FAILED", b"1 FAILED")
    assert parse(GTEST_TEXT, honest, ["A.P", "A.S"], RunEnd(exit_code=None)).problems == []
