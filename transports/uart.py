"""The `uart` console: a target's serial output through pyserial, paired with any loader.

A UART has no exit status and no end: the runtime's `#ondevice exit N` line ends a run
(runloop.ExitLine). The port is opened before the loader starts the program, so nothing
the target prints at boot is lost; a peer that serves the port itself (QEMU's UART on a
TCP socket) is connected to once the loader has started it. Bytes before our first line
(a bootloader's banner, line noise at reset) are kept in the log but put on a line of
their own, so the parser sees our first line whole.

pyserial's `socket://` discards the bytes of a read in progress when the peer closes,
so a read never asks for more than the port already holds; and its open() discards what
arrived while it connected, which a socket peer that starts on connect has already sent.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import Option, Transport
from .contract import Deployed, InfrastructureError, OnBytes, RunEnd
from .runloop import ExitLine, drive

OPEN_TIMEOUT = 10.0
WRITE_GONE_S = 2.0  # for a cancelled write to leave pyserial before the port closes
# where our output starts: our header's first line, or a TFLM harness's own
FIRST_LINE = re.compile(rb"#ondevice |Testing |\[==========\]|\[ RUN ")


class UartTransport(Transport):
    name = "uart"
    device_forms = ("uart:URL[@BAUD]",)
    options = {
        "url": Option(str, help="the port: /dev/ttyUSB0, socket://HOST:PORT, rfc2217://HOST:PORT (any pyserial URL)"),
        "baudrate": Option(int, 115200, "bits per second"),
        "bytesize": Option(int, 8, "data bits"),
        "parity": Option(("N", "E", "O", "M", "S"), "N", "parity"),
        "stopbits": Option(float, 1, "stop bits"),
        "open_timeout": Option(float, OPEN_TIMEOUT, "seconds to wait for the port (a socket peer still starting)"),
    }

    @classmethod
    def claims(cls, device: str) -> bool:
        return device.startswith("uart:")

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        try:
            import serial  # noqa: F401
        except ImportError:
            return "missing: pip install 'pytest-ondevice[uart]'"
        return "ready (pyserial)"

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        if device:  # uart:URL[@BAUD]
            url, _, baud = device.removeprefix("uart:").rpartition("@")
            if not url or not baud.isdigit():
                url, baud = device.removeprefix("uart:"), ""
            self.options["url"] = url
            if baud:
                self.options["baudrate"] = int(baud)
        self.url: str | None = self.options.get("url")

    def open(self) -> None:
        if not self.url:
            raise InfrastructureError(
                f"board {self.board.name} has no UART: set url in its [transport] or pass --console=uart:URL@BAUD"
            )
        try:
            import serial  # noqa: F401
        except ImportError:
            raise InfrastructureError("the uart console needs pyserial: pip install 'pytest-ondevice[uart]'") from None

    @property
    def socket_address(self) -> tuple[str, int] | None:
        """(host, port) of a `socket://` URL: where a loader that serves the UART itself (an
        emulator) must serve it; None for any other port."""
        found = re.fullmatch(r"socket://([^:/]+):(\d+)/?", self.url or "")
        return (found.group(1), int(found.group(2))) if found else None

    @property
    def serves_itself(self) -> bool:
        """A socket URL: the peer may be what the loader starts (QEMU serving its UART)."""
        return self.socket_address is not None

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        raise InfrastructureError('the uart transport is a console only: name a loader (e.g. name = "swd")')

    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        if start is None:
            raise InfrastructureError("the uart console cannot start a program: name a loader in [transport]")
        port = self._listening(start)
        resync = _Resync(on_bytes)
        try:
            return drive(_SerialStream(port, self.url), timeout, resync, self.stop)
        finally:
            resync.flush()
            port.close()

    def _listening(self, start: Callable[[], None]) -> Any:
        """The port open, and the target started once it is (nothing it prints is lost)."""
        port = None
        if not self.serves_itself:
            port = self._open(deadline=time.monotonic() + float(self.options["open_timeout"]))
        else:  # a socket served from before the start (Renode's terminal) is connected to first
            with contextlib.suppress(InfrastructureError):
                port = self._open(deadline=0)
        start()  # reset or launch the target now that the port listens
        if port is None:
            port = self._open(deadline=time.monotonic() + float(self.options["open_timeout"]))
        return port

    def listen(self, start: Callable[[], None], stop: Callable[[], None]) -> _SerialProcess:
        try:
            port = self._listening(start)
        except BaseException:
            stop()
            raise
        return _SerialProcess(port, self.url, stop)

    def _open(self, deadline: float) -> Any:
        import serial

        while True:
            try:
                port = serial.serial_for_url(
                    self.url,
                    baudrate=int(self.options["baudrate"]),
                    bytesize=int(self.options["bytesize"]),
                    parity=self.options["parity"],
                    stopbits=self.options["stopbits"],
                    timeout=0.1,
                    do_not_open=True,
                )
                if self.serves_itself:
                    # pyserial's socket open() throws away what arrived while it connected; a
                    # peer that starts the target on connect (QEMU, wait=on) would lose its first bytes
                    # (replaced on this one port object, on purpose)
                    port.reset_input_buffer = lambda: None  # type: ignore[method-assign]
                port.open()
                return port
            except (serial.SerialException, OSError, ValueError) as e:
                if time.monotonic() >= deadline:
                    raise InfrastructureError(
                        f"cannot open the UART {self.url}: {e}; check the port (ls /dev/serial/by-id/), that no "
                        "other program holds it, and that this account may open it (group dialout)"
                    ) from None
                time.sleep(0.05)


class _SerialStream:
    """A serial port for the shared run loop; the end is the exit line, or the peer closing."""

    def __init__(self, port: Any, url: str | None) -> None:
        self.port, self.url = port, url
        self.exit_line = ExitLine()
        self.status: int | None = None
        self.closed = False

    def read(self, wait: float) -> bytes | None:
        if self.status is not None:
            return b""  # ended: what the target prints next is not this run's
        if self.closed:
            return b""
        import serial

        self.port.timeout = max(wait, 0.001)
        data = b""
        try:
            data = self.port.read(1)  # never more than is there: see the module docstring
            while data and self.port.in_waiting:
                self.port.timeout = 0
                more = self.port.read(self.port.in_waiting)
                if not more:
                    break
                data += more
        except serial.SerialException:
            self.closed = True  # the peer closed (socket://): what was read so far is kept
        if not data:
            return b"" if self.closed else None
        self.status = self.exit_line.feed(data)
        return data

    def poll(self) -> RunEnd | None:
        if self.status is not None:
            return RunEnd(exit_code=self.status)
        if self.closed:
            raise InfrastructureError(f"the UART {self.url} closed before the program's exit line")
        return None

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def kill(self) -> None:
        """The loader stops the target (Combined.run); the port itself has nothing to kill."""


class _SerialProcess(_SerialStream):
    """The port as a scripted test talks to it: what it writes goes to the target's RX."""

    def __init__(self, port: Any, url: str | None, stop: Callable[[], None]) -> None:
        super().__init__(port, url)
        self._stop = stop
        self.closing = False  # a write from device.run()'s input thread gives up
        self._writing = threading.Lock()  # held by a write: the port closes once it is out of pyserial

    def write(self, data: bytes) -> None:
        import serial

        with self._writing:
            try:
                self.port.write(data)
                if not self.closing:  # cancelled by close(): nothing to wait out
                    self.port.flush()
            except (serial.SerialException, OSError) as e:
                if not self.closing:
                    raise InfrastructureError(f"the UART {self.url} failed while writing: {e}") from None
            except (TypeError, AttributeError):  # pyserial's write, its port closed under it
                if not self.closing:
                    raise
        if self.closing:
            raise InfrastructureError(f"the UART {self.url} was closed while the input was written")

    def close_input(self) -> None:
        """A UART has no end of input: the target reads on."""

    def errors(self) -> bytes:
        return b""

    def kill(self) -> None:
        self._stop()

    def close(self) -> None:
        self.closing = True
        try:
            self._stop()
        finally:
            with contextlib.suppress(Exception):  # what waits to go out is dropped
                self.port.reset_output_buffer()
            with contextlib.suppress(Exception):  # a write waiting on a slow line gives up first
                self.port.cancel_write()
            out = self._writing.acquire(timeout=WRITE_GONE_S)  # pyserial's own fds are not for two threads
            try:
                with contextlib.suppress(Exception):
                    self.port.close()
            finally:
                if out:
                    self._writing.release()


class _Resync:
    """Passes output on; before our first line, noise is put on a line of its own."""

    def __init__(self, on_bytes: OnBytes) -> None:
        self.on_bytes = on_bytes
        self.synced = False
        self.pending = b""

    def __call__(self, data: bytes) -> None:
        if self.synced:
            self.on_bytes(data)
            return
        self.pending += data
        found = FIRST_LINE.search(self.pending)
        if found is None:
            if len(self.pending) > 4096:  # no harness output at all: pass it on as it is
                self.synced = True
                self.on_bytes(self.pending)
            return
        self.synced = True
        noise, rest = self.pending[: found.start()], self.pending[found.start() :]
        if noise and not noise.endswith(b"\n"):
            noise += b"\n"
        self.on_bytes(noise + rest)

    def flush(self) -> None:
        if not self.synced and self.pending:
            self.on_bytes(self.pending)
        self.synced, self.pending = True, b""
