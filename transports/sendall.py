"""Writing all of a program's input to a socket that another thread reads at the same time.

socket.sendall() takes its deadline from the socket's timeout when it starts, and the
reading thread sets that timeout before every read (0.1 s, or none at all): a device
that took longer to read the input cut it off mid-write, a frame half sent. So the input
goes in pieces, each as much as the socket takes without waiting, for as long as the
stream is open.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable

PIECE = 65536  # at most, a send: it takes what fits, never waiting (MSG_DONTWAIT)
WRITABLE_WAIT_S = 0.25  # between two looks at whether the stream was closed


def send_all(sock: socket.socket, data: bytes | memoryview, closed: Callable[[], bool]) -> None:
    """Every byte, however slowly the far end reads; OSError once closed() is true (the
    program ended, or the run was closed) before they all went."""
    view = memoryview(data).cast("B")
    writable: select.poll | None = None
    while view:
        try:
            view = view[sock.send(view[:PIECE], socket.MSG_DONTWAIT) :]
            continue
        except (BlockingIOError, InterruptedError, TimeoutError):
            pass
        if closed():
            raise OSError("the stream closed before the input was all written")
        if writable is None:  # not select(): it refuses a descriptor numbered 1024 or more
            writable = select.poll()
            writable.register(sock, select.POLLOUT)
        writable.poll(WRITABLE_WAIT_S * 1000)
