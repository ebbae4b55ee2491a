"""Scripted device tests on real peers: the firmware example on QEMU's emulated STM32 UART,
the CLI example under QEMU user mode, over a real sshd on loopback and through the real
adb server to the stand-in device; a link lost mid-test is an error, never a failure."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from conftest import EXAMPLES
from test_adb import device, phone, server  # noqa: F401 - fixtures
from test_adb import run as adb_run
from test_scripted import BIG_INPUT, BIG_INPUT_TESTS, outcomes
from test_ssh import accounts, board_for_device, pi, sshd  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

FIRMWARE = [
    "test_ping",
    "test_add",
    "test_unknown_command_is_named",
    "test_quit_ends_the_firmware_with_its_status",
    "test_reset_starts_the_firmware_again",
]
CLI = ["test_version", "test_get_from_a_pushed_file", "test_interactive_session"]
LINUX = {
    **dict.fromkeys(CLI, "PASSED"),
    "test_top_class_and_latency": "PASSED",
    "test_a_damaged_model_is_refused": "PASSED",
}


def with_examples(project) -> None:
    shutil.copytree(
        EXAMPLES / "scripted", project.path / "examples" / "scripted", ignore=shutil.ignore_patterns("__pycache__")
    )
    for part in ("gemm", "kernels", "model"):  # what the inference example builds from
        shutil.copytree(EXAMPLES / part, project.path / "examples" / part, ignore=shutil.ignore_patterns("__pycache__"))


def test_the_firmware_example_answers_on_the_emulated_uart(project):
    with_examples(project)
    result = project.run("-v", "examples/scripted/firmware", board="bluepill-qemu-uart")
    assert outcomes(result) == dict.fromkeys(FIRMWARE, "PASSED"), result.stdout.str()


def test_a_wrong_reply_from_the_firmware_fails_naming_what_came(project):
    with_examples(project)
    source = project.path / "examples/scripted/firmware/console_fw.c"
    source.write_text(source.read_text().replace('printf("pong\\n")', 'printf("pang\\n")'))
    result = project.run("-v", "examples/scripted/firmware", "-k", "ping", board="bluepill-qemu-uart")
    assert outcomes(result) == {"test_ping": "FAILED"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*expected 'pong\\\\r?\\\\n' within 30s; what arrived since the last match:*"])
    assert "pang" in result.stdout.str()


def test_the_cli_and_inference_examples_under_qemu_user_mode(project):
    with_examples(project)
    result = project.run("-v", "examples/scripted/cli", "examples/scripted/inference", "--device=qemu", board="rpi")
    assert outcomes(result) == LINUX, result.stdout.str()


def test_the_cli_example_over_ssh_pushes_once(pi):  # noqa: F811 - the fixture
    with_examples(pi)
    result = pi.run("-v", "examples/scripted/cli", f"--device={pi.sshd.alias}", board=pi.board)
    assert outcomes(result) == dict.fromkeys(CLI, "PASSED"), result.stdout.str()
    log = next((pi.path / "_build" / pi.board / "logs" / "scripted").glob("*test_version*.log")).read_text()
    assert "pushed" in log, log
    again = pi.run("-v", "examples/scripted/cli", "-k", "version", f"--device={pi.sshd.alias}", board=pi.board)
    assert outcomes(again) == {"test_version": "PASSED"}
    log = next((pi.path / "_build" / pi.board / "logs" / "scripted").glob("*test_version*.log")).read_text()
    assert "already on the device" in log, log


def assert_big_inputs_pass(project, board: str, where: str) -> None:
    """An input beyond the link's window, to a filter, to a program that reads none of it
    (over SSH an infrastructure error: the channel had closed under the write) and to one
    that reads it late (cut short, without an error, once the window stayed full for the
    reader's 0.1 s timeout)."""
    project.write("test_script.py", BIG_INPUT)
    result = project.pytester.runpytest_subprocess(
        "-v", f"--board={board}", f"--device={where}", "-p", "no:cacheprovider", timeout=60
    )
    assert outcomes(result) == dict.fromkeys(BIG_INPUT_TESTS, "PASSED"), result.stdout.str()


def test_run_over_ssh_writes_the_input_while_it_reads_the_output(pi):  # noqa: F811 - the fixture
    assert_big_inputs_pass(pi, pi.board, pi.sshd.alias)


def test_run_through_adb_writes_the_input_while_it_reads_the_output(phone):  # noqa: F811 - the fixture
    assert_big_inputs_pass(phone, "android-arm64", f"adb:{phone.device.serial}")


SSH_DROP = """
def test_link_dies_mid_expect(device):
    p = device.start(["sh", "-c", "echo up; exec sleep 31"])
    p.expect("up")
    p.expect("never", timeout=20)
"""


def test_a_link_lost_mid_expect_is_an_error_naming_the_device(pi):  # noqa: F811 - the fixture
    pi.write("test_drop.py", SSH_DROP)

    def kill_when_started():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "sleep 31" not in pi.sshd.ps():
            time.sleep(0.05)
        pi.sshd.kill()

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    result = pi.run("-v", "test_drop.py", f"--device={pi.sshd.alias}", board=pi.board)
    killer.join()
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert "infrastructure error, not the test's failure" in text and "connection lost" in text, text


def test_the_cli_and_inference_examples_through_adb(phone):  # noqa: F811 - the fixture
    with_examples(phone)
    result = adb_run(phone, "-v", "examples/scripted/cli", "examples/scripted/inference")
    assert outcomes(result) == LINUX, result.stdout.str()


def test_the_firmware_example_flashed_over_swd_and_driven_through_a_real_tty(project, monkeypatch):
    """--board=bluepill-swd --console=uart:/dev/ttyUSB0: pyOCD flashes through the stand-in
    probe (QEMU's gdbstub), the test talks to the USART through a pty, as to a USB adapter."""
    pytest.importorskip("pyocd")
    from support.qemugdb_probe import QemuBoard, register_with_pyocd
    from test_boards_qemu import RUNTIME
    from test_swd import STANDIN_BOARD, UART_BOARD

    register_with_pyocd()
    with_examples(project)
    with QemuBoard("stm32vldiscovery", uart="pty") as board:
        monkeypatch.setenv("ONDEVICE_QEMUGDB_PROBES", board.probe_address)
        project.write("boards/bluepill-swd-qemu.toml", STANDIN_BOARD)
        project.write("boards/bluepill-swd-usart.toml", UART_BOARD.replace("RUNTIME", str(RUNTIME)))
        result = project.run(
            "-v", "examples/scripted/firmware", f"--console=uart:{board.uart_tty}@115200", board="bluepill-swd-usart"
        )
    assert outcomes(result) == dict.fromkeys(FIRMWARE, "PASSED"), result.stdout.str()


def test_the_demo_runs_the_whole_examples_tree_on_bluepill_qemu_with_nothing_failing(project):
    """scripts/demo.sh's command: the scripted examples for other boards are skipped, saying
    why (the firmware one needs a runtime that reads a UART), never errors."""
    shutil.copytree(EXAMPLES, project.path / "examples", ignore=shutil.ignore_patterns("__pycache__", "target"))
    result = project.run("examples", "-rs", board="bluepill-qemu")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 10 and not outcomes.get("failed") and not outcomes.get("errors"), outcomes
    result.stdout.fnmatch_lines(["*bluepill-qemu's runtime does not read a UART: use bluepill-qemu-uart*"])
