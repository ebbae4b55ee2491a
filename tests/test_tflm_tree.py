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
