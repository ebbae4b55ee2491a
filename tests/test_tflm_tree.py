"""A TFLM tree as a user brings it, run through the README's recipe: the miniature in
tests/support/tflm_mini has TFLM's layout, include paths and both of TFLM's own harness
headers (micro_test.h through MicroPrintf, micro_test_v2.h through DebugLog on stderr),
so what is judged here is TFLM's output, not our header's."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import QUIET

MINI = Path(__file__).parent / "support" / "tflm_mini"
BOARDS = "host,mps2-an386"

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")


@pytest.fixture
def tree(project, monkeypatch):
    shutil.copytree(MINI, project.path, dirs_exist_ok=True)
    (project.path / ".git").mkdir()  # a checkout's root, as TFLM's is
    monkeypatch.setenv("FLATBUFFERS_DIR", str(project.path / "third_party_root" / "flatbuffers"))
    return project


def test_tflm_kernel_tests_with_tflms_own_headers_pass_on_host_and_cortex_m(tree):
    result = tree.run("-v", "-rs", board=BOARDS)
    result.assert_outcomes(passed=10, skipped=6)
    result.stdout.fnmatch_lines_random(
        [
            # a file wholly inside #ifdef USE_TFLM_COMPRESSION has no main: skipped, not a link error
            "*decompress_test.cc::DecompressTest.TestFloat[[]mps2-an386[]] SKIPPED*",
            "SKIPPED [[]1[]] *decompress_test.cc:8: compiled out on mps2-an386: `#ifdef USE_TFLM_COMPRESSION` "
            "(every case of the file: nothing to run)",
            "SKIPPED [[]1[]] *decompress_test.cc:7: compiled out on host: `#ifdef USE_TFLM_COMPRESSION` (every *",
            # v1, through MicroPrintf's "\r\n" lines; the per-kind define reached the library
            "*add_test.cc::AddInt8Saturates[[]mps2-an386[]] PASSED*",
            "*add_test.cc::PlatformDefineComesFromTheBoardKind[[]host[]] PASSED*",
            # v2, through DebugLog on stderr
            "*softmax_test.cc::SoftmaxTest.Float1D[[]mps2-an386[]] PASSED*",
            "*compiled out on mps2-an386: `#ifdef USE_TFLM_COMPRESSION`*",
            "*compiled out on host: `#ifdef USE_TFLM_COMPRESSION`*",
        ]
    )
    # both kernel_util.cc (micro/kernels and lite/kernels) are in the library; no test source is
    for archive in (tree.path / "_cache").rglob("libundertest.a"):
        members = subprocess.run(["ar", "t", str(archive)], capture_output=True, text=True, check=True).stdout
        assert sorted(members.split()).count("kernel_util.cc.o") == 2, members
        assert "_test" not in members, members


def test_a_broken_kernel_fails_exactly_its_case_with_its_float_values_on_both_boards(tree):
    softmax = tree.path / "tensorflow/lite/micro/kernels/softmax.cc"
    softmax.write_text(softmax.read_text().replace("out[i] /= sum;", "out[i] /= sum * (n == 3 ? 1.5f : 1.0f);"))
    result = tree.run("-rf", board=BOARDS)
    result.assert_outcomes(passed=8, failed=2, skipped=6)
    text = result.stdout.str()
    for board in ("host", "mps2-an386"):
        assert f"FAILED tensorflow/lite/micro/kernels/softmax_test.cc::SoftmaxTest.Float1D[{board}]" in text
    # newlib-nano would print "Evaluated:   <= " on Cortex-M without printf's float support
    assert text.count("Evaluated:  0.030010 <= 0.000010") >= 2, text
    result.stdout.fnmatch_lines(["> tensorflow/lite/micro/kernels/softmax_test.cc:11 * EXPECT_NEAR(out[[]i[]]*"])


def test_a_broken_v1_expectation_names_its_values_and_line(tree):
    add = tree.path / "tensorflow/lite/micro/kernels/add.cc"
    add.write_text(add.read_text().replace("SaturatingAdd(a[i], b[i])", "static_cast<int8_t>(a[i] + b[i])"))
    result = tree.run(board="mps2-an386")
    result.assert_outcomes(passed=4, failed=1, skipped=3)
    result.stdout.fnmatch_lines(
        ["*out[[]0[]] == 127 failed at tensorflow/lite/micro/kernels/add_test.cc:14 (-56 vs 127)*"]
    )


def test_the_recipe_runs_from_inside_the_tree_and_names_an_unset_root(tree, monkeypatch):
    micro = tree.path / "tensorflow" / "lite" / "micro"
    (micro / "pytest.ini").write_text((tree.path / "tox.ini").read_text())  # pytest roots here now
    os.chdir(micro)
    run = ("--board=host", "-p", "no:cacheprovider", *QUIET)
    tree.pytester.runpytest(*run).assert_outcomes(passed=5, skipped=3)
    monkeypatch.delenv("FLATBUFFERS_DIR")
    result = tree.pytester.runpytest(*run)
    unset = "*ondevice.toml: 'include_dirs' entry '${FLATBUFFERS_DIR}/include' uses $FLATBUFFERS_DIR, which is not set*"
    result.stdout.fnmatch_lines([unset])
    assert result.ret != 0


STACK_TEST = """
#include "tensorflow/lite/micro/testing/micro_test_v2.h"

