"""The `renode` transport: bare-metal binaries on a Renode-emulated board.

One Renode per session (per xdist worker), many binaries through it: the machine
is created once from the board's platform description, its output (the
semihosting UART by default, as TensorFlow Lite Micro's harness has it, or a
USART) goes to a server socket terminal we read as a byte stream, and each
binary is `pause` / `machine Reset` / `sysbus LoadELF` / `start`. A run ends at
the runtime's `#ondevice exit N` line (Renode halts the CPU at a semihosting
exit and reports no status), or at the timeout. Without `--device` we start
`renode` headless ourselves and stop it at the end; `--device=renode://HOST:PORT`
uses a monitor that is already running.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_ondevice.config.schema import SECONDS

from . import Option, Transport
from ._proc import own_environment
from .contract import Clock, Deployed, InfrastructureError, OnBytes, RunEnd
from .renode_monitor import MonitorError, MonitorGone, RenodeMonitor
from .runloop import ExitLine, drive
from .sendall import send_all

DEFAULT_PLATFORM = "platforms/cpus/stm32f103.repl"
SEMIHOSTING_UART = "sysbus.cpu.uartSemihosting"
TERMINAL = "ondevice_term"
START_TIMEOUT = 60.0
VIRTUAL_POLL = 0.25  # seconds between virtual-time checks while the program prints nothing
INSTALL_HINT = (
    "install Renode: its portable Linux package from https://github.com/renode/renode/releases "
    "(put `renode` on PATH or set RENODE=/path/to/renode), or run its Docker image "
    "(antmicro/renode) and pass --device=renode://HOST:1234; no install needed for "
    "--board=bluepill-qemu, the same target under QEMU"
)


def find_renode(options: dict[str, Any]) -> str | None:
    """The board's or ini's `renode`, then $RENODE, then `renode` on PATH."""
    for candidate in (options.get("renode"), os.environ.get("RENODE"), "renode"):
        if candidate:
            path = shutil.which(candidate)
            if path:
                return path
    return None


class RenodeTransport(Transport):
    name = "renode"
    device_forms = ("renode://HOST:PORT",)
    options = {
        "platform": Option(str, DEFAULT_PLATFORM, "a platform description (.repl), Renode's or beside the board file"),
        "script": Option(str, help="a .resc that sets the machine up, instead of platform"),
        "output": Option(str, SEMIHOSTING_UART, "the UART the program's output comes from"),
        "cpu": Option(str, "sysbus.cpu", "the CPU whose executed instructions bound virtual time"),
        "terminal_port": Option(int, help="the port of Renode's socket terminal (default: a free one)"),
        "virtual_timeout": Option(SECONDS, help="seconds of virtual time a binary may run (default: the timeout)"),
        "monitor_timeout": Option(SECONDS, 30.0, "seconds a monitor command may take"),
        "start_timeout": Option(SECONDS, START_TIMEOUT, "seconds Renode may take to start"),
        "renode": Option(str, help="the renode executable", ini="ondevice_renode"),
    }

    @classmethod
    def claims(cls, device: str) -> bool:
        return device.startswith("renode://")

    @classmethod
    def clock(cls, options: dict[str, Any]) -> Clock | None:
        return Clock("virtual")

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        path = find_renode(options)
        return f"found: {path}" if path else "missing: renode (see: pytest-ondevice docs transports/renode)"

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        self.proc: subprocess.Popen | None = None
        self.monitor: RenodeMonitor | None = None
        self.terminal: socket.socket | None = None
        self.machine = f"ondevice-{os.getpid()}"
        self._console_port = 0  # a console of another transport reads the UART on this port
        self._virtual = 0.0  # seconds of virtual time a binary may run
        self._limit = 0  # the instruction count where that ends (0: not bounded)

    # -- session -----------------------------------------------------------------
    def open(self) -> None:
        if self.device:
            match = re.fullmatch(r"renode://([^:/]+):(\d+)/?", self.device)
            if not match:
                raise InfrastructureError(f"--device={self.device}: expected renode://HOST:PORT")
            host, port = match.group(1), int(match.group(2))
        else:
            host, port = "127.0.0.1", self._start_renode()
        self.host = host
        try:
            self.monitor = RenodeMonitor(host, port, float(self.options.get("monitor_timeout", 30.0)))
            self._create_machine()
        except (MonitorError, MonitorGone) as e:
            self.close()
            raise InfrastructureError(f"{e}") from None

    def _start_renode(self) -> int:
        renode = find_renode(self.options)
        if renode is None:
            raise InfrastructureError(f"renode not found (PATH, $RENODE, ondevice_renode); {INSTALL_HINT}")
        port = _free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="ondevice-renode-")
        self.log_path = Path(self._tmp.name) / "renode.log"
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child
        argv = [renode, "--disable-xwt", "--plain", "--port", str(port), "--pid-file", f"{self._tmp.name}/pid"]
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=own_environment(None),  # a reconnect may start it while tests run
            )
        except OSError as e:
            raise InfrastructureError(f"cannot start {renode}: {e}") from None
        finally:
            log.close()
        ready = f"Monitor available in telnet mode on port {port}".encode()
        deadline = time.monotonic() + float(self.options.get("start_timeout", START_TIMEOUT))
        while time.monotonic() < deadline:
            if ready in self.log_path.read_bytes():
                return port
            if self.proc.poll() is not None:
                raise InfrastructureError(
                    f"renode exited with status {self.proc.returncode} while starting: {self._log_tail()}"
                )
            time.sleep(0.05)
        self._stop_renode()
        raise InfrastructureError(f"renode did not offer its monitor within the start timeout: {self._log_tail()}")

    def _create_machine(self) -> None:
        assert self.monitor is not None
        m = self.monitor
        m.command(f'mach create "{self.machine}"')
        script = self.options.get("script")
        if script:  # a board's own .resc sets the machine up
            m.command(f"include @{_renode_path(script, self.board)}")
        else:
            platform = _renode_path(self.options.get("platform", DEFAULT_PLATFORM), self.board)
            m.command(f"machine LoadPlatformDescription @{platform}")
        output = self.options.get("output", SEMIHOSTING_UART)
        if output == SEMIHOSTING_UART and not script:
            m.command('machine LoadPlatformDescriptionFromString "uartSemihosting: UART.SemihostingUart @ cpu"')
        term_port = self._console_port or int(self.options.get("terminal_port", 0)) or _free_port()
        m.command(f'emulation CreateServerSocketTerminal {term_port} "{TERMINAL}" false')
        m.command(f"connector Connect {output} {TERMINAL}")
        if self._console_port:
            return  # the console connects to it itself
        try:
            self.terminal = socket.create_connection((self.host, term_port), timeout=10)
        except OSError as e:
            raise MonitorGone(f"cannot connect to Renode's socket terminal on {self.host}:{term_port}: {e}") from None

    # -- deploy and run ------------------------------------------------------------
    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        # Renode reads the ELF itself: a remote Renode needs the build dir at the same path
        return Deployed(str(artifact.resolve()), sha256, pushed=None)

    def attach_console(self, console: Transport) -> None:
        """Renode's UART terminal is served where that console reads it: a TCP port here."""
        address = getattr(console, "socket_address", None)
        if address is None or address[0] not in ("127.0.0.1", "localhost"):
            raise InfrastructureError(
                "Renode can serve its UART to a console only on a local TCP socket: "
                f"--console=uart:socket://127.0.0.1:PORT (not {getattr(console, 'url', None) or 'this console'})"
            )
        self._console_port = address[1]

    def start(self, deployed: Deployed) -> None:
        """Load and start one binary on a machine reset to its power-on state."""
        self._command("pause")
        if self.terminal is not None:
            self._drain()  # what the previous binary printed after its exit line
        self._command("machine Reset")  # peripherals and CPU: nothing carries over
        self._command(f"sysbus LoadELF @{deployed.path}")
        budget = self._instruction_budget(self._virtual)
        self._limit = (self._executed() + budget) if budget else 0
        self._command("start")

    def stop_program(self) -> None:
        """After another console's run: frozen until the next binary resets the machine."""
        with contextlib.suppress(InfrastructureError, MonitorError):
            self._command("pause")

    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        assert self.monitor is not None and self.terminal is not None
        self._virtual = float(self.options.get("virtual_timeout", timeout))
        try:
            (start or (lambda: self.start(deployed)))()
            end = drive(_Terminal(self, self.terminal, self._virtual), timeout, on_bytes, self.stop)
            if end.exit_code is None and end.timed_out is not None and end.clock:
                self._command("pause")  # out of virtual time: frozen until the next binary resets it
        except MonitorError as e:
            raise InfrastructureError(f"{e}") from None
        return end

    def spawn(self, deployed: Deployed | None, args: list[str]) -> _Console:
        """A firmware a scripted test talks to: loaded on the reset machine and started, its
        UART on our socket terminal both ways (what the test writes, Renode hands to the
        connected UART's receiver). Not bounded in virtual time: the test's expects are."""
        if deployed is None:
            raise InfrastructureError(
                f"{self.board.name} runs its firmware only (device.flash(...)), no command {args!r}"
            )
        if self.terminal is None:
            raise InfrastructureError("Renode's UART is served to another console here (--console): use that one")
        self._virtual = 0.0
        try:
            self.start(deployed)
        except MonitorError as e:
            raise InfrastructureError(f"{e}") from None
        return _Console(self, self.terminal)

    def _instruction_budget(self, seconds: float) -> int:
        """The virtual-time budget in instructions (board clock, one instruction per cycle)."""
        hz = self.board.clock_hz
        return int(seconds * hz) if hz and seconds > 0 else 0

    def _executed(self) -> int:
        answer = self._command(f"{self.options.get('cpu', 'sysbus.cpu')} ExecutedInstructions")
        number = re.search(r"0x[0-9a-fA-F]+|\d+", answer)
        if number is None:
            raise InfrastructureError(f"Renode's answer to ExecutedInstructions is not a number: {answer!r}")
        return int(number.group(0), 0)

    def _command(self, line: str) -> str:
        assert self.monitor is not None
        try:
            return self.monitor.command(line)
        except MonitorGone as e:
            raise InfrastructureError(f"{e}{self._died()}") from None

    def _drain(self) -> None:
        assert self.terminal is not None
        self.terminal.setblocking(False)
        with contextlib.suppress(BlockingIOError, OSError):
            while self.terminal.recv(65536):
                pass

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise InfrastructureError(f"Renode died mid-run{self._died()}")

    def _died(self) -> str:
        """Why the connection ended, when it is because our Renode exited."""
        if self.proc is None:
            return ""
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return ""
        return f" (renode exited with status {self.proc.returncode}: {self._log_tail()})"

    def _log_tail(self) -> str:
        try:
            text = self.log_path.read_bytes()[-600:].decode(errors="replace").strip()
        except OSError:
            return "no output"
        return text.replace("\n", " / ") or "no output"

    # -- end -------------------------------------------------------------------------
    def close(self) -> None:
        if self.monitor is not None:
            with contextlib.suppress(Exception):
                if self.proc is not None:  # the monitor stays connected until Renode has gone
                    self.monitor.sock.sendall(b"quit\n")
                    self.proc.wait(timeout=5)
                else:  # someone else's Renode: leave it as we found it
                    self.monitor.command("pause")
                    self.monitor.command(f'mach rem "{self.machine}"')
            self.monitor.close()
            self.monitor = None
        if self.terminal is not None:
            with contextlib.suppress(OSError):
                self.terminal.close()
            self.terminal = None
        self._stop_renode()

    def _stop_renode(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


class _Terminal:
    """Renode's socket terminal, for the shared run loop: the end is the runtime's exit line
    (Renode reports no exit status), or the virtual-time budget, polled while it is silent."""

    def __init__(self, transport: RenodeTransport, sock: socket.socket, virtual_timeout: float) -> None:
        """sock: the transport's terminal, connected."""
        self.t, self.sock, self.virtual_timeout = transport, sock, virtual_timeout
        self.exit_line = ExitLine()
        self.status: int | None = None
        self.out_of_time = False
        self.next_poll = time.monotonic() + VIRTUAL_POLL
        self.sock.setblocking(False)

    def read(self, wait: float) -> bytes | None:
        if self.status is not None or self.out_of_time:
            return b""  # the program has ended: what it prints later is the next run's to drain
        ready, _, _ = select.select([self.sock], [], [], wait)
        if not ready:
            self.t._check_alive()
            if self.t._limit and time.monotonic() >= self.next_poll:
                self.next_poll = time.monotonic() + VIRTUAL_POLL
                self.out_of_time = self.t._executed() >= self.t._limit
            return None
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return None
        except OSError as e:
            raise InfrastructureError(f"Renode's output stopped: {e}") from None
        if not data:
            raise InfrastructureError(f"Renode closed its output mid-run{self.t._died()}")
        self.status = self.exit_line.feed(data)
        return data

    def poll(self) -> RunEnd | None:
        if self.status is not None:
            return RunEnd(exit_code=self.status)
        if self.out_of_time:
            return RunEnd(timed_out=self.virtual_timeout, clock="virtual time")
        return None

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def kill(self) -> None:
        """A hang: frozen until the next binary resets the machine."""
        with contextlib.suppress(InfrastructureError):
            self.t._command("pause")


class _Console(_Terminal):
    """The terminal as a scripted test talks to it."""

    def __init__(self, transport: RenodeTransport, sock: socket.socket) -> None:
        super().__init__(transport, sock, 0.0)
        self._closed = False

    def write(self, data: bytes) -> None:
        try:  # the terminal's socket is non-blocking: sendall() gave up as soon as it was full
            send_all(self.sock, data, lambda: self._closed or self.sock.fileno() < 0)
        except OSError as e:
            raise InfrastructureError(f"Renode's terminal failed while writing: {e}") from None

    def close_input(self) -> None:
        """A UART has no end of input."""

    def errors(self) -> bytes:
        return b""

    def close(self) -> None:
        self._closed = True  # a write still waiting gives up
        self.kill()  # paused until the next program resets the machine


def _renode_path(path: str, board: Any) -> str:
    """A file beside the board file is ours to name absolutely; anything else is Renode's own
    (e.g. `platforms/cpus/stm32f103.repl`, relative to Renode's install)."""
    local = Path(board.path).parent / path
    return str(local.resolve()) if local.is_file() else path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
