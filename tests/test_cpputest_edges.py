"""CppUTest's format at its edges: which sources select it, what its binaries link, and
its printed lines: a case's own indented output, failure text, IGNORE_TEST, and the
closing line's counts; with the plugin, which indented lines are failure text."""

from __future__ import annotations

from test_formats import CPPUTEST_TEXT, outcomes, parse, stamped

from pytest_ondevice import formats
from pytest_ondevice.formats.cpputest import CppUTest
from pytest_ondevice.formats.verdicts import RunEnd

OK_LINE = b"\nOK (%d tests, %d ran, 2 checks, 0 ignored, 0 filtered out, 0 ms)\n"


def test_a_source_including_the_command_line_runner_is_cpputest():
    assert formats.for_source('#include "CppUTest/CommandLineTestRunner.h"\n').name == "cpputest"


def test_a_binary_links_cpputest_and_our_plugin_and_runs_verbosely_on_an_os():
    needs = CppUTest().needs("TEST(A, B) {}")
    assert needs.pkg_config == ("cpputest",)
    assert [p.name for p in needs.sources] == ["cpputest_plugin.cpp", "cpputest_main.cpp"]
    assert needs.debian_package == "libcpputest-dev"
    assert CppUTest.run_args == ("-v",)  # each case's start and end lines
    assert CppUTest.kinds == ("host", "linux")


def test_a_cases_indented_output_during_or_after_it_is_not_a_failure():
    stream = b"TEST(G, A)\n\tindented chatter\n - 0 ms\n\tstray after the end\nTEST(G, B) - 0 ms\n" + OK_LINE % (2, 2)
    v = parse(CPPUTEST_TEXT, stream, ["G.A", "G.B"], RunEnd(exit_code=0))
    assert outcomes(v) == {"G.A": "passed", "G.B": "passed"}
    assert v.problems == []
    assert "\tindented chatter" in v.cases["G.A"].log


def test_a_failures_message_is_its_header_and_indented_lines():
    stream = (
        b"TEST(G, F)\nc_test.cpp:7: error: Failure in TEST(G, F)\n\texpected <5>\n\tbut was  <4>\n\n - 0 ms\n"
        b"IGNORE_TEST(G, L) - 0 ms\n\nErrors (1 failures, 2 tests, 1 ran, 2 checks, 1 ignored, 0 filtered out, 0 ms)\n"
    )
    v = parse(CPPUTEST_TEXT, stream, ["G.F", "G.L"], RunEnd(exit_code=1))
    assert outcomes(v) == {"G.F": "failed", "G.L": "skipped"}
    assert v.cases["G.F"].message == "c_test.cpp:7: error: Failure in TEST(G, F)\nexpected <5>\nbut was  <4>"
    assert v.cases["G.F"].location == ("c_test.cpp", 7)
    assert v.cases["G.L"].message == "ignored in the source (IGNORE_TEST)"
    assert v.problems == []


def test_the_closing_lines_count_of_cases_run_must_agree():
    stream = b"TEST(G, A) - 0 ms\n\nErrors (0 failures, 3 tests, 3 ran, 3 checks, 0 ignored, 0 filtered out, 0 ms)\n"
    v = parse(CPPUTEST_TEXT, stream, ["G.A"], RunEnd(exit_code=None))
    assert v.problems == ["the closing summary says 3 total, but the output shows 1"]
    honest = parse(CPPUTEST_TEXT, b"TEST(G, A) - 0 ms\n" + OK_LINE % (1, 1), ["G.A"], RunEnd(exit_code=0))
    assert outcomes(honest) == {"G.A": "passed"}
    assert honest.problems == []


def test_with_the_plugin_only_indented_lines_right_after_a_failure_line_are_its_text():
    stream = (
        b"#ondevice nonce 0123456789abcdef\nTEST(G, A)#ondevice 0123456789abcdef case G.A\n"
        b"\tindented log\nplain log\n\tmore indented log\n"
        + stamped("end G.A passed", "summary cases=1")
        + OK_LINE % (1, 1)
    )
    v = parse(CppUTest(), stream, ["G.A"], RunEnd(exit_code=0))
    assert outcomes(v) == {"G.A": "passed"}
    assert v.cases["G.A"].log == "TEST(G, A)\n\tindented log\nplain log\n\tmore indented log"
