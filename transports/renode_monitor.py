"""A client of Renode's monitor: the telnet-style command line on its `--port`.

Renode's monitor speaks telnet (a negotiation preamble on connect), echoes every
character it receives, ends lines irregularly (`\\n\\r`, `\\r\\n\\r`, `\\r\\n`) and
prints a prompt such as `(monitor) ` or `(machine-0) ` when it is ready for the
next command. So answers are read up to the prompt, never by line ending.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time

IAC, SB, SE = 0xFF, 0xFA, 0xF0
PROMPT = re.compile(r"\(([^()\r\n]+)\) $")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Renode's own texts for a command it refused (renode-infrastructure, AntShell)
ERRORS = (
    "No such command or device",
    "There was an error executing command",
    "Parameters did not match the signature",
    "Cannot load ELF",
    "Could not find file",
    "Could not tokenize",
    "not found.",
    "does not exist",
)
MAX_ANSWER = 1 << 20


class MonitorError(Exception):
    """Renode refused a command; the message quotes its answer."""


class MonitorGone(Exception):
    """The monitor connection closed or stopped answering: Renode is gone."""


class RenodeMonitor:
    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.where = f"{host}:{port}"
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise MonitorGone(f"cannot connect to the Renode monitor at {self.where}: {e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._pending = b""
        self.banner = self._read_to_prompt(timeout)

    def command(self, line: str, timeout: float | None = None) -> str:
        """Send one command; return Renode's answer (echo and prompt removed)."""
        try:
            self.sock.sendall(line.encode() + b"\n")  # \r and \n each count as Enter: send one
        except OSError as e:
            raise MonitorGone(f"Renode monitor at {self.where} closed: {e}") from None
        answer = _strip_echo(self._read_to_prompt(timeout or self.timeout), line)
        refused = [x for x in answer.splitlines() if any(err in x for err in ERRORS)]
        if refused:
            raise MonitorError(f"Renode refused `{line}`: {' / '.join(refused)}")
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _read_to_prompt(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while True:
            match = PROMPT.search(text)
            if match:
                self.prompt = match.group(1)
                return text[: match.start()]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MonitorGone(f"Renode monitor at {self.where}: no prompt within {timeout:g}s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as e:
                raise MonitorGone(f"Renode monitor at {self.where} closed: {e}") from None
            if not data:
                raise MonitorGone(f"Renode monitor at {self.where} closed the connection")
            chunk, self._pending = _strip_telnet(self._pending + data)
            text = (text + ANSI.sub("", chunk.decode("utf-8", errors="replace")))[-MAX_ANSWER:]


def _strip_telnet(data: bytes) -> tuple[bytes, bytes]:
    """Drop telnet commands (IAC ...); return the text and an incomplete tail to keep."""
    out = bytearray()
    i = 0
    while i < len(data):
        b = data[i]
        if b != IAC:
            out.append(b)
            i += 1
            continue
        if i + 1 >= len(data):
            return bytes(out), data[i:]
        op = data[i + 1]
        if op == IAC:  # an escaped 0xFF
            out.append(IAC)
            i += 2
        elif op == SB:  # subnegotiation, up to IAC SE
            end = data.find(bytes([IAC, SE]), i + 2)
            if end < 0:
                return bytes(out), data[i:]
            i = end + 2
        elif 0xFB <= op <= 0xFE:  # WILL, WONT, DO, DONT + option
            if i + 2 >= len(data):
                return bytes(out), data[i:]
            i += 3
        else:
            i += 2
    return bytes(out), b""


def _strip_echo(answer: str, line: str) -> str:
    lines = [x.strip() for x in re.split(r"[\r\n]+", answer)]
    lines = [x for x in lines if x]
    if lines and lines[0] == line.strip():
        lines = lines[1:]
    return "\n".join(lines)
