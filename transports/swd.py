"""The `swd` transport: a microcontroller on a debug probe (ST-Link, CMSIS-DAP, J-Link)
through pyOCD's Python API (no `pyocd` processes).

Loader: the ELF is flashed with pyOCD's programmer, unless the chip already holds it: the
bytes of every loadable segment are read back and compared with the ELF's (so a reflash is
skipped only when the image is byte for byte the same, whatever wrote it). Then the core is
reset and runs. Console: semihosting, serviced by pyOCD's own SemihostAgent while the core
stops at each `bkpt 0xab`; or any other console (a UART) for the loader. The run ends at the
runtime's `#ondevice exit N` line (pyOCD does not implement SYS_EXIT); at the timeout the core
is halted and its PC (and fault registers) are named in the log.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import Option, Transport
from .contract import Clock, Deployed, InfrastructureError, OnBytes, RunEnd
from .runloop import ExitLine, drive

CFSR, HFSR = 0xE000ED28, 0xE000ED2C


class SwdTransport(Transport):
    name = "swd"
    device_forms = ("probe:UNIQUE_ID",)
    options = {
        "target": Option(str, "cortex_m", "pyOCD's target type (pyocd list --targets), e.g. stm32f103c8"),
        "probe": Option(str, help="the probe's unique id (pyocd list); --device=probe:ID overrides"),
        "frequency": Option(int, help="SWD clock in Hz (pyOCD's default when unset)"),
        "flash_is_ram": Option(
            bool, False, "declare the flash a RAM region (an emulated core without a flash controller)"
        ),
        "output": Option(("semihosting", "rtt"), "semihosting", "how the program's output comes back"),
        "reset_delay": Option(float, help="seconds to wait after a reset (pyOCD's reset.post_delay, 0.1 by default)"),
    }

    @classmethod
    def claims(cls, device: str) -> bool:
        return device.startswith("probe:")

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        try:
            import pyocd  # noqa: F401
        except ImportError:
            return "missing: pip install 'pytest-ondevice[swd]'"
        return "ready (pyocd)"

    @classmethod
    def clock(cls, options: dict[str, Any]) -> Clock | None:
        return Clock("cycles")

    @classmethod
    def import_libraries(cls) -> None:
        with contextlib.suppress(ImportError):
            from pyocd.core.helpers import ConnectHelper  # noqa: F401
            from pyocd.core.session import Session  # noqa: F401

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        self.probe_id = device.removeprefix("probe:") if device else self.options.get("probe")
        self.where = f"probe {self.probe_id}" if self.probe_id else "probe"
        self.session: Any = None

    # -- session ---------------------------------------------------------------------------
    def open(self) -> None:
        try:
            from pyocd.core.helpers import ConnectHelper
            from pyocd.core.session import Session
        except ImportError:
            raise InfrastructureError("the swd transport needs pyOCD: pip install 'pytest-ondevice[swd]'") from None
        probes = ConnectHelper.get_all_connected_probes(blocking=False, print_wait_message=False)
        listing = ", ".join(f"{p.unique_id} ({p.description})" for p in probes) or "none"
        if self.probe_id:
            chosen = [p for p in probes if p.unique_id == self.probe_id]
            if not chosen:
                raise InfrastructureError(f"no probe {self.probe_id} attached (probes: {listing})")
            probe = chosen[0]
        elif not probes:
            raise InfrastructureError(
                "no debug probe attached: plug in the ST-Link / CMSIS-DAP / J-Link (and check its USB permissions: "
                "pyocd list)"
            )
        elif len(probes) > 1:
            raise InfrastructureError(
                f"{len(probes)} probes attached and none chosen: {listing}; pass --device=probe:ID"
            )
        else:
            probe = probes[0]
        self.where = f"probe {probe.unique_id}"
        options: dict[str, Any] = {
            "connect_mode": "halt",
            "resume_on_disconnect": False,
            "hide_programming_progress": True,
        }
        if self.options.get("reset_delay") is not None:
            options["reset.post_delay"] = float(self.options["reset_delay"])
        if self.options.get("frequency"):
            options["frequency"] = int(self.options["frequency"])
        try:
            session = Session(probe, target_override=self.options["target"], options=options)
            session.open()
        except Exception as e:  # pyOCD raises its own errors, and USB ones
            if "not recognized" in str(e):
                target = self.options["target"]
                raise InfrastructureError(
                    f"pyOCD does not know the target type {target!r}: install its CMSIS pack (pyocd pack install "
                    f"{target}), or set a built-in one in the board's [transport] target (pyocd list --targets)"
                ) from None
            raise InfrastructureError(
                f"{self.where}: cannot connect to the {self.options['target']} target: {e}; check the wiring and "
                "power, the target type (pyocd list --targets), and that no other program (a debugger) uses the probe"
            ) from None
        self.session = session
        self._memory_map()

    def _memory_map(self) -> None:
        """A generic core has no memory map: the board file's [memory] gives it one."""
        from pyocd.core.memory_map import FlashRegion, RamRegion

        target, memory = self.session.target, self.board.memory
        if self.options.get("flash_is_ram"):  # no flash algorithm may run: writes go straight in
            for region in [r for r in target.memory_map if r.is_flash]:
                target.memory_map.remove_region(region)
                target.memory_map.add_region(
                    RamRegion(start=region.start, length=region.length, is_boot_memory=region.is_boot_memory)
                )
        if not target.memory_map.is_empty:
            return
        flash_cls = RamRegion if self.options.get("flash_is_ram") else FlashRegion
        if memory.flash:
            target.memory_map.add_region(flash_cls(start=memory.flash_origin, length=memory.flash, is_boot_memory=True))
        if memory.ram:
            target.memory_map.add_region(RamRegion(start=memory.ram_origin, length=memory.ram))

    # -- loader ----------------------------------------------------------------------------
    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        if self.session is None:
            raise InfrastructureError(f"{self.where}: not connected")
        segments = _segments(artifact)
        if self._holds(segments):
            return Deployed(str(artifact), sha256, pushed=False)
        from pyocd.flash.file_programmer import FileProgrammer

        try:
            FileProgrammer(self.session).program(str(artifact), file_format="elf")
        except Exception as e:
            raise InfrastructureError(
                f"{self.where}: flashing {artifact.name} failed: {e}; a read-protected chip must be unlocked "
                "(pyocd erase --chip), and the target type must match the chip"
            ) from None
        if not self._holds(segments):
            raise InfrastructureError(f"{self.where}: {artifact.name} does not read back as written (flash worn?)")
        return Deployed(str(artifact), sha256, pushed=True)

    def _holds(self, segments: list[Any]) -> bool:
        """Whether the chip holds every loadable byte of the image (read back, compared by sha256)."""
        target = self.session.target
        try:
            for address, data in segments:
                held = bytes(target.read_memory_block8(address, len(data)))
                if hashlib.sha256(held).digest() != hashlib.sha256(data).digest():
                    return False
        except Exception:  # an unreadable range (protected, unmapped): flash it
            return False
        return True

    def start(self, deployed: Deployed) -> None:
        target = self.session.target
        target.reset_and_halt()
        target.resume()

    def stop_program(self) -> None:
        with contextlib.suppress(Exception):
            self.session.target.halt()

    # -- console: semihosting --------------------------------------------------------------
    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        from pyocd.debug.semihost import SemihostAgent

        target = self.session.target
        agent = SemihostAgent(target.get_target_context(), console=_Output())
        rtt = None
        if self.options["output"] == "rtt":
            address = _symbol(Path(deployed.path), "_SEGGER_RTT")
            if address is None:
                raise InfrastructureError(
                    f"{Path(deployed.path).name} has no RTT control block (_SEGGER_RTT), but the board's output "
                    "is rtt: add runtime/cortex-m/rtt.c to its toolchain.runtime"
                )
            rtt = _Rtt(target, address)
        stream = _Semihosting(self, agent, rtt)
        try:
            (start or (lambda: self.start(deployed)))()
            end = drive(stream, timeout, on_bytes, self.stop, kill=lambda: on_bytes(self._halt_and_say()))
        except InfrastructureError:
            raise
        except Exception as e:  # pyOCD's errors: the probe or the link to the core failed
            raise InfrastructureError(f"{self.where}: the probe failed mid-run: {type(e).__name__}: {e}") from None
        finally:
            with contextlib.suppress(Exception):
                target.halt()
        return end

    def _halt_and_say(self) -> bytes:
        """At a timeout: halt the core and say where it was (a hang's loop, a fault handler),
        as a line of the device log."""
        target = self.session.target
        try:
            target.halt()
            pc = target.read_core_register("pc")
            faults = {name: target.read32(addr) for name, addr in (("CFSR", CFSR), ("HFSR", HFSR))}
        except Exception as e:
            return f"\n#ondevice halted: could not read the core: {e}\n".encode()
        regs = " ".join(f"{k}=0x{v:08x}" for k, v in faults.items() if v)
        return f"\n#ondevice halted at pc=0x{pc:08x}{' ' + regs if regs else ''}\n".encode()

    def close(self) -> None:
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.close()
            self.session = None


