"""doctest's format: cases from the sources, verdicts from real transcripts, and whole runs.

The transcripts in support/doctest/ were recorded by support/doctest/capture.sh from the
cases beside them: built as pytest-ondevice builds them (our listener and main, the host
runtime) with Debian's doctest 2.4.9 on the host and for aarch64 under qemu-aarch64, with
doctest's own main and signal handler, and by the console reporter alone. The case "ends the
run" ends it in several ways: a segfault, an abort, and a test that prints doctest's lines
(or a nonce of its own) and leaves with _exit(0)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import case_outcomes
from support.transcripts import outcomes, replay

from pytest_ondevice import formats
from pytest_ondevice.formats.doctest import LISTENER, MAIN, Doctest, DoctestParser
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

SUPPORT = Path(__file__).resolve().parent / "support" / "doctest"
P, F, S = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
CASES = [c.name for c in Doctest().find_cases((SUPPORT / "cases.cpp").read_text())]
# what the listener said of each when nothing ended the run early
CLEAN = {
    "adds two numbers": P,
    "fails": F,
    "kernels/subcases": F,
    "kernels/skipped": S,
    "throws": F,
    "garbage": P,
    "may fail": P,
    "should fail": F,
    "fails by hand": F,
    "ends the run": P,
    "after it": P,
}


def parse(name: str, expected: list[str] = CASES, chunk: int = 0, parser=None):
    return replay(SUPPORT / name, parser or Doctest().parser(tuple(expected)), expected, chunk)


def text_only(name: str):
    """The console reporter's lines alone, as a stream without our listener has them."""
    return parse(name, parser=DoctestParser(tuple(CASES)))


# -- the sources -----------------------------------------------------------------
def test_cases_are_named_by_their_suite_and_name_at_their_lines():
    src = r"""
    #include <doctest/doctest.h>
    TEST_CASE("adds two numbers") {}
    // TEST_CASE("commented out") {}
    TEST_SUITE("math") {
      TEST_CASE("adds") { if (1) { CHECK(1); } }
      TEST_CASE_FIXTURE(Fixture<int, 2>, "uses a fixture") {}
    }
    TEST_CASE("after the suite" * doctest::skip()) {}
    TEST_SUITE_BEGIN("begun");
    SCENARIO("grows") {}
    TEST_SUITE("inner") { TEST_CASE("nested") {} }
    DOCTEST_TEST_CASE("prefixed") {}
    TEST_SUITE_END();
    TEST_CASE("math/adds") {}
    TEST_CASE_TEMPLATE("typed", T, int, float) {}
    """
    cases = Doctest().find_cases(src)
    assert [(c.name, c.line, c.style) for c in cases] == [
        ("adds two numbers", 3, "doctest"),
        ("math/adds", 6, "doctest"),
        ("math/uses a fixture", 7, "doctest"),
        ("after the suite", 9, "doctest"),
        ("begun/  Scenario: grows", 11, "doctest"),
        ("inner/nested", 12, "doctest"),
        ("begun/prefixed", 13, "doctest"),
    ]


def test_the_transcripts_cases_are_found_where_the_source_declares_them():
    lines = (SUPPORT / "cases.cpp").read_text().splitlines()
    for case in Doctest().find_cases((SUPPORT / "cases.cpp").read_text()):
        assert f'TEST_CASE("{case.name.rpartition("/")[2]}"' in lines[case.line - 1]
    assert list(CLEAN) == CASES


@pytest.mark.parametrize(
    "source, own",
    [
        ('TEST_CASE("a") {}', False),
        ("#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN\n#include <doctest/doctest.h>\n", True),
        ("#define DOCTEST_CONFIG_IMPLEMENT\n#include <doctest/doctest.h>\nint main(int c, char **v) {}", True),
        ("// #define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN\n#include <doctest/doctest.h>\n", False),
    ],
)
def test_a_binary_links_our_listener_and_doctests_main_unless_the_source_has_one(source, own):
    needs = Doctest().needs(source)
    assert needs.sources == ((LISTENER,) if own else (LISTENER, MAIN))
    assert needs.pkg_config == ()  # header-only: /usr/include is on every Debian compiler's path
    assert needs.debian_package == "doctest-dev"
    assert all(p.is_file() for p in (LISTENER, MAIN))


def test_a_source_including_doctest_is_doctest_and_needs_an_os():
    assert formats.for_source("#include <doctest/doctest.h>\n").name == "doctest"
    assert formats.for_source('#include "doctest.h"\n').name == "doctest"
    assert Doctest.kinds == ("host", "linux")
    assert Doctest.run_args == ("--duration=true",)