static int __attribute__((noinline)) Deep(int n) {
  volatile char buffer[4096];
  for (int i = 0; i < 4096; i += 64) buffer[i] = static_cast<char>(n + i);
  return buffer[n & 63] + buffer[4032];
}

static int __attribute__((noinline)) Recurse(int n) {
  volatile char pad[512];
  pad[0] = static_cast<char>(n);
  return n == 0 ? pad[0] : Recurse(n - 1) + pad[0];
}

TEST(StackTest, Shallow) { EXPECT_EQ(1 + 1, 2); }
TEST(StackTest, FourKiBArray) { EXPECT_TRUE(Deep(3) != 12345); }
TEST(StackTest, RecursesPastTheBottom) { EXPECT_TRUE(Recurse(1000) != 7); }

TF_LITE_MICRO_TESTS_MAIN
"""


def stack_bytes(tree, case: str, board: str) -> int:
    """The case's stack record, as the JUnit property carries it."""
    import xml.etree.ElementTree as ET

    root = ET.parse(tree.path / "junit.xml").getroot()
    for testcase in root.iter("testcase"):
        if testcase.get("name") == f"{case}[{board}]":
            for prop in testcase.iter("property"):
                if prop.get("name") == "ondevice_stack_bytes":
                    return int(prop.get("value"))
    raise AssertionError(f"no stack figure for {case}")


def test_with_tflms_own_header_the_runtime_measures_each_cases_stack_on_bare_metal(tree):
    """TFLM's micro_test_v2.h has no markers of ours: the runtime watches its case lines,
    so a 4 KiB array reads as 4 KiB and more, and a recursion past the stack's bottom is an
    overflow, not a random crash."""
    (tree.path / "tensorflow/lite/micro/kernels/stack_test.cc").write_text(STACK_TEST)
    result = tree.run("-v", "--junitxml=junit.xml", "tensorflow/lite/micro/kernels/stack_test.cc", board="mps2-an386")
    outcomes = {
        r.nodeid.split("::")[1]: r.outcome
        for r in result.reprec.getreports("pytest_runtest_logreport")
        if r.when == "call"
    }
    assert outcomes["StackTest.Shallow[mps2-an386]"] == "passed"
    assert outcomes["StackTest.FourKiBArray[mps2-an386]"] == "passed"
    shallow = stack_bytes(tree, "StackTest.Shallow", "mps2-an386")
    deep = stack_bytes(tree, "StackTest.FourKiBArray", "mps2-an386")
    assert 0 < shallow < 1024  # main, the runner and printf's frames: counted from the top of the stack
    assert 4096 <= deep < 4096 + 512, (shallow, deep)  # the array and the frames above it
    assert outcomes["StackTest.RecursesPastTheBottom[mps2-an386]"] == "failed"
    assert len(outcomes) == 3  # the device could not see the overflow: no blame on the binary as a whole
    result.stdout.fnmatch_lines(
        ["*StackTest.RecursesPastTheBottom on mps2-an386*", "stack overflow: the case reached the last 256 bytes*"]
    )


def test_with_tflms_own_header_bare_metal_coverage_comes_at_exit_and_agrees_with_the_host(tree):
    """No markers of ours: the runtime sends the counts as the program exits. The kernel's
    figures on the Cortex-M board are the host's, line for line."""
    import json

    result = tree.run(
        "--ondevice-coverage",
        "--ondevice-coverage-filter=tensorflow/lite/micro/kernels/softmax",
        "tensorflow/lite/micro/kernels/softmax_test.cc",
        board="host,mps2-an386",
    )
    result.assert_outcomes(passed=4, skipped=2)
    out = tree.path / "ondevice-coverage"

    def lines(board: str) -> dict[int, int]:
        (kernel,) = json.loads((out / board / "coverage.json").read_text())["files"]
        assert kernel["file"] == "tensorflow/lite/micro/kernels/softmax.cc"
        return {line["line_number"]: line["count"] for line in kernel["lines"]}

    assert lines("mps2-an386") == lines("host") and any(lines("host").values())
    result.stdout.fnmatch_lines(["host: lines 100.0% (6 of 6)*", "mps2-an386: lines 100.0% (6 of 6)*"])
