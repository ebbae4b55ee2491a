"""Reading a source's preprocessed text for where its Unity assertions are (formats/linemarkers.py):
the texts below are as GCC 12 and clang 14 write them for a CMSIS-NN-style wrapper with real
Unity's expansions (`UnityFail( ..., (UNITY_UINT)((114)))`), cut to the lines that matter."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ondevice.formats import linemarkers
from pytest_ondevice.formats.failure import SourceSearch
from pytest_ondevice.formats.linemarkers import CHUNK, Expanded


def read(tmp_path: Path, text: str) -> Expanded:
    for name in ("Unity/unity_test_max.c", "test_max.c", "test_avg.c", "unity.h"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    return linemarkers.read(io.StringIO(text), tmp_path)


# GCC: NULL, a system header's macro, is marked with flag 3 in the middle of the assertion
GCC = """\
# 0 "Unity/unity_test_max.c"
# 0 "<built-in>"
# 0 "<command-line>"
# 1 "/usr/include/stdc-predef.h" 1 3 4
# 0 "<command-line>" 2
# 1 "Unity/unity_test_max.c"
# 1 "Unity/../unity.h" 1
void UnityFail(const char* message, const UNITY_UINT line);
# 2 "Unity/unity_test_max.c" 2
# 1 "Unity/../test_max.c" 1
# 111 "Unity/../test_max.c"
# 1 "Unity/../unity.h" 1
# 112 "Unity/../test_max.c" 2
void max_pool(void) {
  int out = 3;
  do { if ((out == 4)) { } else { UnityFail( ((" Expected TRUE Was FALSE")), (UNITY_UINT)((114))); } } while (0);
  UnityAssertEqualIntNumber((UNITY_INT)((4)), (UNITY_INT)((out)), (
# 115 "Unity/../test_max.c" 3 4
 ((void *)0)
# 115 "Unity/../test_max.c"
 ), (UNITY_UINT)(115), UNITY_DISPLAY_STYLE_INT)
          ;
}
# 3 "Unity/unity_test_max.c" 2
void setUp(void) {}
void test_max_pool(void) { max_pool(); }
"""


def test_an_assertion_is_placed_in_the_file_and_function_the_markers_say(tmp_path):
    found = read(tmp_path, GCC)
    included = (tmp_path / "test_max.c").resolve()
    assert found.main == (tmp_path / "Unity/unity_test_max.c").resolve()
    assert found.asserts == {114: ((included, "max_pool"),), 115: ((included, "max_pool"),)}
    assert found.names == {"max_pool": frozenset(), "setUp": frozenset(), "test_max_pool": {"max_pool"}}
    assert found.file_at(found.main, 115, "test_max_pool") == included
    assert found.file_at(found.main, 116, "test_max_pool") is None  # no assertion reported 116
    assert found.file_at(included, 115, "test_max_pool") is None  # Unity names the runner's file only


# clang: the expansion on the invocation's first line, its __LINE__ the closing parenthesis's
# (the first invocation spans lines 114-116), then blank lines up to the next line of code
CLANG = """\
# 1 "Unity/unity_test_max.c"
# 1 "<built-in>" 1
# 1 "<built-in>" 3
# 1 "Unity/unity_test_max.c" 2
# 1 "Unity/../test_max.c" 1
# 112 "Unity/../test_max.c"
void max_pool(void) {
  int out = 3;
  UnityAssertEqualIntNumber((UNITY_INT)((4)), (UNITY_INT)((out)), (((void*)0)), (UNITY_UINT)(116), 0);


  UnityAssertEqualIntNumber((UNITY_INT)((118)), (UNITY_INT)((out)), (((void*)0)), (UNITY_UINT)(117), 0);
}
# 3 "Unity/unity_test_max.c" 2
void test_max_pool(void) { max_pool(); }
"""


def test_a_literal_is_the_line_only_within_the_lines_the_invocation_spans(tmp_path):
    found = read(tmp_path, CLANG)
    where = ((tmp_path / "test_max.c").resolve(), "max_pool")
    # 4 and 118 are expected values: before the first invocation, past the one-line second
    assert found.asserts == {116: (where,), 117: (where,)}


# two included files, each with an assertion at line 104, and a wrapper asserting at line 6
TWO = """\
# 1 "Unity/unity_test_max.c"
# 1 "Unity/../test_avg.c" 1
# 102 "Unity/../test_avg.c"
static void avg_pool(void) {
  int out = 2;
  UnityAssertEqualIntNumber((UNITY_INT)((2)), (UNITY_INT)((out)), (((void*)0)), (UNITY_UINT)(104), 0);
}
# 2 "Unity/unity_test_max.c" 2
# 1 "Unity/../test_max.c" 1
# 102 "Unity/../test_max.c"
static void max_pool(void) {
  int out = 3;
  UnityAssertEqualIntNumber((UNITY_INT)((4)), (UNITY_INT)((out)), (((void*)0)), (UNITY_UINT)(104), 0);
}
# 3 "Unity/unity_test_max.c" 2
static void (*const helpers[])(void) = { avg_pool, max_pool };
void test_avg(void) { avg_pool(); }
void test_max(void) { helpers[1](); }
void test_own(void) { UnityAssertEqualIntNumber((UNITY_INT)((1)), (UNITY_INT)((1)), 0, (UNITY_UINT)(6), 0); }
void test_helper(void) { check(); }
void test_via_pointer(void) { void (*f)(void) = max_pool; f(); }
"""


@pytest.mark.parametrize(
    "case, file",
    [
        ("test_avg", "test_avg.c"),
        ("test_via_pointer", "test_max.c"),  # a function named, not only called, is reached
        ("test_max", None),  # reaches neither (through a table): both files are meant, so neither
        ("test_helper", None),
    ],
)
def test_the_assertion_the_failing_case_reaches_wins_at_a_shared_line_number(tmp_path, case, file):
    found = read(tmp_path, TWO)
    where = found.file_at(found.main, 104, case)
    assert where == ((tmp_path / file).resolve() if file else None)


def test_the_wrappers_own_assertion_is_its_own_line(tmp_path):
    found = read(tmp_path, TWO)
    assert found.file_at(found.main, 6, "test_own") == found.main
    assert found.file_at(found.main, 6, "test_avg") == found.main  # the one assertion at 6 anywhere


def test_a_system_headers_functions_and_assertions_are_not_kept(tmp_path):
    text = """\
