"""QEMU transports: a fresh emulator process per binary, nothing left running.

`qemu-system` runs bare-metal Cortex-M images with semihosting output and
`-icount` so that run time and latency figures are the same on every run.
`qemu-user` runs Linux ARM binaries locally (`--device=qemu`), called
explicitly with the cross sysroot rather than relying on binfmt_misc.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import Option, Transport
from ._proc import LocalRunFiles, LocalScratch, LocalSpawns, ProcessStream, RunDirs, run_streaming, with_env
from .contract import Clock, Deployed, InfrastructureError, OnBytes, RunEnd
from .runloop import Interactive

# Debian's package of each emulator (the rest of qemu-system-* is in qemu-system-misc)
PACKAGES = {"qemu-system-arm": "qemu-system-arm", "qemu-system-aarch64": "qemu-system-arm"}


def install_hint(binary: str) -> str:
    name = Path(binary).name
    package = PACKAGES.get(name) or ("qemu-system-misc" if name.startswith("qemu-system-") else "qemu-user")
    return f"install QEMU: apt-get install {package}"


def _find(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise InfrastructureError(f"{binary} not found; {install_hint(binary)}")
    return path


class _LocalFileTransport(LocalSpawns, Transport):
    """The emulator reads the artifact where the build left it: deploy is a no-op."""

    default_binary = ""
    device_forms = ("qemu",)

    @classmethod
    def claims(cls, device: str) -> bool:
        return device == "qemu"

    @classmethod
    def status(cls, options: dict) -> str:
        binary = options.get("binary", cls.default_binary)
        path = shutil.which(binary)
        return f"found: {binary}" if path else f"missing: {binary} ({install_hint(binary)})"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._run_dirs = RunDirs()

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        return Deployed(str(artifact), sha256, pushed=None, cwd=str(self._run_dirs.make(data, self.local_dir)))

    def close(self) -> None:
        self.end_spawned()
        self._run_dirs.close()


# QEMU's own start-up warnings on stderr, not the device's output: a machine's on-board
# network card left without a backend (mps2's lan9118), which -nodefaults does not remove
QEMU_NOISE = re.compile(
    rb"qemu-system-[\w-]+: warning: (?:nic \S+ has no peer|hub \d+ is not connected to host network)"
)


class QemuSystemTransport(_LocalFileTransport):
    name = "qemu-system"
    default_binary = "qemu-system-arm"
    options = {
        "binary": Option(str, "qemu-system-arm", "the emulator executable"),
        "machine": Option(str, help="QEMU's -M machine (required)"),
        "cpu": Option(str, help="QEMU's -cpu"),
        "output": Option(("semihosting", "uart"), "semihosting", "where the program's output comes from"),
        "icount_shift": Option(int, help="-icount shift: virtual time, 2**shift ns per instruction"),
        "extra_args": Option(list, help="more QEMU arguments"),
    }
    _proc: ProcessStream | None  # the running firmware, from start(): set only then

    @classmethod
    def clock(cls, options: dict[str, Any]) -> Clock | None:
        shift = options.get("icount_shift")
        return Clock("virtual", float(2 ** int(shift))) if shift is not None else Clock("wall")

    def open(self) -> None:
        self.qemu = _find(self.options.get("binary", self.default_binary))
        if "machine" not in self.options:
            raise InfrastructureError(f"{self.board.path}: missing key 'transport.machine'")

    def argv(self, image: str, chardev: str = "stdio", interactive: bool = False) -> list[str]:
        """chardev: where the output goes (QEMU's stdout, or a socket a console reads);
        interactive: the first UART on it too, whatever the board's output, for a test to write."""
        o = self.options
        argv = [self.qemu, "-M", o["machine"], "-display", "none", "-monitor", "none", "-nodefaults"]
        if "cpu" in o:
            argv += ["-cpu", o["cpu"]]
        if o.get("output", "semihosting") == "uart" or chardev != "stdio" or interactive:
            # the first UART and semihosting (for the exit status) share one stream
            argv += ["-chardev", f"{chardev},mux=on,id=out0", "-serial", "chardev:out0"]
        else:
            argv += ["-chardev", "stdio,id=out0", "-serial", "null"]
        argv += ["-semihosting-config", "enable=on,target=native,chardev=out0"]
        if o.get("icount_shift") is not None:
            argv += ["-icount", f"shift={int(o['icount_shift'])}"]
        return [*argv, *o.get("extra_args", []), "-kernel", image]

    # -- as a loader for another console (a UART read through pyserial) ------------------
    def attach_console(self, console: Transport) -> None:
        """QEMU serves its first UART where that console reads it: a TCP socket."""
        address = getattr(console, "socket_address", None)
        if address is None:
            raise InfrastructureError(
                f"QEMU can serve its UART to a console only on a TCP socket: --console=uart:socket://127.0.0.1:PORT "
                f"(not {getattr(console, 'url', None) or 'this console'})"
            )
        # nodelay: a one-byte reply is sent at once, not held ~40 ms for a delayed ACK (Nagle)
        self._chardev = f"socket,host={address[0]},port={address[1]},server=on,wait=on,nodelay=on"

    def start(self, deployed: Deployed) -> None:
        """QEMU in the background, waiting for the console to connect before the CPU starts;
        its first UART and semihosting output both go there (a board may print either way)."""
        self._proc = self.spawn_local(self.argv(deployed.path, self._chardev), None, interactive=False)

    def stop_program(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None:
            proc.close()
            self._proc = None

    def spawn(self, deployed: Deployed | None, args: list[str]) -> Interactive:
        """The firmware in QEMU, its first UART (and semihosting) on QEMU's stdin and stdout:
        what the test writes is what the UART receives."""
        if deployed is None:
            raise InfrastructureError(
                f"{self.board.name} is bare metal: it runs its firmware only (device.flash(...)), no command {args!r}"
            )
        return self.spawn_local(self.argv(deployed.path, "stdio", interactive=True), None, QEMU_NOISE)

    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        end = run_streaming(self.argv(deployed.path), timeout, on_bytes, stop=self.stop, noise=QEMU_NOISE)
        if end.signal == "SIGABRT":
            # QEMU aborts when the CPU cannot even take the fault (bad SP or vector table)
            end.fault = "lockup: the CPU could not take a fault (QEMU aborted; see the device log)"
            end.signal = None
        return end


class QemuUserTransport(LocalRunFiles, LocalScratch, _LocalFileTransport):
    name = "qemu-user"
    runs_here = True
    default_binary = "qemu-aarch64"
    options = {
        "binary": Option(str, "qemu-aarch64", "the emulator executable"),
        "sysroot": Option(str, help="QEMU's -L: where a dynamic binary's libraries are"),
        "cpu": Option(str, help="QEMU's -cpu"),
    }

    @classmethod
    def clock(cls, options: dict[str, Any]) -> Clock | None:
        return Clock("wall")

    def open(self) -> None:
        self.qemu = _find(self.options.get("binary", self.default_binary))

    def _emulator(self) -> list[str]:
        argv = [self.qemu]
        sysroot = self.options.get("sysroot")
        if sysroot:
            argv += ["-L", sysroot]
        if "cpu" in self.options:
            argv += ["-cpu", self.options["cpu"]]
        return argv

    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        # a guest signal kills QEMU with the same signal, so SIGSEGV reads as SIGSEGV
        cwd = Path(deployed.cwd or ".")  # qemu-user hands its environment to the guest
        return run_streaming(
            [*self._emulator(), deployed.path, *args],
            timeout,
            on_bytes,
            cwd=cwd,
            env=with_env(deployed),
            stop=self.stop,
        )

    def spawn(self, deployed: Deployed | None, args: list[str]) -> Interactive:
        """The board's binaries through the emulator; any other command is this machine's own
        (the emulated device has no programs of its own)."""
        return self.spawn_here([*self._emulator(), deployed.path, *args] if deployed else args)
