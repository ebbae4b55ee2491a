"""A stand-in Android device for tests only: adbd's side of the ADB wire protocol over TCP.

No Android device or emulator can run on our machines, but the real `adb` server (Debian's
adb 29) can: it connects to this stand-in as it connects to a phone after `adb connect`, so
our ADB transport is tested through the real server and the real adbutils, not a mock of
them. What the stand-in does follows adbd's sources (AOSP adb/protocol.txt, adb.cpp,
daemon/services.cpp, daemon/shell_service.cpp, daemon/file_sync_service.cpp; measured facts
in ../shared/notes/transports.md §2):

- transport: 24-byte headers `<6I` (cmd, arg0, arg1, length, byte sum, cmd ^ 0xffffffff);
  the sum is never checked (a reconnecting server sends 0). The server sends CNXN first; a
  `device` answers CNXN with its banner, an `unauthorized` one answers AUTH TOKEN forever
  and never accepts, an `offline` one never answers. One WRTE at a time per stream: the next
  waits for the host's OKAY; a host WRTE is acknowledged once its data is consumed.
- `shell,v2[,TERM=..][,raw|,pty]:CMD`: the shell protocol (`<BI` id, length); a raw command
  runs on socketpairs (stdin and stdout share one, stderr has its own), its exit status
  comes last (128+N when killed by signal N), after stdout and stderr have closed. Closing
  the stream (or losing the connection) SIGHUPs the shell's pid only, so a background child
  survives as an orphan, as on a real device.
- `shell:CMD` (v1) and `exec:CMD`: a pty in raw mode, the shell its session leader with the
  pty as controlling terminal; output only, no exit status. Closing the stream closes the
  pty master: the kernel's hangup SIGHUPs the session leader and then its foreground group.
- `sync:`: STAT, LIST, SEND (missing parents made 0775; mode bits of the owner copied to group
  and others, so 0644 lands as 0666; mtime from DONE), RECV, QUIT; a failed request ends the
  service, as adbd does.
- anything else is refused (CLSE), which the server reports as "closed".

The device side runs in a private user and mount namespace (`unshare`), chrooted into a
directory of its own: /usr and /etc are read-only bind mounts of the host's, /data/local/tmp,
/sdcard and /tmp are real directories inside it (visible to the tests on the host), and
binfmt_misc is mounted privately with qemu-aarch64 (and qemu-arm) registered, so pushed
aarch64 binaries run as on a phone. Nothing on the host changes. Shells run as root (a real
device's shell user is uid 2000) with adbd's environment plus a marker variable, which is
how the host side finds the processes the device still runs.

Host side: `StandinDevice` (the server process, its controls and its logs), `AdbServer` (a
real `adb nodaemon server` on a free port with its own HOME) and `standin_unavailable()`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import termios
import threading
import time
import tty
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# -- the wire ------------------------------------------------------------------------------
A_CNXN = 0x4E584E43
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_WRTE = 0x45545257
A_CLSE = 0x45534C43
A_AUTH = 0x48545541
A_VERSION = 0x01000001
MAX_PAYLOAD = 262144  # what we announce; a write goes out in pieces of at most min(ours, the host's)
AUTH_TOKEN, AUTH_SIGNATURE, AUTH_RSAPUBLICKEY = 1, 2, 3
HEADER = struct.Struct("<6I")
FEATURES = "shell_v2,cmd"
BANNER = "device::ro.product.name=standin;ro.product.model=StandIn;ro.product.device=standin;features={}\0"
MODES = ("device", "unauthorized", "offline")

# shell protocol packet ids (adb/shell_protocol.h)
SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN, SHELL_WINDOW = range(6)
SHELL_PACKET = struct.Struct("<BI")

SYNC_DATA_MAX = 64 * 1024
SYNC_PATH_MAX = 1024

# -- the device's file system --------------------------------------------------------------
DEVICE_SHELL = "/system/bin/sh"
DEVICE_DIRS = {"data/local/tmp": 0o771, "sdcard": 0o770, "tmp": 0o1777}
READ_ONLY_BINDS = ("usr", "etc")
BINDS = ("dev", "proc", "sys")
DEVICE_PATH = "/system/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER = "ADB_STANDIN_DEVICE"  # in the environment of every process the device starts
# qemu-binfmt-conf.sh's magic and mask; F: the interpreter is opened now, so it works in the chroot
BINFMT = {
    "qemu-aarch64": (
        r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
        r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
    ),
    "qemu-arm": (
        r"\x7fELF\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x28\x00",
        r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
    ),
}


def message(cmd: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    """One transport message: the header (byte sum filled in as adbd does) and its payload."""
    return HEADER.pack(cmd, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF, cmd ^ 0xFFFFFFFF) + data


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """n bytes, or None once the peer is gone."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_message(sock: socket.socket) -> tuple[int, int, int, bytes] | None:
    """The next message (the checksum deliberately unchecked), or None once the connection is gone."""
    head = recv_exact(sock, HEADER.size)
    if head is None:
        return None
    cmd, arg0, arg1, length, _check, magic = HEADER.unpack(head)
    if magic != cmd ^ 0xFFFFFFFF:
        return None
    data = recv_exact(sock, length) if length else b""
    return None if data is None else (cmd, arg0, arg1, data)


