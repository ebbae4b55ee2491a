"""Cross-compiled boards on a real QEMU: bare-metal Cortex-M and Linux ARM under qemu-user."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_built, build_report

from pytest_ondevice.compiling import (
    toolchain,  # imported before any in-process run: pytester drops what a run imported,
)
from pytest_ondevice.compiling.elf import read
from pytest_ondevice.config.board import (
    BoardRegistry,  # and a test that patches toolchain must patch the one the plugin uses
)

pytestmark = pytest.mark.slow
RUNTIME = Path(__file__).resolve().parent.parent / "boards" / "runtime" / "cortex-m"

BOARDS = [
    # board, --device, ELF machine, address of the vector table (bare metal only)
    ("bluepill-qemu", None, "arm", 0x08000000),
    ("mps2-an386", None, "arm", 0x00000000),
    ("rpi", "qemu", "aarch64", None),
]


@pytest.mark.parametrize("board,device,arch,vectors", BOARDS, ids=[b[0] for b in BOARDS])
def test_examples_pass_built_for_the_right_architecture(project, board, device, arch, vectors):
    project.copy_examples()
    args = ["examples", "-v"] + ([f"--device={device}"] if device else [])
    result = project.run(*args, board=board)
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines([f"*depthwise_conv_test.c::SimpleTestQuantized[[]{board}[]] PASSED*"])
    bins = sorted((project.path / "_build" / board / "bin").rglob("*_test*.elf"))
    assert len(bins) == 2
    for binary in bins:
        info = read(binary)
        assert info.arch == arch
        if vectors is not None:
            assert info.section(".isr_vector").addr == vectors
            assert info.entry & ~1 != 0


FAULTS = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Fine) { TF_LITE_MICRO_EXPECT(1); }
    TF_LITE_MICRO_TEST(BadPointer) {
      volatile int *p = (volatile int *)0xFFFFFFF0;
      MicroPrintf("read %d", *p);
    }
    TF_LITE_MICRO_TEST(NeverRuns) { TF_LITE_MICRO_EXPECT(1); }
    TF_LITE_MICRO_TESTS_END
"""


def test_bad_address_is_a_fault_on_bluepill_qemu(project):
    project.write("fault_test.c", FAULTS)
    result = project.run("-v", board="bluepill-qemu")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*BadPointer[[]bluepill-qemu[]] FAILED*",
            "*fault: BusFault (PRECISERR) pc=0x08* BFAR=0xfffffff0 while this case was running*",
            "*not run: fault: BusFault*before this case*",
        ]
    )


def test_bad_address_is_sigsegv_on_rpi_under_qemu_user(project):
    project.write("fault_test.c", FAULTS)
    result = project.run("-v", "--device=qemu", board="rpi")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*crashed: killed by SIGSEGV while this case was running*"])


def test_undefined_instruction_is_a_usage_fault(project):
    project.write(
        "udf_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Undefined) { __asm__ volatile("udf #0"); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run(board="mps2-an385")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fault: UsageFault (UNDEFINSTR) pc=0x*"])
    # QEMU's warning about the machine's unconnected network card is not the device's output
    assert "has no peer" not in result.stdout.str()
    log = (project.path / "_build/mps2-an385/logs/udf_test.c.log").read_text()
    assert "has no peer" not in log and "#ondevice fault UsageFault" in log


def test_a_fault_the_cpu_cannot_take_is_a_lockup_fault_not_a_tool_crash(project):
    project.write(
        "lockup_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(StackGone) {
          __asm__ volatile("mov sp, %0\\n udf #0" :: "r"(0x30000000u));
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run(board="bluepill-qemu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fault: lockup: the CPU could not take a fault*"])
    log = (project.path / "_build/bluepill-qemu/logs/lockup_test.c.log").read_text()
    assert "Lockup" in log  # QEMU's own words on stderr still reach the device log


HANG = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Spins) { for (volatile int i = 0; ; ++i) {} }
    TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.parametrize("board,device", [("bluepill-qemu", None), ("rpi", "qemu")])
def test_endless_loop_is_killed_at_the_timeout(project, board, device):
    project.write("hang_test.c", HANG)
    args = ["--device-timeout=1"] + ([f"--device={device}"] if device else [])
    result = project.run(*args, board=board)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 1s while this case was running*"])
    assert "qemu" not in _my_children()


def _my_children() -> str:
    import os

    names = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name, _, rest = stat.partition(" (")[2].rpartition(")")  # a name may hold spaces
            if int(rest.split()[1]) == os.getpid():
                names.append(name)
    return " ".join(names)


def test_oversized_binary_fails_the_size_check_with_both_figures(project):
    project.write(
        "big_flash_test.c",
        """
        #include "micro_test.h"
        static const unsigned char table[72 * 1024] = {1};
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Lookup) {
          volatile int i = 0;  /* keeps the whole table in the image */
          TF_LITE_MICRO_EXPECT_EQ(table[i], 1);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    project.write(
        "big_ram_test.c",
        """
        #include "micro_test.h"
        static volatile unsigned char scratch[7 * 1024];
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Scratch) { scratch[0] = 1; TF_LITE_MICRO_EXPECT_EQ(scratch[0], 1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run(board="bluepill-qemu")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "big_flash_test.c needs *.? KiB flash, bluepill-qemu has 64 KiB",  # 72 KiB of table + code
            "big_ram_test.c needs 9.* KiB RAM, bluepill-qemu has 8 KiB (QEMU's stm32vldiscovery*20 KiB)",
        ]
    )
    assert "binaries run" in result.stdout.str() and "0 binaries run" in result.stdout.str()


