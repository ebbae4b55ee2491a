"""GoogleTest and CppUTest sources as users have them, built and run per case (real
libraries from Debian: host, and arm64 under qemu-user); a third party's format."""

from __future__ import annotations

import re
import shutil
import textwrap

import pytest
from conftest import EXAMPLES

GTEST = """
#include <gtest/gtest.h>
#include <cstdlib>
TEST(Kernel, Adds) { EXPECT_EQ(2, 1 + 1); }
TEST(Kernel, Fails) {
  EXPECT_EQ(5, 2 + 2) << "off by one";
}
TEST(Kernel, Crashes) { if (!getenv("NO_CRASH")) { volatile int *p = nullptr; *p = 1; } }
TEST(Kernel, After) {}
"""

CPPUTEST = """
#include <CppUTest/TestHarness.h>
#include <cstdlib>
TEST_GROUP(Kernel) {};
TEST(Kernel, After) {}
TEST(Kernel, Crashes) { if (!getenv("NO_CRASH")) { volatile int *p = nullptr; *p = 1; } }
TEST(Kernel, Fails) {
  CHECK_EQUAL(5, 2 + 2);
}
TEST(Kernel, Adds) { CHECK_EQUAL(2, 1 + 1); }
"""


def verdicts(result, with_file: bool = False) -> dict[str, str]:
    found = {}
    for line in result.outlines:
        m = re.search(r"(\w+)\.\w+::(\S+)\[\S+\] (PASSED|FAILED|SKIPPED|ERROR)", line)
        if m:
            found[f"{m.group(1)}::{m.group(2)}" if with_file else m.group(2)] = m.group(3)
    return found


@pytest.mark.parametrize("harness, source, line", [("gtest", GTEST, 6), ("cpputest", CPPUTEST, 8)])
def test_a_failing_case_shows_its_line_and_a_crash_names_the_running_case(project, harness, source, line):
    project.write(f"kernel_{harness}_test.cc", source)
    result = project.run("-v")
    assert verdicts(result) == {
        "Kernel.Adds": "PASSED",
        "Kernel.Fails": "FAILED",
        "Kernel.Crashes": "FAILED",
        "Kernel.After": "FAILED",
    }
    text = result.stdout.str()
    assert f"at kernel_{harness}_test.cc:{line}" in text  # where the failing check is
    assert f"> kernel_{harness}_test.cc:{line} " in text  # the source line, shown with its context
    assert "crashed: killed by SIGSEGV while this case was running" in text
    assert "not run: crashed: killed by SIGSEGV before this case" in text


def test_gtest_case_selected_alone_and_listed_without_building(project):
    project.write("kernel_test.cc", GTEST)
    listed = project.run("--collect-only", "-q")
    assert "kernel_test.cc::Kernel.Fails[host]" in listed.stdout.str()
    assert not (project.path / "_cache").exists() or not any((project.path / "_cache").rglob("*.o"))
    one = project.run("-k", "Adds")
    one.assert_outcomes(passed=1, deselected=3)


def test_format_declared_in_ondevice_toml_for_one_file(project):
    # a header of the project's own that wraps gtest: nothing to tell the format from
    project.write("my_testing.h", "#include <gtest/gtest.h>\n")
    project.write("wrapped_test.cc", '#include "my_testing.h"\nTEST(W, Works) { EXPECT_TRUE(true); }\n')
    project.write("ondevice.toml", '[files."wrapped_test.cc"]\nformat = "gtest"\n')
    project.run().assert_outcomes(passed=1)
    project.write("typo/ondevice.toml", 'format = "gtests"\n')
    project.write("typo/other_test.cc", "#include <gtest/gtest.h>\nTEST(W, Works) {}\n")
    typo = project.run("typo")
    assert typo.ret == pytest.ExitCode.INTERRUPTED  # a collection error, as a broken test file is
    known = "known: boosttest, catch2, cpputest, doctest, exitcode, exitcode_will_fail, gtest, libtest, tflm, unity"
    typo.stdout.fnmatch_lines([f"*typo/ondevice.toml: unknown test format 'gtests'; {known}"])


def test_a_harness_needing_an_os_is_skipped_on_bare_metal(project):
    project.write("kernel_test.cc", GTEST)
    result = project.run("-rs", "--build-only", board="mps2-an386")
    result.assert_outcomes(skipped=4)
    assert "gtest tests need a host or linux board; mps2-an386 is baremetal" in result.stdout.str()


