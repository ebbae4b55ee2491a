"""The ADB transport's link to the adb server, without a device: how its streams are read
and how its kept sync streams are reused (test_adb.py runs it all against the stand-in)."""

from __future__ import annotations

import socket
import struct
import threading
from types import SimpleNamespace

import pytest
from pytest_ondevice.transports import adb_wire


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    return ours, theirs


class Recording:
    """A socket that notes the calls a stream makes on it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.calls: list[tuple] = []

    def setsockopt(self, *args: int) -> None:
        self.calls.append(("setsockopt", *args))
        self.sock.setsockopt(*args)

    def recv(self, size: int) -> bytes:
        self.calls.append(("recv",))
        return self.sock.recv(size)

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


@pytest.mark.skipif(adb_wire.QUICKACK is None, reason="no TCP_QUICKACK here")
def test_every_read_of_a_stream_acknowledges_at_once():
    """The adb server writes a stream's packets with Nagle on, and Linux delays the ACKs of a
    long-lived stream (the keeper's): a reply in two packets waited 40 ms for the second.
    Each read asks the kernel to acknowledge at once."""
    ours, theirs = tcp_pair()
    sock = Recording(ours)
    stream = adb_wire.ShellV2(SimpleNamespace(conn=sock, close=ours.close), "adb:test")
    with theirs:
        theirs.sendall(adb_wire.HEADER.pack(adb_wire.STDOUT, 6) + b"hello\n")
        assert stream.read(5) == b"hello\n"
        theirs.sendall(adb_wire.HEADER.pack(adb_wire.EXIT, 1) + b"\x03")
        while stream.poll() is None:
            stream.wait(5)
    assert stream.poll().exit_code == 3
    reads = [i for i, call in enumerate(sock.calls) if call == ("recv",)]
    assert reads
    for i in reads:
        assert sock.calls[i - 1] == ("setsockopt", socket.IPPROTO_TCP, adb_wire.QUICKACK, 1), sock.calls


class FakeSync:
    """adbd's sync service, just SEND and STAT, on the far end of each stream a test opens."""

    def __init__(self) -> None:
        self.opened: list[socket.socket] = []
        self.received: dict[str, bytes] = {}

    def open_transport(self, timeout: float) -> SimpleNamespace:
        ours, theirs = tcp_pair()
        self.opened.append(theirs)
        threading.Thread(target=self._serve, args=(theirs,), daemon=True).start()
        return SimpleNamespace(conn=ours, send_command=lambda cmd: None, check_okay=lambda: None, close=ours.close)

    def _serve(self, sock: socket.socket) -> None:
        def read(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                if not chunk:
                    raise EOFError
                data += chunk
            return data

        try:
            while True:
                kind, length = adb_wire.SYNC.unpack(read(8))
                path = read(length).decode()
                if kind == b"STAT":
                    size = len(self.received.get(path, b""))
                    sock.sendall(b"STAT" + struct.pack("<III", 0o100600, size, 0))
                    continue
                name, body = path.rsplit(",", 1)[0], b""
                while (head := adb_wire.SYNC.unpack(read(8)))[0] == b"DATA":
                    body += read(head[1])
                self.received[name] = body
                sock.sendall(adb_wire.SYNC.pack(b"OKAY", 0))
        except (EOFError, OSError):
            sock.close()


def test_pushes_reuse_a_kept_sync_stream_and_a_closed_one_is_replaced(tmp_path):
    device = FakeSync()
    transport = SimpleNamespace(syncs=adb_wire.SyncPool(device, timeout=5))
    fs = adb_wire.AdbFs(transport)
    local = tmp_path / "binary"
    local.write_bytes(bytes(range(256)) * 600)  # three DATA packets
    fs.put(str(local), "/data/local/tmp/a")
    fs.put(str(local), "/data/local/tmp/b")
    assert len(device.opened) == 1  # one stream for both
    device.opened[0].shutdown(socket.SHUT_RDWR)  # the device ends the kept stream meanwhile
    fs.put(str(local), "/data/local/tmp/c")  # on a new one, not an error
    assert len(device.opened) == 2
    assert device.received == {f"/data/local/tmp/{n}": local.read_bytes() for n in "abc"}
    transport.syncs.close()
