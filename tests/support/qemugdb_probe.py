"""A stand-in debug probe for pyOCD, for tests only: QEMU's gdbstub behind pyOCD's DebugProbe API.

Our SWD transport will drive pyOCD: a session on a probe, its memory loader, register access,
halt/resume/reset and its own SemihostAgent for the program's output. No probe or board is
attached to our machines, but QEMU emulates the Cortex-M and serves its gdbstub, so this probe
lets pyOCD's real code run against QEMU running our ELF (facts measured with QEMU 7.2 and
pyOCD 0.46: ../shared/notes/transports.md §3 and the tests in tests/test_qemugdb_probe.py).

What pyOCD sees, and what QEMU really does under it:

- DAP: a SW-DP (DPIDR 0x2BA01477) whose CTRL/STAT acks every power-up request, one AHB-AP
  (IDR 0x24770011) at APSEL 0 only (any other APSEL reads 0, or pyOCD finds 255 cores), its BASE
  0xE00FF003 pointing to a ROM table whose one entry is the SCS. The probe manages AP selection
  and hands pyOCD a memory interface; every memory access is a gdb `m`/`M` packet.
- QEMU's gdbstub models no debug block, so the probe models it: DHCSR (S_HALT from the gdb stop
  state, halt = Ctrl-C, resume = `c`, C_STEP = `s`, S_RESET_ST once after a reset), DCRSR/DCRDR
  (gdb `p`/`P`: r0-r15, xPSR; MSP is gdb's `sp`), DEMCR (VC_CORERESET), DFSR, the SCS and ROM
  table ID registers. Everything else in the SCS (CPUID, CFSR, HFSR, MMFAR, BFAR, SHCSR, ICSR,
  VTOR, ...) is QEMU's own model, read through `m` packets; QEMU ignores debugger writes to CFSR.
- Reset (AIRCR SYSRESETREQ/VECTRESET, or the probe's nRESET): QEMU's `system_reset` through
  qRcmd, so SP and PC come from the vector table and the peripherals reset too. QEMU answers OK
  before it resets (in its main loop), so the probe waits for a marker in r12 to be zeroed. A
  reset catch (DEMCR.VC_CORERESET) keeps the core halted, else it runs. An AIRCR write is never
  passed on: QEMU would reset (and run) only at the next continue.
- Semihosting: QEMU runs with `-semihosting-config enable=on,target=gdb`, so a `bkpt 0xab`
  reaches the gdbstub as a File-I/O request (`Fwrite,2,ADDR,LEN`), QEMU having already stepped
  past the BKPT. The probe completes it with the Ctrl-C flag (`F-1,4,C`: QEMU answers T02 and the
  CPU stays stopped), puts back r0 and moves the PC back onto the BKPT, and reports the core
  halted with DFSR.BKPT: the state of a real core halted on `bkpt 0xab`, which pyOCD's
  SemihostAgent serves as on hardware (it reads r0/r1 and memory, writes r0, steps the PC).
- Memory access while the core runs (a real MEM-AP does that): any byte QEMU receives while its
  CPU runs stops it, so the probe pauses the CPU for the access and lets it run on.

What it cannot show (see test_qemugdb_probe.py for what was observed):

- QEMU 7.2 gives gdb no M-profile system registers: PSP and CONTROL/FAULTMASK/BASEPRI/PRIMASK
  (DCRSR 18 and 20) are a shadow the probe keeps (0 unless written); MSP (17) is gdb's `sp`,
  which is the MSP as long as the program never switches to the PSP. No FPU registers.
- No FPB or DWT: no hardware breakpoints or watchpoints. A software breakpoint (`bkpt #0`) is
  not a debug event in QEMU but a HardFault. Vector catch other than VC_CORERESET does nothing.
- Semihosting calls QEMU answers itself never reach pyOCD. Measured: SYS_WRITE0, SYS_WRITEC and
  SYS_WRITE reach it; SYS_OPEN of ":tt" (QEMU's console handle is 1, which pyOCD also takes for
  stdout) and SYS_CLOCK do not, nor SYS_EXIT/SYS_EXIT_EXTENDED: QEMU exits with the status, the
  probe then reports the core halted and `exit_code` holds it (HEAPINFO, ELAPSED, TICKFREQ and
  ERRNO are QEMU-local too, by its sources).
- QEMU gone without an exit status (its "Lockup: can't escalate" abort, or killed) reads as a
  locked-up core (DHCSR.S_LOCKUP); memory access then fails. A real core locks up and stays
  reachable; QEMU is gone. So never let it run an empty vector table: connect_mode "pre-reset"
  (or reset() before loading) on a fresh QemuBoard aborts QEMU. "halt", "attach" and
  "under-reset" are fine.
- Connecting stops QEMU's CPU (its gdbstub does that on every new client), so every session
  starts with the core halted, also with connect_mode "attach".
- Flash is whatever QEMU maps there (ROM that gdb writes reach directly): declare it a RAM
  region (add_memory_map); a flash algorithm would not run faithfully.

Probe listing: the probes "attached" are the gdbstubs listed in ONDEVICE_QEMUGDB_PROBES
("127.0.0.1:1234,127.0.0.1:1235"; IPv4 or host names: an IPv6 address's colons would clash
with pyOCD's "TYPE:ID"). A probe's unique ID is "qemugdb-HOST-PORT", colon-free because pyOCD
reads a colon as "probe type:ID"; "qemugdb:HOST:PORT" (type given explicitly) reaches any
gdbstub, listed or not. Listing never connects (a connection would stop the CPU).

Discovery: pyOCD loads probe plugins from the `pyocd.probe` entry-point group once, when pyOCD
is first imported (pyocd/__init__ imports pyocd.probe.aggregator). pyocd_plugins/ next to this
file holds a dist-info declaring `qemugdb = ondevice_qemugdb_plugin:QemuGdbProbePlugin`; that
small module hands pyOCD this module's QemuGdbProbe. So:
- a test process: register_with_pyocd() (puts pyocd_plugins/ on sys.path, and since importing
  this module has already imported pyOCD, puts the class straight into the aggregator's table);
  an in-process pytester run shares both with the test that runs it;
- a subprocess (a `pytester.runpytest_subprocess`, the `pyocd` CLI): pyocd_environ() puts
  pyocd_plugins/ on PYTHONPATH and the addresses in ONDEVICE_QEMUGDB_PROBES; pyOCD's own scan
  then finds the entry point. (If that process imports this module before pyOCD, the scan runs
  while this module is half-imported: the plugin declines, and the module registers itself at
  the end of its import.)
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyocd.core import exceptions
from pyocd.core.memory_interface import MemoryInterface
from pyocd.core.memory_map import RamRegion
from pyocd.core.plugin import Plugin
from pyocd.coresight.ap import APVersion
from pyocd.probe.debug_probe import DebugProbe

LOG = logging.getLogger(__name__)

ENV_VAR = "ONDEVICE_QEMUGDB_PROBES"
PLUGIN_NAME = "qemugdb"
ID_PREFIX = "qemugdb-"
PLUGIN_DIR = Path(__file__).resolve().parent / "pyocd_plugins"

# --- the debug registers the probe models (ARMv7-M ARM, C1.6) ---
AIRCR = 0xE000ED0C
DFSR = 0xE000ED30
DHCSR = 0xE000EDF0
DCRSR = 0xE000EDF4
DCRDR = 0xE000EDF8
DEMCR = 0xE000EDFC
SCS_IDS_START = 0xE000EFD0  # PIDR4-7, PIDR0-3, CIDR0-3
ROM_TABLE = 0xE00FF000
DEBUG_SPACE = (0xE000E000, 0xE0100000)  # the SCS up to the end of the ROM table: checked word by word

DBGKEY = 0xA05F
C_DEBUGEN, C_HALT, C_STEP = 1 << 0, 1 << 1, 1 << 2
S_REGRDY, S_HALT, S_LOCKUP, S_RESET_ST = 1 << 16, 1 << 17, 1 << 19, 1 << 25
DFSR_HALTED, DFSR_BKPT, DFSR_VCATCH = 1 << 0, 1 << 1, 1 << 3
DEMCR_VC_CORERESET = 1 << 0
VECTKEY = 0x05FA
AIRCR_VECTRESET, AIRCR_SYSRESETREQ = 1 << 0, 1 << 2
DCRSR_REGWNR = 1 << 16

# Cortex-M3 ID registers (r2p0 TRM): the SCS (class 0xE, part 0x000 = "v7-M SCS" to pyOCD; QEMU's
# own PIDR4 reads 0, which hides the ARM designer code) and the ROM table (class 0x1, part 0x4C3)
SCS_IDS = (0x04, 0, 0, 0, 0x00, 0xB0, 0x0B, 0x00, 0x0D, 0xE0, 0x05, 0xB1)
ROM_IDS = (0x04, 0, 0, 0, 0xC3, 0xB4, 0x0B, 0x00, 0x0D, 0x10, 0x05, 0xB1)
ROM_ENTRIES = (0xFFF0F003,)  # SCS at 0xE000E000 (ROM_TABLE - 0xF1000), present, 32-bit format; then 0
ROM_MEMTYPE = 0x1  # offset 0xFCC: system memory present

DPIDR = 0x2BA01477  # SW-DP v1, designer ARM
CSYSPWRUPREQ, CDBGPWRUPREQ = 1 << 30, 1 << 28
AP_IDR = 0x24770011  # AHB-AP, revision 2, designer ARM
AP_BASE = ROM_TABLE | 0x3  # ADIv5 format, entry present
CSW_RESET = 0x03000052  # HPROT data+privileged, DeviceEn, auto-increment single, 32-bit
AP_CSW, AP_TAR, AP_DRW, AP_BASE_REG, AP_IDR_REG = 0x00, 0x04, 0x0C, 0xF8, 0xFC  # CFG (0xF4) reads 0

# DCRSR REGSEL -> gdb register number (QEMU's arm-m-profile.xml: r0-r15 = 0-15, xpsr = 25)
GDB_REGISTER = {**{n: n for n in range(16)}, 16: 25, 17: 13}
SHADOW_REGISTERS = (18, 20)  # PSP, CONTROL/FAULTMASK/BASEPRI/PRIMASK: not exposed by QEMU 7.2
BKPT_SEMIHOST = b"\xab\xbe"  # bkpt 0xab, little-endian
RESET_MARKER = 0x5E5E7000  # in r12 until QEMU's reset zeroes it

READ_CHUNK = 2048  # QEMU's packet buffer is 4096 bytes: 2 hex digits a byte
WRITE_CHUNK = 1024


# ------------------------------------------------------------------ the gdb remote protocol


class GdbConnectionClosed(exceptions.TransferError):
    """QEMU closed the gdb connection (it exited, or was killed): to pyOCD, a failed transfer."""


class GdbRemote:
    """A minimal all-stop GDB remote serial protocol client: what QEMU's gdbstub speaks.

    Acknowledgements stay on (QEMU 7.2 does not offer QStartNoAckMode); TCP_NODELAY is set,
    because with Nagle every small packet waited ~40 ms for the peer's delayed ACK.
    """

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()

    def close(self) -> None:
        self._sock.close()

    def send(self, payload: bytes) -> None:
        self._send(b"$%s#%02x" % (payload, sum(payload) & 0xFF))

    def interrupt(self) -> None:
        """Ctrl-C: QEMU stops a running CPU on any byte, and ignores this one when stopped."""
        self._send(b"\x03")

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as error:
            raise GdbConnectionClosed(f"QEMU's gdbstub went away: {error}") from error

    def command(self, payload: bytes) -> bytes:
        self.send(payload)
        return self.receive()

    def receive(self, timeout: float | None = None) -> bytes:
        """The next packet (acknowledged), waiting at most `timeout` seconds for it."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while (packet := self._take_packet()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise exceptions.TransferTimeoutError("no answer from QEMU's gdbstub")
            self._fill(remaining)
        return packet

    def poll(self) -> bytes | None:
        """A packet that has already arrived, if any, without waiting."""
        packet = self._take_packet()
        if packet is None and select.select([self._sock], [], [], 0)[0]:
            self._fill(self.timeout)
            packet = self._take_packet()
        return packet

    def _fill(self, timeout: float) -> None:
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(65536)
        except TimeoutError:
            return
        except OSError as error:
            raise GdbConnectionClosed(str(error)) from error
        if not data:
            raise GdbConnectionClosed("QEMU closed the gdb connection")
        self._buffer += data

    def _take_packet(self) -> bytes | None:
        """Cut one `$payload#cs` out of the buffer; what precedes it is acks (`+`)."""
        start = self._buffer.find(b"$")
        if start < 0:
            self._buffer.clear()
            return None
        del self._buffer[:start]
        end = self._buffer.find(b"#")
        if end < 0 or len(self._buffer) < end + 3:
            return None
        payload, checksum = bytes(self._buffer[1:end]), bytes(self._buffer[end + 1 : end + 3])
        del self._buffer[: end + 3]
        if int(checksum, 16) != sum(payload) & 0xFF:
            raise exceptions.TransferProtocolError(f"bad checksum in gdb packet {payload[:40]!r}")
        with contextlib.suppress(OSError):  # the W packet of an exiting QEMU: nobody left to ack
            self._sock.sendall(b"+")
        return _unescape(payload)