def test_what_did_not_run_is_summed_up_by_reason_without_asking(project):
    project.write("kernel_test.cc", GTEST)
    project.write("other_test.cc", GTEST)
    result = project.run("--build-only", board="mps2-an386")
    result.stdout.fnmatch_lines(
        ["*ondevice: not run, and why*", "8 skipped: gtest tests need a host or linux board; mps2-an386 is baremetal"]
    )
    assert "not run, and why" not in project.run("-rs", "--build-only", board="mps2-an386").stdout.str()


def test_a_missing_harness_library_names_the_package(project):
    board = 'extends = "linux-aarch64"\n[toolchain]\npkg_config_libdir = "/nonexistent"\n'
    project.write("boards/nolib-arm.toml", board)
    project.write("kernel_test.cc", GTEST)
    result = project.run("--build-only", board="nolib-arm")
    result.assert_outcomes(errors=4)  # the library is the machine's set-up: errors, never failures
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of Kernel.* on nolib-arm*", "nolib-arm: pkg-config found no gtest_main*"]
    )  # the harness's library, not the project's ondevice.toml: no file is blamed
    assert "pkg-config found no gtest_main for board nolib-arm" in result.stdout.str()
    install = "dpkg --add-architecture arm64 && apt-get update && apt-get install libgtest-dev:arm64"
    assert install in result.stdout.str()


@pytest.mark.slow
def test_the_examples_pass_per_case_on_arm64_under_qemu(project):
    dest = project.path / "examples"
    for suite in ("gtest", "cpputest", "gemm", "kernels"):
        shutil.copytree(EXAMPLES / suite, dest / suite)
    result = project.run("-v", "examples/gtest", "examples/cpputest", "--device=qemu", board="rpi")
    assert verdicts(result, with_file=True) == {
        "gemm_gtest_test::GemmS8.OptimizedMatchesReference": "PASSED",
        "gemm_gtest_test::GemmS8.SaturatesToActivationRange": "PASSED",
        "gemm_gtest_test::GemmF32.OptimizedWithinRoundingOfReference": "PASSED",
        "gemm_gtest_test::GemmF32.DISABLED_LargeShapesOnlyOnRequest": "SKIPPED",
        "gemm_cpputest_test::GemmS8.OptimizedMatchesReferenceSmall": "PASSED",
        "gemm_cpputest_test::GemmS8.OptimizedMatchesReferenceSquare": "PASSED",
        "gemm_cpputest_test::GemmS8.LargeShapesOnlyOnRequest": "SKIPPED",
        "gemm_cpputest_test::GemmF32.OptimizedWithinRoundingOfReference": "PASSED",
    }
    result.assert_outcomes(passed=6, skipped=2)


THIRD_PARTY = '''
"""A TAP-like format: `ok NAME` / `not ok NAME`, then `done`."""
import re
from pytest_ondevice.formats.discover import Case, code_of, line_at
from pytest_ondevice.formats import Format
from pytest_ondevice.formats.stream import CaseStream, Summary
from pytest_ondevice.formats.verdicts import Outcome

class TapParser(CaseStream):
    def line(self, line):
        m = re.match(r"(not )?ok (\\w+)$", line)
        if m:
            self.once(m.group(2), Outcome.FAILED if m.group(1) else Outcome.PASSED)
            if m.group(1):
                self.fail(f"{m.group(2)} failed", m.group(2))
        elif line == "done":
            self.close(Summary())

class Tap(Format):
    name = "tap"
    headers = ("tap.h",)
    def find_cases(self, text):
        code = code_of(text)
        return [Case(m.group(1), line_at(code, m.start()), "tap") for m in re.finditer(r"\\bCASE\\((\\w+)\\)", code)]
    def parser(self, order):
        return TapParser(order)
'''


def test_a_third_party_format_registers_through_an_entry_point(project, pytester, monkeypatch):
    plugins = project.path / "site"
    plugins.mkdir()
    (plugins / "tapfmt.py").write_text(textwrap.dedent(THIRD_PARTY))
    dist = plugins / "tapfmt-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tapfmt\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest_ondevice.formats]\ntap = tapfmt:Tap\n")
    project.write("tap.h", "#include <stdio.h>\n#define CASE(n) static void n(void)\n")
    project.write(
        "tap_test.c",
        """
        #include "tap.h"
        CASE(one) {}
        CASE(two) {}
        int main(void) { puts("ok one"); puts("not ok two"); puts("done"); return 1; }
        """,
    )
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    result = pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider", "-v")
    assert verdicts(result) == {"one": "PASSED", "two": "FAILED"}, result.stdout.str()
    assert "two failed" in result.stdout.str()