def test_second_run_compiles_nothing_on_bluepill_qemu(project):
    project.copy_examples()
    project.run("examples", board="bluepill-qemu").assert_outcomes(passed=8)
    again = project.run("examples", board="bluepill-qemu")
    again.assert_outcomes(passed=8)
    assert build_report(again)["compiled"] == 0 and build_report(again)["linked"] == 0


def test_cpp_constructors_and_printf_work_on_bare_metal(project):
    project.write(
        "runtime_test.cc",
        """
        #include <stdio.h>
        #include "micro_test.h"
        struct Init { int value; Init() : value(42) {} };
        static Init init;
        TEST(Runtime, StaticConstructorRan) { EXPECT_EQ(init.value, 42); }
        TEST(Runtime, NewlibPrintf) { printf("printf says %d\\n", 7); fflush(stdout); }
        TF_LITE_MICRO_TESTS_MAIN
        """,
    )
    result = project.run("-s", board="bluepill-qemu")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["[[]bluepill-qemu[]] printf says 7"])


@pytest.mark.parametrize(
    "board",
    [n for n in BoardRegistry().names() if n != "jetson-cuda"],
)
def test_every_shipped_board_builds_the_examples(project, board):
    project.copy_examples()
    assert_built(project.run("examples", "--build-only", board=board), 8)


def test_missing_cross_toolchain_names_package_and_pip_alternative(project, monkeypatch):
    monkeypatch.setattr(toolchain, "zig_installed", lambda: False)
    project.write(
        "boards/exotic.toml",
        'extends = "rpi"\n[toolchain]\ngnu = "riscv99-none-gnu"\nclang_target = "riscv99"\n'
        'zig_target = "riscv99-linux"\ndebian_package = "gcc-riscv99-linux-gnu"\n',
    )
    project.write("x_test.c", FAULTS)
    result = project.run("--device=qemu", board="exotic")
    result.assert_outcomes(errors=3)
    text = result.stdout.str()
    assert "no toolchain for board 'exotic': tried riscv99-none-gnu-gcc" in text
    assert "apt-get install gcc-riscv99-linux-gnu or pip install ziglang" in text


def test_clang_is_the_fallback_when_the_gnu_triple_is_missing(project):
    project.write(
        "boards/rpi-clang.toml",
        'extends = "rpi"\n[toolchain]\ngnu = "no-such-triple"\n',
    )
    project.copy_examples()
    result = project.run("examples", "--device=qemu", board="rpi-clang")
    result.assert_outcomes(passed=8)
    binary = next((project.path / "_build" / "rpi-clang" / "bin").rglob("fully_connected_test.cc.elf"))
    info = read(binary)
    assert info.arch == "aarch64"
    assert b"clang version" in binary.read_bytes()  # .comment names the compiler


def test_zig_cross_compiles_when_no_gnu_toolchain_is_installed(project):
    """The macOS-laptop path: no vendor toolchain, just the ziglang wheel."""
    project.write(
        "boards/rpi-zig.toml",
        'extends = "rpi"\n[toolchain]\ngnu = "no-such-triple"\nclang_target = "no-such-target"\n'
        'cflags = ["-O2"]\ncxxflags = ["-O2", "-fno-exceptions"]\n',
    )
    project.write("fault_test.c", FAULTS)  # C only: zig builds libc++ on first use, which is slow
    result = project.run("--device=qemu", board="rpi-zig")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*crashed: killed by SIGSEGV while this case was running*"])
    binary = next((project.path / "_build" / "rpi-zig" / "bin").rglob("fault_test.c.elf"))
    assert read(binary).arch == "aarch64"


def test_output_through_the_usart_instead_of_semihosting(project):
    """A board's runtime can swap one piece: here the output goes through USART1."""
    project.write(
        "boards/bluepill-qemu-uart.toml",
        'extends = "bluepill-qemu"\n[toolchain]\nruntime = ['
        + ", ".join(
            f'"{RUNTIME}/{name}"'
            for name in ("vectors.c", "startup.c", "fault.c", "semihosting.c", "syscalls.c", "uart_stm32.c")
        )
        + ']\n[transport]\noutput = "uart"\n',
    )
    project.copy_examples()
    result = project.run("examples", board="bluepill-qemu-uart")
    result.assert_outcomes(passed=8)
    binary = next((project.path / "_build" / "bluepill-qemu-uart" / "bin").rglob("fully_connected_test.cc.elf"))
    assert b"uart_init" in binary.read_bytes()  # the UART piece is linked, not semihosting output


def test_data_files_on_a_bare_metal_board_are_a_clear_error(project):
    project.write("testdata/golden.txt", "1")
    project.write("ondevice.toml", 'data = ["testdata/golden.txt"]\n')
    project.write("x_test.c", HANG)
    result = project.run(board="bluepill-qemu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*x_test.c reads files (*golden.txt), but bluepill-qemu is bare metal*"])