def _unescape(payload: bytes) -> bytes:
    """Undo the protocol's `}` escapes and `*` run-length encoding."""
    if b"}" not in payload and b"*" not in payload:
        return payload
    out = bytearray()
    i = 0
    while i < len(payload):
        byte = payload[i]
        if byte == 0x7D:
            out.append(payload[i + 1] ^ 0x20)
        elif byte == 0x2A:
            out += out[-1:] * (payload[i + 1] - 29)
        else:
            out.append(byte)
            i += 1
            continue
        i += 2
    return bytes(out)


# ------------------------------------------------------------------ the core's debug view


class State(enum.Enum):
    RUNNING = "running"
    HALTED = "halted"
    EXITED = "exited"  # the program's SYS_EXIT: QEMU exited with its status
    LOST = "lost"  # QEMU went away without an exit status


class Stop(enum.Enum):
    INTERRUPT = "interrupt"  # our Ctrl-C
    TRAP = "trap"  # a step completed (or a breakpoint)
    SEMIHOST = "semihost"
    EXIT = "exit"


class GdbCortexM:
    """What a probe reaches of a Cortex-M over SWD, built from QEMU's gdbstub.

    One instance per gdb connection; every method is safe to call from pyOCD's threads.
    """

    def __init__(self, remote: GdbRemote) -> None:
        self._gdb = remote
        self._lock = threading.RLock()
        self.state = State.HALTED
        self.exit_code: int | None = None
        self._debugen = True  # a gdb client is attached: QEMU stopped the CPU for it
        self._dfsr = 0
        self._demcr = 0
        self._dcrdr = 0
        self._reset_pending = False
        self._shadow = dict.fromkeys(SHADOW_REGISTERS, 0)
        self._handshake()

    def close(self) -> None:
        self._gdb.close()

    # -- connection
    def _handshake(self) -> None:
        """qSupported, the stop state, then target.xml: QEMU answers p/P only once that was read."""
        self._command(b"qSupported:xmlRegisters=arm")
        reply = self._command(b"?")
        if reply[:1] in (b"W", b"X"):
            self._on_stop(reply)
        offset = 0
        while True:
            chunk = self._command(b"qXfer:features:read:target.xml:%x,ffb" % offset)
            offset += len(chunk) - 1
            if chunk[:1] != b"m":
                break

    # -- memory
    def read(self, addr: int, size: int) -> bytes:
        with self._lock:
            if not _in_debug_space(addr, size):
                with self._paused():
                    return self._gdb_read(addr, size)
            words = b"".join(self._read_word(a).to_bytes(4, "little") for a in range(addr & ~3, addr + size, 4))
            return words[addr & 3 : (addr & 3) + size]

    def write(self, addr: int, data: bytes) -> None:
        with self._lock:
            if not _in_debug_space(addr, len(data)):
                with self._paused():
                    self._gdb_write(addr, data)
                return
            for word in range(addr & ~3, addr + len(data), 4):
                self._write_debug_space(word, addr, data)

    def _write_debug_space(self, word: int, addr: int, data: bytes) -> None:
        """Whole words go through the models; a partial word is merged into what the word reads."""
        lo, hi = max(addr, word), min(addr + len(data), word + 4)
        part = data[lo - addr : hi - addr]
        if hi - lo == 4:
            self._write_word(word, int.from_bytes(part, "little"))
            return
        if not _is_modelled(word):
            with self._paused():
                self._gdb_write(lo, part)
            return
        value = bytearray(self._read_word(word).to_bytes(4, "little"))
        value[lo - word : hi - word] = part
        self._write_word(word, int.from_bytes(value, "little"))

    def _read_word(self, addr: int) -> int:
        value = self._model_read(addr)
        if value is None:
            with self._paused():
                value = int.from_bytes(self._gdb_read(addr, 4), "little")
        return value

    def _write_word(self, addr: int, value: int) -> None:
        if not self._model_write(addr, value):
            with self._paused():
                self._gdb_write(addr, value.to_bytes(4, "little"))

    def _gdb_read(self, addr: int, size: int) -> bytes:
        out = bytearray()
        for start in range(addr, addr + size, READ_CHUNK):
            count = min(READ_CHUNK, addr + size - start)
            reply = self._command(b"m%x,%x" % (start, count))
            if len(reply) != 2 * count:  # "E14": QEMU's bus said no
                raise exceptions.TransferFaultError(f"read {reply.decode()}", fault_address=start, length=count)
            out += bytes.fromhex(reply.decode())
        return bytes(out)

    def _gdb_write(self, addr: int, data: bytes) -> None:
        for offset in range(0, len(data), WRITE_CHUNK):
            chunk = data[offset : offset + WRITE_CHUNK]
            reply = self._command(b"M%x,%x:%s" % (addr + offset, len(chunk), chunk.hex().encode()))
            if reply != b"OK":
                raise exceptions.TransferFaultError(
                    f"write {reply.decode()}", fault_address=addr + offset, length=len(chunk)
                )

    # -- the modelled registers
    def _model_read(self, addr: int) -> int | None:
        if addr == DHCSR:
            return self._read_dhcsr()
        if addr in (DCRSR, DCRDR, DEMCR, DFSR):
            return {DCRSR: 0, DCRDR: self._dcrdr, DEMCR: self._demcr, DFSR: self._dfsr}[addr]
        if SCS_IDS_START <= addr < SCS_IDS_START + 0x30:
            return SCS_IDS[(addr - SCS_IDS_START) // 4]
        if ROM_TABLE <= addr < ROM_TABLE + 0x1000:
            return _rom_table_word(addr - ROM_TABLE)
        return None

    def _model_write(self, addr: int, value: int) -> bool:
        if addr == DHCSR:
            self._write_dhcsr(value)
        elif addr == DCRSR:
            self._transfer_register(value)
        elif addr == DCRDR:
            self._dcrdr = value
        elif addr == DEMCR:
            self._demcr = value
        elif addr == DFSR:
            self._dfsr &= ~value  # write one to clear
        elif addr == AIRCR and value >> 16 == VECTKEY and value & (AIRCR_SYSRESETREQ | AIRCR_VECTRESET):
            self.reset()
        else:
            return _is_modelled(addr)  # ID registers: read-only
        return True

    def _read_dhcsr(self) -> int:
        self.poll()
        value = S_REGRDY | (C_DEBUGEN if self._debugen else 0)
        if self.state is not State.RUNNING:
            value |= S_HALT | C_HALT
        if self.state is State.LOST:
            value |= S_LOCKUP
        if self._reset_pending:  # sticky until read, as on a core
            value |= S_RESET_ST
            self._reset_pending = False
        return value

    def _write_dhcsr(self, value: int) -> None:
        if value >> 16 != DBGKEY:
            return
        self._debugen = bool(value & C_DEBUGEN)
        if self._debugen and value & C_HALT:
            self.halt()
        elif self.state is State.HALTED and self._debugen and value & C_STEP:
            self._step()
        elif self.state is State.HALTED:
            self._resume()

    def _transfer_register(self, dcrsr: int) -> None:
        """DCRSR: move one core register between the core and DCRDR."""
        regsel, is_write = dcrsr & 0x7F, bool(dcrsr & DCRSR_REGWNR)
        if regsel in self._shadow:
            if is_write:
                self._shadow[regsel] = self._dcrdr
            else:
                self._dcrdr = self._shadow[regsel]
            return
        if regsel not in GDB_REGISTER:  # FPU registers (no FPU) and reserved numbers
            if not is_write:
                self._dcrdr = 0
            return
        with self._paused():
            if is_write:
                self._write_register(GDB_REGISTER[regsel], self._dcrdr)
            else:
                self._dcrdr = self._read_register(GDB_REGISTER[regsel])

    def _read_register(self, number: int) -> int:
        reply = self._command(b"p%x" % number)
        if len(reply) != 8:
            raise exceptions.CoreRegisterAccessError(f"gdb p{number:x}: {reply!r}")
        return int.from_bytes(bytes.fromhex(reply.decode()), "little")

    def _write_register(self, number: int, value: int) -> None:
        reply = self._command(b"P%x=%s" % (number, (value & 0xFFFFFFFF).to_bytes(4, "little").hex().encode()))
        if reply != b"OK":
            raise exceptions.CoreRegisterAccessError(f"gdb P{number:x}: {reply!r}")

    # -- run control
    def poll(self) -> None:
        """Take a stop QEMU has reported (semihosting call, exit) or its going away, without waiting."""
        with self._lock:
            if self.state in (State.EXITED, State.LOST):
                return
            try:
                while (packet := self._gdb.poll()) is not None:
                    if self.state is State.RUNNING:
                        self._note(self._on_stop(packet))
            except GdbConnectionClosed:
                self._lost()

    def halt(self) -> None:
        with self._lock:
            if self.state is State.RUNNING:
                self._note(self._interrupt())

    def reset(self) -> None:
        """A system reset by QEMU itself: SP and PC from the vector table, peripherals reset."""
        with self._lock:
            self._check_alive()
            if self.state is State.RUNNING:
                self._interrupt()
            self._check_alive()
            self._system_reset()
            self._reset_pending = True
            self._dfsr = 0
            if self._demcr & DEMCR_VC_CORERESET:
                self._dfsr |= DFSR_VCATCH
            else:
                self._resume()

    def _system_reset(self, timeout: float = 2.0) -> None:
        """HMP `system_reset` through qRcmd, and wait until it happened.

        QEMU answers OK at once but resets in its main loop, sometimes after serving the next
        packets (pyOCD then read the old PC). A reset zeroes r0-r12, so a marker in r12 tells.
        """
        self._write_register(12, RESET_MARKER)
        with self._noting_loss():
            self._gdb.send(b"qRcmd," + b"system_reset".hex().encode())
            while (reply := self._gdb.receive())[:1] == b"O" and reply != b"OK":
                pass  # monitor output
        if reply != b"OK":
            raise exceptions.TransferError(f"QEMU refused system_reset: {reply!r}")
        deadline = time.monotonic() + timeout
        while self._read_register(12) == RESET_MARKER:
            if time.monotonic() > deadline:
                raise exceptions.TransferTimeoutError("QEMU did not reset")
            time.sleep(0.001)

    def _resume(self) -> None:
        self._check_alive()
        self._send(b"c")
        self.state = State.RUNNING

    def _step(self) -> None:
        self._check_alive()
        self._send(b"s")
        self._note(self._wait_stop())

    def _interrupt(self) -> Stop:
        """Stop the running CPU; what stopped it may be a semihosting call that crossed our Ctrl-C."""
        with self._noting_loss():
            self._gdb.interrupt()
        return self._wait_stop()

    def _wait_stop(self) -> Stop:
        while True:
            try:
                packet = self._gdb.receive()
            except GdbConnectionClosed:
                self._lost()
                return Stop.EXIT
            if (stop := self._on_stop(packet)) is not None:
                return stop

    def _lost(self) -> None:
        if self.state is not State.EXITED:  # after W, the close is expected
            self.state = State.LOST

    def _command(self, payload: bytes) -> bytes:
        with self._noting_loss():
            return self._gdb.command(payload)

    def _send(self, payload: bytes) -> None:
        with self._noting_loss():
            self._gdb.send(payload)

    @contextlib.contextmanager
    def _noting_loss(self) -> Iterator[None]:
        try:
            yield
        except GdbConnectionClosed:
            self._lost()
            raise

    def _on_stop(self, packet: bytes) -> Stop | None:
        kind = packet[:1]
        if kind == b"O":  # console output
            return None
        if kind in (b"W", b"X"):
            self.state = State.EXITED
            self.exit_code = int(packet[1:3], 16) if kind == b"W" else None
            return Stop.EXIT
        self.state = State.HALTED
        if kind == b"F":
            self._take_semihost_call()
            return Stop.SEMIHOST
        if kind in (b"T", b"S") and int(packet[1:3], 16) == 2:
            return Stop.INTERRUPT
        return Stop.TRAP

    def _take_semihost_call(self) -> None:
        """QEMU forwarded a `bkpt 0xab` as a File-I/O request, its PC already past the BKPT.

        Completing it with the Ctrl-C flag keeps the CPU stopped (QEMU answers T02); QEMU's
        completion wrote r0, so put the operation number back and the PC onto the BKPT: the
        core is then halted on the semihosting call as a real one is, for pyOCD to serve.
        """
        op, pc = self._read_register(0), self._read_register(15)
        self._command(b"F-1,4,C")
        self._write_register(0, op)
        if self._gdb_read(pc - 2, 2) == BKPT_SEMIHOST:
            self._write_register(15, pc - 2)

    def _note(self, stop: Stop) -> None:
        """Record why the core halted in DFSR, as the core does."""
        if stop in (Stop.INTERRUPT, Stop.TRAP):
            self._dfsr |= DFSR_HALTED
        elif stop is Stop.SEMIHOST:
            self._dfsr |= DFSR_BKPT

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        """QEMU serves memory and registers only while its CPU is stopped; a MEM-AP reads while
        the core runs, so pause the CPU for the access and let it run on."""
        self._check_alive()
        if self.state is not State.RUNNING:
            yield
            return
        stop = self._interrupt()
        if stop is not Stop.INTERRUPT:  # the core halted by itself meanwhile: it stays halted
            self._note(stop)
            self._check_alive()
            yield
            return
        try:
            yield
        finally:
            self._resume()

    def _check_alive(self) -> None:
        if self.state is State.EXITED:
            raise exceptions.TransferError(f"QEMU exited (the program's SYS_EXIT, status {self.exit_code})")
        if self.state is State.LOST:
            raise exceptions.TransferError("QEMU's gdbstub went away (QEMU aborted or was killed)")


def _in_debug_space(addr: int, size: int) -> bool:
    return addr < DEBUG_SPACE[1] and addr + size > DEBUG_SPACE[0]


def _is_modelled(addr: int) -> bool:
    return (
        addr in (DHCSR, DCRSR, DCRDR, DEMCR, DFSR)
        or SCS_IDS_START <= addr < SCS_IDS_START + 0x30
        or ROM_TABLE <= addr < ROM_TABLE + 0x1000
    )


def _rom_table_word(offset: int) -> int:
    if offset < 4 * len(ROM_ENTRIES):
        return ROM_ENTRIES[offset // 4]
    if offset == 0xFCC:
        return ROM_MEMTYPE
    if offset >= 0xFD0:
        return ROM_IDS[(offset - 0xFD0) // 4]
    return 0


# ------------------------------------------------------------------ pyOCD's side


class GdbMemoryInterface(MemoryInterface):
    """The AHB-AP's memory interface pyOCD uses in place of TAR/DRW accesses."""

    def __init__(self, core: GdbCortexM) -> None:
        self._core = core

    def write_memory(self, addr: int, data: int, transfer_size: int = 32, **attrs: Any) -> None:
        self._core.write(addr, data.to_bytes(transfer_size // 8, "little"))

    def read_memory(
        self, addr: int, transfer_size: int = 32, now: bool = True, **attrs: Any
    ) -> int | Callable[[], int]:
        value = int.from_bytes(self._core.read(addr, transfer_size // 8), "little")
        return value if now else (lambda: value)

    def write_memory_block32(self, addr: int, data: Sequence[int], **attrs: Any) -> None:
        self._core.write(addr, struct.pack(f"<{len(data)}I", *data))

    def read_memory_block32(self, addr: int, size: int, **attrs: Any) -> Sequence[int]:
        return list(struct.unpack(f"<{size}I", self._core.read(addr, size * 4)))

    def write_memory_block8(self, addr: int, data: Sequence[int], **attrs: Any) -> None:
        self._core.write(addr, bytes(data))

    def read_memory_block8(self, addr: int, size: int, **attrs: Any) -> Sequence[int]:
        return list(self._core.read(addr, size))


class QemuGdbProbe(DebugProbe):
    """A debug probe whose target is a QEMU gdbstub (see the module's docstring)."""

    @classmethod
    def get_all_connected_probes(cls, unique_id: str | None = None, is_explicit: bool = False) -> list[QemuGdbProbe]:
        addresses = listed_addresses()
        if is_explicit and unique_id and (address := parse_address(unique_id)) and address not in addresses:
            addresses.append(address)
        return [cls(*address) for address in addresses]

    @classmethod
    def get_probe_with_id(cls, unique_id: str, is_explicit: bool = False) -> QemuGdbProbe | None:
        """A full unique ID of a listed probe; with the type given ("qemugdb:HOST:PORT"), any address."""
        address = parse_address(unique_id)
        if address is None:
            return None
        if is_explicit or (unique_id == unique_id_for(*address) and address in listed_addresses()):
            return cls(*address)
        return None

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self._host, self._port = host, port
        self._core: GdbCortexM | None = None
        self._connected = False
        self._reset_asserted = False
        self._ctrl_stat = 0
        self._csw = CSW_RESET
        self._tar = 0

    @property
    def vendor_name(self) -> str:
        return "QEMU"

    @property
    def product_name(self) -> str:
        return f"gdbstub {self._host}:{self._port}"

    @property
    def supported_wire_protocols(self) -> list[DebugProbe.Protocol]:
        return [DebugProbe.Protocol.DEFAULT, DebugProbe.Protocol.SWD]

    @property
    def unique_id(self) -> str:
        return unique_id_for(self._host, self._port)

    @property
    def wire_protocol(self) -> DebugProbe.Protocol | None:
        return DebugProbe.Protocol.SWD if self._connected else None

    @property
    def is_open(self) -> bool:
        return self._core is not None

    @property
    def capabilities(self) -> set[DebugProbe.Capability]:
        return {DebugProbe.Capability.MANAGED_AP_SELECTION, DebugProbe.Capability.MANAGED_DPBANKSEL}

    @property
    def exit_code(self) -> int | None:
        """The program's SYS_EXIT status once QEMU has exited with it (pyOCD has no word for that)."""
        return self._core.exit_code if self._core else None

    def open(self) -> None:
        try:
            self._core = GdbCortexM(GdbRemote(self._host, self._port))
        except OSError as error:
            raise exceptions.ProbeError(f"no QEMU gdbstub at {self._host}:{self._port}: {error}") from error

    def close(self) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None

    def connect(self, protocol: DebugProbe.Protocol | None = None) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def set_clock(self, frequency: float) -> None:
        pass

    def reset(self) -> None:
        self._open_core().reset()

    def assert_reset(self, asserted: bool) -> None:
        """Held in reset the core executes nothing (halted); released, it resets."""
        if asserted:
            self._open_core().halt()
        elif self._reset_asserted:
            self._open_core().reset()
        self._reset_asserted = asserted

    def is_reset_asserted(self) -> bool:
        return self._reset_asserted

    # -- DAP registers
    def read_dp(self, addr: int, now: bool = True) -> int | Callable[[], int]:
        value = self._read_dp(addr)
        return value if now else (lambda: value)

    def _read_dp(self, addr: int) -> int:
        if addr == 0x0:
            return DPIDR
        if addr == 0x4:  # every power-up request acknowledged at once
            acks = (self._ctrl_stat & CSYSPWRUPREQ) << 1 | (self._ctrl_stat & CDBGPWRUPREQ) << 1
            return self._ctrl_stat | acks
        return 0

    def write_dp(self, addr: int, data: int) -> None:
        if addr == 0x4:
            self._ctrl_stat = data & (CSYSPWRUPREQ | CDBGPWRUPREQ | 0x0F00)

    def read_ap(self, addr: int, now: bool = True) -> int | Callable[[], int]:
        value = self._read_ap(addr)
        return value if now else (lambda: value)

    def _read_ap(self, addr: int) -> int:
        if addr >> 24 != 0:  # only APSEL 0 exists
            return 0
        register = addr & 0xFC
        if register == AP_DRW:
            value = self._memory().read_memory(self._tar)
            self._advance_tar()
            return value
        return {AP_CSW: self._csw, AP_TAR: self._tar, AP_BASE_REG: AP_BASE, AP_IDR_REG: AP_IDR}.get(register, 0)

    def write_ap(self, addr: int, data: int) -> None:
        if addr >> 24 != 0:
            return
        register = addr & 0xFC
        if register == AP_CSW:
            self._csw = data
        elif register == AP_TAR:
            self._tar = data
        elif register == AP_DRW:
            self._memory().write_memory(self._tar, data)
            self._advance_tar()

    def _advance_tar(self) -> None:
        if self._csw & 0x30:  # AddrInc
            self._tar = (self._tar + 4) & 0xFFFFFFFF

    def read_ap_multiple(self, addr: int, count: int = 1, now: bool = True) -> Any:
        values = [self._read_ap(addr) for _ in range(count)]
        return values if now else (lambda: values)

    def write_ap_multiple(self, addr: int, values: Sequence[int]) -> None:
        for value in values:
            self.write_ap(addr, value)

    def get_memory_interface_for_ap(self, ap_address: Any) -> MemoryInterface | None:
        if ap_address.ap_version is not APVersion.APv1 or ap_address.apsel != 0:
            return None
        return self._memory()

    def _memory(self) -> GdbMemoryInterface:
        return GdbMemoryInterface(self._open_core())

    def _open_core(self) -> GdbCortexM:
        if self._core is None:
            raise exceptions.ProbeError("probe not open")
        return self._core


class QemuGdbProbePlugin(Plugin):
    """The probe as a pyOCD plugin (pyocd_plugins/ declares the entry point, through a small module)."""

    def load(self) -> type[QemuGdbProbe]:
        return QemuGdbProbe

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    @property
    def description(self) -> str:
        return "QEMU gdbstub as a debug probe (tests only)"


# ------------------------------------------------------------------ listing and discovery


def unique_id_for(host: str, port: int) -> str:
    return f"{ID_PREFIX}{host}-{port}"


def parse_address(text: str) -> tuple[str, int] | None:
    """(host, port) from "HOST:PORT", "HOST-PORT" or a unique ID "qemugdb-HOST-PORT"."""
    text = text.strip().removeprefix(ID_PREFIX)
    host, sep, port = text.rpartition(":" if ":" in text else "-")
    if not sep or not host or not port.isdigit():
        return None
    return host, int(port)


def listed_addresses(environ: Mapping[str, str] = os.environ) -> list[tuple[str, int]]:
    """The gdbstubs ONDEVICE_QEMUGDB_PROBES lists: the probes "attached" to this machine."""
    addresses = []
    for entry in filter(None, (e.strip() for e in environ.get(ENV_VAR, "").split(","))):
        address = parse_address(entry)
        if address is None:
            LOG.warning("%s: not HOST:PORT: %r", ENV_VAR, entry)
        elif address not in addresses:
            addresses.append(address)
    return addresses


def _register_if_scanned_too_early() -> None:
    """pyOCD scanned its plugins while this module was half-imported (pyocd_plugins/ was on the
    path and this module imported pyOCD first): the plugin declined then, so register now."""
    if any(entry and Path(entry).resolve() == PLUGIN_DIR for entry in sys.path):
        register_with_pyocd()


def register_with_pyocd() -> None:
    """Make pyOCD's probe discovery find the plugin in this process.

    pyOCD scans the `pyocd.probe` entry points once, when pyocd.probe.aggregator is first
    imported: with pyocd_plugins/ on sys.path by then, the scan finds our dist-info. If the
    aggregator was imported before, the class goes straight into its table.
    """
    if str(PLUGIN_DIR) not in sys.path:
        sys.path.append(str(PLUGIN_DIR))
    aggregator = sys.modules.get("pyocd.probe.aggregator")
    if aggregator is not None and PLUGIN_NAME not in aggregator.PROBE_CLASSES:
        aggregator.PROBE_CLASSES[PLUGIN_NAME] = QemuGdbProbe


def pyocd_environ(addresses: Sequence[str], base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of a subprocess that should see these probes (PYTHONPATH gets pyocd_plugins/)."""
    environ = dict(base)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN_DIR), base.get("PYTHONPATH", "")]))
    environ[ENV_VAR] = ",".join(addresses)
    return environ


# ------------------------------------------------------------------ memory maps


@dataclass(frozen=True)
class MachineMemory:
    """Where a QEMU machine has its code memory (its "flash") and its RAM."""

    flash_start: int
    flash_size: int
    ram_start: int
    ram_size: int


KIB, MIB = 1024, 1024 * 1024
MACHINE_MEMORY = {  # from QEMU 7.2's `info mtree` (../../../shared/notes/qemu.md §2)
    "stm32vldiscovery": MachineMemory(0x08000000, 128 * KIB, 0x20000000, 8 * KIB),
    "netduino2": MachineMemory(0x08000000, 1 * MIB, 0x20000000, 128 * KIB),
    "lm3s6965evb": MachineMemory(0x00000000, 256 * KIB, 0x20000000, 64 * KIB),
    "mps2-an385": MachineMemory(0x00000000, 4 * MIB, 0x20000000, 4 * MIB),
    "mps2-an386": MachineMemory(0x00000000, 4 * MIB, 0x20000000, 4 * MIB),
}


def add_memory_map(target: Any, machine: str) -> None:
    """Give pyOCD's generic `cortex_m` target the machine's memory, unless it has a map already.

    Without regions its loader refuses to write ("no memory region defined"). QEMU models no
    flash controller (gdb writes land in its ROM directly), so flash is declared as RAM, boot memory.
    """
    if target.memory_map.region_count:
        return
    memory = MACHINE_MEMORY[machine]
    target.memory_map.add_regions(
        RamRegion(start=memory.flash_start, length=memory.flash_size, name="flash", is_boot_memory=True),
        RamRegion(start=memory.ram_start, length=memory.ram_size, name="ram"),
    )


# ------------------------------------------------------------------ the QEMU process


def qemu_unavailable(qemu: str = "qemu-system-arm") -> str | None:
    """Why QemuBoard cannot run here, or None."""
    return None if shutil.which(qemu) else f"{qemu} not installed"


class QemuBoard:
    """An emulated Cortex-M waiting for a debugger: QEMU stopped (-S) with its gdbstub on a free port.

    No kernel: the program comes through the probe (pyOCD's loader). Semihosting goes to gdb
    (`target=gdb`), which is what makes pyOCD's SemihostAgent serve it. With `uart=True`, the
    machine's first UART is a TCP server (`uart_port`; nothing connected, output is dropped);
    with `uart="pty"`, a pseudo-terminal (`uart_tty`, a real tty node, as a USB-serial adapter's).
    Only the QEMU this object started is ever killed.
    """

    def __init__(
        self,
        machine: str = "stm32vldiscovery",
        cpu: str | None = None,
        *,
        uart: bool | str = False,
        qemu: str = "qemu-system-arm",
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
    ) -> None:
        self.machine, self.cpu, self.uart, self.qemu, self.host = machine, cpu, uart, qemu, host
        self.extra_args = list(extra_args)
        self.gdb_port = 0
        self.uart_port: int | None = None
        self.uart_tty: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr = bytearray()
        self._stderr_reader: threading.Thread | None = None

    def __enter__(self) -> QemuBoard:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def probe_address(self) -> str:
        return f"{self.host}:{self.gdb_port}"

    @property
    def unique_id(self) -> str:
        return unique_id_for(self.host, self.gdb_port)

    @property
    def uart_url(self) -> str | None:
        return None if self.uart_port is None else f"socket://{self.host}:{self.uart_port}"

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    @property
    def stderr(self) -> str:
        """What QEMU printed on stderr so far (e.g. its "Lockup" abort)."""
        return self._stderr.decode(errors="replace")

    def command(self) -> list[str]:
        if self.uart == "pty":
            serial = "pty"
        else:
            serial = f"tcp:{self.host}:{self.uart_port},server=on,wait=off" if self.uart else "null"
        cpu = ["-cpu", self.cpu] if self.cpu else []
        return [
            self.qemu, "-M", self.machine, *cpu, "-S", "-gdb", f"tcp:{self.host}:{self.gdb_port}",
            "-semihosting-config", "enable=on,target=gdb", "-display", "none", "-monitor", "none",
            "-nodefaults", "-serial", serial, *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 10.0) -> QemuBoard:
        """Start QEMU and wait for its sockets; a port taken meanwhile by someone else is retried."""
        for _attempt in range(3):
            self.gdb_port = _free_port(self.host)
            self.uart_port = _free_port(self.host) if self.uart is True else None
            self._stderr.clear()
            self._process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )  # one stream: QEMU names a pty on stdout, its errors on stderr
            self._stderr_reader = threading.Thread(target=self._read_stderr, args=(self._process,), daemon=True)
            self._stderr_reader.start()
            if self._wait_listening(timeout):
                return self
            if "in use" not in self.stderr:
                break
        raise RuntimeError(f"QEMU did not start: {' '.join(self.command())}\n{self.stderr}")

    def _find_tty(self) -> bool:
        """QEMU names the pty it made: "char device redirected to /dev/pts/N (label serial0)"."""
        found = re.search(r"char device redirected to (/dev/pts/\d+)", self.stderr)
        if found:
            self.uart_tty = found.group(1)
        return found is not None

    def _wait_listening(self, timeout: float) -> bool:
        ports = [p for p in (self.gdb_port, self.uart_port) if p is not None]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.returncode is not None:
                return False
            if all(_listening(port) for port in ports) and (self.uart != "pty" or self._find_tty()):
                return True
            time.sleep(0.005)
        self.stop()
        return False

    def _read_stderr(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        while chunk := process.stdout.read1(4096):
            self._stderr += chunk

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait(timeout=10)
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=5)
        if self._process.stderr is not None:
            self._process.stderr.close()


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    """Whether a socket listens on the port, from /proc/net/tcp: connecting to QEMU's gdbstub to
    find out would stop its CPU and count as a client."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.1):
            return True
        return False
    return any(f":{port:04X}" == f[1][-5:] and f[3] == "0A" for f in (line.split() for line in lines))


_register_if_scanned_too_early()
