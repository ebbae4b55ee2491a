"""Unity test files without a main (the layout Unity's generate_test_runner.rb and Ceedling
expect): pytest-ondevice links a runner of its own, as the generator would write it.

Unity itself is not in any registry these tests reach: tests/support/unity is a stand-in
written from Unity's documented interface and output (see its header)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import case_outcomes

from pytest_ondevice.formats.unity import Unity

UNITY = Path(__file__).resolve().parent / "support" / "unity"

NO_MAIN = """\
#include "unity.h"

static int counter;

void setUp(void) { counter = 1; }

void test_passes(void) {
  TEST_ASSERT_EQUAL_INT(1, counter);
}

void test_fails(void) {
  TEST_ASSERT_EQUAL_INT(2, counter + 2);
}

void test_ignored(void) { TEST_IGNORE(); }

void should_run_too(void) { TEST_ASSERT_TRUE(counter == 1); }

static void test_helper_is_not_a_test(void) {}
"""

SUITE_HOOKS = """\
#include "unity.h"
#include <stdio.h>

void test_only(void) { TEST_ASSERT_TRUE(1); }

void suiteSetUp(void) { printf("suite starts\\n"); }
int suiteTearDown(int failures) { printf("suite ends with %d\\n", failures); return failures; }
"""


def unity_project(project) -> None:
    shutil.copytree(UNITY, project.path / "unity")
    project.write("ondevice.toml", 'sources = ["unity/unity.c"]\ninclude_dirs = ["unity"]\n')


def test_the_runner_is_made_from_the_files_test_functions_in_source_order():
    needs = Unity().needs(NO_MAIN)
    assert [p.name for p in needs.sources] == ["unity_runner.c"]
    tests, *hooks = needs.defines
    assert tests == "ONDEVICE_UNITY_TESTS(X)=X(test_passes,7)X(test_fails,11)X(test_ignored,15)X(should_run_too,17)"
    assert hooks == [
        "ONDEVICE_UNITY_HAS_SETUP=1",
        "ONDEVICE_UNITY_HAS_TEARDOWN=0",
        "ONDEVICE_UNITY_HAS_SUITE_SETUP=0",
        "ONDEVICE_UNITY_HAS_SUITE_TEARDOWN=0",
    ]
    with_main = NO_MAIN + "int main(void) { UNITY_BEGIN(); RUN_TEST(test_passes); return UNITY_END(); }\n"
    assert Unity().needs(with_main).sources == ()


@pytest.mark.parametrize(
    "board, device", [("host", None), pytest.param("rpi", "qemu", marks=pytest.mark.slow)], ids=["host", "rpi"]
)
def test_a_unity_file_without_main_runs_each_test_function(project, board, device):
    unity_project(project)
    project.write("gemm_unity_test.c", NO_MAIN)
    result = project.run("-v", *([f"--device={device}"] if device else []), board=board)
    assert case_outcomes(result) == {
        "test_passes": "PASSED",
        "test_fails": "FAILED",
        "test_ignored": "SKIPPED",
        "should_run_too": "PASSED",
    }
    text = result.stdout.str()
    # Unity's line names the test file (as the generator's UnityBegin("file") does), so it opens
    assert "gemm_unity_test.c:12: Expected 2 Was 3" in text
    assert re.search(r"> gemm_unity_test.c:12 +TEST_ASSERT_EQUAL_INT\(2, counter \+ 2\);", text)  # the source line


@pytest.mark.slow
def test_on_bare_metal_too(project):
    unity_project(project)
    project.write("gemm_unity_test.c", NO_MAIN)
    result = project.run("-v", board="bluepill-qemu")
    assert case_outcomes(result)["test_fails"] == "FAILED" and case_outcomes(result)["test_passes"] == "PASSED"


def test_suite_hooks_are_called_and_suite_teardown_sets_the_exit_status(project):
    unity_project(project)
    project.write("suite_unity_test.c", SUITE_HOOKS)
    result = project.run("-v")
    assert case_outcomes(result) == {"test_only": "PASSED"}
    log = (project.path / "_build/host/logs/suite_unity_test.c.log").read_text()
    assert "suite starts" in log and "suite ends with 0" in log


WRAPPER = """\
#include "unity.h"
#include "cases/gemm_cases.c"

void test_in_wrapper(void);
void setUp(void) {}
void tearDown(void) {}

