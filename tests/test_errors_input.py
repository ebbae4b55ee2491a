"""Input the user got wrong in a way the checker never saw: bytes that are not UTF-8 in one
of our TOML files, a lease directory that cannot be made. Each is an error naming the file
(and where in it), never an INTERNALERROR or a collection traceback."""

from __future__ import annotations

import pytest
from conftest import QUIET

PASSING = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(One) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TEST(Two) { TF_LITE_MICRO_EXPECT_EQ(2, 2); }
    TF_LITE_MICRO_TESTS_END
"""
LATIN1 = "# r\xe9glages du banc\n".encode("latin-1")  # "réglages": one byte 0xe9, as a Latin-1 editor saves it


def _no_traceback(result: pytest.RunResult) -> None:
    text = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in text and "Traceback (most recent call last)" not in text, text
    assert "UnicodeDecodeError" not in text, text


def _latin1(project, name: str, body: str) -> None:
    """body with a Latin-1 comment as its second line."""
    first, rest = body.split("\n", 1)
    path = project.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(first.encode() + b"\n" + LATIN1 + rest.encode())


SAYS = "*{name}:2: not UTF-8: byte 0xe9 at column 4 (TOML files must be UTF-8*"


def test_a_latin1_comment_in_a_fleet_file_is_a_usage_error_naming_file_line_and_byte(project):
    _latin1(project, "farm.toml", '[fleet]\n[device.h1]\nboard = "host"\n')
    project.write("a_test.c", PASSING)
    result = project.pytester.runpytest("--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: " + SAYS.format(name="farm.toml")])
    _no_traceback(result)


def test_doctor_on_that_fleet_file_says_the_same(project):
    _latin1(project, "farm.toml", '[fleet]\n[device.h1]\nboard = "host"\n')
    result = project.pytester.runpytest("--ondevice-doctor", "--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines([SAYS.format(name="farm.toml")])
    _no_traceback(result)


def test_a_latin1_comment_in_ondevice_toml_makes_its_items_errors_naming_it(project):
    _latin1(project, "ondevice.toml", "timeout = 30\n\n")
    project.write("a_test.c", PASSING)
    result = project.run()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([SAYS.format(name="ondevice.toml")])
    _no_traceback(result)


def test_a_latin1_comment_in_a_board_file_is_a_usage_error_naming_it(project):
    _latin1(project, "boards/mine.toml", 'extends = "host"\n')
    project.write("a_test.c", PASSING)
    result = project.run(board="mine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: " + SAYS.format(name="boards/mine.toml")])
    _no_traceback(result)


def test_a_latin1_board_file_is_listed_as_invalid_with_its_place(project):
    _latin1(project, "boards/mine.toml", 'extends = "host"\n')
    result = project.pytester.runpytest("--list-boards")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["mine*invalid board file*", "error: " + SAYS.format(name="mine.toml")])
    _no_traceback(result)


def test_a_lease_dir_that_cannot_be_made_is_a_usage_error_naming_it(project):
    project.write("not-a-dir", "a file where the lease directory's parent should be\n")
    project.write("farm.toml", '[fleet]\nlease_dir = "not-a-dir/leases"\n[device.h1]\nboard = "host"\n')
    project.write("a_test.c", PASSING)
    result = project.pytester.runpytest("--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: cannot create the lease directory {project.path}/not-a-dir/leases: Not a directory (set lease_dir*"]
    )
    _no_traceback(result)


def test_the_column_is_counted_in_characters_after_valid_utf8_on_the_same_line(tmp_path):
    from pytest_ondevice.config.schema import ConfigError, load_toml

    path = tmp_path / "x.toml"
    path.write_bytes(b'a = 1\nname = "caf\xc3\xa9" # \xe9t\xe9\n')  # UTF-8 "café", then a Latin-1 "été"
    with pytest.raises(ConfigError) as e:
        load_toml(path)
    assert str(e.value).startswith(f"{path}:2: not UTF-8: byte 0xe9 at column 17 (")
