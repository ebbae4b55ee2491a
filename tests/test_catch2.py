"""Catch2's format: cases from the sources, verdicts from real transcripts, and whole runs.

The transcripts in support/catch2/ were recorded by support/catch2/capture.sh from the cases
beside them: built as pytest-ondevice builds them (our listener and main, the host runtime)
with Debian's Catch2 2.13 on the host and for aarch64 under qemu-aarch64 (-fno-exceptions: a
failed REQUIRE ends the binary), with Catch2's own main and signal handler, and by the
console reporter alone of Catch2 2.13 and 3.7 (v3.version). Each case is run to its end in
several ways: a segfault, an abort, and a test that prints Catch2's lines (or a nonce of its
own) and leaves with _exit(0)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import case_outcomes
from support.transcripts import outcomes, replay

from pytest_ondevice import formats
from pytest_ondevice.formats.catch2 import LISTENER, MAIN, Catch2, Catch2Parser
from pytest_ondevice.formats.verdicts import Outcome, RunEnd
from pytest_ondevice.formats.wordnames import as_word, from_word

SUPPORT = Path(__file__).resolve().parent / "support" / "catch2"
P, F, S = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
CASES = [c.name for c in Catch2().find_cases((SUPPORT / "cases.cpp").read_text())]
V2 = [c for c in CASES if c != "skips"]  # "skips" is compiled for Catch2 v3 only
# what the listener said of each when nothing ended the run early
CLEAN = {
    "adds two numbers": P,
    "fails": F,
    "sections": F,
    "hidden": S,
    "throws": F,
    "garbage": P,
    "may fail": P,
    "ends the run": P,
    "after it": P,
}
NOT_RUN = {"hidden", "after it"}  # after "ends the run" in run order (hidden ones go last)


def parse(name: str, expected: list[str] = V2, chunk: int = 0, parser=None):
    return replay(SUPPORT / name, parser or Catch2().parser(tuple(expected)), expected, chunk)


def text_only(name: str, expected: list[str] = V2):
    """The console reporter's lines alone, as a stream without our listener has them."""
    return parse(name, expected, parser=Catch2Parser(tuple(expected)))


# -- the sources -----------------------------------------------------------------
def test_cases_are_named_as_the_source_writes_them_at_their_lines():
    src = r"""
    #include <catch2/catch.hpp>
    TEST_CASE("adds two numbers", "[math]") {}
    // TEST_CASE("commented out") {}
    /* TEST_CASE("in a block comment") {} */
    #define MY_CASE(n) TEST_CASE(n)
    SCENARIO("vectors grow") {}
    TEST_CASE_METHOD(Fixture<int, 2>, "uses a fixture", "[.]") {}
    CATCH_TEST_CASE( "prefixed" ) {}
    TEST_CASE("joined " "literals \"quoted\"\ttab") {}
    TEMPLATE_TEST_CASE("typed", "", int, float) {}
    TEST_CASE(NAME_FROM_A_MACRO) {}
    TEST_CASE("adds two numbers") {}
    """
    cases = Catch2().find_cases(src)
    assert [(c.name, c.line, c.style) for c in cases] == [
        ("adds two numbers", 3, "catch2"),
        ("Scenario: vectors grow", 7, "catch2"),
        ("uses a fixture", 8, "catch2"),
        ("prefixed", 9, "catch2"),
        ('joined literals "quoted"\ttab', 10, "catch2"),
    ]


def test_the_transcripts_cases_are_found_where_the_source_declares_them():
    lines = (SUPPORT / "cases.cpp").read_text().splitlines()
    for case in Catch2().find_cases((SUPPORT / "cases.cpp").read_text()):
        assert f'TEST_CASE("{case.name}"' in lines[case.line - 1]
    assert [*CLEAN, "skips"] == CASES