# -- the listener's lines ----------------------------------------------------------
@pytest.mark.parametrize("chunk", [0, 1, 17])
def test_each_case_gets_the_verdict_doctest_gave_it(chunk):
    v = parse("hooked_clean", chunk=chunk)
    assert outcomes(v) == CLEAN
    assert v.problems == [] and v.unknown == {}
    assert v.cases["fails"].location == ("cases.cpp", 18)
    assert v.cases["fails"].message.splitlines() == [
        "cases.cpp:18: ERROR: CHECK( x == 5 ) is NOT correct!",
        "  values: CHECK( 4 == 5 )",
        "  logged: x is 4",
    ]
    assert v.cases["kernels/subcases"].message.splitlines()[:2] == [
        "cases.cpp:25: ERROR: CHECK( 1 == 2 ) is NOT correct!",
        "in subcase: outer / inner b",
    ]
    assert v.cases["throws"].message == "cases.cpp:32: ERROR: test case THREW exception: boom"
    assert v.cases["kernels/skipped"].message == "skipped in the source (doctest::skip)"
    assert v.cases["should fail"].message == "marked should_fail, but no assertion failed"
    assert v.cases["fails by hand"].message == "cases.cpp:48: ERROR: by hand"  # MESSAGE is no failure
    assert "Allowed to fail so marking it as not failed" in v.cases["may fail"].log


def test_a_cases_log_holds_its_output_readable_and_doctests_time_line():
    log = parse("hooked_clean").cases["garbage"].log
    assert "\ufffd\ufffd bytes \ufffd( not utf-8" in log and "\x00" not in log
    assert re.search(r"^0\.\d+ s: garbage$", log, re.MULTILINE)  # our end comes after doctest's


@pytest.mark.parametrize("name, signal_name", [("hooked_segv", "SIGSEGV"), ("hooked_abort", "SIGABRT")])
def test_a_crash_mid_case_is_that_cases_and_the_rest_did_not_run(name, signal_name):
    v = parse(name)
    assert outcomes(v) == {**CLEAN, "ends the run": F, "after it": F}
    assert v.cases["ends the run"].message == f"crashed: killed by {signal_name} while this case was running"
    assert v.cases["after it"].message == f"not run: crashed: killed by {signal_name} before this case"
    assert v.crash is not None and v.crash.case == "ends the run" and v.crash.how == signal_name
    assert v.problems == []


def test_doctests_own_signal_handler_ends_the_case_and_the_run_but_the_crash_stays_the_cases():
    v = parse("hooked_own_main_segv")
    assert outcomes(v) == {**CLEAN, "ends the run": F, "after it": F}
    assert v.cases["ends the run"].message.splitlines() == [
        "cases.cpp:52: FATAL ERROR: test case CRASHED: SIGSEGV - Segmentation violation signal",
        "crashed: killed by SIGSEGV while this case was running",
    ]
    assert v.cases["ends the run"].location == ("cases.cpp", 52)
    assert v.problems == []


def test_doctests_lines_printed_by_a_test_that_leaves_with_exit_0_pass_nothing():
    v = parse("hooked_forge")
    assert outcomes(v) == {**CLEAN, "ends the run": F, "after it": F}
    assert v.cases["ends the run"].message == "no verdict: output ended while this case was running"
    assert "[doctest] Status: SUCCESS!" in v.cases["ends the run"].log


def test_a_nonce_printed_by_a_test_makes_nothing_of_the_run_believed():
    v = parse("hooked_forge-nonce")
    assert all(o is F for o in outcomes(v).values())
    assert "a second nonce" in v.cases["adds two numbers"].message


def test_a_run_without_the_listeners_nonce_is_not_believed():
    v = parse("console_clean")
    assert all(o is F for o in outcomes(v).values())
    assert any("printed no nonce" in p for p in v.problems)


def test_on_aarch64_under_qemu_the_verdicts_and_the_crash_are_the_same():
    v = parse("qemu_aarch64_hooked_segv")
    assert outcomes(v) == {**CLEAN, "ends the run": F, "after it": F}
    # built with -fno-exceptions: the source's "throws" is a failed CHECK there
    assert v.cases["throws"].location == ("cases.cpp", 34)
    assert v.crash is not None and v.crash.case == "ends the run"


# -- the console reporter's lines alone ------------------------------------------
def test_doctests_console_lines_alone_give_each_case_a_verdict():
    v = text_only("console_clean")
    # the text cannot know a may_fail failure from a failure, and shows no skipped case
    assert outcomes(v) == {**CLEAN, "may fail": F, "kernels/skipped": F}
    assert v.cases["kernels/skipped"].message.startswith("not run: the device never started this case")
    assert v.cases["fails"].message.endswith("  logged: x is 4")
    assert v.cases["throws"].location == ("cases.cpp", 32)
    assert v.cases["should fail"].message == "Should have failed but didn't! Marking it as failed!"
    assert v.problems == []


def test_in_the_console_lines_doctests_crash_report_is_the_running_cases_crash():
    v = text_only("console_segv")
    assert v.cases["ends the run"].message.splitlines() == [
        "cases.cpp:52: FATAL ERROR: test case CRASHED: SIGSEGV - Segmentation violation signal",
        "crashed: killed by SIGSEGV while this case was running",
    ]
    assert v.cases["after it"].message == "not run: crashed: killed by SIGSEGV before this case"
    assert v.cases["garbage"].outcome is P


