"""`--board=bluepill-renode` through the Renode monitor client.

Renode is packaged by neither Debian nor PyPI (its portable Linux package comes from
https://github.com/renode/renode/releases), so these run against tests/support/renode_standin.py,
a stand-in speaking Renode's monitor protocol with QEMU behind it. When a real Renode is found
as the plugin finds it (`renode` on PATH, or RENODE=/path/to/renode) the same tests run against
it too; without one, that half of each test is skipped saying so (README: "What each transport
is tested against").
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytest_ondevice.transports.renode_monitor import MonitorError, RenodeMonitor, _strip_echo, _strip_telnet

SUPPORT = Path(__file__).resolve().parent / "support"
STANDIN = SUPPORT / "bin" / "renode"


def _real_renode() -> str | None:
    """A Renode found as the plugin finds one (transports/renode.py: find_renode), not the stand-in."""
    for candidate in (os.environ.get("RENODE"), "renode"):
        path = shutil.which(candidate) if candidate else None
        if path and Path(path).resolve() != STANDIN.resolve():
            return path
    return None


REAL_RENODE = _real_renode()
NO_RENODE = (
    "Renode is not installed (neither RENODE nor PATH finds a `renode`; Debian and PyPI have none): ran against "
    "the stand-in only. Install its portable Linux package from https://github.com/renode/renode/releases "
    "and put `renode` on PATH, or set RENODE=/path/to/renode"
)

pytestmark = pytest.mark.slow


@pytest.fixture(
    params=[
        "stand-in",
        pytest.param(
            "renode",
            marks=pytest.mark.skipif(REAL_RENODE is None, reason=NO_RENODE),
        ),
    ]
)
def renode(request, monkeypatch, tmp_path):
    """The `renode` the plugin will start (the stand-in records its launches and commands)."""
    binary = str(STANDIN) if request.param == "stand-in" else REAL_RENODE
    monkeypatch.setenv("RENODE", binary)
    used = UsedRenode(request.param == "stand-in", tmp_path / "launches", tmp_path / "monitor-commands.txt")
    monkeypatch.setenv("ONDEVICE_STANDIN_LAUNCHES", str(used.launches))
    monkeypatch.setenv("ONDEVICE_STANDIN_TRANSCRIPT", str(used.transcript))
    yield used
    assert not _running_standins(), "a Renode was left running"


class UsedRenode:
    def __init__(self, standin: bool, launches: Path, transcript: Path) -> None:
        self.standin, self.launches, self.transcript = standin, launches, transcript

    def assert_started_once(self) -> None:
        if self.standin:
            assert len(self.launches.read_text().split()) == 1

    def only_standin(self, why: str) -> None:
        if not self.standin:
            pytest.skip(f"a check of the stand-in only, not run against the real Renode: {why}")


def _running_standins() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"{STANDIN} --disable-xwt" in line]


CASES = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
    TF_LITE_MICRO_TEST(Fails) { int acc = 3; TF_LITE_MICRO_EXPECT_EQ(acc, 4); }
    TF_LITE_MICRO_TESTS_END
"""

FAULT = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Fine) { TF_LITE_MICRO_EXPECT(1); }
    TF_LITE_MICRO_TEST(Traps) { __builtin_trap(); }
    TF_LITE_MICRO_TEST(NeverRuns) { TF_LITE_MICRO_EXPECT(1); }
    TF_LITE_MICRO_TESTS_END
"""

NO_VERDICT = """
    #include <stdlib.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(LeavesEarly) { exit(0); }
    TF_LITE_MICRO_TESTS_END
"""

HANG = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Spins) { for (volatile int i = 0; ; ++i) {} }
    TF_LITE_MICRO_TESTS_END
"""

# the first binary leaves SysTick running; the second must find it reset
SYSTICK_ON = """
    #include <stdint.h>
    #include "micro_test.h"
    #define SYST_CSR (*(volatile uint32_t *)0xE000E010)
    #define SYST_RVR (*(volatile uint32_t *)0xE000E014)
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(StartsSysTick) { SYST_RVR = 0xFFFFFF; SYST_CSR = 5; TF_LITE_MICRO_EXPECT_EQ(SYST_CSR & 1, 1); }
    TF_LITE_MICRO_TESTS_END
"""
SYSTICK_OFF = """
    #include <stdint.h>
    #include "micro_test.h"
    #define SYST_CSR (*(volatile uint32_t *)0xE000E010)
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(FindsSysTickReset) { TF_LITE_MICRO_EXPECT_EQ(SYST_CSR & 1, 0); }
    TF_LITE_MICRO_TESTS_END
"""