@pytest.mark.parametrize(
    "source, own",
    [
        ('TEST_CASE("a") {}', False),
        ("#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n", True),
        ("  #  define CATCH_CONFIG_RUNNER\n#include <catch2/catch.hpp>\nint main(int c, char **v) {}", True),
        ("#include <catch2/catch.hpp>\nint main(int argc, char **argv) { return 0; }", True),
        ("// #define CATCH_CONFIG_MAIN\n/* int main(int c, char **v) {} */\n#include <catch2/catch.hpp>\n", False),
        ('#include <catch2/catch.hpp>\nconst char *s = "/*";\n#define CATCH_CONFIG_MAIN\n', True),
    ],
)
def test_a_binary_links_our_listener_and_catch2s_main_unless_the_source_has_one(source, own):
    needs = Catch2().needs(source)
    assert needs.sources == ((LISTENER,) if own else (LISTENER, MAIN))
    assert needs.pkg_config == ()  # header-only: /usr/include is on every Debian compiler's path
    assert needs.debian_package == "catch2"
    assert all(p.is_file() for p in (LISTENER, MAIN))


def test_a_source_including_catch2_is_catch2_and_needs_an_os():
    assert formats.for_source("#include <catch2/catch.hpp>\n").name == "catch2"
    assert formats.for_source('#include "third_party/catch.hpp"\n').name == "catch2"
    assert Catch2.kinds == ("host", "linux")
    assert Catch2.run_args == ("--durations", "yes")  # each case's time in its log; the text mode's case ends


@pytest.mark.parametrize("name", ["adds two numbers", "100%", "tab\there", "", "ünïcode stays", "a%20b"])
def test_a_name_is_one_word_on_the_stamped_lines_and_comes_back_whole(name):
    word = as_word(name)
    assert " " not in word and "\t" not in word and word
    assert from_word(word) == name


# -- the listener's lines ----------------------------------------------------------
@pytest.mark.parametrize("chunk", [0, 1, 13])
def test_each_case_gets_the_verdict_catch2_gave_it(chunk):
    v = parse("v2_hooked_clean", chunk=chunk)
    assert outcomes(v) == CLEAN
    assert v.problems == [] and v.unknown == {}
    fails = v.cases["fails"]
    assert fails.location == ("cases.cpp", 18)
    assert fails.message.splitlines() == [
        "cases.cpp:18: FAILED:",
        "  CHECK( x == 5 )",
        "with expansion:",
        "  4 == 5",
        "with message:",
        "  x is 4",
    ]
    assert v.cases["sections"].message.splitlines()[:2] == ["cases.cpp:24: FAILED:", "in section: outer / inner b"]
    assert v.cases["throws"].message.endswith("due to unexpected exception with message:\n  boom")
    assert v.cases["hidden"].message == "hidden in the source (tag [!hide][.]): run only when named"
    assert "FAILED" in v.cases["may fail"].log  # Catch2 printed its failure; it is the case's passing


def test_a_cases_garbage_output_is_its_log_in_readable_text():
    v = parse("v2_hooked_clean")
    log = v.cases["garbage"].log
    assert "\ufffd\ufffd bytes \ufffd( not utf-8" in log and "\x00" not in log
    assert "0.000 s: garbage" in log  # Catch2's own time line, before our end line


@pytest.mark.parametrize("name, signal_name", [("v2_hooked_segv", "SIGSEGV"), ("v2_hooked_abort", "SIGABRT")])
def test_a_crash_mid_case_is_that_cases_and_the_rest_did_not_run(name, signal_name):
    v = parse(name)
    assert outcomes(v) == {**CLEAN, "ends the run": F, **dict.fromkeys(NOT_RUN, F)}
    assert v.cases["ends the run"].message == f"crashed: killed by {signal_name} while this case was running"
    assert v.cases["after it"].message == f"not run: crashed: killed by {signal_name} before this case"
    assert v.crash is not None and v.crash.case == "ends the run" and v.crash.how == signal_name
    assert v.problems == []


def test_catch2s_own_signal_handler_ends_the_case_and_the_run_but_the_crash_stays_the_cases():
    """A source with CATCH_CONFIG_MAIN: Catch2 reports the signal, ends the case and the run,
    then re-raises it; the listener tells the failure and nothing after it."""
    v = parse("v2_hooked_own_main_segv")
    assert outcomes(v) == {**CLEAN, "ends the run": F, **dict.fromkeys(NOT_RUN, F)}
    assert v.cases["ends the run"].message.splitlines() == [
        "cases.cpp:44: FAILED:",
        "due to a fatal error condition:",
        "  SIGSEGV - Segmentation violation signal",
        "crashed: killed by SIGSEGV while this case was running",
    ]
    assert v.cases["fails"].outcome is F and v.cases["may fail"].outcome is P
    assert v.problems == []


