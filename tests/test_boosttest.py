"""Boost.Test's format: cases from the sources, verdicts from real transcripts, whole runs.

The transcripts in support/boosttest/ were recorded by support/boosttest/capture.sh from the
cases beside them: built as pytest-ondevice builds them (our observer, the framework
header-only, our main, the host runtime) with Debian's Boost.Test 1.74 on the host and for
aarch64 under qemu-aarch64, run with pytest-ondevice's arguments, and with Boost.Test's own
main alone (its log only). The case "ends_the_run" ends it in several ways: a segfault, an
abort, and a test that prints Boost.Test's lines (or a nonce of its own) and leaves with
_exit(0)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.transcripts import code_or_signal, outcomes, replay

from pytest_ondevice import formats
from pytest_ondevice.formats.boosttest import (
    FRAMEWORK,
    FRAMEWORK_DYN,
    MAIN,
    OBSERVER,
    RUNNER,
    BoostTest,
    BoostTestParser,
)
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

SUPPORT = Path(__file__).resolve().parent / "support" / "boosttest"
P, F, S = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
CASES = [c.name for c in BoostTest().find_cases((SUPPORT / "cases.cpp").read_text())]
# what the observer said of each when nothing ended the run early
CLEAN = {
    "adds": P,
    "kernels/fails": F,
    "kernels/requires": F,
    "kernels/disabled": S,
    "throws": F,
    "garbage": P,
    "expected": P,
    "ends_the_run": P,
    "after_it": P,
}
DYN = "#define BOOST_TEST_DYN_LINK\n"
EXCEPTIONS = 'cxxflags = ["-fexceptions"]\n'


def parse(name: str, chunk: int = 0, parser=None):
    return replay(SUPPORT / name, parser or BoostTest().parser(tuple(CASES)), CASES, chunk, code_or_signal)


def text_only(name: str):
    """Boost.Test's log lines alone, as a stream without our observer has them."""
    return parse(name, parser=BoostTestParser(tuple(CASES)))


# -- the sources -----------------------------------------------------------------
def test_cases_are_named_by_their_suite_path_at_their_lines():
    src = """
    #define BOOST_TEST_MODULE kernels
    #include <boost/test/unit_test.hpp>
    BOOST_AUTO_TEST_CASE(adds) {}
    // BOOST_AUTO_TEST_CASE(commented_out) {}
    BOOST_AUTO_TEST_SUITE(math)
    BOOST_AUTO_TEST_CASE( subtracts, * boost::unit_test::disabled() ) {}
    BOOST_FIXTURE_TEST_SUITE(fixtured, Fixture)
    BOOST_FIXTURE_TEST_CASE(uses_it, Other) {}
    BOOST_AUTO_TEST_SUITE_END()
    BOOST_AUTO_TEST_CASE(after_inner) {}
    BOOST_AUTO_TEST_SUITE_END()
    BOOST_AUTO_TEST_CASE_TEMPLATE(typed, T, types) {}
    BOOST_DATA_TEST_CASE(data, xs) {}
    BOOST_AUTO_TEST_CASE(last) {}
    """
    cases = BoostTest().find_cases(src)
    assert [(c.name, c.line, c.style) for c in cases] == [
        ("adds", 4, "boosttest"),
        ("math/subtracts", 7, "boosttest"),
        ("math/fixtured/uses_it", 9, "boosttest"),
        ("math/after_inner", 11, "boosttest"),
        ("last", 15, "boosttest"),
    ]


def test_the_transcripts_cases_are_found_where_the_source_declares_them():
    lines = (SUPPORT / "cases.cpp").read_text().splitlines()
    for case in BoostTest().find_cases((SUPPORT / "cases.cpp").read_text()):
        assert f"BOOST_AUTO_TEST_CASE({case.name.rpartition('/')[2]}" in lines[case.line - 1]
    assert list(CLEAN) == CASES