def test_examples_pass_per_case_as_on_bluepill_qemu(project, renode):
    project.copy_examples()
    result = project.run("examples", "-v", board="bluepill-renode,bluepill-qemu")
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines(["*depthwise_conv_test.c::SimpleTestQuantized[[]bluepill-renode[]] PASSED*"])
    renode.assert_started_once()


def test_pass_and_fail_with_the_failure_location(project, renode):
    project.write("cases_test.c", CASES)
    result = project.run("-v", board="bluepill-renode")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*acc == 4 failed at cases_test.c:5 (3 vs 4)*"])


def test_fault_is_a_failure_naming_it_and_the_next_binary_runs(project, renode):
    project.write("a_fault_test.c", FAULT)
    project.write("b_cases_test.c", CASES)
    result = project.run("-v", board="bluepill-renode")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(["*Traps*fault: UsageFault*"])
    result.stdout.fnmatch_lines(["*b_cases_test.c::Passes*PASSED*"])


def test_output_without_the_summary_is_no_verdict(project, renode):
    project.write("early_test.c", NO_VERDICT)
    result = project.run(board="bluepill-renode")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no verdict*"])


def test_hang_is_stopped_at_the_timeout_and_the_machine_serves_the_next_binary(project, renode):
    project.write("a_hang_test.c", HANG)
    project.write("b_cases_test.c", CASES)
    result = project.run("--device-timeout=2", board="bluepill-renode")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*timed out after 2s while this case was running*"])


def test_virtual_time_budget_stops_a_hang_before_the_wall_clock(project, renode):
    renode.only_standin("the stand-in's instruction count is an estimate; a real Renode counts them")
    project.write("boards/bluepill-vt.toml", 'extends = "bluepill-renode"\n[transport]\nvirtual_timeout = 0.5\n')
    project.write("hang_test.c", HANG)
    started = time.monotonic()
    result = project.run("--device-timeout=30", board="bluepill-vt")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 0.5s of virtual time while this case was running*"])
    assert time.monotonic() - started < 15


def test_two_binaries_in_a_row_through_one_renode_with_state_reset(project, renode):
    project.write("a_systick_test.c", SYSTICK_ON)
    project.write("b_systick_test.c", SYSTICK_OFF)
    result = project.run("--device-log=live", board="bluepill-renode")
    result.assert_outcomes(passed=2)
    renode.assert_started_once()
    if not renode.standin:
        return  # a real Renode has shown the reset itself (SysTick found off)
    # the stand-in starts a fresh QEMU per binary, so it cannot show stale peripheral state:
    # what it can show is that the client resets the machine before loading each binary
    sent = [c for c in renode.transcript.read_text().splitlines() if not c.endswith("ExecutedInstructions")]
    per_binary = [sent[i - 1 : i + 3] for i, line in enumerate(sent) if line == "machine Reset"]
    assert [[c.split(" @")[0] for c in seq] for seq in per_binary] == [
        ["pause", "machine Reset", "sysbus LoadELF", "start"]
    ] * 2
    assert sent[-1] == "quit"
    log_b = (project.path / "_build" / "bluepill-renode" / "logs" / "b_systick_test.c.log").read_text()
    assert "StartsSysTick" not in log_b  # nothing of the first binary's output leaks into the second's
    result.stdout.fnmatch_lines(["*[[]bluepill-renode[]] Testing FindsSysTickReset*"])


def test_a_board_may_set_the_machine_up_with_its_own_resc(project, renode):
    project.write(
        "boards/bluepill.resc",
        "machine LoadPlatformDescription @platforms/cpus/stm32f103.repl\n"
        'machine LoadPlatformDescriptionFromString "uartSemihosting: UART.SemihostingUart @ cpu"\n',
    )
    project.write("boards/bluepill-resc.toml", 'extends = "bluepill-renode"\n[transport]\nscript = "bluepill.resc"\n')
    project.write("cases_test.c", CASES)
    result = project.run(board="bluepill-resc")
    result.assert_outcomes(passed=1, failed=1)
    if renode.standin:
        assert f"include @{project.path / 'boards' / 'bluepill.resc'}" in renode.transcript.read_text()