class Stream:
    """One open service on a connection, with adb's flow control: one unacknowledged WRTE each way."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int) -> None:
        self.conn = conn
        self.local_id = local_id
        self.remote_id = remote_id
        self.cv = threading.Condition()
        self.can_send = True
        self.inbox: deque[bytes] = deque()
        self.open = True

    def write(self, data: bytes) -> bool:
        """Send data, waiting for the host's OKAY before each piece; False once the stream is closed."""
        step = self.conn.max_payload
        for start in range(0, len(data), step):
            with self.cv:
                self.cv.wait_for(lambda: self.can_send or not self.open)
                if not self.open:
                    return False
                self.can_send = False
            self.conn.send(A_WRTE, self.local_id, self.remote_id, data[start : start + step])
        return True

    def read(self) -> bytes | None:
        """The host's next WRTE, acknowledged now that it is consumed; None once the host closed."""
        with self.cv:
            self.cv.wait_for(lambda: self.inbox or not self.open)
            if not self.inbox:
                return None
            data = self.inbox.popleft()
            is_open = self.open
        if is_open:
            self.conn.send(A_OKAY, self.local_id, self.remote_id)
        return data

    def close(self) -> None:
        """The device ends the stream (the host answers with a CLSE of its own, which is ignored)."""
        if self._end():
            self.conn.send(A_CLSE, self.local_id, self.remote_id)

    # -- called by the connection's reader ------------------------------------------------
    def acked(self) -> None:
        with self.cv:
            self.can_send = True
            self.cv.notify_all()

    def deliver(self, data: bytes) -> None:
        with self.cv:
            self.inbox.append(data)
            self.cv.notify_all()

    def gone(self) -> None:
        """The host closed the stream, or the connection is lost."""
        self._end()

    def _end(self) -> bool:
        with self.cv:
            was_open, self.open = self.open, False
            self.cv.notify_all()
        self.conn.forget(self)
        return was_open