def test_catch2s_lines_printed_by_a_test_that_leaves_with_exit_0_pass_nothing():
    """The test prints its own time line, the next case's, our end line with a made-up
    nonce and Catch2's `All tests passed`, then calls _exit(0)."""
    v = parse("v2_hooked_forge")
    assert outcomes(v) == {**CLEAN, "ends the run": F, **dict.fromkeys(NOT_RUN, F)}
    assert v.cases["ends the run"].message == "no verdict: output ended while this case was running"
    assert v.cases["after it"].message.startswith("not run")
    assert "All tests passed (3 assertions in 9 test cases)" in v.cases["ends the run"].log


def test_a_nonce_printed_by_a_test_makes_nothing_of_the_run_believed():
    v = parse("v2_hooked_forge-nonce")
    assert {n for n, o in outcomes(v).items() if o is not F} == set()
    assert "a second nonce" in v.cases["adds two numbers"].message
    assert v.cases["fails"].location == ("cases.cpp", 18)  # a failure stays one


def test_a_run_without_the_listeners_nonce_is_not_believed():
    v = parse("v2_console_clean")
    assert all(o is F for o in outcomes(v).values())
    assert any("printed no nonce" in p for p in v.problems)


def test_on_aarch64_without_exceptions_a_failed_require_ends_the_binary_in_its_case():
    v = parse("qemu_aarch64_hooked")
    ran = {"adds two numbers": P, "fails": F, "sections": F, "throws": F}
    assert outcomes(v) == {**ran, **{n: F for n in V2 if n not in ran}}
    assert v.cases["throws"].message.splitlines() == [
        "cases.cpp:33: FAILED:",
        "  REQUIRE( 1 == 2 )",
        "crashed: killed by SIGABRT while this case was running",
    ]
    assert v.cases["garbage"].message == "not run: crashed: killed by SIGABRT before this case"
    assert v.crash is not None and v.crash.case == "throws"


def test_a_stamped_fail_line_cannot_pass_a_case_and_an_end_for_another_case_moves_nothing():
    stream = (
        b"#ondevice nonce 0123456789abcdef\n"
        b"#ondevice 0123456789abcdef case a%20b\n"
        b"#ondevice 0123456789abcdef end c passed\n"
        b"#ondevice 0123456789abcdef fail a%20b x.cc:3: FAILED:\n"
        b"#ondevice 0123456789abcdef end a%20b passed\n"
        b"#ondevice 0123456789abcdef case c\n#ondevice 0123456789abcdef end c passed\n"
        b"#ondevice 0123456789abcdef summary cases=2\n"
    )
    parser = Catch2().parser(("a b", "c"))
    for line in stream.decode().splitlines():
        parser.feed_line(line)
    v = parser.verdicts(["a b", "c"], RunEnd(exit_code=1))
    assert outcomes(v) == {"a b": F, "c": P}
    assert v.cases["a b"].location == ("x.cc", 3)


# -- the console reporter's lines alone (v2 and v3) -------------------------------
def test_catch2_v2s_console_lines_alone_give_each_case_a_verdict():
    v = text_only("v2_console_clean")
    # the text cannot know a [!mayfail] failure from a failure, nor a hidden case from one not run
    assert outcomes(v) == {**CLEAN, "may fail": F, "hidden": F}
    assert v.cases["hidden"].message.startswith("not run: the device never started this case")
    assert v.cases["fails"].location == ("cases.cpp", 18)
    assert v.cases["fails"].message.endswith("with message:\n  x is 4")
    assert v.problems == []


def test_catch2_v3s_console_lines_alone_give_each_case_a_verdict():
    assert (SUPPORT / "v3.version").read_text().startswith("Catch2 v3.")
    v = text_only("v3_console_clean", CASES)
    assert outcomes(v) == {**CLEAN, "may fail": F, "hidden": F, "skips": S}
    assert v.cases["skips"].message == "cases.cpp:70: not on this board"  # v3's SKIP()
    assert v.cases["sections"].outcome is F  # v3 times a case once per leaf section: still one case
    assert v.problems == []