@pytest.mark.parametrize(
    "source, linked",
    [
        ("#include <boost/test/unit_test.hpp>\nBOOST_AUTO_TEST_CASE(a) {}\n", (FRAMEWORK, MAIN)),
        ("#define BOOST_TEST_MODULE m\n#include <boost/test/unit_test.hpp>\n", (FRAMEWORK, RUNNER)),
        ("#define BOOST_TEST_MAIN\n#include <boost/test/unit_test.hpp>\n", (FRAMEWORK, RUNNER)),
        ("#define BOOST_TEST_MODULE m\n#include <boost/test/included/unit_test.hpp>\n", ()),
        (
            "#define BOOST_TEST_DYN_LINK\n#define BOOST_TEST_MODULE m\n#include <boost/test/unit_test.hpp>\n",
            (FRAMEWORK_DYN,),
        ),
        (
            "#define BOOST_TEST_DYN_LINK\n#include <boost/test/unit_test.hpp>\nint main(int c, char **v) {}",
            (FRAMEWORK_DYN,),
        ),
        ("#define BOOST_TEST_DYN_LINK\n#include <boost/test/unit_test.hpp>\n", (FRAMEWORK, MAIN)),
        ("#include <boost/test/unit_test.hpp>\nint main(int argc, char **argv) {}", (FRAMEWORK,)),
        ("// #define BOOST_TEST_MODULE m\n#include <boost/test/unit_test.hpp>\n", (FRAMEWORK, MAIN)),
    ],
)
def test_a_binary_links_our_observer_and_what_the_source_lacks_of_the_framework(source, linked):
    needs = BoostTest().needs(source)
    assert needs.sources == (OBSERVER, *linked)
    assert needs.pkg_config == ()  # header-only, compiled into the binary: no library for a board
    assert needs.debian_package == "libboost-test-dev"
    assert all(p.is_file() for p in (OBSERVER, FRAMEWORK, FRAMEWORK_DYN, RUNNER, MAIN))


def test_a_source_including_boost_test_is_boosttest_and_needs_an_os():
    assert formats.for_source("#include <boost/test/unit_test.hpp>\n").name == "boosttest"
    assert formats.for_source("#include <boost/test/included/unit_test.hpp>\n").name == "boosttest"
    assert formats.for_source('#include "unit_test.hpp"\n').name == "tflm"  # a header of one's own
    assert BoostTest.kinds == ("host", "linux")
    assert BoostTest.run_args == ("--catch_system_errors=no", "--log_level=test_suite", "--color_output=no")


def test_the_framework_says_what_to_add_where_the_board_has_no_exceptions():
    assert "add cxxflags = ['-fexceptions'] to ondevice.toml" in FRAMEWORK.read_text()


# -- the observer's lines and the log's failure text ---------------------------------
@pytest.mark.parametrize("chunk", [0, 1, 19])
def test_each_case_gets_the_verdict_boost_test_gave_it(chunk):
    v = parse("hooked_clean", chunk=chunk)
    assert outcomes(v) == CLEAN
    assert v.problems == [] and v.unknown == {}
    fails = v.cases["kernels/fails"]
    assert fails.location == ("cases.cpp", 20)
    assert fails.message.splitlines() == [
        'cases.cpp:20: error: in "kernels/fails": check x == 5 has failed [4 != 5]',
        "Failure occurred in a following context:",
        "x is 4",
        'cases.cpp:21: error: in "kernels/fails": check x == 6 has failed [4 != 6]',
    ]
    assert v.cases["kernels/requires"].message == (
        'cases.cpp:25: fatal error: in "kernels/requires": critical check 1 == 2 has failed'
    )
    assert v.cases["throws"].message == "cases.cpp:33: fatal error: std::runtime_error: boom"
    assert v.cases["kernels/disabled"].message == "disabled in the source (a disabled() or enable_if decorator)"
    # expected_failures(1): its failed check is its passing, as results_collector counts it
    assert 'error: in "expected": check 1 == 2 has failed' in v.cases["expected"].log


def test_a_cases_log_is_its_entering_and_leaving_lines_and_its_output_readable():
    log = parse("hooked_clean").cases["garbage"].log
    assert 'Entering test case "garbage"' in log and 'Leaving test case "garbage"' in log
    assert "\ufffd\ufffd bytes \ufffd( not utf-8" in log and "\x00" not in log


@pytest.mark.parametrize("name, signal_name", [("hooked_segv", "SIGSEGV"), ("hooked_abort", "SIGABRT")])
def test_a_crash_mid_case_is_that_cases_and_the_rest_did_not_run(name, signal_name):
    v = parse(name)
    assert outcomes(v) == {**CLEAN, "ends_the_run": F, "after_it": F}
    assert v.cases["ends_the_run"].message == f"crashed: killed by {signal_name} while this case was running"
    assert v.cases["after_it"].message == f"not run: crashed: killed by {signal_name} before this case"
    assert v.crash is not None and v.crash.case == "ends_the_run" and v.crash.how == signal_name
    assert v.problems == []


def test_boost_tests_lines_printed_by_a_test_that_leaves_with_exit_0_pass_nothing():
    v = parse("hooked_forge")
    assert outcomes(v) == {**CLEAN, "ends_the_run": F, "after_it": F}
    assert v.cases["ends_the_run"].message == "no verdict: output ended while this case was running"
    assert "*** No errors detected" in v.cases["ends_the_run"].log


def test_a_nonce_printed_by_a_test_makes_nothing_of_the_run_believed():
    v = parse("hooked_forge-nonce")
    assert all(o is F for o in outcomes(v).values())
    assert "a second nonce" in v.cases["adds"].message