int main(void) {
  UnityBegin("build/test/runners/wrapper_test.c");  /* as a runner generated elsewhere names it */
  RUN_TEST(test_in_wrapper);
  RUN_TEST(test_included);
  return UNITY_END();
}

void test_in_wrapper(void) {
  TEST_ASSERT_EQUAL_INT(5, 6);
}
"""

INCLUDED = """\
/* cases #included by the wrapper: Unity names their lines after the wrapper */

void test_included(void) {
  int acc = 40;
  TEST_ASSERT_EQUAL_INT(42, acc);
}
"""


def test_a_failure_location_is_found_where_the_framework_did_not_say(project):
    unity_project(project)
    project.write("suite/wrapper_test.c", WRAPPER)
    project.write("suite/cases/gemm_cases.c", INCLUDED)
    result = project.run("-v")
    assert case_outcomes(result) == {"test_in_wrapper": "FAILED", "test_included": "FAILED"}
    text = result.stdout.str()
    # printed as "build/test/runners/wrapper_test.c:16": the file is suite/wrapper_test.c
    assert re.search(r"> suite/wrapper_test.c:16 +TEST_ASSERT_EQUAL_INT\(5, 6\);", text)
    assert "at suite/wrapper_test.c:16" in text
    # printed under the wrapper's name, line 5 of the file it includes, where test_included is
    assert re.search(r"> suite/cases/gemm_cases.c:5 +TEST_ASSERT_EQUAL_INT\(42, acc\);", text)
    assert "at suite/cases/gemm_cases.c:5" in text


# CMSIS-NN's and cJSON's layouts: a main the text match cannot see, and the runner Unity's
# generator wrote, named among the file's sources in ondevice.toml
OWN_MAIN_BEHIND_A_MACRO = """\
#include "unity.h"
#define CJSON_CDECL
void setUp(void) {}
void tearDown(void) {}
void test_one(void) { TEST_ASSERT_TRUE(1); }
void test_two(void) { TEST_ASSERT_EQUAL_INT(1, 2); }
int CJSON_CDECL main(void) {
  UNITY_BEGIN();
  RUN_TEST(test_one);
  RUN_TEST(test_two);
  return UNITY_END();
}
"""

GENERATED_RUNNER = """\
#include "unity.h"
void setUp(void);
void tearDown(void);
extern void test_one(void);
extern void test_two(void);
int main(void) {
  UnityBegin("test_pair.c");
  RUN_TEST(test_one);
  RUN_TEST(test_two);
  return UnityEnd();
}
"""

TESTS_ONLY = """\
#include "unity.h"
void setUp(void) {}
void tearDown(void) {}
void test_one(void) { TEST_ASSERT_TRUE(1); }
void test_two(void) { TEST_ASSERT_EQUAL_INT(1, 2); }
"""


@pytest.mark.parametrize("board", ["host", pytest.param("bluepill-qemu", marks=pytest.mark.slow)])
def test_a_main_behind_a_calling_convention_macro_is_the_binarys_and_ours_is_not_linked(project, board):
    unity_project(project)
    project.write("own_main_unity_test.c", OWN_MAIN_BEHIND_A_MACRO)
    result = project.run("-v", board=board)
    assert case_outcomes(result) == {"test_one": "PASSED", "test_two": "FAILED"}, result.stdout.str()


@pytest.mark.parametrize("board", ["host", pytest.param("mps2-an386", marks=pytest.mark.slow)])
def test_a_runner_unitys_generator_wrote_named_among_the_sources_is_the_binarys_main(project, board):
    unity_project(project)
    project.write("runners/test_pair_runner.c", GENERATED_RUNNER)
    project.write("pair_unity_test.c", TESTS_ONLY)
    project.write(
        "ondevice.toml",
        'sources = ["unity/unity.c"]\ninclude_dirs = ["unity"]\n'
        '[files."pair_unity_test.c"]\nsources = ["runners/test_pair_runner.c"]\n',
    )
    result = project.run("-v", board=board)
    assert case_outcomes(result) == {"test_one": "PASSED", "test_two": "FAILED"}, result.stdout.str()


# CMSIS-NN's wrapper: Unity/unity_test_x.c #includes ../test_x.c and defines test_x(void) { x(); }
INCLUDED_TESTS = (
    "\n" * 100
    + """\
