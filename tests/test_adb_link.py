"""The ADB transport's link to the adb server, without a device: how its streams are read
(test_adb.py runs it all against the stand-in)."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from pytest_ondevice.transports import adb


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


@pytest.mark.skipif(adb.QUICKACK is None, reason="no TCP_QUICKACK here")
def test_every_read_of_a_stream_acknowledges_at_once():
    """The adb server writes a stream's packets with Nagle on, and Linux delays the ACKs of a
    long-lived stream (the keeper's): a reply in two packets waited 40 ms for the second.
    Each read asks the kernel to acknowledge at once."""
    ours, theirs = tcp_pair()
    sock = Recording(ours)
    stream = adb.ShellV2(SimpleNamespace(conn=sock, close=ours.close), "adb:test")
    with theirs:
        theirs.sendall(adb.HEADER.pack(adb.STDOUT, 6) + b"hello\n")
        assert stream.read(5) == b"hello\n"
        theirs.sendall(adb.HEADER.pack(adb.EXIT, 1) + b"\x03")
        while stream.poll() is None:
            stream.wait(5)
    assert stream.poll().exit_code == 3
    reads = [i for i, call in enumerate(sock.calls) if call == ("recv",)]
    assert reads
    for i in reads:
        assert sock.calls[i - 1] == ("setsockopt", socket.IPPROTO_TCP, adb.QUICKACK, 1), sock.calls