def test_a_run_without_the_observers_nonce_is_not_believed():
    v = parse("console_clean")
    assert all(o is F for o in outcomes(v).values())
    assert any("printed no nonce" in p for p in v.problems)


def test_on_aarch64_under_qemu_the_verdicts_and_the_crash_are_the_same():
    v = parse("qemu_aarch64_hooked_segv")
    assert outcomes(v) == {**CLEAN, "ends_the_run": F, "after_it": F}
    assert v.cases["kernels/fails"].location == ("cases.cpp", 20)
    assert v.crash is not None and v.crash.case == "ends_the_run"


def test_a_failure_line_printed_for_another_case_or_after_a_pass_moves_nothing():
    stream = (
        b"#ondevice nonce 0123456789abcdef\n"
        b"#ondevice 0123456789abcdef case a\n"
        b'x.cc(3): error: in "b": check forged has failed\n'
        b"#ondevice 0123456789abcdef end a passed\n"
        b'x.cc(4): error: in "a": check after its end has failed\n'
        b"#ondevice 0123456789abcdef case b\n#ondevice 0123456789abcdef end b passed\n"
        b"#ondevice 0123456789abcdef summary cases=2\n"
    )
    parser = BoostTest().parser(("a", "b"))
    for line in stream.decode().splitlines():
        parser.feed_line(line)
    v = parser.verdicts(["a", "b"], RunEnd(exit_code=0))
    assert outcomes(v) == {"a": P, "b": P}
    assert v.problems == []


# -- the log alone (--log_level=test_suite) ---------------------------------------
def test_boost_tests_log_alone_gives_each_case_a_verdict():
    v = text_only("console_clean")
    # the log cannot tell an expected failure from a failure
    assert outcomes(v) == {**CLEAN, "expected": F}
    assert v.cases["kernels/disabled"].message == "skipped: disabled"
    assert v.cases["throws"].location == ("cases.cpp", 33)  # from its last checkpoint
    assert v.cases["throws"].message.splitlines()[1] == 'cases.cpp:33: last checkpoint: "throws" test entry'
    assert v.problems == []


def test_in_boost_tests_log_alone_a_crash_is_the_running_cases():
    v = text_only("console_segv")
    assert v.cases["ends_the_run"].message == "crashed: killed by SIGSEGV while this case was running"
    assert v.cases["after_it"].message == "not run: crashed: killed by SIGSEGV before this case"
    assert v.cases["garbage"].outcome is P


def test_in_boost_tests_log_alone_a_cases_lines_that_look_like_boost_tests_move_nothing():
    """What a running case prints is its log: a checkpoint with no failure before it, another
    case's skip and the closing line fail nothing, skip nothing and end nothing."""
    log = [
        't.cpp(3): Entering test case "a"',
        "main.cpp(7): last checkpoint reached, says the test's own log",
        'Test case "b" is skipped because the test printed this line',
        "*** No errors detected",
        't.cpp(3): Leaving test case "a"; testing time: 10us',
        't.cpp(5): Entering test case "b"',
        't.cpp(5): Leaving test case "b"; testing time: 10us',
        "*** No errors detected",
    ]
    parser = BoostTestParser(("a", "b"))
    for line in log:
        parser.feed_line(line)
    v = parser.verdicts(["a", "b"], RunEnd(exit_code=0))
    assert outcomes(v) == {"a": P, "b": P}
    assert "last checkpoint reached" in v.cases["a"].log
    assert (v.problems, v.unknown) == ([], {})


