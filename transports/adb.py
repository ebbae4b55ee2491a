"""The `adb` transport: an Android phone or board through the adb server (adbutils).

Everything a Linux device needs beyond the link is shared with SSH (linuxdevice.py):
the hash-named binary cache on the device, the session dir, the keeper shell that
ends a session's processes when its link goes, the pidfile-and-token kill. Here is
only the link: the device chosen by serial, `host:port` (adb connect) or as the only
one attached; pushes over sync streams kept for the session; every command in a
`shell,v2:` stream, whose exit packet carries the real exit status. Closing a v2 stream
SIGHUPs only the shell on a real adbd, so a timeout kills the run's process group itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shlex
import shutil
import socket
import stat
import struct
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import Option, device_cache
from ._proc import own_environment
from .contract import ConnectionLost, Deployed, InfrastructureError, RunEnd, end_from_status
from .keeper import BOOT, Keeper
from .linuxdevice import DEFAULT_CACHE_ENTRIES, LinuxDevice, RunStream
from .sendall import PIECE, send_all

DEVICE_DIR = "/data/local/tmp"  # the one place an adb shell may write and exec on every Android
CONNECT_TIMEOUT = 10.0
PUSH_TIMEOUT = 60.0
AID_SYSTEM, AID_SHELL = 1000, 2000  # own /data and /data/local/tmp on Android
STDIN, STDOUT, STDERR, EXIT, CLOSE_STDIN = 0, 1, 2, 3, 4
HEADER = struct.Struct("<BI")
# The adb server writes each packet of a stream to its client as it comes, with Nagle on: on a
# long-lived stream (the keeper's) Linux delays our ACKs (up to 40 ms), so a reply in two
# packets (a command's output, then its done line) stalled 44 ms. Acknowledging at once costs
# nothing (measured: a keeper command 1.2 ms instead of 44)
QUICKACK = getattr(socket, "TCP_QUICKACK", None)

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
    options = {
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
            _adbutils()

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
        adbutils = _adbutils()
        host, port = _server(self.options.get("adb_server"))
        timeout = float(self.options.get("connect_timeout", CONNECT_TIMEOUT))
        self._reach_server(host, port, timeout)
        client = _client_class()(host=host, port=port, socket_timeout=timeout)
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


V1_GO, V1_END = "ondevice_go", "ondevice_end"  # shell variables, never exported


class ShellV2(RunStream):
    """adb's shell protocol v2 over one stream, as the keeper's channel and as a run's stream."""

    def __init__(self, conn: Any, where: str) -> None:
        self.conn, self.sock, self.where = conn, conn.conn, where
        self._out = bytearray()
        self._err = bytearray()
        self._status: int | None = None
        self._closed = False
        self._buf = b""
        self._timeout: float | None = None
        self._sending = threading.Lock()
        with contextlib.suppress(OSError):  # a keeper command, or a line to a program, goes out now:
            # Nagle would hold it for the server's delayed ACK of what went before (44 ms)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # the keeper's Channel
    def sendall(self, data: bytes) -> None:
        """One stdin packet, whole: a run's input is written beside the thread reading its
        output, which sets the socket's timeout (sendall.py)."""
        header = HEADER.pack(STDIN, len(data))
        if len(data) <= PIECE:  # one send: a keeper command is not held back behind its header
            self._send(header + data)
        else:  # an input: not copied to put the header before it
            self._send(header, data)

    def _send(self, *parts: bytes) -> None:
        with self._sending:  # a packet's header and data go out together
            for part in parts:
                send_all(self.sock, part, lambda: self._closed)

    def settimeout(self, seconds: float) -> None:
        self._timeout = seconds

    def recv(self, size: int) -> bytes:
        """Stdout bytes; b"" once the stream ended; TimeoutError when nothing came in time."""
        while not self._out and not self._closed and self._status is None:
            if not self._pump(self._timeout):
                raise TimeoutError
        data = bytes(self._out[:size])
        del self._out[:size]
        return data

    def shutdown_write(self) -> None:
        self._send(HEADER.pack(CLOSE_STDIN, 0))

    def write(self, data: bytes) -> None:
        self.sendall(data)

    def close_input(self) -> None:
        self.shutdown_write()

    # the run loop's Stream
    def read(self, wait: float) -> bytes | None:
        if not self._out and not self._closed and self._status is None:
            self._pump(wait)
        if self._out:
            data = bytes(self._out)
            self._out.clear()
            return data
        return b"" if (self._closed or self._status is not None) else None

    def poll(self) -> RunEnd | None:
        if self._status is not None:
            return end_from_status(self._status)
        if self._closed:  # no exit packet: the link went, the program's fate is unknown
            raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
        return None

    def wait(self, seconds: float) -> None:
        if self._status is None and not self._closed:
            self._pump(seconds)

    def kill(self) -> None:  # pragma: no cover - the transport kills by pidfile and token
        self.close()

    def errors(self) -> bytes:
        return bytes(self._err)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(Exception):
            self.conn.close()

    def _pump(self, wait: float | None) -> bool:
        """Read one chunk and sort it; False when nothing came within `wait`."""
        self.sock.settimeout(wait)
        try:
            if QUICKACK is not None:  # see QUICKACK: Linux turns it off again after a while
                self.sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self._closed = True
        self._take(chunk)
        return True

    def _take(self, chunk: bytes) -> None:
        """Shell protocol v2 packets: stdout, stderr (bounded), the exit status."""
        self._buf += chunk
        while len(self._buf) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._buf)
            if len(self._buf) < HEADER.size + length:
                break
            body = self._buf[HEADER.size : HEADER.size + length]
            self._buf = self._buf[HEADER.size + length :]
            if kind == STDOUT:
                self._out += body
            elif kind == STDERR:
                self._err += body[: 65536 - len(self._err)]
            elif kind == EXIT and body:
                self._status = body[0]


