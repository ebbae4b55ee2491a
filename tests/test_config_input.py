"""Configuration input end to end: a wrong value is a usage error or an error naming the
file (or option) and the key, never an INTERNALERROR, a traceback or a test failure."""

from __future__ import annotations

import pytest

PASSING = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(One) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TEST(Two) { TF_LITE_MICRO_EXPECT_EQ(2, 2); }
    TF_LITE_MICRO_TESTS_END
"""


def _no_traceback(result: pytest.RunResult) -> None:
    text = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in text and "Traceback (most recent call last)" not in text, text


def _ini(project, **options: str) -> None:
    lines = "".join(f"{k} = {v}\n" for k, v in options.items())
    project.pytester.makeini(
        f"[pytest]\nondevice_build_dir = {project.path / '_build'}\n"
        f"ondevice_cache_dir = {project.path / '_cache'}\nondevice_boards = boards\n{lines}"
    )


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("ondevice_timeout", "soon", "must be a number of seconds, not 'soon'"),
        ("ondevice_timeout", "0", "must be a number of seconds > 0"),
        ("ondevice_timeout", "-5", "must be a number of seconds > 0"),
        ("ondevice_timeout", "nan", "must be a number of seconds > 0"),
        ("ondevice_retries", "twice", "must be a whole number of extra attempts >= 0, not 'twice'"),
        ("ondevice_retries", "-1", "must be a whole number of extra attempts >= 0"),
    ],
)
def test_a_bad_number_in_the_ini_is_a_usage_error_naming_the_option(project, option, value, says):
    _ini(project, **{option: value})
    project.write("a_test.c", PASSING)
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option} in *tox.ini: {says}*"])
    _no_traceback(result)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--device-timeout=0"], "argument --device-timeout: must be a number of seconds > 0, not '0'"),
        (["--device-timeout=-5"], "argument --device-timeout: must be a number of seconds > 0"),
        (["--device-timeout=nan"], "argument --device-timeout: must be a number of seconds > 0"),
        (["--device-timeout=inf"], "argument --device-timeout: must be a number of seconds > 0"),
        (["--build-jobs=0"], "argument --build-jobs: must be a whole number >= 1, not '0'"),
        (["--build-jobs=-1"], "argument --build-jobs: must be a whole number >= 1, not '-1'"),
    ],
)
def test_a_bad_number_on_the_command_line_is_a_usage_error(project, args, says):
    project.write("a_test.c", PASSING)
    result = project.run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{says}*"])
    _no_traceback(result)


def test_good_numbers_still_work(project):
    _ini(project, ondevice_timeout="30", ondevice_retries="0")
    project.write("a_test.c", PASSING)
    project.run("--device-timeout=20", "--build-jobs=1").assert_outcomes(passed=2)


def test_a_broken_board_file_in_the_users_dir_fails_the_board_list_without_a_traceback(project):
    project.write("boards/broken.toml", "kind = \n")
    project.write("boards/mine.toml", 'extends = "host"\n')
    result = project.pytester.runpytest("--list-boards")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["board*kind*arch*toolchain*transport", "broken*invalid board file*", "host*local (ready)", "mine*host*"]
    )
    result.stdout.fnmatch_lines(["*1 board file(s) cannot be used:*", "error: *broken.toml: not valid TOML*"])
    _no_traceback(result)


def test_an_unknown_board_beside_a_broken_file_names_the_board_asked_for(project):
    project.write("boards/broken.toml", "kind = \n")
    project.write("a_test.c", PASSING)
    result = project.run(board="hots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown board 'hots' (did you mean 'host'?)*"])
    assert "broken.toml" not in result.stderr.str()
    project.write("boards/mine.toml", 'extends = "hots"\n')
    result = project.run(board="mine")
    result.stderr.fnmatch_lines(["*mine.toml: 'extends': unknown board 'hots' (did you mean 'host'?)*"])
    assert "not valid TOML" not in result.stderr.str()


def test_a_transport_key_typo_is_a_usage_error_naming_file_and_key(project):
    project.write("boards/qemu-typo.toml", 'extends = "bluepill-qemu"\n[transport]\nmachin = "x"\n')
    project.write("a_test.c", PASSING)
    result = project.run(board="qemu-typo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*qemu-typo.toml: unknown key 'transport.machin' (did you mean 'transport.machine'?)*"]
    )


@pytest.mark.parametrize(
    "toml, says",
    [
        ('sources = "a.c"\n', "'sources' must be a list of strings"),
        ("timeout = -5\n", "'timeout' must be a number of seconds > 0, not -5"),
        ('include_dirs = ["inlcude"]\n', "'include_dirs' entry 'inlcude' does not exist"),
        ('[files."typo_test.c"]\ntimeout = 5\n', "?files.'typo_test.c'? names no file"),  # ? for [ ]
    ],
)
def test_a_broken_ondevice_toml_makes_errors_not_failures(project, toml, says):
    project.write("ondevice.toml", toml)
    project.write("a_test.c", PASSING)
    result = project.run()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([f"*ondevice.toml: {says}*"])
    _no_traceback(result)