class StreamReader:
    """Exact-length reads over a stream's WRTEs, which split the sync protocol's messages anywhere."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.buf = bytearray()

    def read_exact(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            chunk = self.stream.read()
            if chunk is None:
                return None
            self.buf += chunk
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


class Connection:
    """One TCP connection from the adb server: handshake by the device's mode, then streams."""

    def __init__(self, device: Device, sock: socket.socket) -> None:
        self.device = device
        self.sock = sock
        self.lock = threading.Lock()
        self.streams: dict[int, Stream] = {}
        self.next_id = 1
        self.max_payload = MAX_PAYLOAD
        self.online = False
        self.host_max: int | None = None  # from the host's CNXN, once it came

    def send(self, cmd: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        with self.lock, contextlib.suppress(OSError):
            self.sock.sendall(message(cmd, arg0, arg1, data))

    def forget(self, stream: Stream) -> None:
        with self.lock:
            self.streams.pop(stream.local_id, None)

    def drop(self) -> None:
        """Cut the connection as a network failure would; the reader then ends every stream."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def serve(self) -> None:
        try:
            while (msg := read_message(self.sock)) is not None:
                self.handle(*msg)
        finally:
            with self.lock:
                streams = list(self.streams.values())
            for stream in streams:
                stream.gone()
            self.sock.close()
            self.device.forget(self)

    def handle(self, cmd: int, arg0: int, arg1: int, data: bytes) -> None:
        if cmd == A_CNXN:
            self.host_max = arg1
            self.handshake()
        elif cmd == A_AUTH and arg0 == AUTH_SIGNATURE:  # never accepted: another token
            self.send(A_AUTH, AUTH_TOKEN, 0, secrets.token_bytes(20))
        elif cmd == A_OPEN and self.online:
            self.open(arg0, data.rstrip(b"\0").decode(errors="replace"))
        elif cmd in (A_OKAY, A_WRTE, A_CLSE):
            with self.lock:
                stream = self.streams.get(arg1)
            if stream is None or stream.remote_id != arg0:
                return
            if cmd == A_OKAY:
                stream.acked()
            elif cmd == A_WRTE:
                stream.deliver(data)
            else:
                stream.gone()
        # RSAPUBLICKEY: a real device would ask its user; ours never answers (it stays unauthorized)

    def handshake(self) -> None:
        """Answer the host's CNXN as the device's mode says (again when the mode changes before it is online)."""
        mode = self.device.mode
        self.max_payload = min(self.host_max or MAX_PAYLOAD, MAX_PAYLOAD)
        if mode == "device":
            self.online = True
            self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, BANNER.format(self.device.features).encode())
        elif mode == "unauthorized":
            self.send(A_AUTH, AUTH_TOKEN, 0, secrets.token_bytes(20))
        # offline: silence

    def open(self, remote_id: int, service: str) -> None:
        self.device.log(open=service)
        handler = service_handler(service)
        if handler is None:
            self.send(A_CLSE, 0, remote_id)  # adbd's answer to a service it does not know
            return
        with self.lock:
            local_id = self.next_id
            self.next_id += 1
            stream = self.streams[local_id] = Stream(self, local_id, remote_id)
        self.send(A_OKAY, local_id, remote_id)
        threading.Thread(target=handler, args=(self.device, stream), daemon=True).start()


def service_handler(service: str) -> Callable[[Device, Stream], None] | None:
    if service.startswith(("shell:", "shell,")):
        return lambda device, stream: shell_service(device, stream, service)
    if service.startswith("exec:"):
        return lambda device, stream: Subprocess(device, stream, service[5:], pty=True, protocol=False).run()
    if service == "sync:":
        return lambda device, stream: SyncService(device, stream).run()
    return None


# -- shell -----------------------------------------------------------------------------------
def shell_service(device: Device, stream: Stream, service: str) -> None:
    """`shell[,arg...]:CMD` as adbd parses it: v2 selects the shell protocol, raw/pty the type
    (pty by default without a command), TERM=... the terminal; raw without the protocol is a raw pty."""
    head, _, command = service.partition(":")
    args = head.split(",")[1:]
    protocol = "v2" in args
    use_pty = not command
    term = None
    for arg in args:
        if arg == "raw":
            use_pty = False
        elif arg == "pty":
            use_pty = True
        elif arg.startswith("TERM="):
            term = arg[5:]
    make_raw = not protocol and not use_pty
    Subprocess(device, stream, command, pty=use_pty or not protocol, protocol=protocol, term=term, raw=make_raw).run()


class Subprocess:
    """A shell command as adbd's Subprocess runs it: its own session, a pty or socketpairs, and
    its output relayed raw or in shell-protocol packets until it closes."""

    def __init__(
        self,
        device: Device,
        stream: Stream,
        command: str,
        *,
        pty: bool,
        protocol: bool,
        term: str | None = None,
        raw: bool = True,
    ) -> None:
        self.device = device
        self.stream = stream
        self.command = command
        self.pty = pty
        self.protocol = protocol
        self.term = term
        self.raw = raw
        self.lock = threading.Lock()  # guards the fds below against the pump closing them
        self.inout: int | None = None  # pty master, or our end of the stdin/stdout socketpair
        self.err: int | None = None
        self.sockets: list[socket.socket] = []
        self.wake_r, self.wake_w = os.pipe()
        self.host_gone = False
        self.seen = b""  # stdout tail, for the drop marker

    def run(self) -> None:
        try:
            proc = self.spawn()
        except OSError as e:
            self.close_fds()
            os.close(self.wake_r)
            os.close(self.wake_w)
            self.report_error(str(e))
            return
        feeder = threading.Thread(target=self.feed_stdin, daemon=True)
        feeder.start()
        self.pump()
        if self.host_gone:
            if self.protocol:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGHUP)  # the shell only: its background children live on
            self.close_fds()  # a pty master closing hangs the terminal up
        else:
            self.close_fds()
            if not self.protocol:
                self.stream.close()  # the output ended: so does a raw stream, exit status or not
        status = proc.wait()
        if not self.host_gone and self.protocol:
            code = 128 - status if status < 0 else status
            self.stream.write(SHELL_PACKET.pack(SHELL_EXIT, 1) + bytes([code & 0xFF]))
            self.stream.close()
        feeder.join()  # it ends with the stream, and writes to wake_w until then
        os.close(self.wake_r)
        os.close(self.wake_w)

    def spawn(self) -> subprocess.Popen:
        argv = [DEVICE_SHELL, "-c", self.command] if self.command else [DEVICE_SHELL]
        if self.pty:
            master, slave = os.openpty()
            if self.raw:
                tty.setraw(slave)
            child_in = child_out = child_err = slave
            self.inout = master
            argv = ["setsid", "--ctty", *argv]  # a new session with the pty as its controlling terminal
        else:
            ours, theirs = socket.socketpair()
            self.sockets += [ours, theirs]
            child_in = child_out = theirs.fileno()
            self.inout = ours.fileno()
            child_err = child_out
            if self.protocol:
                err_ours, err_theirs = socket.socketpair()
                self.sockets += [err_ours, err_theirs]
                child_err = err_theirs.fileno()
                self.err = err_ours.fileno()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=child_in,
                stdout=child_out,
                stderr=child_err,
                env=self.device.environment(self.term),
                cwd="/",
                start_new_session=not self.pty,
            )
        finally:
            if self.pty:
                os.close(slave)
            else:
                for sock in self.sockets[1::2]:  # the child's ends
                    sock.close()
        for fd in (self.inout, self.err):
            if fd is not None:
                os.set_blocking(fd, False)
        return proc

    def report_error(self, text: str) -> None:
        """adbd's ReportError: the message on stderr and exit status 126 (raw: just the message)."""
        data = f"error: {text}\n".encode()
        if self.protocol:
            data = SHELL_PACKET.pack(SHELL_STDERR, len(data)) + data + SHELL_PACKET.pack(SHELL_EXIT, 1) + b"\x7e"
        self.stream.write(data)
        self.stream.close()

    # -- output --------------------------------------------------------------------------
    def pump(self) -> None:
        """Relay output until every output fd has closed or the host has gone."""
        ids = {self.inout: SHELL_STDOUT, self.err: SHELL_STDERR}
        live = [fd for fd in ids if fd is not None]
        poller = select.poll()
        for fd in live:
            poller.register(fd, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while live:
            for fd, _event in poller.poll():
                if fd == self.wake_r:
                    self.host_gone = True
                    return
                data = self.read_output(fd)
                if data is None:
                    continue
                if not data:
                    poller.unregister(fd)
                    live.remove(fd)
                elif not self.emit(ids[fd], data):
                    self.host_gone = True
                    return

    @staticmethod
    def read_output(fd: int) -> bytes | None:
        """Some output, b"" at its end (EIO: a pty whose last holder closed), None if nothing yet."""
        try:
            return os.read(fd, 32768)
        except BlockingIOError:
            return None
        except OSError as e:
            if e.errno in (errno.EIO, errno.ECONNRESET):
                return b""
            raise

    def emit(self, packet_id: int, data: bytes) -> bool:
        packet = SHELL_PACKET.pack(packet_id, len(data)) + data if self.protocol else data
        sent = self.stream.write(packet)
        if packet_id == SHELL_STDOUT:
            self.seen = self.device.watch_output(self.seen, data)
        return sent

    def close_fds(self) -> None:
        with self.lock:
            if self.pty and self.inout is not None:
                os.close(self.inout)
            for sock in self.sockets[::2]:
                sock.close()
            self.inout = self.err = None

    # -- input ---------------------------------------------------------------------------
    def feed_stdin(self) -> None:
        """Host data to the command's stdin (raw, or unwrapped from shell packets) until the host closes."""
        reader = StreamReader(self.stream)
        while True:
            if self.protocol:
                head = reader.read_exact(SHELL_PACKET.size)
                packet_id, length = SHELL_PACKET.unpack(head) if head else (None, 0)
                data = reader.read_exact(length) if head else None
                if head is None or data is None:
                    break
                self.on_packet(packet_id, data)
            else:
                data = self.stream.read()
                if data is None:
                    break
                self.write_stdin(data)
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")

    def on_packet(self, packet_id: int, data: bytes) -> None:
        if packet_id == SHELL_STDIN:
            self.write_stdin(data)
        elif packet_id == SHELL_CLOSE_STDIN and not self.pty:  # a pty cannot close just its input
            with self.lock:
                if self.sockets and self.inout is not None:
                    with contextlib.suppress(OSError):
                        self.sockets[0].shutdown(socket.SHUT_WR)
        elif packet_id == SHELL_WINDOW:
            self.set_window(data)

    def write_stdin(self, data: bytes) -> None:
        """Write all of data unless the command's stdin closes meanwhile (then the rest is dropped)."""
        while data:
            with self.lock:
                if self.inout is None:
                    return
                try:
                    data = data[os.write(self.inout, data) :]
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    return
            time.sleep(0.01)  # the command is not reading: wait, as adbd stops reading the host meanwhile

    def set_window(self, data: bytes) -> None:
        """`rows x cols, xpixels x ypixels`, as adbd's ioctl(TIOCSWINSZ) takes it."""
        try:
            rows_cols, pixels = data.rstrip(b"\0").decode().split(",")
            rows, cols = map(int, rows_cols.split("x"))
            xpix, ypix = map(int, pixels.split("x"))
        except ValueError:
            return
        with self.lock:
            if self.inout is not None:
                with contextlib.suppress(OSError):  # fails on a socketpair, silently as in adbd
                    fcntl.ioctl(self.inout, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, xpix, ypix))


# -- sync --------------------------------------------------------------------------------------
class SyncService:
    """`sync:` requests (`<4sI` id, length, then the path) until one fails, QUIT, or the stream closes."""

    def __init__(self, device: Device, stream: Stream) -> None:
        self.device = device
        self.stream = stream
        self.reader = StreamReader(stream)

    def run(self) -> None:
        handlers = {b"STAT": self.stat, b"LIST": self.list, b"SEND": self.send, b"RECV": self.recv}
        while (head := self.reader.read_exact(8)) is not None:
            request, length = struct.unpack("<4sI", head)
            if length > SYNC_PATH_MAX:
                self.fail("path too long")
                break
            name = self.reader.read_exact(length)
            if name is None or request == b"QUIT":
                break
            handler = handlers.get(request)
            if handler is None:
                self.fail(f"unknown command {struct.unpack('<I', request)[0]:08x}")
                break
            if not handler(name.decode(errors="surrogateescape")):
                break
        self.stream.close()

    def fail(self, reason: str) -> bool:
        text = reason.encode()
        self.stream.write(b"FAIL" + struct.pack("<I", len(text)) + text)
        return False

    def stat(self, path: str) -> bool:
        """lstat; all zeros when the path does not exist (adbd's STAT v1)."""
        try:
            st = os.lstat(path)
            fields = (st.st_mode, st.st_size, int(st.st_mtime))
        except OSError:
            fields = (0, 0, 0)
        return self.stream.write(b"STAT" + struct.pack("<III", *(f & 0xFFFFFFFF for f in fields)))

    def list(self, path: str) -> bool:
        """DENT per entry readdir gives (with . and ..; entries lstat fails on are left out), then DONE."""
        out = bytearray()
        try:
            names = [".", "..", *os.listdir(path)]
        except OSError:
            names = []
        for name in names:
            try:
                st = os.lstat(os.path.join(path, name))
            except OSError:
                continue
            raw = os.fsencode(name)
            fields = (st.st_mode, st.st_size, int(st.st_mtime), len(raw))
            out += b"DENT" + struct.pack("<IIII", *(f & 0xFFFFFFFF for f in fields)) + raw
        out += b"DONE" + bytes(16)
        return self.stream.write(bytes(out))

    def send(self, spec: str) -> bool:
        """`path,mode` then DATA... DONE(mtime): adbd's do_send_v1/send_impl/handle_send_file."""
        path, comma, mode_text = spec.rpartition(",")
        if not comma:
            return self.fail("missing , in ID_SEND_V1")
        try:
            mode = parse_c_integer(mode_text)
        except ValueError:
            return self.fail("bad mode")
        try:
            st_mode = os.lstat(path).st_mode
            do_unlink = stat.S_ISREG(st_mode) or (stat.S_ISLNK(st_mode) and not stat.S_ISLNK(mode))
        except OSError:
            do_unlink = True
        if do_unlink:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if stat.S_ISLNK(mode):
            return self.send_link(path)
        mode &= 0o777
        mode |= (mode >> 3) & 0o070  # the owner's bits to group and others
        mode |= (mode >> 3) & 0o007
        return self.send_file(path, mode, do_unlink)

    def send_file(self, path: str, mode: int, do_unlink: bool) -> bool:
        try:
            fd = create_file(path, mode)
        except OSError as e:
            return self.failed_send(path, f"couldn't create file: {os.strerror(e.errno or 0)}", do_unlink)
        try:
            os.fchmod(fd, mode)  # the umask must not narrow it
            mtime, size = self.receive_into(fd)
        except SyncFailure as e:
            return self.failed_send(path, e.reason, do_unlink)
        finally:
            os.close(fd)
        os.utime(path, (mtime, mtime), follow_symlinks=False)
        self.device.log(send=path, size=size, mode=oct(mode))  # logged before the OKAY: a test sees it at once
        return self.stream.write(b"OKAY" + struct.pack("<I", 0))

    def receive_into(self, fd: int) -> tuple[int, int]:
        """DATA chunks written to fd up to DONE: (the mtime DONE carries, the size)."""
        size = 0
        while True:
            head = self.reader.read_exact(8)
            if head is None:
                raise SyncFailure(None)
            kind, length = struct.unpack("<4sI", head)
            if kind == b"DONE":
                return length, size
            if kind != b"DATA":
                raise SyncFailure("invalid data message")
            if length > SYNC_DATA_MAX:
                raise SyncFailure("oversize data message")
            data = self.reader.read_exact(length)
            if data is None:
                raise SyncFailure(None)
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except OSError as e:
                raise SyncFailure(f"write failed: {os.strerror(e.errno or 0)}") from e
            size += length

    def failed_send(self, path: str, reason: str | None, do_unlink: bool) -> bool:
        """FAIL, then swallow DATA up to DONE as adbd does (old clients keep writing); the partial
        file is removed, also when the stream ended mid-push (reason None: nobody to tell)."""
        if reason is not None:
            self.fail(reason)
            while (head := self.reader.read_exact(8)) is not None:
                kind, length = struct.unpack("<4sI", head)
                if kind != b"DATA" or length > SYNC_DATA_MAX or self.reader.read_exact(length) is None:
                    break
        if do_unlink:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return False

    def send_link(self, path: str) -> bool:
        head = self.reader.read_exact(8)
        if head is None:
            return False
        kind, length = struct.unpack("<4sI", head)
        if kind != b"DATA" or length > SYNC_DATA_MAX:
            return self.fail("invalid data message: expected ID_DATA")
        target = self.reader.read_exact(length)
        done = self.reader.read_exact(8)
        if target is None or done is None:
            return False
        try:
            os.makedirs(os.path.dirname(path), 0o775, exist_ok=True)
            os.symlink(target.rstrip(b"\0"), path)
        except OSError as e:
            return self.fail(f"symlink failed: {os.strerror(e.errno or 0)}")
        if done[:4] != b"DONE":
            return self.fail("invalid data message: expected ID_DONE")
        mtime = struct.unpack("<I", done[4:])[0]
        os.utime(path, (mtime, mtime), follow_symlinks=False)
        self.device.log(send=path, size=len(target), mode="symlink")
        return self.stream.write(b"OKAY" + struct.pack("<I", 0))

    def recv(self, path: str) -> bool:
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError as e:
            return self.fail(f"open failed: {os.strerror(e.errno or 0)}")
        with f:
            while chunk := f.read(SYNC_DATA_MAX - 8):
                if not self.stream.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk):
                    return False
        self.device.log(recv=path)
        return self.stream.write(b"DONE" + struct.pack("<I", 0))


