"""ADB's wire protocol as the adb transport speaks it, over streams adbutils opens.

The shell protocol v2 (`<BI` packets: stdin, stdout, stderr, the exit status, the end of
stdin) and its v1 fallback (one raw pty stream, the exit status a marker line); sync
streams (SEND and STAT) kept open for the session's pushes; and the file system the
device cache needs, made of those and the keeper's shell commands.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import socket
import stat
import struct
import threading
import time
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .contract import ConnectionLost, InfrastructureError, RunEnd, end_from_status
from .linuxdevice import RunStream
from .sendall import PIECE, send_all

if TYPE_CHECKING:
    from .adb import AdbTransport

STDIN, STDOUT, STDERR, EXIT, CLOSE_STDIN = 0, 1, 2, 3, 4
HEADER = struct.Struct("<BI")
# The adb server writes each packet of a stream to its client as it comes, with Nagle on: on a
# long-lived stream (the keeper's) Linux delays our ACKs (up to 40 ms), so a reply in two
# packets (a command's output, then its done line) stalled 44 ms. Acknowledging at once costs
# nothing (measured: a keeper command 1.2 ms instead of 44)
QUICKACK = getattr(socket, "TCP_QUICKACK", None)


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
        self.go = tokens[0].encode() + b"-go" if tokens else b""  # the line before the binary's output
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
        out = self._run(f"stat -c '%u %g %f %s %Y' {shlex.quote(path)}")
        return _Attr.parse(path.rsplit("/", 1)[-1], out.split())

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
                attrs.append(_Attr.parse(parts[5], parts[:5]))
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
        adbutils = import_adbutils()
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
        adbutils = import_adbutils()
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
def client_class() -> type:
    """adbutils' AdbClient without two costs of every stream it opens: it asks the server its
    version first (one more connection; the version does not change while a session runs),
    and its close() pauses 10 ms after the shutdown (for a socket another object shares; ours
    never are). A push through its Sync paid both three times, a run's stream once."""
    import_adbutils()  # quietly, the first time
    from adbutils import AdbClient

    class Client(AdbClient):
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

    @classmethod
    def parse(cls, filename: str, fields: list[str]) -> _Attr:
        """From stat -c '%u %g %f %s %Y' (the mode in hex)."""
        uid, gid, mode, size, mtime = fields[:5]
        return cls(filename, int(uid), int(gid), int(mode, 16), int(size), int(mtime))


def import_adbutils() -> ModuleType:
    """adbutils, imported quietly: it pulls in requests, whose urllib3 warns about SOCKS
    support nobody here asked for, in every user's test summary."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import adbutils
    except ImportError:
        raise InfrastructureError("the adb transport needs adbutils: pip install 'pytest-ondevice[adb]'") from None
    return adbutils
