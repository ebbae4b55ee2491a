"""The stand-in pyOCD probe (support/qemugdb_probe.py) through pyOCD's public API, as our SWD
transport will use it: list probes, open a session on one, load an ELF, reset, run, serve the
program's semihosting with pyOCD's own SemihostAgent, halt at a timeout, read fault registers.

The ELFs are our own examples and small test programs, built with the plugin (--build-only)
for bluepill-qemu (QEMU stm32vldiscovery: flash 0x08000000, 8 KiB RAM at 0x20000000) and
mps2-an385 (code at 0, RAM at 0x20000000).
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyocd", reason="pyocd not installed")

from elftools.elf.elffile import ELFFile
from pyocd.core.helpers import ConnectHelper
from pyocd.core.session import Session
from pyocd.core.target import Target
from pyocd.debug.semihost import ConsoleIOHandler, SemihostAgent
from pyocd.flash.file_programmer import FileProgrammer
from support.qemugdb_probe import (
    ENV_VAR,
    MACHINE_MEMORY,
    QemuBoard,
    QemuGdbProbe,
    add_memory_map,
    pyocd_environ,
    qemu_unavailable,
    register_with_pyocd,
)

REPO = Path(__file__).resolve().parent.parent
EXIT_LINE = re.compile(rb"#ondevice exit (-?\d+)\n")
needs_qemu = pytest.mark.skipif(qemu_unavailable() is not None, reason=str(qemu_unavailable()))

register_with_pyocd()

PROGRAMS = {
    "hang_test.c": """
        #include "micro_test.h"
        __attribute__((noinline)) void spin_forever(void) { for (volatile unsigned i = 0;; ++i) {} }
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Spins) { spin_forever(); }
        TF_LITE_MICRO_TESTS_END
    """,
    "fault_test.c": """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(BadPointer) {
          volatile int *p = (volatile int *)0xFFFFFFF0;
          MicroPrintf("read %d", *p);
        }
        TF_LITE_MICRO_TESTS_END
    """,
    "lockup_test.c": """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(StackGone) { __asm__ volatile("mov sp, %0\\n udf #0" :: "r"(0x30000000u)); }
        TF_LITE_MICRO_TESTS_END
    """,
}
BOARD_MACHINE = {"bluepill-qemu": "stm32vldiscovery", "mps2-an385": "mps2-an385"}


@pytest.fixture(scope="module")
def elfs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """{(board, name): ELF}: examples/kernels and PROGRAMS, built by the plugin for both boards."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc not installed")
    root = tmp_path_factory.mktemp("elfs")
    shutil.copytree(REPO / "examples" / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in PROGRAMS.items():
        (root / name).write_text(textwrap.dedent(text))
    (root / "pytest.ini").write_text(
        f"[pytest]\nondevice_build_dir = {root / '_build'}\nondevice_cache_dir = {root / '_cache'}\n"
    )
    for board in BOARD_MACHINE:
        command = [sys.executable, "-m", "pytest", f"--board={board}", "--build-only", "-q", "-p", "no:cacheprovider"]
        subprocess.run(command, cwd=root, check=True, capture_output=True, timeout=300)
    return {
        (b, e.name.removesuffix(".elf")): e for b in BOARD_MACHINE for e in (root / "_build" / b / "bin").rglob("*.elf")
    }


@pytest.fixture
def board(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[QemuBoard]:
    """A QEMU machine (stm32vldiscovery unless parametrized) listed as the one attached probe."""
    machine = getattr(request, "param", "stm32vldiscovery")
    with QemuBoard(machine) as qemu:
        monkeypatch.setenv(ENV_VAR, qemu.probe_address)
        yield qemu


@pytest.fixture
def session(board: QemuBoard) -> Iterator[Session]:
    """What the transport does: a session on the chosen probe, generic Cortex-M, halted, with a memory map."""
    session = ConnectHelper.session_with_chosen_probe(
        blocking=False,
        unique_id=board.unique_id,
        target_override="cortex_m",
        options={"connect_mode": "halt", "hide_programming_progress": True},
    )
    assert session is not None
    with session:
        add_memory_map(session.target, board.machine)
        yield session


def qemugdb_probes() -> list[QemuGdbProbe]:
    return [p for p in ConnectHelper.get_all_connected_probes(blocking=False) if isinstance(p, QemuGdbProbe)]


# ------------------------------------------------------------------ listing


def test_no_probe_without_the_variable(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert qemugdb_probes() == []


@pytest.mark.parametrize("count", [1, 2])
def test_each_listed_gdbstub_is_a_probe_with_a_colon_free_unique_id(monkeypatch, count):
    addresses = [f"127.0.0.1:{1234 + n}" for n in range(count)]
    monkeypatch.setenv(ENV_VAR, ",".join(addresses))
    probes = qemugdb_probes()
    assert [p.unique_id for p in probes] == [f"qemugdb-127.0.0.1-{1234 + n}" for n in range(count)]
    assert [p.description for p in probes] == [f"QEMU gdbstub {a}" for a in addresses]
    chosen = ConnectHelper.get_all_connected_probes(blocking=False, unique_id="qemugdb-127.0.0.1-1234")
    assert [p.unique_id for p in chosen] == ["qemugdb-127.0.0.1-1234"]


def test_pyocds_own_plugin_scan_finds_the_probe_in_a_subprocess():
    """`pyocd list --probes` in a fresh process: the entry point in pyocd_plugins/ on PYTHONPATH."""
    environ = pyocd_environ(["127.0.0.1:1234", "127.0.0.1:1235"])
    result = subprocess.run(
        [sys.executable, "-m", "pyocd", "list", "--probes"], env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"QEMU gdbstub 127.0.0.1:1234\s+qemugdb-127.0.0.1-1234", result.stdout)
    assert "qemugdb-127.0.0.1-1235" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["inprocess", "subprocess"])
def test_a_pytester_run_finds_the_probe(pytester, monkeypatch, mode):
    """In-process the outer register_with_pyocd() already did it; a subprocess needs PYTHONPATH."""
    monkeypatch.setenv(ENV_VAR, "127.0.0.1:1234")
    monkeypatch.setenv("PYTHONPATH", pyocd_environ([])["PYTHONPATH"])
    pytester.makepyfile(
        test_inner="""
        from pyocd.core.helpers import ConnectHelper

        def test_listed():
            ids = [p.unique_id for p in ConnectHelper.get_all_connected_probes(blocking=False)]
            assert "qemugdb-127.0.0.1-1234" in ids
        """
    )
    result = getattr(pytester, f"runpytest_{mode}")("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# ------------------------------------------------------------------ QEMU behind pyOCD


@needs_qemu
def test_session_on_the_chosen_probe_reads_the_cortex_m3_cpuid(session):
    assert session.target.read32(0xE000ED00) == 0x410FC231
    assert session.target.selected_core.name == "Cortex-M3"
    assert session.target.get_state() is Target.State.HALTED


@needs_qemu
def test_an_explicit_probe_type_reaches_an_unlisted_gdbstub(monkeypatch):
    with QemuBoard("mps2-an385", uart=True) as qemu:
        monkeypatch.delenv(ENV_VAR, raising=False)
        with ConnectHelper.session_with_chosen_probe(
            blocking=False, unique_id=f"qemugdb:{qemu.probe_address}", target_override="cortex_m"
        ) as session:
            assert session.target.read32(0xE000ED00) == 0x410FC231
        assert qemu.uart_url == f"socket://127.0.0.1:{qemu.uart_port}"
    assert qemu.returncode is not None  # only our QEMU, killed on leaving


@dataclass
class Run:
    """What the transport's loop saw: the semihosting output and how the run ended."""

    output: bytes
    ended: str  # "exit line", "timeout", "lockup" or "halted"
    seconds: float

    @property
    def exit_status(self) -> int | None:
        match = EXIT_LINE.search(self.output)
        return int(match.group(1)) if match else None


def load(session: Session, elf: Path) -> None:
    """FileProgrammer writes the ELF's PT_LOAD segments at their LMA; then reset and halt on the reset vector."""
    FileProgrammer(session).program(str(elf), file_format="elf")
    session.target.reset_and_halt()


def run(session: Session, timeout: float) -> Run:
    """Resume and serve semihosting until the runtime's "#ondevice exit N" line; halt at the timeout.

    The core stays halted on the exit line's semihosting call, in the context that printed it
    (a fault handler's fault registers are still set). pyOCD does not implement SYS_EXIT.
    """
    target = session.target
    output = io.BytesIO()
    agent = SemihostAgent(target.get_target_context(), console=ConsoleIOHandler(io.BytesIO(), output))
    start = time.monotonic()
    target.resume()
    while time.monotonic() - start < timeout:
        state = target.get_state()
        if state is Target.State.LOCKUP:
            return Run(output.getvalue(), "lockup", time.monotonic() - start)
        if state is not Target.State.HALTED:
            time.sleep(0.0005)
            continue
        if not agent.check_and_handle_semihost_request():
            return Run(output.getvalue(), "halted", time.monotonic() - start)
        if EXIT_LINE.search(output.getvalue()):
            return Run(output.getvalue(), "exit line", time.monotonic() - start)
        target.resume()
    target.halt()
    return Run(output.getvalue(), "timeout", time.monotonic() - start)


def elf_symbol(elf: Path, name: str) -> range:
    with elf.open("rb") as f:
        symbol = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name(name)[0]
    start = symbol["st_value"] & ~1
    return range(start, start + symbol["st_size"])


@needs_qemu
@pytest.mark.slow
def test_an_example_runs_to_all_tests_passed_through_pyocds_semihost_agent(session, elfs):
    elf = elfs["bluepill-qemu", "depthwise_conv_test.c"]
    load(session, elf)
    with elf.open("rb") as f:
        reset_vector = ELFFile(f).get_section_by_name(".isr_vector").data()[4:8]
    assert session.target.read_core_register("pc") == int.from_bytes(reset_vector, "little") & ~1

    result = run(session, timeout=10)

    assert result.ended == "exit line", result.output
    assert b"~~~ALL TESTS PASSED~~~" in result.output
    assert result.exit_status == 0
    session.target.resume()  # into SYS_EXIT_EXTENDED, which QEMU serves itself: it exits
    deadline = time.monotonic() + 5
    while session.probe.exit_code is None and time.monotonic() < deadline:
        session.target.get_state()
    assert session.probe.exit_code == 0


@needs_qemu
@pytest.mark.slow
def test_a_hang_is_halted_at_the_timeout_with_its_pc_in_the_loop(session, elfs):
    elf = elfs["bluepill-qemu", "hang_test.c"]
    load(session, elf)
    target = session.target
    result = run(session, timeout=0.3)
    assert result.ended == "timeout"
    assert b"Testing Spins" in result.output
    assert target.get_state() is Target.State.HALTED
    pc = target.read_core_register("pc")
    assert pc in elf_symbol(elf, "spin_forever")
    target.step()
    assert target.read_core_register("pc") != pc

    target.resume()  # memory reads while the core runs: QEMU pauses for them, the core runs on
    assert target.read32(0xE000ED00) == 0x410FC231
    assert target.get_state() is Target.State.RUNNING


@needs_qemu
@pytest.mark.slow
@pytest.mark.parametrize(
    "board,elf_board", [("mps2-an385", "mps2-an385"), ("stm32vldiscovery", "bluepill-qemu")], indirect=["board"]
)
def test_a_fault_leaves_the_fault_registers_readable(session, board, elfs, elf_board):
    """QEMU's SCB model answers gdb memory reads: CFSR, HFSR, BFAR and the active exception."""
    load(session, elfs[elf_board, "fault_test.c"])
    result = run(session, timeout=10)
    assert result.ended == "exit line"
    assert result.exit_status == 3
    assert b"#ondevice fault BusFault (PRECISERR)" in result.output

    target = session.target
    cfsr, hfsr, bfar = target.read32(0xE000ED28), target.read32(0xE000ED2C), target.read32(0xE000ED38)
    assert (cfsr, hfsr, bfar) == (0x00008200, 0, 0xFFFFFFF0)  # PRECISERR | BFARVALID
    assert f"CFSR=0x{cfsr:08x} HFSR=0x{hfsr:08x} BFAR=0x{bfar:08x}".encode() in result.output
    assert target.read_core_register("xpsr") & 0x1FF == 5  # still in the BusFault handler
    faulting_pc = int(re.search(rb"pc=0x([0-9a-f]{8})", result.output).group(1), 16)
    flash = MACHINE_MEMORY[board.machine]
    assert flash.flash_start <= faulting_pc < flash.flash_start + flash.flash_size


@needs_qemu
@pytest.mark.slow
def test_a_fault_the_cpu_cannot_take_reads_as_lockup(session, board, elfs):
    """QEMU aborts ("Lockup: can't escalate"): the gdb connection ends without an exit status."""
    load(session, elfs["bluepill-qemu", "lockup_test.c"])
    result = run(session, timeout=10)
    assert result.ended == "lockup"
    assert "Lockup" in board.stderr


@needs_qemu
@pytest.mark.slow
def test_flash_reads_back_equal_and_64k_read_time(session, elfs):
    """What "already flashed: skip" needs: the image read back equal, and the cost of a 64 KiB CRC."""
    elf = elfs["bluepill-qemu", "depthwise_conv_test.c"]
    FileProgrammer(session).program(str(elf), file_format="elf")
    target = session.target
    with elf.open("rb") as f:
        for segment in ELFFile(f).iter_segments():
            if segment["p_type"] == "PT_LOAD" and segment["p_filesz"]:
                data = segment.data()
                assert bytes(target.read_memory_block8(segment["p_paddr"], len(data))) == data

    start = time.monotonic()
    words = target.read_memory_block32(0x08000000, 64 * 1024 // 4)
    seconds = time.monotonic() - start
    crc = zlib.crc32(b"".join(w.to_bytes(4, "little") for w in words))
    print(f"64 KiB read back in {seconds * 1000:.0f} ms, CRC32 {crc:08x}")
    assert seconds < 2