class SyncFailure(Exception):
    """A push that cannot go on: `reason` for the host's FAIL, None when the host is gone."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_c_integer(text: str) -> int:
    """strtoul(text, 0): 0x hex, leading 0 octal, else decimal."""
    text = text.strip()
    if text.lower().startswith("0x"):
        return int(text[2:], 16)
    if text.startswith("0") and len(text) > 1:
        return int(text[1:], 8)
    return int(text)


def create_file(path: str, mode: int) -> int:
    """open(O_CREAT|O_EXCL), making missing parents 0775 (adbd's secure_mkdirs); an existing one is reused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        return os.open(path, flags, mode)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), 0o775, exist_ok=True)
        return os.open(path, flags, mode)
    except FileExistsError:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC, mode)


# -- the device server ---------------------------------------------------------------------------
class Device:
    """The listening adbd: its connections, its mode, its log of what it was asked, its controls."""

    def __init__(self, mode: str, features: str, token: str, events: int, port: int = 0) -> None:
        self.mode = mode
        self.features = features
        self.token = token
        self.events = events  # fd of the JSON-lines log on the host
        self.lock = threading.Lock()
        self.connections: set[Connection] = set()
        self.drop_marker: bytes | None = None
        self.server = socket.create_server(("127.0.0.1", port))
        self.port = self.server.getsockname()[1]

    def serve_forever(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.log(connect=sock.getpeername()[1])
            conn = Connection(self, sock)
            with self.lock:
                self.connections.add(conn)
            threading.Thread(target=conn.serve, daemon=True).start()

    def forget(self, conn: Connection) -> None:
        with self.lock:
            self.connections.discard(conn)

    def drop(self) -> None:
        with self.lock:
            connections = list(self.connections)
        # Logged first: a client that sees the cut may read the events before the loop ends.
        self.log(drop=len(connections))
        for conn in connections:
            conn.drop()

    def watch_output(self, tail: bytes, data: bytes) -> bytes:
        """Drop every connection once stdout shows the armed marker (once); returns the new tail."""
        marker = self.drop_marker
        if not marker:
            return b""
        window = tail + data
        if marker in window:
            self.drop_marker = None
            self.drop()
            return b""
        return window[-(len(marker) - 1) :] if len(marker) > 1 else b""

    def environment(self, term: str | None) -> dict[str, str]:
        """adbd's additions to its own environment (shell_service.cpp), plus our marker."""
        env = {
            "PATH": DEVICE_PATH,
            "HOME": "/",
            "HOSTNAME": "standin",
            "LOGNAME": "shell",
            "USER": "shell",
            "SHELL": DEVICE_SHELL,
            "TMPDIR": "/data/local/tmp",
            "ANDROID_DATA": "/data",
            "ANDROID_ROOT": "/system",
            MARKER: self.token,
        }
        if term:
            env["TERM"] = term
        return env

    def log(self, **event: object) -> None:
        line = json.dumps(event) + "\n"
        with self.lock:
            os.write(self.events, line.encode())

    def control(self, line: str) -> str:
        """One command from the host side (a line on stdin); the answer is a line on stdout."""
        verb, _, arg = line.strip().partition(" ")
        if verb == "drop":
            self.drop()
        elif verb == "drop-after-output":
            self.drop_marker = bytes.fromhex(arg)
        elif verb == "mode" and arg in MODES:
            self.mode = arg
            with self.lock:
                waiting = [c for c in self.connections if not c.online and c.host_max is not None]
            for conn in waiting:  # a device that was silent (or unauthorized) answers now
                conn.handshake()
        else:
            return f"error unknown control {line.strip()!r}"
        return "ok"


def build_root(root: Path) -> None:
    """The device's file system in `root` (in our private mount namespace): the host's system
    read-only, its own /data/local/tmp, /sdcard and /tmp, and /system/bin/sh."""
    script = ["set -e"]  # one shell for all the mounts: a process each would cost ~20 ms
    for name in (*READ_ONLY_BINDS, *BINDS):
        target = shlex.quote(str(root / name))
        script += [f"mkdir -p {target}", f"mount --rbind /{name} {target}"]
        if name in READ_ONLY_BINDS:
            script.append(f"mount -o remount,bind,ro {target}")
    subprocess.run(["sh", "-c", "\n".join(script)], check=True)
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink() and not (root / name).is_symlink():
            (root / name).symlink_to(os.readlink(host))
    for rel, mode in DEVICE_DIRS.items():
        (root / rel).mkdir(parents=True, exist_ok=True)
        os.chmod(root / rel, mode)
    (root / "system/bin").mkdir(parents=True, exist_ok=True)
    if not (root / "system/bin/sh").is_symlink():
        (root / "system/bin/sh").symlink_to("/bin/sh")


def register_binfmt() -> None:
    """A binfmt_misc of our own (one per user namespace since Linux 6.7), so aarch64 ELF files exec."""
    misc = Path("/proc/sys/fs/binfmt_misc")
    subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(misc)], check=True)
    for name, (magic, mask) in BINFMT.items():
        interpreter = shutil.which(name)
        if interpreter:
            (misc / "register").write_text(f":{name}:M::{magic}:{mask}:{interpreter}:F\n")


