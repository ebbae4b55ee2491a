"""A stand-in for Renode, for tests only: its monitor protocol, with QEMU doing the emulation.

Renode (a .NET application) cannot be installed on our machines. This server speaks
what our client uses of Renode's telnet monitor as Renode's sources do it
(renode-infrastructure, AntShell; see ../shared/notes/transports.md §4):

- on connect: telnet negotiation `FF FD 00 FF FD 1F FF FB 01 FF FB 03 FF FC 22`, the banner
  `Renode, version X (…)` to the first client only, then the prompt `(monitor) `, which
  becomes `(NAME) ` once a machine is created/selected;
- every typed character is echoed; `\\r` and `\\n` each count as Enter, which echoes `\\n\\r`;
  output lines end `\\r\\n\\r`, error lines `\\r\\n`;
- the texts: `No such command or device: X`, `There was an error executing command 'X'`,
  `Starting emulation...`, `Pausing emulation...`, `Emulation is already started. Ignoring
  command`, `Cannot load ELF on an unpaused machine.`, `Renode is quitting`.

The emulation behind it is `qemu-system-arm -M netduino2` (STM32F205: Cortex-M3, flash at
0x08000000, 128 KiB RAM, so a Blue Pill image linked for 20 KiB fits; QEMU's
`stm32vldiscovery` has 8 KiB). Semihosting output goes to the socket terminal connected to
`sysbus.cpu.uartSemihosting`; at the program's semihosting exit the "CPU halts" and the
emulation stays started, as in Renode. What it cannot show: Renode's own peripheral models
and timing (virtual time, the STM32F103's exact memory map: netduino2 does not fault on
reads of unmapped addresses), USART output (a connected USART stays silent).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PREAMBLE = bytes([0xFF, 0xFD, 0x00, 0xFF, 0xFD, 0x1F, 0xFF, 0xFB, 0x01, 0xFF, 0xFB, 0x03, 0xFF, 0xFC, 0x22])
BANNER = "Renode, version 1.15.3.0 (ondevice-stand-in)"
PLATFORMS = {"platforms/cpus/stm32f103.repl": ["sysbus.usart1", "sysbus.usart2", "sysbus.usart3"]}
QEMU_MACHINE = "netduino2"
# QEMU does not report its instruction count; the stand-in estimates ExecutedInstructions from
# the time the CPU ran, at half the Blue Pill's 72 MHz (so the wall clock still strikes first
# when both budgets are equal)
INSTRUCTIONS_PER_SECOND = 36_000_000


class Machine:
    def __init__(self, name: str) -> None:
        self.name = name
        self.peripherals: set[str] = set()
        self.elf: str | None = None
        self.started = False
        self.paused = False
        self.qemu: subprocess.Popen | None = None
        self.connections: dict[str, str] = {}  # peripheral -> terminal name
        self.ran = 0.0  # seconds the CPU executed before the current stretch
        self.running_since: float | None = None

    def executed(self) -> int:
        running = 0.0
        if self.running_since is not None and self.qemu is not None and self.qemu.poll() is None:
            running = time.monotonic() - self.running_since
        return int((self.ran + running) * INSTRUCTIONS_PER_SECOND)

    def stop_clock(self) -> None:
        if self.running_since is not None:
            self.ran += time.monotonic() - self.running_since
            self.running_since = None


class Terminal:
    """`emulation CreateServerSocketTerminal PORT "name" false`: raw bytes to whoever connects."""

    def __init__(self, port: int) -> None:
        self.server = socket.create_server(("127.0.0.1", port))
        self.client: socket.socket | None = None
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.client = conn

    def write(self, data: bytes) -> None:
        with self.lock:
            if self.client is not None:
                try:
                    self.client.sendall(data)
                except OSError:
                    self.client = None


class StandIn:
    def __init__(self, port: int, die_on_start: int = 0) -> None:
        self.port = port
        self.die_on_start = die_on_start  # the Nth `start` kills the process (Renode dying mid-run)
        self.starts = 0
        self.machines: dict[str, Machine] = {}
        self.current: Machine | None = None
        self.terminals: dict[str, Terminal] = {}
        self.banner_sent = False
        self.server = socket.create_server(("127.0.0.1", port))

    # -- the telnet monitor ---------------------------------------------------------
    def serve_forever(self) -> None:
        print(f"[INFO] Monitor available in telnet mode on port {self.port}", flush=True)
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        out = conn.sendall
        out(PREAMBLE)
        if not self.banner_sent:
            out(f"{BANNER}\r\n\r".encode())
            self.banner_sent = True
        out(self._prompt())
        line = b""
        while True:
            try:
                data = conn.recv(4096)
            except OSError:
                return
            if not data:
                return
            for byte in data:
                ch = bytes([byte])
                if ch in (b"\r", b"\n"):
                    out(b"\n\r")
                    for text, is_error in self.execute(line.decode(errors="replace").strip()):
                        out(text.encode() + (b"\r\n" if is_error else b"\r\n\r"))
                    out(self._prompt())
                    line = b""
                else:
                    out(ch)  # echo
                    line += ch

    def _prompt(self) -> bytes:
        return f"({self.current.name if self.current else 'monitor'}) ".encode()

    # -- commands -------------------------------------------------------------------
    def execute(self, line: str) -> list[tuple[str, bool]]:
        if not line:
            return []
        transcript = os.environ.get("ONDEVICE_STANDIN_TRANSCRIPT")
        if transcript:  # the tests read back which commands the client sent
            with open(transcript, "a") as f:
                f.write(line + "\n")
        try:
            words = shlex.split(line)
        except ValueError:
            return [(f"Could not tokenize here: {line}", True)]
        head = words[0]
        m = self.current
        if head == "mach":
            return self._mach(words[1:])
        if head in ("start", "s"):
            return self._start()
        if head == "pause":
            return self._pause()
        if head == "quit":
            self._kill_qemu()
            os._exit(0)
        if head in ("include", "i") and len(words) == 2 and words[1].startswith("@"):
            path = Path(words[1][1:])
            if not path.is_file():
                return self._error(line, f"Could not find file '{path}'")
            answers: list[tuple[str, bool]] = []
            for sub in path.read_text().splitlines():
                answers += self.execute(sub.strip())
            return answers
        if head == "emulation" and len(words) >= 2:
            if words[1] == "CreateServerSocketTerminal" and len(words) >= 4:
                self.terminals[words[3]] = Terminal(int(words[2]))
                return []
            return self._error(line, "Parameters did not match the signature")
        if head == "connector" and len(words) == 4 and words[1] == "Connect":
            if m is None or words[2] not in m.peripherals:
                return [(f"No such command or device: {words[2]}", True)]
            if words[3] not in self.terminals:
                return self._error(line, f"Could not find external '{words[3]}'")
            m.connections[words[2]] = words[3]
            return []
        if head == "machine" and m is not None and len(words) >= 2:
            return self._machine(line, words[1:])
        if head == "sysbus.cpu" and m is not None and words[1:] == ["ExecutedInstructions"]:
            return [(str(m.executed()), False)]
        if head == "sysbus" and m is not None and len(words) == 3 and words[1] == "LoadELF":
            if m.started and not m.paused:
                return self._error(line, "Cannot load ELF on an unpaused machine.")
            path = Path(words[2].lstrip("@"))
            if not path.is_file():
                return self._error(line, f"Could not find file '{path}'")
            m.elf = str(path)
            return []
        return [(f"No such command or device: {head}", True)]

    def _error(self, line: str, why: str) -> list[tuple[str, bool]]:
        return [(f"There was an error executing command '{line}'", True), (why, True)]

    def _mach(self, args: list[str]) -> list[tuple[str, bool]]:
        if args and args[0] == "create":
            name = args[1] if len(args) > 1 else f"machine-{len(self.machines)}"
            self.current = self.machines[name] = Machine(name)
            return []
        if args and args[0] == "rem" and len(args) == 2:
            machine = self.machines.pop(args[1], None)
            if machine is None:
                return [(f"Machine {args[1]} not found.", True)]
            self._kill_qemu(machine)
            if self.current is machine:
                self.current = None
            return []
        if args and args[0] == "clear":
            self.current = None
            return []
        if args and args[0] == "set" and len(args) == 2:
            if args[1] not in self.machines:
                return [(f"Machine {args[1]} not found.", True)]
            self.current = self.machines[args[1]]
            return []
        return [("Parameters did not match the signature", True)]

    def _machine(self, line: str, args: list[str]) -> list[tuple[str, bool]]:
        m = self.current
        assert m is not None
        if args[0] == "LoadPlatformDescription" and len(args) == 2:
            path = args[1].lstrip("@")
            if path in PLATFORMS:
                m.peripherals.update(PLATFORMS[path])
            elif Path(path).is_file():
                m.peripherals.update(PLATFORMS["platforms/cpus/stm32f103.repl"])
            else:
                return self._error(line, f"Could not find file '{path}'")
            m.peripherals.add("sysbus.cpu")
            return []
        if args[0] == "LoadPlatformDescriptionFromString" and len(args) == 2:
            if "UART.SemihostingUart @ cpu" in args[1] and "sysbus.cpu" in m.peripherals:
                m.peripherals.add("sysbus.cpu.uartSemihosting")
                return []
            return self._error(line, "Could not resolve the platform description")
        if args[0] == "Reset":
            running = m.started and not m.paused
            self._kill_qemu(m)
            m.ran, m.running_since = 0.0, None
            if running:
                self._launch(m)
            return []
        return [(f"No such command or device: machine {args[0]}", True)]

    # -- emulation (QEMU) --------------------------------------------------------------
    def _start(self) -> list[tuple[str, bool]]:
        m = self.current
        self.starts += 1
        if self.die_on_start and self.starts >= self.die_on_start:
            os._exit(134)  # as a crashing Renode would: no answer, sockets closed
        if m is None:
            return []
        if m.started and not m.paused:
            return [("Emulation is already started. Ignoring command", False)]
        if m.qemu is not None and m.qemu.poll() is None:
            _signal(m.qemu, signal.SIGCONT)
        elif m.elf is not None:
            self._launch(m)
        m.started, m.paused = True, False
        m.running_since = time.monotonic()
        return [("Starting emulation...", False)]

    def _pause(self) -> list[tuple[str, bool]]:
        m = self.current
        if m is not None and m.qemu is not None and m.qemu.poll() is None:
            _signal(m.qemu, signal.SIGSTOP)
        if m is not None:
            m.paused = True
            m.stop_clock()
        return [("Pausing emulation...", False)]

    def _launch(self, m: Machine) -> None:
        if m.elf is None:
            return
        argv = ["qemu-system-arm", "-M", QEMU_MACHINE, "-display", "none", "-monitor", "none", "-nodefaults"]
        argv += ["-semihosting-config", "enable=on,target=native", "-icount", "shift=0", "-kernel", m.elf]
        m.qemu = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        threading.Thread(target=self._relay, args=(m, m.qemu), daemon=True).start()

    def _relay(self, m: Machine, qemu: subprocess.Popen) -> None:
        assert qemu.stdout is not None
        while True:
            data = qemu.stdout.read1(4096)
            if not data:
                qemu.wait()
                m.stop_clock()
                return  # the program exited: the CPU halts, the emulation stays started
            name = m.connections.get("sysbus.cpu.uartSemihosting")
            if name and m.qemu is qemu:
                self.terminals[name].write(data)

    def _kill_qemu(self, machine: Machine | None = None) -> None:
        for m in [machine] if machine else list(self.machines.values()):
            if m.qemu is not None and m.qemu.poll() is None:
                _signal(m.qemu, signal.SIGCONT)
                m.qemu.kill()
                m.qemu.wait()
            m.qemu = None


def main(argv: list[str]) -> int:
    """Accepts Renode's command line as our plugin calls it: --disable-xwt --plain --port N --pid-file F."""
    port = 1234
    pid_file = None
    it = iter(argv)
    for arg in it:
        if arg in ("--port", "-P"):
            port = int(next(it))
        elif arg == "--pid-file":
            pid_file = next(it)
    if pid_file:
        Path(pid_file).write_text(str(os.getpid()))
    launches = os.environ.get("ONDEVICE_STANDIN_LAUNCHES")
    if launches:  # the tests count how many Renodes a session started
        with open(launches, "a") as f:
            f.write(f"{os.getpid()}\n")
    die = int(os.environ.get("ONDEVICE_STANDIN_DIE_ON_START", "0"))
    StandIn(port, die).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def _signal(proc, sig: int) -> None:
    """The emulator may end (and be reaped) between the check and the signal: as Renode
    does, the monitor answers anyway."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
