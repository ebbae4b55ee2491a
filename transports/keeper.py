"""One long `sh` per session on a Linux device, for any transport that can open a shell
with a stdin (an SSH exec channel, an adb shell v2 stream).

It runs our housekeeping commands one per line (no login shell parses them: fish and
nologin alike), and when its stdin ends — the session's end or a dropped link — it ends
every process of the session and removes the session dir: neither sshd nor adbd signals
a command whose connection went (see device_cache.KEEPER for the script itself).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
from typing import Protocol

from . import device_cache
from .contract import ConnectionLost, InfrastructureError

READ_SIZE = 65536

BOOT = "exec sh -c 'IFS= read -r ondevice_cmd && eval \"$ondevice_cmd\"'"
"""What the device's shell parses first (fish, bash, dash, zsh alike); the real command comes on stdin."""


class Channel(Protocol):
    """A byte pipe to a shell on the device: paramiko's Channel has exactly this."""

    def sendall(self, data: bytes) -> None: ...
    def recv(self, size: int) -> bytes: ...  # b"": closed; TimeoutError: nothing within the timeout
    def settimeout(self, seconds: float) -> None: ...
    def shutdown_write(self) -> None: ...


class Keeper:
    def __init__(self, channel: Channel, where: str) -> None:
        """The channel runs BOOT; send the keeper script and read its hello."""
        self.channel = channel
        self.where = where
        self.nonce = secrets.token_hex(6)
        self._buf = b""
        self._lock = threading.Lock()  # one command at a time: the answers share one stream

    def start(self) -> tuple[int, str] | None:
        """(uid, home) on the device, or None if the account cannot run sh commands."""
        with contextlib.suppress(OSError):  # a nologin shell may be gone already: what it said is read below
            self.channel.sendall((device_cache.KEEPER.replace("NONCE", self.nonce) + "\n").encode())
        try:
            line = self.line()
        except InfrastructureError:
            line = ""
        match = re.fullmatch(r"#ondevice-hello (\d+) (.*)", line)
        if not match:
            self.refusal = (line + self._buf.decode(errors="replace")).strip()
            return None
        return int(match.group(1)), match.group(2)

    def line(self) -> str:
        while b"\n" not in self._buf:
            try:
                data = self.channel.recv(READ_SIZE)
            except TimeoutError:
                raise ConnectionLost(f"{self.where}: the device stopped answering") from None
            if not data:
                raise ConnectionLost(f"{self.where}: connection lost")
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode(errors="replace")

    def exec(self, command: str) -> str:
        """A short housekeeping command; its failure is the device's, not the test's."""
        if "\n" in command:
            raise InfrastructureError(f"{self.where}: a name with a newline cannot be used on the device: {command!r}")
        with self._lock:
            try:
                self.channel.sendall(f"{{ {command}; }} </dev/null 2>&1\n".encode())
                lines = []
                while True:
                    line = self.line()
                    if line.startswith(f"#ondevice-done {self.nonce} "):
                        status = int(line.rsplit(" ", 1)[1])
                        break
                    lines.append(line)
            except InfrastructureError:
                raise
            except Exception as e:  # paramiko: SSHException or OSError on a dead link
                raise ConnectionLost(f"{self.where}: connection lost: {e}") from None
        out = "\n".join(lines[:-1] if lines and lines[-1] == "" else lines)
        if status != 0:
            raise InfrastructureError(f"{self.where}: `{command}` failed (exit {status}): {out.strip()}")
        return out

    def finish(self, timeout: float = 10.0) -> None:
        """EOF: the keeper ends this session's processes and removes its dir; wait for it."""
        self.channel.shutdown_write()
        self.channel.settimeout(timeout)
        while self.channel.recv(READ_SIZE):
            pass