class ShellV1(ShellV2):
    """`shell:CMD` on a raw pty: one output stream, no exit packet, no closing of stdin alone.

    As a run's stream (tokens given), what comes before the line `<go>-go` is the shell's
    pre-flight checks (errors()), and the exit status is the line `<end> N` printed after the
    binary; both are taken out of the output (held back while they may still be arriving).
    As the keeper's channel, `break` ends the keeper's loop, which then cleans up as at end
    of input."""

    def __init__(self, conn: Any, where: str, tokens: tuple[str, str] | None) -> None:
        super().__init__(conn, where)
        self.go = tokens[0].encode() + b"-go" if tokens else None
        self.marker = tokens[1].encode() if tokens else None
        self._started = tokens is None
        self._pre = bytearray()  # the pre-flight checks' lines: before the binary started
        self._held = b""

    def sendall(self, data: bytes) -> None:
        self._send(data)

    def shutdown_write(self) -> None:
        self._send(b"break\n")

    def _take(self, chunk: bytes) -> None:
        """Raw output; the go line and the status line, when this is a run's stream, taken out."""
        if not self._started:
            if not chunk:
                return  # closed before the binary started: only the checks spoke
            self._pre += chunk
            found = re.search(re.escape(self.go) + rb"\r?\n", self._pre)
            if found is None:
                del self._pre[: max(0, len(self._pre) - 65536)]
                return
            self._started = True
            chunk = bytes(self._pre[found.end() :])
            del self._pre[found.start() :]
            if not chunk:
                return
        if not chunk:  # closed: what was held back is output after all
            self._out += self._held
            self._held = b""
            return
        if self.marker is None:
            self._out += chunk
            return
        data = self._held + chunk
        found = re.search(rb"\n?" + re.escape(self.marker) + rb" (\d+)\r?\n", data)
        if found:
            self._status = int(found.group(1))
            data = data[: found.start()]
            self._held = b""
        else:  # keep back what may be the start of the marker line
            keep = len(self.marker) + 8
            data, self._held = data[:-keep], data[-keep:]
        self._out += data

    def errors(self) -> bytes:
        return bytes(self._pre)