def test_renode_not_found_is_an_error_saying_how_to_install_it(project, monkeypatch):
    monkeypatch.delenv("RENODE", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    project.write("cases_test.c", CASES)
    result = project.run(board="bluepill-renode")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*renode not found*portable Linux package*--board=bluepill-qemu*"])


def test_monitor_refusing_a_command_is_an_error_quoting_renode(project, renode):
    project.write(
        "boards/bluepill-odd.toml",
        'extends = "bluepill-renode"\n[transport]\nplatform = "platforms/cpus/nosuch.repl"\n',
    )
    project.write("cases_test.c", CASES)
    result = project.run(board="bluepill-odd")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*Renode refused `machine LoadPlatformDescription @platforms/cpus/nosuch.repl`: There was an error*"]
    )


def test_renode_dying_mid_run_is_an_error_not_a_failure(project, renode, monkeypatch):
    renode.only_standin("a real Renode cannot be told to crash")
    monkeypatch.setenv("ONDEVICE_STANDIN_DIE_ON_START", "1")
    project.write("cases_test.c", CASES)
    result = project.run(board="bluepill-renode")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*Renode*closed*renode exited with status 134*"])


@pytest.fixture
def running_renode():
    """A Renode someone else started (a farm host): our session must leave it running."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(STANDIN), "--port", str(port)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    assert b"Monitor available" in proc.stdout.readline()
    yield port
    proc.kill()
    proc.wait()


def test_device_url_uses_a_renode_already_running(project, running_renode, monkeypatch):
    monkeypatch.setenv("RENODE", "/nonexistent/renode")  # never started by us
    project.copy_examples()
    url = f"--device=renode://127.0.0.1:{running_renode}"
    for _ in range(2):  # a second session on the same Renode: the first left it clean
        result = project.run("examples", url, board="bluepill-renode")
        result.assert_outcomes(passed=8)
    monitor = RenodeMonitor("127.0.0.1", running_renode)
    with pytest.raises(MonitorError, match=r"Machine ondevice-\d+ not found"):
        monitor.command(f'mach set "ondevice-{os.getpid()}"')  # our machine was removed at the end
    monitor.close()


# -- the protocol, byte for byte (transcripts of what Renode sends) --------------------------


def test_transcript_of_connect_echo_prompt_and_refusals(running_renode):
    sock = socket.create_connection(("127.0.0.1", running_renode), timeout=5)
    assert _read_until(sock, b"(monitor) ") == (
        b"\xff\xfd\x00\xff\xfd\x1f\xff\xfb\x01\xff\xfb\x03\xff\xfc\x22"
        b"Renode, version 1.15.3.0 (ondevice-stand-in)\r\n\r(monitor) "
    )
    sock.sendall(b'mach create "m"\n')
    assert _read_until(sock, b"(m) ") == b'mach create "m"\n\r(m) '
    sock.sendall(b"frobnicate\n")
    assert _read_until(sock, b"(m) ") == b"frobnicate\n\rNo such command or device: frobnicate\r\n(m) "
    sock.sendall(b"start\n")
    assert _read_until(sock, b"(m) ") == b"start\n\rStarting emulation...\r\n\r(m) "
    sock.sendall(b"sysbus LoadELF @/x.elf\n")
    assert b"Cannot load ELF on an unpaused machine." in _read_until(sock, b"(m) ")
    sock.close()


def test_client_commands_against_the_monitor(running_renode, tmp_path):
    monitor = RenodeMonitor("127.0.0.1", running_renode)
    assert "Renode, version" in monitor.banner and monitor.prompt == "monitor"
    assert monitor.command('mach create "t"') == "" and monitor.prompt == "t"
    assert monitor.command("machine LoadPlatformDescription @platforms/cpus/stm32f103.repl") == ""
    assert (
        monitor.command('machine LoadPlatformDescriptionFromString "uartSemihosting: UART.SemihostingUart @ cpu"') == ""
    )
    assert monitor.command(f'emulation CreateServerSocketTerminal {_free_port()} "term" false') == ""
    assert monitor.command("connector Connect sysbus.cpu.uartSemihosting term") == ""
    with pytest.raises(MonitorError, match="Could not find file"):
        monitor.command(f"sysbus LoadELF @{tmp_path / 'missing.elf'}")
    assert monitor.command("start") == "Starting emulation..."
    assert monitor.command("start") == "Emulation is already started. Ignoring command"
    assert monitor.command("pause") == "Pausing emulation..."
    assert monitor.command("machine Reset") == ""
    with pytest.raises(MonitorError, match="No such command or device: frobnicate"):
        monitor.command("frobnicate")
    assert monitor.command("sysbus.cpu ExecutedInstructions").isdigit()
    script = tmp_path / "setup.resc"
    script.write_text('mach create "from-script"\n')
    assert monitor.command(f"include @{script}") == "" and monitor.prompt == "from-script"
    assert monitor.command('mach rem "from-script"') == "" and monitor.prompt == "monitor"
    with pytest.raises(MonitorError, match=r"Machine from-script not found\."):
        monitor.command('mach rem "from-script"')
    monitor.close()


def test_telnet_commands_split_across_reads_are_dropped():
    text, rest = _strip_telnet(b"ab\xff\xfd")
    assert (text, rest) == (b"ab", b"\xff\xfd")
    text, rest = _strip_telnet(rest + b"\x00cd\xff\xff\xff\xfa\x1f\x00\x50\xff\xf0e")
    assert (text, rest) == (b"cd\xffe", b"")


def test_answers_with_renodes_irregular_line_endings():
    assert _strip_echo("start\n\rStarting emulation...\r\n\r", "start") == "Starting emulation..."
    assert _strip_echo("x\n\rline one\r\n\rline two\r\n", "x") == "line one\nline two"


def _read_until(sock: socket.socket, end: bytes) -> bytes:
    data = b""
    deadline = time.monotonic() + 5
    while not data.endswith(end) and time.monotonic() < deadline:
        data += sock.recv(4096)
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bench_figures_on_renode_are_cycles_and_repeat_exactly(project, renode):
    from test_bench import GEMM

    project.write("gemm_test.c", GEMM)
    raws = []
    for i in range(2):
        result = project.run(f"--bench-json=b{i}.json", board="bluepill-renode")
        result.assert_outcomes(passed=1)
        record = json.loads((project.path / f"b{i}.json").read_text())["records"][0]
        assert record["unit"] == "cycles" and record["deterministic"] and record["us"] > 0
        raws.append(record["raw"])
    assert raws[0] == raws[1]  # Renode's clock is virtual time


def test_a_uart_console_reads_renodes_terminal(project, renode):
    """Renode as the loader, pyserial as the console: its UART terminal is served on the port
    the console names, and connected to before each binary starts (nothing printed is lost)."""
    project.copy_examples()
    result = project.run(f"--console=uart:socket://127.0.0.1:{_free_port()}", "examples", board="bluepill-renode")
    result.assert_outcomes(passed=8)
    renode.assert_started_once()


def test_renode_serves_a_console_only_on_a_local_socket(project, renode):
    project.copy_examples()
    result = project.run("--console=uart:/dev/ttyUSB7@115200", "examples", board="bluepill-renode")
    result.assert_outcomes(errors=8)
    result.stdout.fnmatch_lines(["*Renode can serve its UART to a console only on a local TCP socket*"])


RENODE_SCRIPT = """
import pytest

def test_banner_and_exit(device):
    console = device.flash("fw.c")
    console.expect("booted on renode")
    console.expect(r"answer (\\d+)\\r?\\n")
    assert console.match.group(1) == "42"
    assert console.wait(30) == 3
    again = device.reset()
    again.expect("booted on renode")
    assert again.wait(30) == 3
"""


def test_a_scripted_test_flashes_a_firmware_and_reads_its_console(project, renode):
    """Output and the end on Renode's terminal, through the device fixture. What the test
    writes goes to the terminal's UART; the stand-in's semihosting UART takes no input,
    so only a real Renode can show a reply (docs/scripted.md)."""
    project.write(
        "fw.c", '#include <stdio.h>\nint main(void) { printf("booted on renode\\nanswer 42\\n"); return 3; }\n'
    )
    project.write("test_fw.py", RENODE_SCRIPT)
    result = project.run("-v", "test_fw.py", board="bluepill-renode")
    result.assert_outcomes(passed=1)
    renode.assert_started_once()
