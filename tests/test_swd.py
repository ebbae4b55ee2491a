"""The SWD transport through pyOCD's real session, loader and semihosting agent, against a
stand-in probe on QEMU's gdbstub (tests/support/qemugdb_probe.py says what it is and what it
cannot show: no SWD wire, no flash algorithm)."""

from __future__ import annotations

import shutil

import pytest

pyocd = pytest.importorskip("pyocd")

from support.qemugdb_probe import QemuBoard, register_with_pyocd  # noqa: E402
from test_boards_qemu import FAULTS, HANG  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm"),
]
register_with_pyocd()  # before any session: pyOCD reads its probe plugins once

# The Blue Pill board as the stand-in can take it: QEMU's stm32vldiscovery has 8 KiB of RAM,
# no flash controller (its flash is written like RAM) and no DWT (SysTick counts instead).
STANDIN_BOARD = """
extends = "bluepill-swd"
[toolchain]  # bluepill-swd's flags without -DONDEVICE_CYCLES_DWT: benches count SysTick
cflags = ["-mcpu=cortex-m3", "-mthumb", "-O2", "-g", "-Wall", "-ffunction-sections", "-fdata-sections"]
cxxflags = ["-mcpu=cortex-m3", "-mthumb", "-O2", "-g", "-Wall", "-ffunction-sections", "-fdata-sections",
            "-fno-exceptions", "-fno-rtti", "-fno-threadsafe-statics", "-fno-use-cxa-atexit"]
[memory]
ram = 8192
[transport]
target = "cortex_m"
flash_is_ram = true
reset_delay = 0.0
"""

CASES = """
#include "micro_test.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
TF_LITE_MICRO_TEST(Fails) {
  int acc = 3;
  TF_LITE_MICRO_EXPECT_EQ(acc, 4);
}
TF_LITE_MICRO_TESTS_END
"""


@pytest.fixture
def chip(project, monkeypatch):
    with QemuBoard("stm32vldiscovery") as board:
        monkeypatch.setenv("ONDEVICE_QEMUGDB_PROBES", board.probe_address)
        project.write("boards/bluepill-swd-qemu.toml", STANDIN_BOARD)
        project.board = board
        yield project


def run(chip, *args):
    return chip.run(*args, board="bluepill-swd-qemu")


def test_examples_pass_per_case_through_pyocd(chip):
    chip.copy_examples("gemm", "model", "prebuilt")
    # QEMU without -icount runs SysTick on a coarse host clock: a fast bench may read 0 ticks,
    # which is an error by design (no figure rather than a false one): benches run unmeasured
    result = run(chip, "examples", "-v", "--bench-disable")
    result.assert_outcomes(passed=17)
    result.stdout.fnmatch_lines(["*depthwise_conv_test.c::SimpleTestQuantized[[]bluepill-swd-qemu[]] PASSED*"])


def test_pass_and_fail_with_file_and_line(chip):
    chip.write("cases_test.c", CASES)
    result = run(chip, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*acc == 4 failed at cases_test.c:7 (3 vs 4)*"])


def test_an_unchanged_image_is_not_flashed_again(chip):
    chip.write("cases_test.c", CASES)
    run(chip).stdout.fnmatch_lines(["*1 pushed, 0 already on the device*"])
    run(chip).stdout.fnmatch_lines(["*0 pushed, 1 already on the device*"])
    chip.write(
        "cases_test.c", CASES.replace("TF_LITE_MICRO_TESTS_END", "TF_LITE_MICRO_TEST(New) {}\nTF_LITE_MICRO_TESTS_END")
    )
    run(chip).stdout.fnmatch_lines(["*1 pushed, 0 already on the device*"])


def test_a_fault_is_named_with_its_pc(chip):
    chip.write("fault_test.c", FAULTS)
    result = run(chip)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*BusFault*pc=0x*"])


def test_a_hang_is_halted_at_the_timeout_and_its_pc_named(chip):
    chip.write("hang_test.c", HANG)
    result = run(chip, "--device-timeout=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 2s while this case was running*"])
    log = (chip.path / "_build/bluepill-swd-qemu/logs/hang_test.c.log").read_text()
    assert "#ondevice halted at pc=0x" in log


def test_no_probe_is_an_error_saying_what_to_plug_in(chip, monkeypatch):
    monkeypatch.setenv("ONDEVICE_QEMUGDB_PROBES", "")
    chip.write("cases_test.c", CASES)
    result = run(chip)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*no debug probe attached*"])


def test_two_probes_and_none_chosen_lists_them_and_an_id_picks_one(chip, monkeypatch):
    with QemuBoard("stm32vldiscovery") as second:
        monkeypatch.setenv("ONDEVICE_QEMUGDB_PROBES", f"{chip.board.probe_address},{second.probe_address}")
        chip.write("cases_test.c", CASES)
        result = run(chip)
        result.assert_outcomes(errors=2)
        result.stdout.fnmatch_lines(
            [f"*2 probes attached and none chosen: *{second.unique_id}*; pass --device=probe:ID*"]
        )
        chosen = run(chip, f"--device=probe:{second.unique_id}")
        chosen.assert_outcomes(passed=1, failed=1)