class AdbFs:
    """What the device cache needs of a file system, through adb sync and the keeper's shell
    (toybox on Android, coreutils elsewhere: both have stat -c, realpath, ln, mv)."""

    def __init__(self, transport: AdbTransport) -> None:
        self.t = transport

    def _run(self, command: str) -> str:
        try:
            return self.t._exec(command)
        except ConnectionLost:
            raise
        except InfrastructureError as e:
            raise OSError(str(e)) from None

    def lstat(self, path: str) -> Any:
        out = self._run(f"stat -c '%u %g %f %s %Y' {shlex.quote(path)}").split()
        return _Attr(path.rsplit("/", 1)[-1], *map(int, out[:2]), int(out[2], 16), *map(int, out[3:5]))

    def mkdir(self, path: str, mode: int = 0o777) -> None:
        self._run(f"mkdir -m {mode:o} {shlex.quote(path)}")

    def chmod(self, path: str, mode: int) -> None:
        self._run(f"chmod {mode:o} {shlex.quote(path)}")

    def normalize(self, path: str) -> str:
        return self._run(f"cd {shlex.quote(path)} && pwd -P").strip()

    def listdir_attr(self, path: str = ".") -> list[Any]:
        q = shlex.quote(path)
        # one stat for them all (a process per file took 1-3 ms each on the stand-in); an
        # empty dir leaves a glob unmatched: stat's complaint about it is not an entry
        out = self._run(f"cd {q} && {{ stat -c '%u %g %f %s %Y %n' * .[!.]* 2>/dev/null; true; }}")
        attrs = []
        for line in out.splitlines():
            parts = line.split(" ", 5)
            if len(parts) == 6:
                uid, gid, mode, size, mtime = int(parts[0]), int(parts[1]), int(parts[2], 16), *map(int, parts[3:5])
                attrs.append(_Attr(parts[5], uid, gid, mode, size, mtime))
        return attrs

    def listdir(self, path: str = ".") -> list[str]:
        return [a.filename for a in self.listdir_attr(path)]

    def remove(self, path: str) -> None:
        self._run(f"rm -f {shlex.quote(path)}")

    def symlink(self, source: str, dest: str) -> None:
        self._run(f"ln -s {shlex.quote(source)} {shlex.quote(dest)}")

    def utime(self, path: str, times: Any) -> None:
        self._run(f"touch -c {shlex.quote(path)}")

    def posix_rename(self, old: str, new: str) -> None:
        self._run(f"mv -f {shlex.quote(old)} {shlex.quote(new)}")

    def get(self, remote: str, local: str) -> None:
        adbutils = _adbutils()
        if not self._run(f"[ -f {shlex.quote(remote)} ] && echo yes; true").strip():
            raise FileNotFoundError(remote)
        try:
            self.t.adb.sync.pull(remote, local)
        except adbutils.AdbError as e:
            raise OSError(f"adb pull of {remote}: {e}") from None

    def put(self, local: str, remote: str) -> None:
        """adb sync push, then its size confirmed (a short write on a full disk is caught)."""
        syncs = self.t.syncs
        if syncs is None:
            raise OSError("not connected")
        size = os.path.getsize(local)
        for fresh in (False, True):
            with syncs.link(fresh) as link:
                try:
                    sent = link.send(local, remote, 0o600)
                    held = link.stat(remote)[1]
                    break
                except OSError as e:
                    # a kept stream the device has meanwhile closed: once more on a new one
                    if fresh or not link.reused or isinstance(e, TimeoutError):
                        raise OSError(f"adb push to {remote}: {e}") from None
                    raise _Stale from None
        if sent != size or held != size:
            raise OSError(f"adb push to {remote}: {held} of {size} bytes arrived (device full?)")


SYNC_DATA_MAX = 64 * 1024  # adbd's largest DATA packet
SYNC = struct.Struct("<4sI")


class _Stale(Exception):
    """A kept sync stream that failed on first use: SyncPool.link drops it, put tries a new one."""