def test_in_the_console_lines_a_crash_before_a_cases_heading_is_the_next_cases_in_run_order():
    sep = "=" * 79
    data = f"{sep}\nx.cc:3:\nTEST SUITE: s\nTEST CASE:  a\n\n0.000001 s: a\nchatter\n"
    parser = DoctestParser(("s/a", "b c", "d"))
    for line in data.splitlines():
        parser.feed_line(line)
    v = parser.verdicts(["s/a", "b c", "d"], RunEnd(signal="SIGSEGV"))
    assert outcomes(v) == {"s/a": P, "b c": F, "d": F}
    assert "first case in run order without one" in v.cases["b c"].message


# -- whole runs: built against Debian's doctest, run per case ------------------------
KERNEL = """
#include <doctest/doctest.h>
#include <cstdio>
#include <unistd.h>
TEST_CASE("adds two numbers") { CHECK(1 + 1 == 2); }
TEST_SUITE("kernels") {
  TEST_CASE("fails") {
    int x = 4;
    CHECK(x == 5);
  }
  TEST_CASE("subcases") {
    SUBCASE("small") { CHECK(1 == 1); }
    SUBCASE("large") { CHECK(2 == 3); }
  }
}
TEST_CASE("skipped" * doctest::skip()) { CHECK(false); }
TEST_CASE("crashes") { volatile int *p = nullptr; *p = 1; }
TEST_CASE("after") {}
"""
# what KERNEL's cases get, on every board
KERNEL_VERDICTS = {
    "adds two numbers": "PASSED",
    "kernels/fails": "FAILED",
    "kernels/subcases": "FAILED",
    "skipped": "SKIPPED",
    "crashes": "FAILED",
    "after": "FAILED",
}
FORGING = """
#include <doctest/doctest.h>
#include <cstdio>
#include <unistd.h>
TEST_CASE("first") {}
TEST_CASE("leaves early") {
  std::puts("0.000001 s: leaves early");
  std::puts("[doctest] test cases: 3 | 3 passed | 0 failed | 0 skipped");
  std::puts("[doctest] Status: SUCCESS!");
  std::fflush(stdout);
  _exit(0);
}
TEST_CASE("never reached") { CHECK(false); }
"""
# doctest's REQUIRE does not compile under the boards' -fno-exceptions: a project adds -fexceptions
REQUIRING = """
#include <doctest/doctest.h>
#include <stdexcept>
TEST_CASE("requires") {
  REQUIRE(2 == 3);
  CHECK(false);  // not reached
}
TEST_CASE("throws") { throw std::runtime_error("boom"); }
TEST_CASE("after") { CHECK(true); }
"""


def test_each_case_is_an_item_with_doctests_verdict_and_a_crash_is_the_running_cases(project):
    project.write("kernel_doctest_test.cc", KERNEL)
    result = project.run("-v", "-rs")
    assert case_outcomes(result) == KERNEL_VERDICTS
    text = result.stdout.str()
    assert "at kernel_doctest_test.cc:9" in text  # where the failing check is
    assert "> kernel_doctest_test.cc:9 " in text  # the source line, with its context
    assert "in subcase: large" in text
    assert "skipped in the source (doctest::skip)" in text
    assert "crashed: killed by SIGSEGV while this case was running" in text
    assert "not run: crashed: killed by SIGSEGV before this case" in text


def test_a_test_printing_doctests_closing_lines_and_leaving_early_passes_nothing(project):
    project.write("forge_doctest_test.cc", FORGING)
    result = project.run("-v")
    assert case_outcomes(result) == {"first": "PASSED", "leaves early": "FAILED", "never reached": "FAILED"}
    assert "no verdict: output ended while this case was running" in result.stdout.str()


def test_with_exceptions_a_failed_require_and_a_throw_end_their_case_only(project):
    project.write("require_doctest_test.cc", REQUIRING)
    project.write("ondevice.toml", 'cxxflags = ["-fexceptions"]\n')
    result = project.run("-v")
    assert case_outcomes(result) == {"requires": "FAILED", "throws": "FAILED", "after": "PASSED"}
    text = result.stdout.str()
    assert "require_doctest_test.cc:5: FATAL ERROR: REQUIRE( 2 == 3 ) is NOT correct!" in text
    assert "test case THREW exception: boom" in text


def test_a_source_with_doctests_main_of_its_own_keeps_it(project):
    project.write(
        "own_main_doctest_test.cc",
        """
        #define DOCTEST_CONFIG_IMPLEMENT
        #include <doctest/doctest.h>
        TEST_CASE("passes") {}
        int main(int argc, char **argv) {
          doctest::Context context(argc, argv);
          return context.run();
        }
        """,
    )
    result = project.run("-v")
    assert case_outcomes(result) == {"passes": "PASSED"}


@pytest.mark.slow
def test_the_cases_run_per_case_on_arm64_under_qemu(project):
    """Header-only: the cross compiler finds Debian's doctest in /usr/include."""
    project.write("kernel_doctest_test.cc", KERNEL)
    result = project.run("-v", "--device=qemu", board="rpi")
    assert case_outcomes(result) == KERNEL_VERDICTS
    text = result.stdout.str()
    assert "at kernel_doctest_test.cc:9" in text
    assert "crashed: killed by SIGSEGV while this case was running" in text