def _segments(elf: Path) -> list[tuple[int, bytes]]:
    """(load address, bytes) of each loadable segment with content: what flashing writes."""
    from elftools.elf.elffile import ELFFile  # pyOCD's own dependency

    with open(elf, "rb") as f:
        return [
            (seg["p_paddr"], seg.data())
            for seg in ELFFile(f).iter_segments()
            if seg["p_type"] == "PT_LOAD" and seg["p_filesz"] > 0
        ]


class _Rtt:
    """SEGGER RTT's up-buffer 0, read while the core runs (runtime/cortex-m/rtt.c writes it)."""

    UP0 = 24  # offset of up-buffer 0 in the control block: id[16], max_up, max_down

    def __init__(self, target: Any, address: int) -> None:
        self.target, self.cb = target, address
        self.buffer = 0
        self.size = 0
        self.exit_line = ExitLine()

    def drain(self) -> bytes:
        """What the target wrote since the last call; the read offset is moved on."""
        target = self.target
        if not self.size:  # not set up yet: the id is written last
            if bytes(target.read_memory_block8(self.cb, 10)) != b"SEGGER RTT":
                return b""
            _, self.buffer, self.size, _, _, _ = target.read_memory_block32(self.cb + self.UP0, 6)
        wr, rd = target.read_memory_block32(self.cb + self.UP0 + 12, 2)
        if wr == rd or wr >= self.size or rd >= self.size:
            return b""
        if wr > rd:
            data = bytes(target.read_memory_block8(self.buffer + rd, wr - rd))
        else:
            data = bytes(target.read_memory_block8(self.buffer + rd, self.size - rd))
            data += bytes(target.read_memory_block8(self.buffer, wr)) if wr else b""
        if self.exit_line.feed(data) is not None:
            target.halt()  # held at its end (the runtime waits for this read), as a semihosting exit is
        target.write32(self.cb + self.UP0 + 16, wr)
        return data