#include "unity.h"
static void max_pool_keeps_the_largest(void) {
  int out = 3;
  TEST_ASSERT_EQUAL_INT(4, out);
}
"""
)
CMSIS_WRAPPER = """\
#include "unity.h"
#include "../test_max_pool.c"
void setUp(void) {}
void tearDown(void) {}
void test_max_pool_keeps_the_largest(void) { max_pool_keeps_the_largest(); }
"""


def test_a_failure_in_an_included_file_is_shown_at_its_line_there(project):
    unity_project(project)
    project.write("test_max_pool.c", INCLUDED_TESTS)
    project.write("Unity/unity_test_max_pool.c", CMSIS_WRAPPER)
    project.write("Unity/ondevice.toml", 'sources = ["../unity/unity.c"]\ninclude_dirs = ["../unity"]\n')
    result = project.run("-v", "-p", "no:randomly", "-o", "ondevice_files=unity_test_*.c")
    assert case_outcomes(result) == {"test_max_pool_keeps_the_largest": "FAILED"}, result.stdout.str()
    text = result.stdout.str()
    # Unity prints the wrapper's name with the included file's __LINE__ (104, past the wrapper's end)
    assert "Unity/unity_test_max_pool.c:104: Expected 4 Was 3" in text
    assert re.search(r"> test_max_pool.c:104 +TEST_ASSERT_EQUAL_INT\(4, out\);", text), text


# Two files a wrapper includes, each with an assertion at line 104: Unity prints the wrapper's
# name and 104 for either; the file whose assertion the failing case's function calls is the one
AVG_POOL_TESTS = (
    "\n" * 100
    + """\
#include "unity.h"
static void avg_pool_rounds_down(void) {
  int out = 2;
  TEST_ASSERT_EQUAL_INT(2, out);
}
"""
)
POOLS_WRAPPER = """\
#include "unity.h"
#include "../test_avg_pool.c"
#include "../test_max_pool.c"
void setUp(void) {}
void tearDown(void) {}
void test_avg_pool_rounds_down(void) { avg_pool_rounds_down(); }
void test_max_pool_keeps_the_largest(void) { max_pool_keeps_the_largest(); }
"""
# a wrapper whose own (passing) case asserts at line 5, the line of the included file's failure
CONV_TESTS = """\
#include "unity.h"
/* the wrapper's case calls this */
static void conv_pads_the_edges(void) {
  int edge = 0;
  TEST_ASSERT_EQUAL_INT(1, edge);
}
"""
CONV_WRAPPER = """\
#include "unity.h"
#include "../test_conv.c"
void setUp(void) {}
void tearDown(void) {}
void test_wrapper_own(void) { TEST_ASSERT_EQUAL_INT(1, 1); }
void test_conv_pads_the_edges(void) { conv_pads_the_edges(); }
"""


def test_an_included_files_line_is_the_one_the_failing_case_reaches(project):
    """The text of the files cannot tell these apart (two files assert at 104; the wrapper
    itself asserts at 5): the preprocessor's line markers place each expanded assertion in
    its file and function, and the failing case's function calls one of them."""
    unity_project(project)
    project.write("test_max_pool.c", INCLUDED_TESTS)
    project.write("test_avg_pool.c", AVG_POOL_TESTS)
    project.write("test_conv.c", CONV_TESTS)
    project.write("Unity/unity_test_pools.c", POOLS_WRAPPER)
    project.write("Unity/unity_test_conv.c", CONV_WRAPPER)
    project.write("Unity/ondevice.toml", 'sources = ["../unity/unity.c"]\ninclude_dirs = ["../unity"]\n')
    result = project.run("-v", "-p", "no:randomly", "-o", "ondevice_files=unity_test_*.c")
    assert case_outcomes(result) == {
        "test_avg_pool_rounds_down": "PASSED",
        "test_max_pool_keeps_the_largest": "FAILED",
        "test_wrapper_own": "PASSED",
        "test_conv_pads_the_edges": "FAILED",
    }, result.stdout.str()
    text = result.stdout.str()
    assert "Unity/unity_test_pools.c:104: Expected 4 Was 3" in text
    assert re.search(r"> test_max_pool.c:104 +TEST_ASSERT_EQUAL_INT\(4, out\);", text), text
    assert "test_avg_pool.c:104" not in text
    assert "Unity/unity_test_conv.c:5: Expected 1 Was 0" in text
    assert re.search(r"> test_conv.c:5 +TEST_ASSERT_EQUAL_INT\(1, edge\);", text), text
    assert not re.search(r"> Unity/unity_test_conv.c:5 ", text)
