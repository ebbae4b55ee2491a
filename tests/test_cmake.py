"""A CMake project run as it is (ondevice_cmake): configured per board, built by CMake, its
tests listed by CTest, one item per case (Unity, GoogleTest, Catch2, doctest, Boost.Test),
with CTest's verdicts on the host; on rpi under qemu-user and over a real sshd on loopback,
with the project's shared library pushed; on an Android stand-in over the real adb server;
its framework-free and Unity tests on bare metal (QEMU's mps2-an386 and stm32vldiscovery)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO, case_outcomes

from pytest_ondevice.compiling.cmake import STAMP

CASES = ["Dot.Empty", "Dot.Saturates32Bits", "Dot.Negative", "dot_of_nothing_is_0", "dot_of_two"]
CASES += ["dot is symmetric", "dot of a vector with itself is its squared norm", "dot_exit", "reads_input"]
CASES += ["test_dot_of_one", "test_dot_accumulates_past_int8", "dot/zero_vector", "dot/scaled"]
EXPECTED = dict.fromkeys(CASES, "PASSED")
PLAIN = {"dot_exit": "PASSED", "reads_input": "PASSED"}  # both link libdot.so
BARE = {"dot_exit": "PASSED", "reads_input": "ERROR", "test_dot_of_one": "PASSED"}
BARE |= {"test_dot_accumulates_past_int8": "PASSED"}  # no file system, no C++ frameworks found for the board
# the planted bug (dot.c adds 1 at i == 1) fails the cases with two or more elements
PLANTED = {"Dot.Saturates32Bits", "Dot.Negative", "dot_of_two", "dot of a vector with itself is its squared norm"}
PLANTED |= {"dot_exit", "reads_input", "test_dot_accumulates_past_int8", "dot/zero_vector", "dot/scaled"}
UNITY = REPO / "tests" / "support" / "unity"  # the project brings its Unity (a stand-in of ours: none is packaged)
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
pytestmark = needs_cmake


def with_ini(project, *lines: str) -> None:
    """The project's ini, with examples/cmake copied in as its CMake project, and lines more."""
    base = [f"ondevice_build_dir = {project.path / '_build'}", f"ondevice_cache_dir = {project.path / '_cache'}"]
    base.append("ondevice_boards = boards")
    cache = [line for line in lines if line.startswith("ondevice_cmake_cache")]
    cache = cache or ["ondevice_cmake_cache ="]
    cache[0] += f"\n  UNITY_DIR={UNITY}"
    others = [line for line in lines if not line.startswith("ondevice_cmake_cache")]
    project.pytester.makeini("\n".join(["[pytest]", *base, "ondevice_cmake = proj", *cache, *others]) + "\n")


@pytest.fixture
def cmake_project(project):
    shutil.copytree(EXAMPLES / "cmake", project.path / "proj")
    with_ini(project)
    return project


def build_dirs(project, board: str) -> list[Path]:
    return sorted((project.path / "_build" / board / "cmake").iterdir())


def ctest(build_dir: Path) -> dict[str, str]:
    """CTest's own verdicts on the same build tree: {test: Passed|Failed}."""
    out = subprocess.run(["ctest"], cwd=build_dir, capture_output=True, text=True).stdout
    verdicts = {}
    for m in re.finditer(r"Test +#\d+: (.+?) \.+ *(?:\*\*\*)?(\w+)", out):
        verdicts[m.group(1)] = "Passed" if m.group(2) == "Passed" else "Failed"
    return verdicts


def test_a_cmake_project_runs_as_it_is_one_item_per_case_with_ctests_verdicts(cmake_project):
    result = cmake_project.run("-v")
    assert case_outcomes(result) == EXPECTED, result.stdout.str()
    result.stdout.fnmatch_lines(["proj/tests/dot_gtest.cc::Dot.Negative[[]host[]] PASSED*"])
    (build_dir,) = build_dirs(cmake_project, "host")
    assert set(ctest(build_dir).values()) == {"Passed"}  # CTest agrees, one line per executable or case