def _symbol(elf: Path, name: str) -> int | None:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(elf, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        found = symtab.get_symbol_by_name(name) if isinstance(symtab, SymbolTableSection) else None
        return found[0]["st_value"] if found else None


class _Output:
    """pyOCD's console I/O handler interface, collecting what the target writes."""

    def __init__(self) -> None:
        self.agent: Any = None
        self.data = bytearray()

    def write(self, fd: int, ptr: int, length: int) -> int:
        self.data += bytes(self.agent.get_data(ptr, length))
        return 0  # semihosting: the count NOT written

    def read(self, fd: int, ptr: int, length: int) -> int:
        return length  # no input

    def readc(self) -> int:
        return -1

    def open(self, *args: Any) -> int:
        return -1

    def close(self, *args: Any) -> int:
        return 0

    def istty(self, fd: int) -> int:
        return 1

    def seek(self, *args: Any) -> int:
        return -1

    def flen(self, fd: int) -> int:
        return 0

    def remove(self, *args: Any) -> int:
        return -1

    def rename(self, *args: Any) -> int:
        return -1

    @property
    def errno(self) -> int:
        return 0


class _Semihosting:
    """The core's output, for the shared run loop: each halt at `bkpt 0xab` is serviced by
    pyOCD's agent and the core resumed; an RTT buffer, if any, is read while the core runs.
    The end is our exit line."""

    def __init__(self, transport: SwdTransport, agent: Any, rtt: _Rtt | None = None) -> None:
        self.agent, self.target, self.rtt = agent, transport.session.target, rtt
        self.exit_line = ExitLine()
        self.status: int | None = None
        self.fault: str | None = None

    def read(self, wait: float) -> bytes | None:
        if self.status is not None or self.fault:
            return b""
        from pyocd.core.target import Target

        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            out = self.rtt.drain() if self.rtt else b""
            halted = self.target.get_state() == Target.State.HALTED
            handled = False
            if halted:
                try:
                    handled = self.agent.check_and_handle_semihost_request()
                except NotImplementedError:  # SYS_EXIT after our exit line, or a call pyOCD lacks
                    handled = False
                out += bytes(self.agent.console.data)
                self.agent.console.data.clear()
                if not handled and self.rtt:
                    out += self.rtt.drain()  # what the program wrote before it stopped
            if out:
                self.status = self.exit_line.feed(out)
            if halted and self.status is None:
                if handled:
                    self.target.resume()
                else:  # SYS_EXIT without our exit line, a breakpoint, a lockup
                    pc = self.target.read_core_register("pc")
                    self.fault = f"the core stopped at pc=0x{pc:08x} outside semihosting (a breakpoint, or a lockup)"
            if out:
                return out
            if self.fault:
                return b""
            time.sleep(0.001)
        return None

    def poll(self) -> RunEnd | None:
        if self.status is not None:
            return RunEnd(exit_code=self.status)
        if self.fault:
            return RunEnd(fault=self.fault)
        return None

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def kill(self) -> None:
        self.target.halt()