# -- whole runs: built against Debian's Boost.Test headers, run per case ------------
KERNEL = """
#define BOOST_TEST_MODULE kernels
#include <boost/test/unit_test.hpp>
#include <stdexcept>
BOOST_AUTO_TEST_CASE(adds) { BOOST_TEST(1 + 1 == 2); }
BOOST_AUTO_TEST_SUITE(math)
BOOST_AUTO_TEST_CASE(fails) {
  int x = 4;
  BOOST_TEST(x == 5);
}
BOOST_AUTO_TEST_CASE(requires) { BOOST_REQUIRE(2 == 3); BOOST_CHECK(false); }
BOOST_AUTO_TEST_CASE(skipped, *boost::unit_test::disabled()) {}
BOOST_AUTO_TEST_SUITE_END()
BOOST_AUTO_TEST_CASE(throws) { throw std::runtime_error("boom"); }
BOOST_AUTO_TEST_CASE(crashes) { volatile int *p = nullptr; *p = 1; }
BOOST_AUTO_TEST_CASE(after) {}
"""
# what KERNEL's cases get (written as kernel_test.cc), on every board
KERNEL_VERDICTS = {
    "kernel_test::adds": "PASSED",
    "kernel_test::math/fails": "FAILED",
    "kernel_test::math/requires": "FAILED",
    "kernel_test::math/skipped": "SKIPPED",
    "kernel_test::throws": "FAILED",
    "kernel_test::crashes": "FAILED",
    "kernel_test::after": "FAILED",
}
# no module, no main: ours; and a test that prints Boost.Test's closing lines and leaves
FORGING = """
#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <unistd.h>
BOOST_AUTO_TEST_CASE(first) {}
BOOST_AUTO_TEST_CASE(leaves_early) {
  std::puts("forge_test.cc(6): Leaving test case \\"leaves_early\\"; testing time: 9us");
  std::puts("\\n*** No errors detected");
  std::fflush(stdout);
  _exit(0);
}
BOOST_AUTO_TEST_CASE(never_reached) { BOOST_CHECK(false); }
"""
# written for the shared library: its main comes from unit_test.hpp
DYNAMIC = """
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE dynamic
#include <boost/test/unit_test.hpp>
BOOST_AUTO_TEST_CASE(passes) { BOOST_TEST(true); }
BOOST_AUTO_TEST_CASE(fails) { BOOST_TEST(false); }
"""
# the framework compiled by the source itself
INCLUDED = """
#define BOOST_TEST_MODULE included
#include <boost/test/included/unit_test.hpp>
BOOST_AUTO_TEST_CASE(passes) { BOOST_TEST(true); }
"""


def verdicts(result) -> dict[str, str]:
    """{file::case: PASSED|FAILED|SKIPPED|ERROR} from a -v run's item lines."""
    found = {}
    for line in result.outlines:
        m = re.search(r"(\w+)\.cc::(\S+)\[[\w-]+\] (PASSED|FAILED|SKIPPED|ERROR)\b", line)
        if m:
            found[f"{m.group(1)}::{m.group(2)}"] = m.group(3)
    return found


@pytest.fixture
def boost_project(project, tmp_path_factory):
    """One cache for this worker's Boost.Test runs (the framework compiles in 20 s), and
    -fexceptions, which the framework needs and the boards leave out."""
    project.use_cache(tmp_path_factory.getbasetemp() / "boosttest-cache")
    project.write("ondevice.toml", EXCEPTIONS)
    return project


def test_each_case_is_an_item_with_boost_tests_verdict_and_a_crash_is_the_running_cases(boost_project):
    boost_project.write("kernel_test.cc", KERNEL)
    result = boost_project.run("-v", "-rs")
    assert verdicts(result) == KERNEL_VERDICTS
    text = result.stdout.str()
    assert 'kernel_test.cc:9: error: in "math/fails": check x == 5 has failed [4 != 5]' in text
    assert "> kernel_test.cc:9 " in text  # the source line, with its context
    assert "kernel_test.cc:14: fatal error: std::runtime_error: boom" in text
    assert "disabled in the source (a disabled() or enable_if decorator)" in text
    assert "crashed: killed by SIGSEGV while this case was running" in text
    assert "not run: crashed: killed by SIGSEGV before this case" in text


def test_sources_for_the_static_library_the_shared_one_or_none_all_run(boost_project):
    boost_project.write("forge_test.cc", FORGING)
    boost_project.write("dynamic_test.cc", DYNAMIC)
    boost_project.write("included_test.cc", INCLUDED)
    result = boost_project.run("-v")
    assert verdicts(result) == {
        "dynamic_test::passes": "PASSED",
        "dynamic_test::fails": "FAILED",
        "forge_test::first": "PASSED",
        "forge_test::leaves_early": "FAILED",
        "forge_test::never_reached": "FAILED",
        "included_test::passes": "PASSED",
    }
    assert "no verdict: output ended while this case was running" in result.stdout.str()


def test_without_exceptions_the_build_says_what_to_add(project):
    project.write("forge_test.cc", FORGING)  # no throw of its own: it compiles without exceptions
    result = project.run("-v")
    assert set(verdicts(result).values()) == {"FAILED"}
    assert "add cxxflags = ['-fexceptions'] to ondevice.toml" in result.stdout.str()


@pytest.mark.slow
def test_the_cases_run_per_case_on_arm64_under_qemu(boost_project):
    """Header-only, compiled into the binary: no arm64 Boost package is needed."""
    boost_project.write("kernel_test.cc", KERNEL)
    result = boost_project.run("-v", "--device=qemu", board="rpi")
    assert verdicts(result) == KERNEL_VERDICTS
    text = result.stdout.str()
    assert 'kernel_test.cc:9: error: in "math/fails"' in text
    assert "crashed: killed by SIGSEGV while this case was running" in text