def test_ctest_labels_are_markers(cmake_project):
    result = cmake_project.run("-m", "io", "-v")
    assert case_outcomes(result) == {"reads_input": "PASSED"}
    result.assert_outcomes(passed=1, deselected=len(EXPECTED) - 1)


def plant_bug(project) -> None:
    dot = project.path / "proj" / "src" / "dot.c"
    dot.write_text(dot.read_text().replace("sum += a[i] * b[i];", "sum += a[i] * b[i] + (i == 1);"))


def test_a_planted_bug_fails_exactly_the_cases_that_exercise_it_as_ctest_says(cmake_project):
    plant_bug(cmake_project)
    result = cmake_project.run("-v")
    assert case_outcomes(result) == {c: "FAILED" if c in PLANTED else "PASSED" for c in EXPECTED}
    result.stdout.fnmatch_lines(["*/proj/tests/dot_gtest.cc:10: Failure"])  # the failing assertion, in the source
    result.stdout.fnmatch_lines(["*tests/dot_unity.c:20: Expected 48387 Was 48388*"])
    (build_dir,) = build_dirs(cmake_project, "host")
    verdicts = ctest(build_dir)
    # CTest has one line per executable where it has no discovered cases: Unity's, Boost.Test's
    per_binary = {"dot_unity": "test_dot_accumulates_past_int8", "dot_boost": "dot/scaled"}
    assert {per_binary.get(t, t) for t, v in verdicts.items() if v == "Failed"} == PLANTED - {"dot/zero_vector"}


def test_a_forged_gtest_pass_line_is_not_believed(cmake_project):
    proj = cmake_project.path / "proj"
    (proj / "tests" / "forged_gtest.cc").write_text(
        "#include <gtest/gtest.h>\n#include <cstdio>\n#include <unistd.h>\n"
        'TEST(Forged, Leaves) { std::printf("[       OK ] Forged.Leaves (0 ms)\\n"); std::fflush(stdout); _exit(0); }\n'
    )
    cmake = proj / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "if(GTest_FOUND)\n  add_executable(forged_gtest tests/forged_gtest.cc)\n"
        "  target_link_libraries(forged_gtest GTest::gtest_main)\n  gtest_discover_tests(forged_gtest)\nendif()\n"
    )
    result = cmake_project.run("-v", "-k", "Forged")
    assert case_outcomes(result).get("Forged.Leaves") == "FAILED", result.stdout.str()


def test_will_fail_turns_the_exit_status_around_but_never_a_crash(cmake_project):
    proj = cmake_project.path / "proj"
    (proj / "tests" / "exits_1.c").write_text("int main(void) { return 1; }\n")
    (proj / "tests" / "aborts.c").write_text("#include <stdlib.h>\nint main(void) { abort(); }\n")
    cmake = proj / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "add_executable(exits_1 tests/exits_1.c)\nadd_test(NAME expected_to_fail COMMAND exits_1)\n"
        "set_tests_properties(expected_to_fail PROPERTIES WILL_FAIL TRUE)\n"
        "add_executable(aborts tests/aborts.c)\nadd_test(NAME crashes COMMAND aborts)\n"
        "set_tests_properties(crashes PROPERTIES WILL_FAIL TRUE)\n"
    )
    result = cmake_project.run("-v", "-k", "expected_to_fail or crashes")
    assert case_outcomes(result) == {"expected_to_fail": "PASSED", "crashes": "FAILED"}
    result.stdout.fnmatch_lines(["*the test crashed: killed by SIGABRT*"])


def test_a_configure_error_is_an_error_naming_the_cmakelists_line(cmake_project):
    cmake = cmake_project.path / "proj" / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + 'message(FATAL_ERROR "no such option")\n')
    result = cmake_project.run()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # pytest stops at a collection error
    result.stdout.fnmatch_lines(["*ERROR collecting proj/CMakeLists.txt*", "*CMakeLists.txt:*", "*no such option*"])
    assert "FAILED" not in result.stdout.str()