@pytest.mark.parametrize("name, expected", [("v2_console_segv", V2), ("v3_console_segv", CASES)])
def test_in_the_console_lines_catch2s_fatal_error_is_the_running_cases_crash(name, expected):
    """Catch2's handler prints the case's end and the totals before the signal ends the
    binary: the crash stays the case's, not the whole run's."""
    v = text_only(name, expected)
    crashed = v.cases["ends the run"]
    assert crashed.outcome is F
    assert crashed.message.splitlines()[-2:] == [
        "  SIGSEGV - Segmentation violation signal",
        "crashed: killed by SIGSEGV while this case was running",
    ]
    assert v.cases["after it"].message == "not run: crashed: killed by SIGSEGV before this case"
    assert v.cases["adds two numbers"].outcome is P


def test_in_the_console_lines_a_crash_before_any_line_of_the_case_is_the_next_cases_in_run_order():
    data = b"0.000 s: a\n-----\nchatter\n"  # a passing case prints nothing before its time line
    parser = Catch2Parser(("a", "b c", "d"))
    for line in data.decode().splitlines():
        parser.feed_line(line)
    v = parser.verdicts(["a", "b c", "d"], RunEnd(signal="SIGSEGV"))
    assert outcomes(v) == {"a": P, "b c": F, "d": F}
    assert v.cases["b c"].message.startswith("crashed: killed by SIGSEGV while this case was running")
    assert "first case in run order without a verdict" in v.cases["b c"].message


def test_the_console_totals_must_agree_with_the_lines():
    lines = "0.000 s: a\n0.000 s: b\n" + "=" * 79 + "\ntest cases: 3 | 3 passed\n"
    parser = Catch2Parser(("a", "b"))
    for line in lines.splitlines():
        parser.feed_line(line)
    v = parser.verdicts(["a", "b"], RunEnd(exit_code=0))
    assert v.problems == ["the closing summary says 3 total, but the output shows 2"]


# -- whole runs: built against Debian's Catch2, run per case ------------------------
KERNEL = """
#include <catch2/catch.hpp>
TEST_CASE("adds two numbers", "[kernel]") { CHECK(1 + 1 == 2); }
TEST_CASE("fails") {
  int x = 4;
  CHECK(x == 5);
}
TEST_CASE("sections") {
  SECTION("small") { CHECK(1 == 1); }
  SECTION("large") { CHECK(2 == 3); }
}
TEST_CASE("hidden", "[.]") { CHECK(false); }
TEST_CASE("may fail", "[!mayfail]") { CHECK(false); }
TEST_CASE("last") {}
"""
# what KERNEL's cases get, on every board
KERNEL_VERDICTS = {
    "adds two numbers": "PASSED",
    "fails": "FAILED",
    "sections": "FAILED",
    "hidden": "SKIPPED",
    "may fail": "PASSED",
    "last": "PASSED",
}
# REQUIRE and exceptions: the boards build with -fno-exceptions, where a failed REQUIRE ends the binary
REQUIRING = """
#include <catch2/catch.hpp>
#include <stdexcept>
TEST_CASE("requires") {
  REQUIRE(2 == 3);
  CHECK(false);  // not reached
}
TEST_CASE("after") { CHECK(true); }
"""
REQUIRING_VERDICTS = {"requires": "FAILED", "after": "FAILED"}  # without exceptions
THROWING = """
TEST_CASE("throws") { throw std::runtime_error("boom"); }
TEST_CASE("checks a throw") { REQUIRE_THROWS_AS(throw std::logic_error("x"), std::logic_error); }
"""
# a source with Catch2's main of its own: Catch2's signal handler is in charge
CRASHING = """
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
TEST_CASE("before") {}
TEST_CASE("crashes") { volatile int *p = nullptr; *p = 1; }
TEST_CASE("after") {}
"""
FORGING = """
#include <catch2/catch.hpp>
#include <cstdio>
#include <unistd.h>
TEST_CASE("first") {}
TEST_CASE("leaves early") {
  std::puts("0.000 s: leaves early\\n0.000 s: never reached");
  std::puts("===============================================================================");
  std::puts("All tests passed (2 assertions in 3 test cases)");
  std::fflush(stdout);
  _exit(0);
}
TEST_CASE("never reached") { CHECK(false); }
"""


