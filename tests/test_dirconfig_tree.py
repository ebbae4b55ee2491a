"""ondevice.toml for a tree as a user brings it (TFLM's layout): exclude globs, test sources
kept out of the library, environment variables for third-party roots, settings per kind of
board and per board, and the config found when pytest runs from a subdirectory."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import QUIET

KERNEL = "int {name}_value(void) {{ return {value}; }}\n"
TEST = """
    #include "micro_test.h"
    #include "third_party_cfg.h"
    int add_value(void);
    #ifndef BOARD_SETTING
    #define BOARD_SETTING 9
    #endif
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(AddKernel) {{ TF_LITE_MICRO_EXPECT_EQ(add_value() + THIRD_PARTY_OFFSET, {expected}); }}
    TF_LITE_MICRO_TEST(BoardSetting) {{ TF_LITE_MICRO_EXPECT_EQ(BOARD_SETTING * 10 + KIND_SETTING, {setting}); }}
    TF_LITE_MICRO_TESTS_END
"""


def _tree(project, monkeypatch, toml: str, expected: int = 3, setting: int = 11):
    micro = project.path / "tensorflow" / "lite" / "micro"
    project.write("tensorflow/lite/micro/kernels/add.cc", 'extern "C" ' + KERNEL.format(name="add", value=1))
    project.write(
        "tensorflow/lite/micro/kernels/add_test.cc",
        TEST.format(expected=expected, setting=setting).replace("int add_value", 'extern "C" int add_value'),
    )
    project.write("tensorflow/lite/micro/kernels/conv_test_helpers.cc", "int helper_unused(void) { return 0; }\n")
    project.write("third_party_root/include/third_party_cfg.h", "#define THIRD_PARTY_OFFSET 2\n")
    monkeypatch.setenv("THIRD_PARTY_ROOT", str(project.path / "third_party_root"))
    project.write("ondevice.toml", toml)
    return micro


CONFIG = """
sources = ["tensorflow/lite/micro/kernels/*.cc"]
exclude = ["tensorflow/lite/micro/kernels/*_helpers.cc"]
include_dirs = ["${THIRD_PARTY_ROOT}/include"]

[kind.host]
defines = ["KIND_SETTING=1"]

[kind.baremetal]
defines = ["KIND_SETTING=2"]

[board.host]
defines = ["BOARD_SETTING=1"]
"""


def test_a_tflm_style_tree_builds_with_exclude_env_vars_and_board_settings(project, monkeypatch):
    _tree(project, monkeypatch, CONFIG)
    result = project.run("-v")
    result.assert_outcomes(passed=2)
    # the test source matched the library glob too: it is not in the archive (no second main)
    (archive,) = (project.path / "_cache").rglob("libundertest.a")
    members = subprocess.run(["ar", "t", str(archive)], capture_output=True, text=True, check=True).stdout.split()
    assert members == ["add.cc.o"]


def test_an_unset_variable_names_file_key_and_variable(project, monkeypatch):
    _tree(project, monkeypatch, CONFIG)
    monkeypatch.delenv("THIRD_PARTY_ROOT")
    result = project.run()
    assert result.parseoutcomes().get("errors") == 2, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*ondevice.toml: 'include_dirs' entry '${THIRD_PARTY_ROOT}/include' uses $THIRD_PARTY_ROOT, which is not set*"]
    )


def test_a_board_table_applies_only_to_its_board(project, monkeypatch):
    _tree(project, monkeypatch, CONFIG.replace("[board.host]", "[board.rpi]"), setting=91)
    project.run().assert_outcomes(passed=2)


def test_the_config_is_found_when_pytest_runs_from_a_subdirectory(project, monkeypatch):
    micro = _tree(project, monkeypatch, CONFIG)
    (project.path / ".git").mkdir()  # the repository root, where ondevice.toml is
    os.chdir(micro)
    ini = project.path / "tox.ini"
    (micro / "pytest.ini").write_text(ini.read_text().replace("[pytest]", "[pytest]", 1))  # pytest roots here now
    result = project.pytester.runpytest("--board=host", "-p", "no:cacheprovider", *QUIET)
    result.assert_outcomes(passed=2)


COMPRESSED = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Plain) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    #ifdef USE_TFLM_COMPRESSION
    TF_LITE_MICRO_TEST(PlainCompressed) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    #endif  // USE_TFLM_COMPRESSION
    #if 0
    TF_LITE_MICRO_TEST(Disabled) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
    #else
    TF_LITE_MICRO_TEST(Enabled) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    #endif
    TF_LITE_MICRO_TESTS_END
"""


def test_a_case_the_preprocessor_removed_is_skipped_naming_the_condition(project):
    project.write("compressed_test.c", COMPRESSED)
    result = project.run("-v", "-rs")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "*PlainCompressed[[]host[]] SKIPPED*",
            "*compiled out on host: `#ifdef USE_TFLM_COMPRESSION`*",
            "*compiled out on host: `#if 0`*",
        ]
    )
    project.write("ondevice.toml", '[board.host]\ndefines = ["USE_TFLM_COMPRESSION"]\n')
    again = project.run("-v")
    again.assert_outcomes(passed=3, skipped=1)
    again.stdout.fnmatch_lines(["*PlainCompressed[[]host[]] PASSED*"])


def test_a_case_never_started_but_compiled_in_still_fails(project):
    project.write(
        "renamed_test.c",
        """
        #include "micro_test.h"
        #define TF_LITE_MICRO_TEST_RENAMED(n) TF_LITE_MICRO_TEST(Other)
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Fine) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
        TF_LITE_MICRO_TEST_RENAMED(Lost) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    assert "compiled out" not in result.stdout.str()


def test_a_link_error_is_a_failure_unless_every_case_was_compiled_out(project):
    """A file the preprocessor emptied for the board has nothing to link and is skipped
    (tflm_mini's decompress_test.cc); a link that fails with a case still in is a failure."""
    project.write(
        "half_test.c",
        """
        #include "micro_test.h"
        void not_linked_anywhere(void);
        TF_LITE_MICRO_TESTS_BEGIN
        #ifdef NOT_ON_THIS_BOARD
        TF_LITE_MICRO_TEST(Gone) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
        #endif
        TF_LITE_MICRO_TEST(Kept) { not_linked_anywhere(); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-rf")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*link failed*", "*undefined reference to*not_linked_anywhere*"])
    assert "compiled out" not in result.stdout.str()


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("[board.hots]", "[board.hots] names no known board (did you mean 'board.host'?)"),
        ("[kind.baremetl]", "unknown key 'kind.baremetl' (did you mean 'kind.baremetal'?)"),
    ],
)
def test_a_mistyped_board_or_kind_table_is_an_error_naming_it(project, monkeypatch, table, says):
    """A table for no board or kind would apply to nothing, in silence."""
    _tree(project, monkeypatch, CONFIG.replace("[board.host]", table))
    result = project.run()
    assert result.parseoutcomes().get("errors") == 2, result.stdout.str()
    assert f"ondevice.toml: {says}" in result.stdout.str()