def test_a_target_that_does_not_build_errors_its_tests_and_the_others_run(cmake_project):
    proj = cmake_project.path / "proj"
    (proj / "tests" / "broken.c").write_text("int main(void) { return undefined_function(); }\n")
    cmake = proj / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "add_executable(broken tests/broken.c)\n" + "add_test(NAME broken COMMAND broken)\n"
    )
    result = cmake_project.run("-v")
    outcomes = case_outcomes(result)
    assert outcomes.pop("broken") == "ERROR"
    assert outcomes == EXPECTED
    result.stdout.fnmatch_lines(["*did not build*", "*undefined_function*"])


def test_the_project_is_configured_again_only_when_cmakes_inputs_changed(cmake_project):
    cmake_project.run().assert_outcomes(passed=len(EXPECTED))
    (build_dir,) = build_dirs(cmake_project, "host")
    stamp = build_dir / STAMP
    first = stamp.stat().st_mtime_ns
    cmake_project.run().assert_outcomes(passed=len(EXPECTED))
    assert stamp.stat().st_mtime_ns == first  # nothing changed: not configured again
    cmake = cmake_project.path / "proj" / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + "\n# an edit\n")
    os.utime(cmake, ns=(first + 10**9, first + 10**9))
    cmake_project.run().assert_outcomes(passed=len(EXPECTED))
    assert stamp.stat().st_mtime_ns != first


@pytest.mark.slow
def test_on_rpi_under_qemu_user(cmake_project):
    result = cmake_project.run("-v", "--device=qemu", board="rpi")
    assert case_outcomes(result) == EXPECTED, result.stdout.str()


@pytest.mark.slow
def test_on_a_pi_over_ssh_the_shared_library_goes_with_the_binary(cmake_project):
    from support.sshd import BinfmtLease, loopback_pis

    with BinfmtLease() as binfmt, loopback_pis(1) as (pi,):
        if not binfmt:
            pytest.skip("needs binfmt_misc to run the Pi's aarch64 binaries on this machine")
        with_ini(cmake_project, f"ondevice_ssh_config = {pi.ssh_config}")
        result = cmake_project.run("-v", f"--device={pi.alias}", board="rpi")
        assert case_outcomes(result) == EXPECTED, result.stdout.str()
        # no build-tree RUNPATH: the device finds libdot.so only where it was pushed
        with_ini(cmake_project, f"ondevice_ssh_config = {pi.ssh_config}", "ondevice_cmake_cache = CMAKE_SKIP_RPATH=ON")
        result = cmake_project.run("-v", f"--device={pi.alias}", "-k", "dot_exit or reads_input", board="rpi")
        assert case_outcomes(result) == PLAIN, result.stdout.str()


def test_without_a_build_tree_runpath_the_project_library_is_found_beside_the_binary(cmake_project):
    """No RUNPATH: the binaries find libdot.so only beside them, where it was put. The
    frameworks' discovery runs each binary as it is built, which then cannot start: CMake
    says gtest's and doctest's targets did not build (their items are errors saying why), and
    Catch2's lists no test at all (neither does ctest)."""
    with_ini(cmake_project, "ondevice_cmake_cache = CMAKE_SKIP_RPATH=ON")
    result = cmake_project.run("-v")
    discovered = {k: "ERROR" for k in EXPECTED if k.startswith("Dot.") or k.startswith("dot ")}  # gtest's, doctest's
    catch2 = {"dot_of_nothing_is_0", "dot_of_two"}
    run = {k: v for k, v in EXPECTED.items() if k not in discovered and k not in catch2}
    assert case_outcomes(result) == {**discovered, **run}, result.stdout.str()
    result.stdout.fnmatch_lines(["*CMake did not build*", "*libdot.so: cannot open shared object file*"])


def test_a_unity_case_that_prints_its_own_pass_line_and_leaves_is_not_believed(cmake_project):
    """Unity's verdict lines are text a case can print: the board's runtime, linked into every
    executable, stamps the exit with the case Unity was running."""
    unity_test = cmake_project.path / "proj" / "tests" / "dot_unity.c"
    unity_test.write_text(
        unity_test.read_text()
        .replace('#include "dot.h"', '#include "dot.h"\n#include <stdio.h>\n#include <stdlib.h>')
        .replace(
            "  TEST_ASSERT_EQUAL_INT(-21, dot_s8(a, b, 1));",
            '  printf("%s:13:test_dot_of_one:PASS\\n", __FILE__);\n  exit(0);',
        )
    )
    result = cmake_project.run("-v", "-k", "test_dot")
    assert case_outcomes(result) == {"test_dot_of_one": "FAILED", "test_dot_accumulates_past_int8": "FAILED"}
    result.stdout.fnmatch_lines(["*the program exited while this case was running*"])