# 1 "test_max.c"
# 1 "/usr/include/x.h" 1 3 4
static inline void helper(void) { UnityFail("x", (UNITY_UINT)(2)); }
# 2 "test_max.c" 2
void test_max(void) { helper(); }
"""
    found = read(tmp_path, text)
    assert found.asserts == {} and found.names == {"test_max": frozenset()}


def test_a_line_longer_than_a_piece_is_read_in_pieces_and_the_lines_still_count(tmp_path):
    table = "static const int table[] = {" + "1, " * CHUNK + "};"
    text = f"""\
# 1 "test_max.c"
{table}
void max_pool(void) {{
  UnityFail("x", (UNITY_UINT)(3));
}}
"""
    found = read(tmp_path, text)
    assert found.asserts == {3: (((tmp_path / "test_max.c").resolve(), "max_pool"),)}


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_what_a_compiler_writes_is_read(tmp_path, cc):
    """Both compilers' own -E output, from a wrapper including a file whose assertion spans
    two lines (GCC's __LINE__ is its first, clang's its last)."""
    if shutil.which(cc) is None:
        pytest.skip(f"no {cc} here")
    (tmp_path / "unity.h").write_text(
        "#include <stddef.h>\n"
        "void UnityFail(const char *message, unsigned long line);\n"
        "#define TEST_ASSERT_TRUE(c) do { if (!(c)) UnityFail(NULL, (unsigned long)(__LINE__)); } while (0)\n"
    )
    (tmp_path / "test_max.c").write_text(
        '#include "unity.h"\nvoid max_pool(void) {\n  int out = 3;\n  TEST_ASSERT_TRUE(\n    out == 4);\n}\n'
    )
    (tmp_path / "Unity").mkdir()
    (tmp_path / "Unity/unity_test_max.c").write_text(
        '#include "unity.h"\n#include "../test_max.c"\nvoid test_max_pool(void) { max_pool(); }\n'
    )
    out = subprocess.run([cc, "-E", "-I.", "Unity/unity_test_max.c"], cwd=tmp_path, capture_output=True, text=True)
    found = linemarkers.read(io.StringIO(out.stdout), tmp_path)
    line = 4 if cc == "gcc" else 5
    assert found.file_at(found.main, line, "test_max_pool") == (tmp_path / "test_max.c").resolve(), out.stdout


def test_a_markers_file_name_is_read_as_the_c_string_it_is(tmp_path):
    (tmp_path / 'odd "dir"').mkdir()
    (tmp_path / 'odd "dir"/test_max.c').touch()
    text = '# 1 "odd \\"dir\\"/test_max.c"\nvoid test_max(void) { UnityFail("x", (UNITY_UINT)(1)); }\n'
    found = linemarkers.read(io.StringIO(text), tmp_path)
    assert found.main == (tmp_path / 'odd "dir"/test_max.c').resolve()
    assert found.file_at(found.main, 1, "test_max") == found.main


def test_a_failure_line_is_found_by_the_markers_and_guessed_only_without_them(tmp_path):
    """SourceSearch with the markers' reading takes the file the case reaches; with the files
    the compiler read (-MM, when the source could not be preprocessed) it finds two files
    asserting at 104 and cannot tell, as before."""
    (tmp_path / "unity.h").write_text(
        'void UnityFail(const char *message, unsigned long line);\n#define TEST_FAIL() UnityFail("x", __LINE__)\n'
    )
    for name in ("avg", "max"):
        body = f'#include "unity.h"\nstatic void {name}_pool(void) {{\n  TEST_FAIL();\n}}\n'
        (tmp_path / f"test_{name}.c").write_text("\n" * 101 + body)
    (tmp_path / "Unity").mkdir()
    wrapper = tmp_path / "Unity/unity_test_pools.c"
    wrapper.write_text(
        '#include "../test_avg.c"\n#include "../test_max.c"\n'
        "void test_avg(void) { avg_pool(); }\nvoid test_max(void) { max_pool(); }\n"
    )
    out = subprocess.run(["gcc", "-E", str(wrapper)], cwd=tmp_path, capture_output=True, text=True, check=True)
    expanded = linemarkers.read(io.StringIO(out.stdout), tmp_path)
    included = tuple(p.resolve() for p in (wrapper, tmp_path / "test_avg.c", tmp_path / "test_max.c"))
    printed = "build/Unity/unity_test_pools.c"  # as a runner generated elsewhere names it
    search = SourceSearch(tmp_path, (), "test_max", included, expanded)
    assert search.locate(printed, 104) == ((tmp_path / "test_max.c").resolve(), "test_max.c")
    assert SourceSearch(tmp_path, (), "test_avg", included, expanded).locate(printed, 104)[1] == "test_avg.c"
    assert SourceSearch(tmp_path, (), "test_max", included).locate(printed, 104) is None
