"""--ondevice-coverage: the code under test built with gcov instrumentation, run on the
device, its counts brought back and read by the board's gcov through gcovr; checked
against a plain host gcov run of the same code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import build_report, case_outcomes
from test_adb import device, phone, server  # noqa: F401 - fixtures
from test_adb import run as adb_run
from test_ssh import accounts, board_for_device, pi, sshd  # noqa: F401 - fixtures

LIB = """
int used(int x) { return x + 1; }
int unused(int x) {
  if (x > 3) return x * 2;
  return x - 1;
}
"""
TEST = """
#include "micro_test.h"
int used(int x);
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(CallsUsed) { TF_LITE_MICRO_EXPECT_EQ(used(1), 2); }
TF_LITE_MICRO_TEST(FailsAfterCalling) { TF_LITE_MICRO_EXPECT_EQ(used(2), 4); }
TF_LITE_MICRO_TESTS_END
"""

pytest.importorskip("gcovr")


def library(project) -> None:
    project.write("lib/lib.c", LIB)
    project.write("lib/ondevice.toml", 'sources = ["lib.c"]\n')
    project.write("lib/lib_test.c", TEST)


def functions(trace) -> dict[str, int]:
    """Calls per function of lib.c, from gcovr's JSON."""
    data = json.loads(trace.read_text())
    (lib,) = [f for f in data["files"] if f["file"].endswith("lib.c")]
    return {f["name"]: f["execution_count"] for f in lib["functions"]}


def host_gcov(where) -> dict:
    """The same library and a main that calls used() once, built and run with gcc --coverage
    as anyone would, summarised by gcovr: the figures ours must equal."""
    where.mkdir()
    tmp_path = where
    (tmp_path / "lib.c").write_text(LIB)
    (tmp_path / "main.c").write_text("int used(int x);\nint main(void) { return used(1) == 2 ? 0 : 1; }\n")
    subprocess.run(["gcc", "--coverage", "-O2", "lib.c", "main.c", "-o", "prog"], cwd=tmp_path, check=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GCOV_")}
    subprocess.run(["./prog"], cwd=tmp_path, check=True, env=clean)
    out = subprocess.run(
        [sys.executable, "-m", "gcovr", "--root", str(tmp_path), "--filter", r".*lib\.c", "--json-summary", "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_one_function_called_one_not_agrees_with_host_gcov_and_a_failing_case_still_counts(project, tmp_path):
    library(project)
    result = project.run("-v", "--ondevice-coverage")
    assert case_outcomes(result) == {"CallsUsed": "PASSED", "FailsAfterCalling": "FAILED"}
    out = project.path / "ondevice-coverage"
    assert functions(out / "host" / "coverage.json") == {"used": 2, "unused": 0}  # both cases called it
    expected = host_gcov(tmp_path / "plain-gcov")
    covered, total = expected["line_covered"], expected["line_total"]
    assert (covered, total) == (1, 4)  # what gcc + gcov say of lib.c run once
    result.stdout.fnmatch_lines(
        [
            "*ondevice coverage*",
            f"host: lines 25.0% ({covered} of {total}), functions 50.0% (1 of 2)*",
            f"all boards: lines 25.0% ({covered} of {total})*",
        ]
    )
    cobertura = ET.parse(out / "coverage.xml").getroot()
    assert cobertura.get("line-rate") == "0.25"
    assert not any("lib_test.c" in c.get("filename") for c in cobertura.iter("class"))  # tests are left out
    assert (out / "index.html").is_file() and (out / "host" / "index.html").is_file()


def test_the_session_leaves_the_environment_as_it_found_it(project):
    library(project)
    before = {k: v for k, v in os.environ.items() if k.startswith("GCOV_")}
    project.run("--ondevice-coverage")
    assert {k: v for k, v in os.environ.items() if k.startswith("GCOV_")} == before


def test_instrumented_objects_are_never_mixed_with_plain_ones(project):
    library(project)
    plain = project.run()
    covered = project.run("--ondevice-coverage")
    again = project.run()
    assert build_report(plain)["compiled"] > 0
    assert build_report(covered)["compiled"] == build_report(plain)["compiled"]  # all built again, instrumented
    assert build_report(again)["compiled"] == 0 and build_report(again)["reused"] > 0  # the plain ones, reused


def test_a_bare_metal_board_says_it_is_not_measured(project):
    library(project)
    result = project.run("--ondevice-coverage", board="host,bluepill-qemu")
    result.stdout.fnmatch_lines(["bluepill-qemu: not measured (bare metal is not instrumented yet)", "host: lines*"])


@pytest.mark.slow
def test_the_pi_binary_under_qemu_user_mode_is_read_by_the_cross_gcov(project):
    library(project)
    result = project.run("--ondevice-coverage", "--device=qemu", board="rpi")
    result.stdout.fnmatch_lines(["rpi: lines 25.0% (1 of 4), functions 50.0% (1 of 2)*"])
    assert functions(project.path / "ondevice-coverage" / "rpi" / "coverage.json") == {"used": 2, "unused": 0}


@pytest.mark.slow
def test_over_ssh_the_counts_come_back_from_the_device(pi):  # noqa: F811 - the fixture
    library(pi)
    result = pi.run("--ondevice-coverage", f"--device={pi.sshd.alias}", board=pi.board)
    result.stdout.fnmatch_lines([f"{pi.board}: lines 25.0% (1 of 4), functions 50.0% (1 of 2)*"])
    assert functions(pi.path / "ondevice-coverage" / pi.board / "coverage.json") == {"used": 2, "unused": 0}


@pytest.mark.slow
def test_through_adb_the_counts_come_back_from_the_phone(phone):  # noqa: F811 - the fixture
    library(phone)
    result = adb_run(phone, "--ondevice-coverage")
    result.stdout.fnmatch_lines(["android-arm64: lines 25.0% (1 of 4), functions 50.0% (1 of 2)*"])