@pytest.mark.slow
def test_on_bare_metal_the_framework_free_and_unity_tests_run_and_a_file_reader_is_an_error(cmake_project):
    result = cmake_project.run("-v", board="mps2-an386")
    assert case_outcomes(result) == BARE, result.stdout.str()
    result.stdout.fnmatch_lines(["*CTest test reads_input reads files (*tests/inputs), but mps2-an386 is bare metal*"])
    plant_bug(cmake_project)
    result = cmake_project.run("-v", board="bluepill-qemu")
    bugged = {c: "FAILED" if c in PLANTED and v == "PASSED" else v for c, v in BARE.items()}
    assert case_outcomes(result) == bugged, result.stdout.str()
    result.stdout.fnmatch_lines(["*tests/dot_unity.c:20: Expected 48387 Was 48388*"])


@contextlib.contextmanager
def a_phone(tmp_path: Path):
    """A stand-in Android device behind the real adb server: (server port, serial)."""
    from support.adb_standin import AdbServer, StandinDevice, standin_unavailable

    if (why := standin_unavailable()) is not None:
        pytest.skip(why)
    with AdbServer(tmp_path / "adb-home") as server:
        device = StandinDevice(tmp_path / "device").start()
        try:
            server.connect(device)
            yield server.port, device.serial
        finally:
            server.disconnect(device)
            device.stop()


@pytest.mark.slow
def test_on_an_android_phone_over_adb_the_executables_are_static_and_the_inputs_go_along(cmake_project, tmp_path):
    with a_phone(tmp_path) as (port, serial):
        with_ini(cmake_project, f"ondevice_adb_server = 127.0.0.1:{port}")
        result = cmake_project.run("-v", f"--device=adb:{serial}", board="android-arm64")
        assert case_outcomes(result) == EXPECTED, result.stdout.str()
    (build_dir,) = build_dirs(cmake_project, "android-arm64")
    assert not list(build_dir.glob("*.so")), "a phone has no loader for the project's glibc libraries"


def test_the_project_in_ondevice_toml_with_labels_run_and_left_out(project):
    shutil.copytree(EXAMPLES / "cmake", project.path / "proj")
    base = [f"ondevice_build_dir = {project.path / '_build'}", f"ondevice_cache_dir = {project.path / '_cache'}"]
    project.pytester.makeini("\n".join(["[pytest]", *base]) + "\n")
    table = f'[cmake]\nsource = "proj"\ncache = {{ UNITY_DIR = "{UNITY}", CMAKE_SKIP_RPATH = false }}\n'
    project.write("ondevice.toml", table + 'labels = ["fast"]\nexclude_labels = ["io"]\n')
    result = project.run("-v")
    fast = ["Dot.Empty", "Dot.Saturates32Bits", "Dot.Negative", "dot_exit", "test_dot_of_one"]
    assert case_outcomes(result) == dict.fromkeys([*fast, "test_dot_accumulates_past_int8"], "PASSED")
    project.write("ondevice.toml", table + 'exclude_labels = ["fast", "io"]\n')
    result = project.run("-v", "-k", "not doctest and not dot_boost")
    assert set(case_outcomes(result)) == {"dot_of_nothing_is_0", "dot_of_two"}  # Catch2's: no label


def test_a_typo_in_the_cmake_table_names_the_file_and_key(project):
    project.write("ondevice.toml", '[cmake]\nsource = "."\nlabel = ["fast"]\n')
    result = project.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ondevice.toml*cmake.label*labels*"])


