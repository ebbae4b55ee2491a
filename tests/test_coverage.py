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

from pytest_ondevice.records import coverage

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
    assert build_report(plain)["compiled"] == 3  # lib.c, lib_test.c and the runtime
    assert build_report(covered)["compiled"] == 2  # both built again, instrumented; the runtime never is
    assert build_report(again)["compiled"] == 0 and build_report(again)["reused"] > 0  # the plain ones, reused


BARE = [
    "mps2-an386",
    pytest.param("bluepill-qemu", marks=pytest.mark.slow),
    pytest.param("riscv32-qemu", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("board", BARE)
def test_bare_metal_sends_its_counts_over_the_output_and_they_agree_with_host_gcov(project, tmp_path, board):
    library(project)
    result = project.run("-v", "--ondevice-coverage", board=board)
    assert case_outcomes(result) == {"CallsUsed": "PASSED", "FailsAfterCalling": "FAILED"}
    expected = host_gcov(tmp_path / "plain-gcov")
    covered, total = expected["line_covered"], expected["line_total"]
    result.stdout.fnmatch_lines([f"{board}: lines 25.0% ({covered} of {total}), functions 50.0% (1 of 2)*"])
    assert functions(project.path / "ondevice-coverage" / board / "coverage.json") == {"used": 2, "unused": 0}
    (log,) = (p.read_text() for p in project.path.rglob(f"{board}/logs/lib/lib_test.c.log"))
    assert log.index(" gcda-end ") < log.index(" summary")  # the summary vouches for the counts


UNUSED_TEST = """
#include "micro_test.h"
int unused(int x);
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(CallsUnusedLow) { TF_LITE_MICRO_EXPECT_EQ(unused(1), 0); }
TF_LITE_MICRO_TESTS_END
"""
CRASH_TEST = """
#include "micro_test.h"
int unused(int x);
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(CallsUnusedHighThenCrashes) {
  TF_LITE_MICRO_EXPECT_EQ(unused(5), 10);
  __builtin_trap();
}
TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_runs_are_merged_and_a_run_that_crashed_is_named(project, workers):
    """Each run's counts are kept apart and merged by the board's gcov-tool; a binary that
    crashed sent nothing, which the report says instead of counting its code as run."""
    library(project)
    project.write("lib/unused_test.c", UNUSED_TEST)
    project.write("lib/crash_test.c", CRASH_TEST)
    result = project.run(*workers, "--ondevice-coverage", board="mps2-an386,host")
    host = functions(project.path / "ondevice-coverage" / "host" / "coverage.json")
    bare = functions(project.path / "ondevice-coverage" / "mps2-an386" / "coverage.json")
    assert host == {"used": 2, "unused": 1}  # the host's crashed run wrote nothing either: libgcov writes at exit
    assert bare == host
    result.stdout.fnmatch_lines(
        [
            "mps2-an386: 1 of 3 runs sent no counts (they ended before their summary: lib/crash_test.c);*",
            "mps2-an386: lines 100.0% (4 of 4)*",
        ]
    )


def test_a_bare_metal_board_built_by_clang_says_it_is_not_measured(monkeypatch, tmp_path):
    from pytest_ondevice.compiling import builder, toolchain
    from pytest_ondevice.config.board import BoardRegistry

    board = BoardRegistry().get("mps2-an386")
    covering = builder.Builder(tmp_path / "build", 1, tmp_path, coverage_dir=tmp_path / "data")
    assert covering.covered(board) and builder.COVERAGE_RUNTIME in covering.runtime_sources(board)
    clang = toolchain.ResolvedToolchain("clang", ("clang",), ("clang++",), ("llvm-ar",), "clang")
    monkeypatch.setattr(toolchain, "resolve", lambda board: clang)
    assert not covering.covered(board) and builder.COVERAGE_RUNTIME not in covering.runtime_sources(board)


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


def test_runs_are_merged_by_gcov_tool_whatever_the_session_environment_says(tmp_path, monkeypatch):
    """gcov-tool writes through libgcov, which reads GCOV_PREFIX: the session's own (set for
    the programs it starts) must not send the merged counts elsewhere."""
    (tmp_path / "lib.c").write_text(LIB)
    (tmp_path / "main.c").write_text("int used(int);int unused(int);\nint main(int c,char**v){return unused(c)*0;}\n")
    subprocess.run(["gcc", "--coverage", "lib.c", "main.c", "-o", "prog"], cwd=tmp_path, check=True)
    data = tmp_path / "data"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GCOV_")}
    for argv in (["./prog"], ["./prog", "a", "b", "c", "d"]):  # unused(1), then unused(5)
        subprocess.run(argv, cwd=tmp_path, check=True, env=clean)
        files = {p.name: p.read_bytes() for p in tmp_path.glob("*.gcda")}
        coverage.keep_sent(data, "board", argv[0], files, [])
        for p in tmp_path.glob("*.gcda"):
            p.unlink()
    monkeypatch.setenv("GCOV_PREFIX", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GCOV_PREFIX_STRIP", "99")
    seen = coverage.fold_sent(data, "board", ["gcc"])
    assert seen.runs == 2 and not seen.silent
    (merged,) = (data / "sent").glob("*.merged")
    assert sorted(p.name for p in merged.iterdir()) == ["prog-lib.gcda", "prog-main.gcda"]
    assert not (tmp_path / "elsewhere").exists()


def test_the_history_keeps_each_nights_figures_and_the_report_shows_what_fell(project, tmp_path):
    """Two nights with --history: the second calls unused() no more. The history keeps each
    board's figures, whole and per file; the morning report names lib.c as fallen."""
    from pytest_ondevice.commands.cli import main
    from pytest_ondevice.records import history

    library(project)
    project.write("lib/unused_test.c", UNUSED_TEST)
    db = project.path / "history.db"
    project.run("--ondevice-coverage", f"--history={db}", board="host,mps2-an386")
    (project.path / "lib" / "unused_test.c").unlink()
    project.run("--ondevice-coverage", f"--history={db}", board="host,mps2-an386")
    kept = history.load(db)
    whole = {(c.run_id, c.board): c for c in kept.coverage if c.file is None}
    assert {board for _, board in whole} == {"host", "mps2-an386", None}
    first, second = (run.id for run in kept.runs)
    for board in ("host", "mps2-an386", None):
        assert (whole[first, board].line_covered, whole[first, board].line_total) == (4, 4)
        assert (whole[second, board].line_covered, whole[second, board].line_total) == (1, 4)
    assert {c.file for c in kept.coverage if c.file} == {"lib/lib.c"}
    page = tmp_path / "nightly.html"
    assert main(["report", str(db), "--html", str(page)]) == 0
    text = page.read_text()
    assert "<h2>Code coverage</h2>" in text and "25.0 % (1 of 4)" in text and "-75.0 points" in text
    fell = text.split("Files whose line coverage fell")[1]
    assert "lib/lib.c" in fell and "100.0 % (4 of 4)" in fell
