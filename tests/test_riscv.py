"""riscv32-qemu: rv32imac bare metal on QEMU's virt machine, with the real cross compiler
(Debian's gcc-riscv64-unknown-elf and picolibc) and the real qemu-system-riscv32."""

from __future__ import annotations

import json
import shutil

import pytest
from test_boards_qemu import FAULTS

from pytest_ondevice.compiling.elf import read

pytestmark = pytest.mark.slow
BOARD = "riscv32-qemu"
PICOLIBC_LD = "/usr/lib/picolibc/riscv64-unknown-elf/lib/picolibc.ld"  # Debian's picolibc


def test_the_examples_pass_benches_included_with_the_same_figures_every_run(project):
    project.copy_examples("gemm", "model")
    figures = []
    for run in (1, 2):
        result = project.run("examples", "-v", f"--bench-json=bench{run}.json", board=BOARD)
        result.assert_outcomes(passed=15)
        result.stdout.fnmatch_lines(["*gemm_s8_test.c::BenchInt8Gemm32[[]riscv32-qemu[]] PASSED*"])
        # picolibc's specs add -Tpicolibc.ld, found on the link's -L path: the cache still vouches
        assert "not cached" not in result.stdout.str()
        if run == 2:
            result.stdout.fnmatch_lines(["ondevice build: 0 compiled, * reused; 0 linked, 5 reused*"])
        records = json.loads((project.path / f"bench{run}.json").read_text())["records"]
        figures.append({r["name"]: (r["unit"], r["median"], r["min"], r["max"]) for r in records})
    assert figures[0] == figures[1]  # -icount: the cycle CSR counts virtual time
    unit, median, low, high = figures[0]["gemm_s8_naive_32"]
    assert unit == "instructions" and low == median == high and 100_000 < median < 1_000_000
    assert figures[0]["gemm_s8_opt_32"][1] < median  # the optimized kernel is faster here too
    for binary in (project.path / "_build" / BOARD / "bin").rglob("*_test*.elf"):
        info = read(binary)
        assert info.arch == "riscv" and info.entry == 0x80000000
    # a picolibc.ld beside the sources would now be the linker's: the cached links no longer hold
    shutil.copy(PICOLIBC_LD, project.path / "picolibc.ld")
    result = project.run("examples", board=BOARD)
    result.assert_outcomes(passed=15)
    result.stdout.fnmatch_lines(["ondevice build: 0 compiled, * reused; 5 linked, 0 reused*"])


def test_a_trap_is_a_fault_naming_the_cause_the_pc_and_the_running_case(project):
    project.write("fault_test.c", FAULTS)  # the Cortex-M fault test's source
    result = project.run("-v", board=BOARD)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*BadPointer[[]riscv32-qemu[]] FAILED*",
            "*fault: LoadAccessFault pc=0x8* mcause=0x00000005 mtval=0xfffffff0 while this case was running*",
            "*not run: fault: LoadAccessFault*before this case*",
        ]
    )


def test_an_illegal_instruction_is_named(project):
    project.write(
        "illegal_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Illegal) { __asm__ volatile(".word 0"); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run(board=BOARD)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fault: IllegalInstruction pc=0x8* mcause=0x00000002 *while this case was running*"])


def test_a_failing_check_names_its_file_and_line_and_printf_reaches_the_log(project):
    project.write(
        "cases_test.cc",
        """
        #include <stdio.h>
        #include "micro_test.h"
        struct Init { int value; Init() : value(42) {} };
        static Init init;
        TEST(Runtime, StaticConstructorRan) { EXPECT_EQ(init.value, 42); }
        TEST(Runtime, PicolibcPrintf) { printf("printf says %d %.2f\\n", 7, 1.5); }
        TEST(Runtime, Fails) { EXPECT_EQ(1 + 1, 3); }
        TF_LITE_MICRO_TESTS_MAIN
        """,
    )
    result = project.run("-s", board=BOARD)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["[[]riscv32-qemu[]] printf says 7 1.50", "*cases_test.cc:8*"])


def test_an_endless_loop_is_killed_at_the_timeout(project):
    project.write(
        "loop_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Spins) { for (;;) {} }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("--device-timeout=2", board=BOARD)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 2*while this case was running*"])