FIXTURE_STEP = r"""#include <stdio.h>
#include <string.h>
/* make, use or drop a file: the three steps of a CTest fixture */
int main(int argc, char **argv) {
  if (argc < 3) return 2;
  if (!strcmp(argv[1], "make")) {
    FILE *f = fopen(argv[2], "w");
    return !f || fputs("db", f) < 0 || fclose(f) != 0;
  }
  if (!strcmp(argv[1], "use")) {
    FILE *f = fopen(argv[2], "r");
    if (!f) fprintf(stderr, "no %s: its fixture was not set up first\n", argv[2]);
    return !f;
  }
  return !strcmp(argv[1], "drop") ? remove(argv[2]) != 0 : 2;
}
"""


def with_fixture(project, setup: str = "make") -> Path:
    """A fixture whose tests CTest lists in the wrong order: the user first, its set-up and
    clean-up after; one executable, three argument sets."""
    proj = project.path / "proj"
    (proj / "tests" / "fixture_step.c").write_text(FIXTURE_STEP)
    db = project.path / "db.txt"
    cmake = proj / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "add_executable(fixture_step tests/fixture_step.c)\n"
        f"add_test(NAME use_db COMMAND fixture_step use {db})\n"
        f"add_test(NAME make_db COMMAND fixture_step {setup} {db})\n"
        f"add_test(NAME drop_db COMMAND fixture_step drop {db})\n"
        "set_tests_properties(use_db PROPERTIES FIXTURES_REQUIRED db)\n"
        "set_tests_properties(make_db PROPERTIES FIXTURES_SETUP db)\n"
        "set_tests_properties(drop_db PROPERTIES FIXTURES_CLEANUP db)\n"
    )
    return db


def test_ctest_fixtures_run_set_up_first_and_clean_up_last(cmake_project):
    db = with_fixture(cmake_project)
    result = cmake_project.run("-v", "-k", "_db")
    assert case_outcomes(result) == {"make_db": "PASSED", "use_db": "PASSED", "drop_db": "PASSED"}
    order = [line.split("::")[1].split("[")[0] for line in result.outlines if "_db[host]" in line]
    assert order == ["make_db", "use_db", "drop_db"]
    assert not db.exists()  # cleaned up after its user


def test_a_test_whose_fixture_did_not_set_up_is_not_run_as_ctest_says(cmake_project):
    with_fixture(cmake_project, setup="wrong-step")
    result = cmake_project.run("-v", "-k", "_db")
    assert case_outcomes(result) == {"make_db": "FAILED", "use_db": "FAILED", "drop_db": "FAILED"}
    result.stdout.fnmatch_lines(["*not run: fixture db's setup test make_db failed*"])
    (build_dir,) = build_dirs(cmake_project, "host")
    assert {t: v for t, v in ctest(build_dir).items() if t.endswith("_db")} == {
        "make_db": "Failed",
        "use_db": "Failed",  # "Not Run"
        "drop_db": "Failed",  # nothing to drop
    }


def test_a_fixtures_set_up_left_out_of_the_run_is_said(cmake_project):
    with_fixture(cmake_project)
    result = cmake_project.run("-v", "-k", "use_db")
    assert case_outcomes(result) == {"use_db": "FAILED"}
    result.stdout.fnmatch_lines(["*setup test make_db is left out of this run: select it too*"])


@pytest.mark.slow
def test_under_xdist_a_fixtures_tests_run_on_one_worker_in_order(cmake_project):
    db = with_fixture(cmake_project)
    result = cmake_project.run("-v", "-n", "2", "-k", "_db or dot_exit or Dot.")
    result.assert_outcomes(passed=7)
    order = [line.split("::")[1].split("[")[0] for line in result.outlines if "PASSED" in line and "_db[host]" in line]
    assert order == ["make_db", "use_db", "drop_db"]
    assert not db.exists()


def test_a_board_without_the_projects_cxx_compiler_names_the_package(cmake_project, monkeypatch):
    cmake_project.write(
        "boards/no-cxx.toml",
        'extends = "host"\n[toolchain]\ngnu = ""\ndebian_package = "g++"\n',
    )
    env_cxx = cmake_project.path / "no-such-c++"
    monkeypatch.setenv("CXX", str(env_cxx))
    result = cmake_project.run(board="no-cxx")
    result.stdout.fnmatch_lines(["*board no-cxx has no working C++ compiler for this project: apt-get install g++*"])
    assert "FAILED" not in result.stdout.str()


