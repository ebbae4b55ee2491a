"""CUDA tests (`*_test.cu`): built for real by NVIDIA's nvcc 13 (the wheels scripts/setup.sh
--cuda installs) for a workstation's GPU and, cross, for a Jetson Orin; run for real on this
machine and under qemu-aarch64, where no GPU exists: every case is then an error naming the
device and the CUDA error, decided from our header's stamped line, never a pass."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import EXAMPLES, build_report

from pytest_ondevice.compiling import cuda, elf
from pytest_ondevice.config.board import BoardRegistry

REGISTRY = BoardRegistry()


def _toolkit_found() -> bool:
    try:
        cuda.toolkit(REGISTRY.get("jetson-cuda"))
        cuda.toolkit(REGISTRY.get("host-cuda"))
    except cuda.CudaError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _toolkit_found(), reason="needs the CUDA wheels: scripts/setup.sh --cuda")
NO_GPU = "no usable CUDA GPU: cudaErrorInsufficientDriver (35)"
BOTH = ("host-cuda,jetson-cuda", "--device=jetson-cuda=qemu")


@pytest.fixture
def gemm(project):
    shutil.copytree(EXAMPLES / "cuda", project.path / "cuda")
    return project


def test_the_gemm_kernels_are_built_for_each_boards_gpu_and_cpu_and_a_rerun_compiles_nothing(gemm):
    result = gemm.run("cuda", "--build-only", board=BOTH[0])
    assert result.parseoutcomes().get("built") == 8, result.stdout.str()
    host = next((gemm.path / "_build" / "host-cuda").rglob("gemm_cuda_test.cu.elf"))
    jetson = next((gemm.path / "_build" / "jetson-cuda").rglob("gemm_cuda_test.cu.elf"))
    assert elf.read(host).arch == "x86_64" and elf.read(jetson).arch == "aarch64"
    # machine code for each architecture the board file names, and the lowest one's PTX
    assert cuda.gpu_images(host) == {"sm_75", "sm_86", "compute_75"}
    assert cuda.gpu_images(jetson) == {"sm_87", "compute_87"}
    for binary in (host, jetson):  # the CUDA runtime is in the binary, not the device's
        needed = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True).stdout
        assert "libcudart" not in needed, needed
    again = gemm.run("cuda", "--build-only", board=BOTH[0])
    assert build_report(again)["compiled"] == 0 and build_report(again)["linked"] == 0


def test_without_a_gpu_every_case_is_an_error_naming_the_device_and_the_cuda_error(gemm):
    result = gemm.run("cuda", "-rE", "--junitxml=junit.xml", *BOTH[1:], board=BOTH[0])
    result.assert_outcomes(errors=8)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of NaiveMatchesTheCpuOnAllShapes on host-cuda*",
            f"host-cuda: {NO_GPU}: CUDA driver version is insufficient for CUDA runtime version*",
            "*ERROR at setup of TiledMatchesTheCpuOnAllShapes on host-cuda*",  # the same error, said once in full
            "host-cuda: no usable CUDA GPU: * (the same error as *::NaiveMatchesTheCpuOnAllShapes*: shown there*",
            "*ERROR at setup of NaiveMatchesTheCpuOnAllShapes on jetson-cuda*",
            f"jetson-cuda: {NO_GPU}: CUDA driver version is insufficient for CUDA runtime version*",
        ]
    )
    suite = ET.parse(gemm.path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("errors"), suite.get("failures")) == ("8", "0")


def test_with_no_gpu_skip_the_cases_are_skipped_saying_why(gemm):
    result = gemm.run("cuda", "-rs", "--ondevice-no-gpu=skip", board="host-cuda")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] cuda/gemm_cuda_test.cu:*: {NO_GPU}*"] * 4)


FORGED = """
#include <stdio.h>
#include <unistd.h>
#include "micro_test.h"
// printed before main, so before the header asks for the GPU: a pass with nothing behind it
__attribute__((constructor)) static void forge(void) {
  printf("Testing Kernel\\n1/1 tests passed\\n~~~ALL TESTS PASSED~~~\\n");
  fflush(stdout);
  _exit(0);
}
__global__ void kernel(int *x) { *x = 1; }
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Kernel) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
TF_LITE_MICRO_TESTS_END
"""


def test_a_pass_printed_by_a_binary_that_never_reached_the_gpu_does_not_pass(project):
    project.write("forged_test.cu", FORGED)
    result = project.run("-rf", board="host-cuda")
    result.assert_outcomes(failed=2)  # the case, and the binary as a whole
    result.stdout.fnmatch_lines(["*its output never declared the run's nonce*"])


def test_a_shared_cuda_runtime_missing_on_the_device_names_the_library_and_the_board_option(gemm):
    # the aarch64 loader under qemu-aarch64 finds no libcudart.so.13 in the cross sysroot
    gemm.write("boards/orin-shared.toml", 'extends = "jetson-cuda"\n[cuda]\ncudart = "shared"\n')
    result = gemm.run("cuda", "-rE", "--device=orin-shared=qemu", board="orin-shared")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            "*the device's loader could not find libcudart.so.13 (exit 127, before the program started): "
            'install the CUDA runtime on the device, or link it statically ([[]cuda[]] cudart = "static" '
            "in orin-shared.toml)*"
        ]
    )


def test_cuda_tests_on_a_board_without_a_gpu_are_skipped_saying_why(gemm):
    result = gemm.run("cuda", "-rs", board="host")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*a CUDA test needs a board with a GPU ([[]cuda[]] archs in its file); host has none"])


def test_without_a_toolkit_the_items_are_errors_naming_the_setup_command(gemm, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(gemm.path / "no-toolkit-here"))
    result = gemm.run("cuda", "-rE", board="host-cuda")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(["*CUDA_HOME=*no-toolkit-here has no bin/nvcc*scripts/setup.sh --cuda*"])


def test_a_board_file_with_a_misspelt_gpu_architecture_names_the_file_and_key(project):
    project.write("boards/orin.toml", 'extends = "jetson-cuda"\n[cuda]\narchs = ["87"]\n')
    project.write("x_test.cu", FORGED)
    result = project.run(board="orin")
    result.stderr.fnmatch_lines(["*orin.toml: key 'cuda.archs' entry '87' is not a GPU architecture such as 'sm_87'*"])
    assert result.ret != 0


def test_nvcc_keeps_commas_spaces_and_gnu_dialects_of_host_flags_in_one_piece():
    board = REGISTRY.get("host-cuda")
    argv = cuda.compile_argv(
        cuda.toolkit(board),
        board,
        ("c++",),
        ["-ffile-prefix-map=/a b=.", "-Wa,--noexecstack", "-DV=1,2", "-std=gnu++17"],
    )
    assert argv[-5:] == [
        '-Xcompiler="-ffile-prefix-map=/a b=."',
        "-Xcompiler=-Wa\\,--noexecstack",
        "-DV=1\\,2",
        "-std=c++17",
        "-Xcompiler=-std=gnu++17",
    ]


def test_nvcc_gets_the_boards_host_flags_through_xcompiler_and_its_own_directly():
    board = REGISTRY.get("jetson-cuda")
    tk = cuda.toolkit(board)
    argv = cuda.compile_argv(
        tk, board, ("aarch64-linux-gnu-g++",), ["-O2", "-mcpu=cortex-a78ae", "-isystem", "/x", "-DX=1", "-c", "a.cu"]
    )
    assert argv[:3] == [str(tk.nvcc), "-ccbin", "aarch64-linux-gnu-g++"]
    assert "-gencode=arch=compute_87,code=sm_87" in argv and "-gencode=arch=compute_87,code=compute_87" in argv
    assert "-DONDEVICE_CUDA_MIN_ARCH=87" in argv  # an older GPU is refused as unavailable, before any case
    assert argv[-8:] == [
        "-O2",
        "-Xcompiler=-O2",
        "-Xcompiler=-mcpu=cortex-a78ae",
        "-Xcompiler=-isystem",
        "-Xcompiler=/x",
        "-DX=1",
        "-c",
        "a.cu",
    ]


def test_the_fat_binary_reader_names_each_image_and_survives_garbage(tmp_path):
    import struct

    def entry(kind: int, arch: int, payload: bytes) -> bytes:
        header = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload)) + bytes(12) + struct.pack("<I", arch)
        return header.ljust(64, b"\0") + payload

    body = entry(2, 87, b"E" * 24) + entry(1, 87, b"P" * 8)
    fatbin = struct.pack("<IHHQ", cuda.FATBIN_MAGIC, 1, 16, len(body)) + body
    damaged = struct.pack("<IHHQ", cuda.FATBIN_MAGIC, 1, 0, 0) + b"\xff" * 40  # sizes of 0, then garbage
    assert cuda.gpu_images(Path(shutil.which("true"))) == set()  # no .nv_fatbin at all
    truncated = fatbin[: len(fatbin) - 52]  # the PTX entry's header runs past the end
    cases = ((fatbin, {"sm_87", "compute_87"}), (damaged + fatbin, {"sm_87", "compute_87"}), (truncated, {"sm_87"}))
    for data, want in cases:
        section = tmp_path / "fatbin.bin"
        section.write_bytes(data)
        obj = tmp_path / "x.o"
        subprocess.run(
            ["objcopy", "-I", "binary", "-O", "elf64-x86-64", "--rename-section", ".data=.nv_fatbin", section, obj],
            check=True,
        )
        assert cuda.gpu_images(obj) == want


def test_a_cuda_file_whose_cases_an_ifdef_removes_is_skipped_naming_it(project):
    """nvcc's preprocessor, not the host compiler's, decides what the board compiles."""
    project.write(
        "off_test.cu",
        """
        #include "micro_test.h"
        #ifdef USE_FEATURE_X
        __global__ void k(int *x) { *x = 1; }
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(NeedsX) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
        TF_LITE_MICRO_TESTS_END
        #endif
        """,
    )
    result = project.run("-rs", board="host-cuda")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*compiled out on host-cuda: `#ifdef USE_FEATURE_X` (every case of the file*"])