def test_an_unknown_target_type_names_the_pack_to_install(chip):
    chip.write("boards/packless.toml", 'extends = "bluepill-swd-qemu"\n[transport]\ntarget = "stm32f103c8"\n')
    chip.write("cases_test.c", CASES)
    result = chip.run(board="packless")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*pyocd pack install stm32f103c8*"])


RTT_BOARD = """
extends = "bluepill-swd-qemu"
[toolchain]
runtime = [
  "RUNTIME/vectors.c", "RUNTIME/startup.c", "RUNTIME/fault.c", "RUNTIME/semihosting.c",
  "RUNTIME/syscalls.c", "RUNTIME/cycles.c", "RUNTIME/rtt.c",
]
[transport]
output = "rtt"
"""


def test_output_through_rtt_is_read_while_the_core_runs(chip):
    from test_boards_qemu import RUNTIME

    chip.write("boards/bluepill-swd-rtt.toml", RTT_BOARD.replace("RUNTIME", str(RUNTIME)))
    chip.copy_examples()
    result = chip.run("examples", "-v", board="bluepill-swd-rtt")
    result.assert_outcomes(passed=8)
    binary = next((chip.path / "_build" / "bluepill-swd-rtt" / "bin").rglob("fully_connected_test.cc.elf"))
    assert b"_SEGGER_RTT" in binary.read_bytes()


def test_rtt_output_without_the_rtt_runtime_names_the_fix(chip):
    chip.write("boards/no-rtt.toml", 'extends = "bluepill-swd-qemu"\n[transport]\noutput = "rtt"\n')
    chip.write("cases_test.c", CASES)
    result = chip.run(board="no-rtt")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*has no RTT control block (_SEGGER_RTT)*add runtime/cortex-m/rtt.c*"])


UART_BOARD = """
extends = "bluepill-swd-qemu"
[toolchain]  # QEMU exits right after the last line: the runtime gives the reader of its pty time
cflags = ["-mcpu=cortex-m3", "-mthumb", "-O2", "-g", "-Wall", "-ffunction-sections", "-fdata-sections",
          "-DONDEVICE_UART_DRAIN_SPINS=20000000"]
runtime = [
  "RUNTIME/vectors.c", "RUNTIME/startup.c", "RUNTIME/fault.c", "RUNTIME/semihosting.c",
  "RUNTIME/syscalls.c", "RUNTIME/cycles.c", "RUNTIME/uart_stm32.c",
]
"""


def test_flash_over_swd_and_read_the_usart_through_a_real_tty(project, monkeypatch):
    """pytest --board=... --console=uart:/dev/ttyUSB0@115200, with QEMU's USART on a pty.

    One binary: the runtime's semihosting exit after its last UART line is served by QEMU
    itself, which then stops (a real core halts at that BKPT, under the debugger's eye), so
    the stand-in "chip" takes one program per QEMU here."""
    from test_boards_qemu import RUNTIME

    with QemuBoard("stm32vldiscovery", uart="pty") as board:
        monkeypatch.setenv("ONDEVICE_QEMUGDB_PROBES", board.probe_address)
        project.write("boards/bluepill-swd-qemu.toml", STANDIN_BOARD)
        project.write("boards/bluepill-swd-usart.toml", UART_BOARD.replace("RUNTIME", str(RUNTIME)))
        project.write("cases_test.c", CASES)
        result = project.run(f"--console=uart:{board.uart_tty}@115200", "-v", board="bluepill-swd-usart")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines_random(
            ["*cases_test.c::Passes[[]bluepill-swd-usart[]] PASSED*", "*acc == 4 failed at cases_test.c:7 (3 vs 4)*"]
        )


def test_a_probe_held_by_another_program_is_an_error_saying_so(chip):
    from pyocd.core.helpers import ConnectHelper

    other = ConnectHelper.session_with_chosen_probe(
        blocking=False, unique_id=chip.board.unique_id, target_override="cortex_m", options={"connect_mode": "halt"}
    )
    other.open()  # a debugger left attached
    try:
        chip.write("cases_test.c", CASES)
        result = run(chip)
        result.assert_outcomes(errors=2)
        result.stdout.fnmatch_lines(
            ["*cannot connect to the cortex_m target*no other program (a debugger) uses the probe*"]
        )
    finally:
        other.close()


def test_a_target_type_that_does_not_match_the_chip_is_an_error_naming_the_checks(chip):
    """stm32f103rc's flash algorithm cannot run on this "chip" (no flash controller): what a
    wrong target type (or a locked chip) looks like to pyOCD."""
    chip.write(
        "boards/mismatch.toml", 'extends = "bluepill-swd"\n[memory]\nram = 8192\n[transport]\ntarget = "stm32f103rc"\n'
    )
    chip.write("cases_test.c", CASES)
    result = chip.run(board="mismatch")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*flashing cases_test.c.elf failed: *read-protected chip must be unlocked (pyocd erase --chip)*target type*"]
    )