def test_cpputest_with_a_main_of_its_own_is_one_item_per_case(cmake_project):
    proj = cmake_project.path / "proj"
    (proj / "tests" / "dot_cpputest.cpp").write_text(
        '#include <CppUTest/CommandLineTestRunner.h>\n#include <CppUTest/TestHarness.h>\n#include "dot.h"\n'
        "TEST_GROUP(Dot){};\n"
        "TEST(Dot, OfOne) { const signed char a[] = {3}; LONGS_EQUAL(9, dot_s8(a, a, 1)); }\n"
        "TEST(Dot, OfTwo) { const signed char a[] = {1, 2}; LONGS_EQUAL(6, dot_s8(a, a, 2)); }\n"
        "int main(int ac, char **av) { return CommandLineTestRunner::RunAllTests(ac, av); }\n"
    )
    cmake = proj / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text() + "find_library(CPPUTEST CppUTest)\nif(CPPUTEST)\n"
        "  add_executable(dot_cpputest tests/dot_cpputest.cpp)\n"
        "  target_link_libraries(dot_cpputest dot ${CPPUTEST})\n"
        "  add_test(NAME dot_cpputest COMMAND dot_cpputest)\nendif()\n"
    )
    result = cmake_project.run("-v", "-k", "cpputest")
    assert case_outcomes(result) == {"Dot.OfOne": "PASSED", "Dot.OfTwo": "FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*dot_cpputest.cpp:6*"])


STRICT_PROJECT = {
    "CMakeLists.txt": """cmake_minimum_required(VERSION 3.16)
project(strict C)
# cJSON's way: the project's own code held to C89 and every warning an error
set(CMAKE_C_FLAGS "${CMAKE_C_FLAGS} -std=c89 -pedantic -Werror -Wall -Wextra -Wsign-conversion")
set(CMAKE_C_FLAGS "${CMAKE_C_FLAGS} -Wmissing-prototypes -Wstrict-prototypes -Wconversion -Wshadow")
enable_testing()
add_executable(strict strict.c)
add_test(NAME strict COMMAND strict)
# read from CTest's default working directory, the build dir, where configure copied it
file(COPY inputs DESTINATION ${CMAKE_CURRENT_BINARY_DIR})
add_executable(reads reads.c)
add_test(NAME reads COMMAND reads)
add_executable(tool tool.c)  # not a test, and it does not build
""",
    "strict.c": "int main(void) { return 0; }\n",
    "reads.c": """#include <stdio.h>
int main(void) {
  FILE *f = fopen("inputs/data.txt", "r");
  int c;
  if (f == NULL) {
    puts("no inputs/data.txt here");
    return 1;
  }
  c = fgetc(f);
  fclose(f);
  return c == 'x' ? 0 : 1;
}
""",
    "tool.c": "int main(void) { return undefined_function(); }\n",
    "inputs/data.txt": "x\n",
}


@pytest.fixture
def strict_project(project):
    for name, text in STRICT_PROJECT.items():
        project.write(f"strict/{name}", text)
    base = [f"ondevice_build_dir = {project.path / '_build'}", f"ondevice_cache_dir = {project.path / '_cache'}"]
    project.pytester.makeini("\n".join(["[pytest]", *base, "ondevice_cmake = strict"]) + "\n")
    return project


def test_a_project_as_strict_as_cjson_builds_and_reads_from_ctests_working_directory(strict_project):
    """Our runtime and hooks are compiled apart from the project's -std=c89 -Werror; a test runs
    where CTest runs it (its build dir, which holds what configure copied); an executable that
    is not a test and does not build is nobody's error."""
    result = strict_project.run("-v")
    assert case_outcomes(result) == {"strict": "PASSED", "reads": "PASSED"}, result.stdout.str()
    assert result.ret == 0
    (build_dir,) = build_dirs(strict_project, "host")
    assert ctest(build_dir) == {"strict": "Passed", "reads": "Passed"}