class SyncLink:
    """One `sync:` stream, kept open for many requests: adbutils' Sync opens one (a connection
    to the server, the device's transport, the service) for every request and STATs before
    every push, three streams a push where this takes none."""

    def __init__(self, conn: Any, timeout: float) -> None:
        self.conn, self.sock = conn, conn.conn
        self.sock.settimeout(timeout)
        self.reused = False

    def send(self, local: str, remote: str, mode: int) -> int:
        """SEND: the file in DATA packets, DONE with the time as its mtime; the bytes sent."""
        spec = f"{remote},{stat.S_IFREG | mode}".encode()
        out, sent = SYNC.pack(b"SEND", len(spec)) + spec, 0
        with open(local, "rb") as f:
            while chunk := f.read(SYNC_DATA_MAX):
                self.sock.sendall(out + SYNC.pack(b"DATA", len(chunk)) + chunk)
                out, sent = b"", sent + len(chunk)
        self.sock.sendall(out + SYNC.pack(b"DONE", int(time.time())))
        kind, length = SYNC.unpack(self._read(SYNC.size))
        if kind == b"FAIL":  # adbd ends the service after a failure: this stream is done for
            raise OSError(self._read(length).decode(errors="replace"))
        if kind != b"OKAY":
            raise OSError(f"unexpected answer to SEND: {kind!r}")
        return sent

    def stat(self, remote: str) -> tuple[int, int, int]:
        """(mode, size, mtime); all 0 when nothing is there."""
        path = remote.encode()
        self.sock.sendall(SYNC.pack(b"STAT", len(path)) + path)
        answer = self._read(16)
        if answer[:4] != b"STAT":
            raise OSError(f"unexpected answer to STAT: {answer[:4]!r}")
        return struct.unpack("<III", answer[4:])

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise OSError("the device closed the sync stream")
            data += chunk
        return data

    def close(self) -> None:
        self.conn.close()


class SyncPool:
    """The session's sync streams: one per thread that pushes at the same time, kept between pushes."""

    def __init__(self, device: Any, timeout: float) -> None:
        self.device, self.timeout = device, timeout
        self._idle: list[SyncLink] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def link(self, fresh: bool = False) -> Iterator[SyncLink]:
        """A stream to use alone; back to the pool when done, closed if anything went wrong."""
        link = None
        with self._lock:
            if self._idle and not fresh:
                link = self._idle.pop()
        if link is None:
            link = self._open()
        try:
            yield link
        except BaseException as e:
            link.close()
            if isinstance(e, _Stale):
                return
            raise
        with self._lock:
            if not self._closed:
                link.reused = True
                self._idle.append(link)
                return
        link.close()

    def _open(self) -> SyncLink:
        adbutils = _adbutils()
        try:
            conn = self.device.open_transport(timeout=self.timeout)
        except adbutils.AdbError as e:
            raise OSError(f"cannot open adb sync: {e}") from None
        try:
            conn.send_command("sync:")
            conn.check_okay()
        except adbutils.AdbError as e:
            conn.close()
            raise OSError(f"cannot open adb sync: {e}") from None
        return SyncLink(conn, self.timeout)

    def close(self) -> None:
        with self._lock:
            self._closed, idle, self._idle = True, self._idle, []
        for link in idle:
            link.close()


@functools.cache
def _client_class() -> type:
    """adbutils' AdbClient without two costs of every stream it opens: it asks the server its
    version first (one more connection; the version does not change while a session runs),
    and its close() pauses 10 ms after the shutdown (for a socket another object shares; ours
    never are). A push through its Sync paid both three times, a run's stream once."""
    adbutils = _adbutils()

    class Client(adbutils.AdbClient):
        _version: int | None = None

        def server_version(self) -> int:
            if self._version is None:
                self._version = super().server_version()
            return self._version

        def make_connection(self, timeout: float | None = None) -> Any:
            conn = super().make_connection(timeout)
            conn.close = functools.partial(_close, conn.conn)
            return conn

    return Client


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class _Attr:
    """The fields of paramiko's SFTPAttributes that device_cache reads."""

    def __init__(self, filename: str, uid: int, gid: int, mode: int, size: int, mtime: int) -> None:
        self.filename, self.st_uid, self.st_gid, self.st_mode = filename, uid, gid, mode
        self.st_size, self.st_mtime = size, mtime


def _adbutils() -> Any:
    """adbutils, imported quietly: it pulls in requests, whose urllib3 warns about SOCKS
    support nobody here asked for, in every user's test summary."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import adbutils
    except ImportError:
        raise InfrastructureError("the adb transport needs adbutils: pip install 'pytest-ondevice[adb]'") from None
    return adbutils


def _server(value: str | None) -> tuple[str, int]:
    """HOST:PORT of the adb server; adb's own $ANDROID_ADB_SERVER_PORT is honoured."""
    if value:
        host, _, port = value.rpartition(":")
        return host or "127.0.0.1", int(port)
    return "127.0.0.1", int(os.environ.get("ANDROID_ADB_SERVER_PORT") or 5037)