@pytest.fixture
def catch2_project(project, tmp_path_factory):
    """One cache for this worker's Catch2 runs: Catch2's main is compiled once (20 s)."""
    project.use_cache(tmp_path_factory.getbasetemp() / "catch2-cache")
    return project


def test_each_case_is_an_item_with_catch2s_verdict_and_a_failure_shows_its_line(catch2_project):
    catch2_project.write("kernel_catch2_test.cc", KERNEL)
    result = catch2_project.run("-v", "-rs")
    assert case_outcomes(result) == KERNEL_VERDICTS
    text = result.stdout.str()
    assert "at kernel_catch2_test.cc:6" in text  # where the failing check is
    assert "> kernel_catch2_test.cc:6 " in text  # the source line, with its context
    assert "in section: large" in text and "CHECK( 2 == 3 )" in text
    assert "hidden in the source (tag [!hide][.]): run only when named" in text


def test_without_exceptions_a_failed_require_ends_the_binary_in_its_case(catch2_project):
    catch2_project.write("require_catch2_test.cc", REQUIRING)
    result = catch2_project.run("-v")
    assert case_outcomes(result) == REQUIRING_VERDICTS
    text = result.stdout.str()
    assert "REQUIRE( 2 == 3 )" in text and "at require_catch2_test.cc:5" in text
    assert "crashed: killed by SIGABRT while this case was running" in text
    assert "not run: crashed: killed by SIGABRT before this case" in text


def test_with_exceptions_a_failed_require_and_a_throw_end_their_case_only(catch2_project):
    catch2_project.write("require_catch2_test.cc", REQUIRING + THROWING)
    catch2_project.write("ondevice.toml", 'cxxflags = ["-fexceptions"]\n')
    result = catch2_project.run("-v")
    assert case_outcomes(result) == {
        "requires": "FAILED",
        "after": "PASSED",
        "throws": "FAILED",
        "checks a throw": "PASSED",
    }
    text = result.stdout.str()
    assert "due to unexpected exception with message:" in text and "  boom" in text
    assert "CHECK( false )" not in text  # REQUIRE ended its case there


def test_a_crash_is_the_running_cases_with_catch2s_own_main_and_signal_handler(catch2_project):
    catch2_project.write("crash_catch2_test.cc", CRASHING)
    result = catch2_project.run("-v")
    assert case_outcomes(result) == {"before": "PASSED", "crashes": "FAILED", "after": "FAILED"}
    text = result.stdout.str()
    assert "SIGSEGV - Segmentation violation signal" in text
    assert "crashed: killed by SIGSEGV while this case was running" in text
    assert "not run: crashed: killed by SIGSEGV before this case" in text


def test_a_test_printing_catch2s_closing_lines_and_leaving_early_passes_nothing(catch2_project):
    catch2_project.write("forge_catch2_test.cc", FORGING)
    result = catch2_project.run("-v")
    assert case_outcomes(result) == {"first": "PASSED", "leaves early": "FAILED", "never reached": "FAILED"}
    assert "no verdict: output ended while this case was running" in result.stdout.str()


def test_a_case_is_listed_and_selected_by_its_name_with_spaces(catch2_project):
    catch2_project.write("kernel_catch2_test.cc", KERNEL)
    listed = catch2_project.run("--collect-only", "-q")
    assert "kernel_catch2_test.cc::adds two numbers[host]" in listed.stdout.str()
    one = catch2_project.run("kernel_catch2_test.cc::adds two numbers[host]")
    one.assert_outcomes(passed=1)
    catch2_project.run("-k", "last or fails").assert_outcomes(passed=1, failed=1, deselected=4)


@pytest.mark.slow
def test_the_cases_run_per_case_on_arm64_under_qemu(catch2_project):
    """Header-only: the cross compiler finds Debian's Catch2 in /usr/include."""
    catch2_project.write("kernel_catch2_test.cc", KERNEL)
    catch2_project.write("require_catch2_test.cc", REQUIRING)
    result = catch2_project.run("-v", "--device=qemu", board="rpi")
    assert case_outcomes(result) == {**KERNEL_VERDICTS, **REQUIRING_VERDICTS}
    text = result.stdout.str()
    assert "at kernel_catch2_test.cc:6" in text
    assert "crashed: killed by SIGABRT while this case was running" in text