def serve(argv: list[str]) -> int:
    """Inside the namespace: build the device, chroot into it, listen, print the port, obey stdin."""
    opts = dict(zip(argv[::2], argv[1::2], strict=True))
    root = Path(opts["--root"])
    events = os.open(opts["--events"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    register_binfmt()
    build_root(root)
    # from here on Python's own files are out of reach: every module used is imported at the top
    os.chroot(root)
    os.chdir("/")
    mode, features = opts.get("--mode", "device"), opts.get("--features", FEATURES)
    device = Device(mode, features, opts["--token"], events, int(opts.get("--port", "0")))
    threading.Thread(target=device.serve_forever, daemon=True).start()
    print(f"port {device.port}", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        print(device.control(line), flush=True)
    return 0


# == host side: what the tests use ===============================================================
@dataclass
class DeviceProcess:
    pid: int
    args: str


class StandinDevice:
    """One stand-in device: its server runs in a namespace of its own, its files under `base`.

    `base/fs` is the device's "/": `data_dir` (`base/fs/data/local/tmp`) is the device's
    /data/local/tmp as the host sees it. `base/events.jsonl` logs what the device was asked
    (`opened()`, `pushes()`), `base/server.log` is the server's stderr. Controls: `drop()`,
    `drop_after_output(marker)`, `set_mode(mode)`; `processes()` lists what still runs.
    `features` is the banner's list: without shell_v2, adb falls back to `shell:` (v1).
    `stop()` then `start()` is a reboot: same port and serial, files kept, processes gone.
    """

    def __init__(self, base: Path, mode: str = "device", features: str = FEATURES) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.base = Path(base)
        self.mode = mode
        self.features = features
        self.token = secrets.token_hex(8)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.lock = threading.Lock()

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def fs(self) -> Path:
        return self.base / "fs"

    @property
    def data_dir(self) -> Path:
        return self.fs / "data/local/tmp"

    @property
    def events_file(self) -> Path:
        return self.base / "events.jsonl"

    def host_path(self, device_path: str) -> Path:
        """Where a device path is on the host (only under /data, /sdcard and /tmp is it the device's own)."""
        return self.fs / device_path.lstrip("/")

    def start(self, timeout: float = 10) -> StandinDevice:
        self.fs.mkdir(parents=True, exist_ok=True)
        self.events_file.touch()
        argv = ["unshare", "--user", "--map-root-user", "--mount", "--fork", "--kill-child"]
        argv += [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "--root", str(self.fs), "--mode", self.mode]
        argv += ["--features", self.features, "--token", self.token, "--events", str(self.events_file)]
        argv += ["--port", str(self.port)]  # 0 the first time; a restart keeps the port, so the serial
        with open(self.base / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True
            )
        line = self._readline(timeout)
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the stand-in device did not start: {(self.base / 'server.log').read_text()}")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        """End the server, then whatever the device still runs (orphans included)."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.proc = None
        self.kill_processes()

    def __enter__(self) -> StandinDevice:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- controls ------------------------------------------------------------------------
    def drop(self) -> None:
        """Cut the device's TCP connections now (the listener stays: the adb server reconnects)."""
        self._control("drop")

    def drop_after_output(self, marker: bytes) -> None:
        """Cut the connections as soon as a shell's stdout shows `marker` (after relaying that output); once."""
        self._control(f"drop-after-output {marker.hex()}")

    def set_mode(self, mode: str) -> None:
        """How the device answers a CNXN from now on. A connection not yet online is answered
        again at once (an offline device turned "device" comes online, as when adbd recovers);
        one online stays so until it is dropped (`set_mode("offline")`, then `drop()`: the
        server reconnects and the device stays offline)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self._control(f"mode {mode}")
        self.mode = mode

    def _control(self, line: str) -> None:
        if self.proc is None:
            raise RuntimeError("the stand-in device is not running")
        with self.lock:
            self.proc.stdin.write(f"{line}\n".encode())
            self.proc.stdin.flush()
            answer = self._readline(10)
        if answer != "ok":
            raise RuntimeError(f"stand-in device: {answer or 'no answer'}")

    def _readline(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().decode().strip() if ready else ""

    # -- observation ---------------------------------------------------------------------
    def events(self) -> list[dict]:
        """What the device did, in order: {"connect": the server's port} (a connection accepted),
        {"open": service}, {"send": path, "size", "mode"}, {"recv": path}, {"drop": connections}."""
        return [json.loads(line) for line in self.events_file.read_text().splitlines() if line]

    def opened(self) -> list[str]:
        """Every service string the host opened (shell commands, sync:, …)."""
        return [e["open"] for e in self.events() if "open" in e]

    def pushes(self) -> list[str]:
        """The device paths of completed pushes (sync SEND), in order."""
        return [e["send"] for e in self.events() if "send" in e]

    def processes(self) -> list[DeviceProcess]:
        """Live processes the device started (shells, their children, orphans), found by the
        marker in their environment; zombies are left out."""
        needle = f"{MARKER}={self.token}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                args = Path(f"/proc/{entry}/cmdline").read_bytes()
            except (OSError, IndexError):
                continue
            if needle in environ.split(b"\0") and state != "Z":
                found.append(DeviceProcess(int(entry), args.replace(b"\0", b" ").decode(errors="replace").strip()))
        return found

    def kill_processes(self, timeout: float = 5) -> None:
        """SIGKILL what the device still runs, polled until gone: the next test starts clean."""
        deadline = time.monotonic() + timeout
        while (procs := self.processes()) and time.monotonic() < deadline:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
            time.sleep(0.02)


def free_port() -> int:
    """An ephemeral port: never 5555-5585, which the adb server probes for emulators."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AdbServer:
    """A real `adb nodaemon server` on a free port, with HOME (and so ~/.android/adbkey) in `home`."""

    def __init__(self, home: Path, adb: str = "adb") -> None:
        self.home = Path(home)
        self.adb_path = shutil.which(adb) or adb
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment for adb clients (and adbutils) of this server."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ADB_", "ANDROID_"))}
        return {**env, "HOME": str(self.home), "ANDROID_ADB_SERVER_PORT": str(self.port)}

    def start(self, timeout: float = 10) -> AdbServer:
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        with open(self.home / "adb-server.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.adb_path, "-P", str(self.port), "nodaemon", "server"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"adb server exited: {(self.home / 'adb-server.log').read_text()}")
            with contextlib.suppress(OSError):
                self.query("host:version")
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("the adb server did not answer")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> AdbServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """`adb -P PORT args…`: text output captured, stdin /dev/null, 20 s timeout, unless kwargs say otherwise."""
        options = {"capture_output": True, "text": True, "timeout": 20, "env": self.env}
        if "input" not in kwargs:
            options["stdin"] = subprocess.DEVNULL
        return subprocess.run([self.adb_path, "-P", str(self.port), *args], **{**options, **kwargs})

    def query(self, request: str) -> str:
        """One host request of the smart-socket protocol, answered with OKAY and a length-prefixed string."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(f"{len(request):04x}{request}".encode())
            status = recv_exact(s, 4)
            if status != b"OKAY":
                raise OSError(f"adb server: {status!r} to {request}")
            length = recv_exact(s, 4)
            return recv_exact(s, int(length, 16)).decode() if length else ""

    def devices(self) -> dict[str, str]:
        """serial -> state ("device", "unauthorized", "offline", …), as `adb devices` lists them."""
        out = self.query("host:devices")
        return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)

    def wait_for(self, serial: str, state: str | None, timeout: float = 10) -> None:
        """Until the server lists serial in state (None: not at all)."""
        deadline = time.monotonic() + timeout
        while (now := self.devices().get(serial)) != state:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{serial} is {now or 'not listed'}, not {state or 'gone'}")
            time.sleep(0.02)

    def connect(self, device: StandinDevice, timeout: float = 10) -> None:
        """`adb connect` the device and wait until it is listed in its mode. The server's answer
        is not awaited: for a device that never answers CNXN it comes after adb's 10 s timeout
        ("failed to connect to …"), while the device is listed `offline` at once."""
        request = f"host:connect:{device.serial}"
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(f"{len(request):04x}{request}".encode())
            if recv_exact(s, 4) != b"OKAY":
                raise OSError(f"adb server refused {request}")
        self.wait_for(device.serial, device.mode, timeout)

    def disconnect(self, device: StandinDevice) -> None:
        self.run("disconnect", device.serial)


_unavailable: list[str | None] = []


def standin_unavailable() -> str | None:
    """Why a stand-in device cannot run here (a reason to skip with), or None."""
    if not _unavailable:
        _unavailable.append(_probe())
    return _unavailable[0]


def _probe() -> str | None:
    for tool in ("adb", "unshare", "setsid", "qemu-aarch64"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    mount = ["mount", "-t", "binfmt_misc", "binfmt_misc", "/proc/sys/fs/binfmt_misc"]
    trial = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "--fork", "--", *mount],
        capture_output=True,
        text=True,
    )
    if trial.returncode != 0:
        return f"no private binfmt_misc in a user namespace (Linux >= 6.7 needed): {trial.stderr.strip()}"
    return None


if __name__ == "__main__":
    # a phone's adbd does not inherit a hang-up ignored by whoever started the tests (nohup):
    # its shells' hang-up on a closed stream is what the tests check
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    sys.exit(serve(sys.argv[1:]))
