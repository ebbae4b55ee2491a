"""The `adb` transport: an Android phone or board through the adb server (adbutils).

Everything a Linux device needs beyond the link is shared with SSH (linuxdevice.py):
the hash-named binary cache on the device, the session dir, the keeper shell that
ends a session's processes when its link goes, the pidfile-and-token kill. Here is
only the link: the device chosen by serial, `host:port` (adb connect) or as the only
one attached; pushes over sync streams kept for the session; every command in a
`shell,v2:` stream, whose exit packet carries the real exit status. Closing a v2 stream
SIGHUPs only the shell on a real adbd, so a timeout kills the run's process group itself.
What goes over those streams, byte by byte, is adb_wire.py's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from . import Option, device_cache
from ._proc import own_environment
from .adb_wire import AdbFs, ShellV1, ShellV2, SyncPool, client_class, import_adbutils
from .contract import ConnectionLost, Deployed, InfrastructureError
from .keeper import BOOT, Keeper
from .linuxdevice import DEFAULT_CACHE_ENTRIES, LinuxDevice, RunStream

DEVICE_DIR = "/data/local/tmp"  # the one place an adb shell may write and exec on every Android
CONNECT_TIMEOUT = 10.0
PUSH_TIMEOUT = 60.0
AID_SYSTEM, AID_SHELL = 1000, 2000  # own /data and /data/local/tmp on Android
V1_GO, V1_END = "ondevice_go", "ondevice_end"  # shell variables, never exported

STATE_HINTS = {
    "unauthorized": "unlock the device and accept the 'Allow USB debugging?' prompt (tick 'Always allow'), "
    "then run again; no prompt: revoke USB debugging authorisations in Developer options and reconnect",
    "offline": "the device does not answer adb: reconnect its cable (or `adb reconnect`), or reboot it",
    "no permissions": "the USB device node is not readable: add a udev rule for it (see `adb devices`)",
}


class AdbTransport(LinuxDevice):
    name = "adb"
    device_forms = ("adb:SERIAL", "adb:HOST:PORT")
    trusted_uids = (0, AID_SYSTEM, AID_SHELL)  # as owners or groups: Android's root group has no app in it
    options: dict[str, Any] = {
        "serial": Option(str, help="the device's serial, or HOST:PORT for adb over TCP (--device=adb:... overrides)"),
        "adb_server": Option(
            str,
            help="the adb server, HOST:PORT (default: $ANDROID_ADB_SERVER_PORT on 127.0.0.1, else 5037)",
            ini="ondevice_adb_server",
        ),
        "scratch_root": Option(str, DEVICE_DIR, "where the binary cache lives on the device"),
        "cache_entries": Option(int, DEFAULT_CACHE_ENTRIES, "binaries kept on the device"),
        "connect_timeout": Option(float, CONNECT_TIMEOUT, "seconds to reach the device"),
        "push_timeout": Option(float, PUSH_TIMEOUT, "seconds a device may be silent mid-push"),
        "exec_wrapper": Option("command", help="a command the binary runs under (a string, or its words)"),
    }

    @classmethod
    def claims(cls, device: str) -> bool:
        return device.startswith("adb:")

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        try:
            import adbutils  # noqa: F401
        except ImportError:
            return "missing: pip install 'pytest-ondevice[adb]'"
        return "ready (adbutils)"

    @classmethod
    def import_libraries(cls) -> None:
        with contextlib.suppress(InfrastructureError):
            import_adbutils()

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        self.serial = device[len("adb:") :] if device else self.options.get("serial")
        self.where = f"adb:{self.serial}" if self.serial else "adb"
        self.adb: Any = None
        self.v2 = True  # the device offers shell protocol v2 (asked at open)
        self.syncs: SyncPool | None = None
        self._reopen_lock = threading.Lock()

    # -- connection --------------------------------------------------------------------
    def open(self) -> None:
        adbutils = import_adbutils()
        host, port = _server(self.options.get("adb_server"))
        timeout = float(self.options.get("connect_timeout", CONNECT_TIMEOUT))
        self._reach_server(host, port, timeout)
        client = client_class()(host=host, port=port, socket_timeout=timeout)
        try:
            client.server_version()
            if self.serial and ":" in self.serial:  # adb over TCP: attach it first (a no-op when attached)
                said = client.connect(self.serial, timeout=timeout)
                if "connected" not in said or "unable" in said or "failed" in said:
                    raise InfrastructureError(f"adb connect {self.serial}: {said.strip()}")
            self.serial = self._choose(self._listing(client, timeout))
            self.where = f"adb:{self.serial}"
            self.adb = client.device(self.serial)
            with self.adb.open_transport("features") as conn:
                self.v2 = "shell_v2" in conn.read_string_block().split(",")
            self.syncs = SyncPool(self.adb, float(self.options.get("push_timeout", PUSH_TIMEOUT)))
            self._start_keeper()
            uid, home = self.keeper_hello
            self._start_session(AdbFs(self), uid, home, "shell")
        except InfrastructureError:
            self.adb = None
            raise
        except (adbutils.AdbError, OSError, EOFError) as e:
            self.adb = None
            raise ConnectionLost(f"{self.where}: {e}") from None

    def _reach_server(self, host: str, port: int, timeout: float) -> None:
        """The adb server must answer; the default one is started as `adb` itself would
        (adbutils would start one on the default port whatever port was asked for)."""
        for attempt in (1, 2):
            try:
                socket.create_connection((host, port), timeout=timeout).close()
                return
            except OSError as e:
                adb = shutil.which("adb")
                default = not self.options.get("adb_server") and not os.environ.get("ANDROID_ADB_SERVER_PORT")
                if attempt == 1 and default and adb and host == "127.0.0.1":
                    subprocess.run(
                        [adb, "start-server"], capture_output=True, timeout=30, check=False, env=own_environment(None)
                    )
                    continue
                raise InfrastructureError(
                    f"no adb server on {host}:{port} ({e.strerror or e}); start one: adb start-server "
                    "(Debian: apt-get install adb), or point adb_server / ondevice_adb_server at yours"
                ) from None

    def _listing(self, client: Any, timeout: float) -> list[Any]:
        """`adb devices`, once the asked-for device has settled: right after `adb connect` or a
        dropped link it is offline or connecting for a moment (the server retries on its own)."""
        deadline = time.monotonic() + timeout
        while True:
            devices = client.list()
            state = next((d.state for d in devices if d.serial == self.serial), None)
            if state not in ("offline", "connecting", "authorizing", None) or not self.serial:
                return devices
            if time.monotonic() >= deadline:
                return devices
            time.sleep(0.2)

    def _choose(self, devices: list[Any]) -> str:
        """The serial to use: the one asked for, or the only one attached; its state must be `device`."""
        listing = ", ".join(f"{d.serial} ({d.state})" for d in devices) or "none"
        if self.serial:
            found = [d for d in devices if d.serial == self.serial]
            if not found:
                raise InfrastructureError(f"adb: no device {self.serial} attached (adb devices: {listing})")
            chosen = found[0]
        elif not devices:
            raise InfrastructureError(
                "adb: no device attached; plug one in (USB debugging on), or pass --device=adb:HOST:PORT"
            )
        elif len(devices) > 1:
            raise InfrastructureError(
                f"adb: {len(devices)} devices attached and none chosen: {listing}; pass --device=adb:SERIAL"
            )
        else:
            chosen = devices[0]
        if chosen.state != "device":
            hint = STATE_HINTS.get(chosen.state, f"adb lists it as {chosen.state!r}")
            raise InfrastructureError(f"adb:{chosen.serial} is {chosen.state}: {hint}")
        return chosen.serial

    def _start_keeper(self) -> None:
        channel = self._shell(BOOT)
        channel.settimeout(float(self.options.get("connect_timeout", CONNECT_TIMEOUT)))
        self.keeper = Keeper(channel, self.where)
        hello = self.keeper.start()
        if hello is None:
            raise InfrastructureError(f"{self.where}: the device's shell cannot run sh commands: {self.keeper.refusal}")
        self.keeper_hello = hello
        channel.settimeout(float(self.options.get("push_timeout", PUSH_TIMEOUT)))

    def _shell(self, command: str, tokens: tuple[str, str] | None = None) -> ShellV2:
        """A `shell,v2:` stream (separate stdout/stderr, a stdin, the exit status), or on a
        device without shell_v2 (Android before 7) a `shell:` stream on a raw pty."""
        service = f"shell,v2,raw:{command}" if self.v2 else f"shell:{command}"
        try:
            conn = self.adb.open_transport(timeout=float(self.options.get("connect_timeout", CONNECT_TIMEOUT)))
            conn.send_command(service)
            conn.check_okay()
        except Exception as e:
            raise ConnectionLost(f"{self.where}: cannot open a shell: {e}") from None
        return ShellV2(conn, self.where) if self.v2 else ShellV1(conn, self.where, tokens)

    def _run_command(
        self, deployed: Deployed, args: list[str], pidfile: str, token: str, io: str = "</dev/null 2>&1"
    ) -> str:
        command = super()._run_command(deployed, args, pidfile, token, io)
        if self.v2:
            return command
        # without shell_v2 the checks, the binary and the exit status share one stream: the
        # shell reads two tokens from its stdin (never in a command line or an environment
        # the binary could read from /proc), says the checks are over with the first, and
        # gives the status with the second
        return f"read -r {V1_GO} {V1_END} || exit 125; {command}"

    def _invoke(self, command: str) -> str:
        if self.v2:
            return super()._invoke(command)
        return f"printf '%s-go\\n' \"${V1_GO}\"; {command}; printf '\\n%s %d\\n' \"${V1_END}\" $?"

    def _fs(self, role: str) -> device_cache.DeviceFs:
        return AdbFs(self)

    def _start_run(self, command: str) -> RunStream:
        if self.adb is None:
            raise ConnectionLost(f"{self.where}: not connected")
        if self.v2:
            return self._shell(command)
        tokens = (f"ondevice-{secrets.token_hex(16)}", f"ondevice-{secrets.token_hex(16)}")
        stream = self._shell(command, tokens)
        try:
            stream.sendall(f"{tokens[0]} {tokens[1]}\n".encode())
        except OSError as e:
            stream.close()
            raise ConnectionLost(f"{self.where}: cannot start the binary: {e}") from None
        return stream

    def _push_failed(self, error: Exception, artifact: Path) -> InfrastructureError:
        if self.adb is not None and self._alive():
            return InfrastructureError(f"{self.where}: pushing {artifact.name} failed: {error}")
        return ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}: {error}")

    def reopen(self) -> None:
        """A fresh connection; then end what the lost one ran and remove its dir."""
        with self._reopen_lock:
            if self.adb is not None and self._alive():
                return  # the link is fine (a binary vanished from the cache): deploy pushes it again
            lost = self._forget_session()
            self._drop_syncs()
            self.adb = None
            self.open()
            self._clean_lost(lost)

    def close(self) -> None:
        if self.adb is None:
            return
        self._end_session()
        self._drop_syncs()
        self.adb = None

    def _drop_syncs(self) -> None:
        if self.syncs is not None:
            self.syncs.close()
            self.syncs = None


def _server(value: str | None) -> tuple[str, int]:
    """HOST:PORT of the adb server; adb's own $ANDROID_ADB_SERVER_PORT is honoured."""
    if value:
        host, _, port = value.rpartition(":")
        return host or "127.0.0.1", int(port)
    return "127.0.0.1", int(os.environ.get("ANDROID_ADB_SERVER_PORT") or 5037)