def test_a_node_id_names_one_test_and_only_the_targets_asked_for_are_collected(strict_project):
    result = strict_project.run("-v", "strict/reads.c::reads[host]")
    assert case_outcomes(result) == {"reads": "PASSED"}, result.stdout.str()
    strict_project.pytester.makeini(
        "[pytest]\nondevice_cmake = strict\nondevice_cmake_targets = strict\n"
        f"ondevice_build_dir = {strict_project.path / '_build'}\n"
    )
    assert case_outcomes(strict_project.run("-v")) == {"strict": "PASSED"}


def test_a_project_beside_the_ini_directory_is_collected(strict_project, monkeypatch):
    where = strict_project.path / "run"
    where.mkdir()
    (where / "pytest.ini").write_text(f"[pytest]\nondevice_cmake = ../strict\nondevice_build_dir = {where / '_b'}\n")
    monkeypatch.chdir(where)
    result = strict_project.pytester.runpytest_subprocess("--board=host", "-v", "-p", "no:cacheprovider")
    assert case_outcomes(result) == {"strict": "PASSED", "reads": "PASSED"}, result.stdout.str()


@pytest.mark.slow
def test_under_qemu_user_a_test_reads_from_ctests_working_directory(strict_project):
    result = strict_project.run("-v", "--device=qemu", board="rpi")
    assert case_outcomes(result) == {"strict": "PASSED", "reads": "PASSED"}, result.stdout.str()


@pytest.mark.slow
def test_on_bare_metal_a_test_that_opens_a_file_links_and_is_told_there_is_no_file_system(strict_project):
    result = strict_project.run("-v", board="mps2-an386")
    assert case_outcomes(result) == {"strict": "PASSED", "reads": "FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*ondevice: no file system on bare metal: cannot open inputs/data.txt*"])


def test_a_misspelt_cache_variable_is_a_warning_and_no_tests_at_all_an_error(strict_project):
    strict_project.pytester.makeini(
        "[pytest]\nondevice_cmake = strict\nondevice_cmake_cache = ENABLE_STRICT_TESTZ=ON\n"
        f"ondevice_build_dir = {strict_project.path / '_build'}\n"
    )
    result = strict_project.run("-v")
    result.stdout.fnmatch_lines(["ondevice: CMake project */strict, built in */_build/host/cmake/strict-*"])
    result.stdout.fnmatch_lines(["*host: the project did not read the cache variable ENABLE_STRICT_TESTZ (misspelt?)*"])
    for name, text in STRICT_PROJECT.items():  # the same project with its tests off
        strict_project.write(f"untested/{name}", text.replace("enable_testing()", ""))
    strict_project.pytester.makeini(
        f"[pytest]\nondevice_cmake = untested\nondevice_build_dir = {strict_project.path / '_build'}\n"
    )
    result = strict_project.run()
    result.stdout.fnmatch_lines(["*CTest lists no test in *: is testing on (enable_testing() or include(CTest))*"])


@pytest.mark.slow
def test_on_a_phone_what_a_test_reads_from_its_build_dir_goes_along_when_cmake_data_names_it(strict_project, tmp_path):
    """A device of its own file system gets what [cmake.data] names (CTest's working directory
    is not there); without it, the test cannot read its input, as it would not on the phone."""
    with a_phone(tmp_path) as (port, serial):
        ini = (
            f"[pytest]\nondevice_build_dir = {strict_project.path / '_build'}\nondevice_adb_server = 127.0.0.1:{port}\n"
        )
        strict_project.pytester.makeini(ini)
        strict_project.write("ondevice.toml", '[cmake]\nsource = "strict"\n')
        result = strict_project.run("-v", f"--device=adb:{serial}", board="android-arm64")
        assert case_outcomes(result) == {"strict": "PASSED", "reads": "FAILED"}, result.stdout.str()
        result.stdout.fnmatch_lines(["*no inputs/data.txt here*"])
        strict_project.write("ondevice.toml", '[cmake]\nsource = "strict"\n[cmake.data]\n"rea*" = ["inputs"]\n')
        result = strict_project.run("-v", f"--device=adb:{serial}", board="android-arm64")
        assert case_outcomes(result) == {"strict": "PASSED", "reads": "PASSED"}, result.stdout.str()
