"""What a scripted test holds: one leased device of a board and its open transport.

The lease, the transport and the build store are the session's (the same a test binary
uses); this object adds what a script does with them: build a program for the board,
deploy or flash it, run commands, talk to programs through pexpect's API, copy files.
Everything it starts ends when the test does.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..compiling import toolchain
from ..compiling.builder import Artifact, BuildError
from ..config.board import Board, Memory
from ..config.schema import ConfigError
from ..farm.fleet import Device as FleetDevice
from ..transports import Clock, Deployed, InfrastructureError, Interactive, Transport
from ..transports.runloop import drive
from .console import Console, returncode
from .testlog import TestLog

if TYPE_CHECKING:
    from ..run.engine import Engine

SOURCE_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".S", ".s"}
OUTPUT_KEPT = 16 << 20  # of one device.run()'s stdout in memory, by default: its first and last halves
INPUT_GONE_S = 10.0  # for the input's writer to see the program closed


class SetupError(Exception):
    """What the project's configuration or the machine lacks (an ondevice.toml mistake, a
    missing compiler): the test's item is an error naming it, as a C case's is, never a
    failure with a traceback of our plumbing."""


class BuildFailed(AssertionError):
    """A program the test builds did not compile: the test's own code, so a failure."""


class OutputDropped(UserWarning):
    """device.run() left the middle of a program's stdout out (beyond max_output): said
    where the test looks, since a cut made in silence reads as the program's own output."""


class RunResult(subprocess.CompletedProcess):
    """subprocess.CompletedProcess, and `dropped`: the bytes of stdout left out (0: none)."""

    def __init__(self, args: Any, returncode: int, stdout: Any, stderr: Any, dropped: int = 0) -> None:
        super().__init__(args, returncode, stdout, stderr)
        self.dropped = dropped

    def __repr__(self) -> str:
        base = super().__repr__()
        return f"{base[:-1]}, dropped={self.dropped})" if self.dropped else base


class _Kept:
    """A program's stdout within `limit` bytes: its head and its tail (where a program says
    how it ended), and how much was left out between them. None: all of it."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if self.limit is None:
            self.head += data
            return
        room = (self.limit + 1) // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > 2 * self._tail_size() + (1 << 16):  # trimmed now and then, not on every read
            self._trim()

    def _tail_size(self) -> int:
        return 0 if self.limit is None else self.limit - (self.limit + 1) // 2

    def _trim(self) -> None:
        del self.tail[: max(0, len(self.tail) - self._tail_size())]

    def dropped(self) -> int:
        self._trim()
        return self.total - len(self.head) - len(self.tail)

    def output(self, cut_note: str) -> bytes:
        """Head and tail, with a line saying what was left out between them."""
        dropped = self.dropped()
        if not dropped:
            return bytes(self.head + self.tail)
        return bytes(self.head) + cut_note.encode() + bytes(self.tail)


class Device:
    """One device of `board`, leased for one test (see the module's docstring)."""

    def __init__(
        self,
        session: Engine,
        board: Board,
        device: FleetDevice,
        transport: Transport,
        log: TestLog,
        here: Path | None = None,
    ) -> None:
        self.board = board
        self.name = device.name  # the fleet's name of the device ("pi-3"), the board's own otherwise
        self.tags = device.tags
        self._device = device
        self._here = here or session.settings.rootdir  # the test file's directory
        self.log = log
        self._session = session
        self._transport = transport
        self._programs: list[Console] = []
        self._console: Console | None = None
        self._firmware: Deployed | None = None
        self._count = 0

    def __repr__(self) -> str:
        return f"<Device {self.where}>"

    @property
    def where(self) -> str:
        return self.board.name if self.name == self.board.name else f"{self.board.name}@{self.name}"

    # -- what the board file says ------------------------------------------------------------
    @property
    def kind(self) -> str:
        """What the board runs: "linux", "android", "baremetal" or "host"."""
        return self.board.kind

    @property
    def clock(self) -> Clock:
        """What timing figures count here ("virtual" under QEMU's icount: exact on every run)."""
        return self._session.devices.clock_for(self.board, self._device)

    @property
    def clock_hz(self) -> int | None:
        return self.board.clock_hz

    @property
    def memory(self) -> Memory:
        """The board's flash and RAM sizes and its stack, in bytes (None: not stated)."""
        return self.board.memory

    # -- programs for the board ---------------------------------------------------------------
    def build(self, source: str | os.PathLike[str]) -> Artifact:
        """A C/C++ source built for the board (its toolchain, flags and runtime) through the
        build store: built once per content, reused while nothing it reads changes."""
        path = self._source(source)
        try:
            return self._session.build_source(self.board, path)
        except BuildError as e:
            raise BuildFailed(f"{self.where}: {path} did not build:\n{e}") from None
        except (toolchain.ToolchainError, ConfigError) as e:
            raise SetupError(str(e)) from None

    def deploy(self, program: Artifact | str | os.PathLike[str]) -> Deployed:
        """The program put on the device (a source is built first): pushed through the device
        cache, so content the device already holds is not sent again."""
        artifact = self._artifact(program)
        deployed = self._transport.deploy(artifact.path, artifact.sha256)
        how = {True: "pushed", False: "already on the device", None: "in place"}[deployed.pushed]
        self.log.note(f"deployed {artifact.path.name} ({artifact.sha256[:12]}): {how}")
        return deployed

    def flash(self, firmware: Artifact | str | os.PathLike[str]) -> Console:
        """Load a firmware and start it; its console is `device.console` (and the result).

        A Linux board has no firmware to flash: there, deploy() and start() a program."""
        if self.board.kind != "baremetal":
            raise InfrastructureError(
                f"{self.where} runs Linux: deploy() a program and start() or run() it (flash() is for bare metal)"
            )
        self._firmware = self.deploy(firmware)
        return self._boot()

    def reset(self) -> Console:
        """Start the flashed firmware again from its reset vector (a fresh console)."""
        if self._firmware is None:
            raise InfrastructureError(f"{self.where}: reset() before flash(): nothing to restart")
        return self._boot()

    def _boot(self) -> Console:
        if self._console is not None:
            self._end(self._console)
        assert self._firmware is not None
        self.log.note(f"started the firmware {Path(self._firmware.path).name}")
        self._console = self._start(self._firmware, [], "console", timeout=30)
        return self._console

    @property
    def console(self) -> Console:
        """The board's console: the flashed firmware's (bare metal), or a shell (Linux)."""
        if self._console is None or self._console.closed:
            if self.board.kind == "baremetal":
                raise InfrastructureError(
                    f"{self.where}: the console of a bare-metal board is its firmware's: flash() one first"
                )
            self.log.note("opened a shell")
            self._console = self._start(None, ["sh"], "console", timeout=30)
        return self._console

    def start(
        self,
        args: Sequence[Any],
        timeout: float = 30,
        encoding: str | None = "utf-8",
    ) -> Console:
        """A program (args[0]: a command on the device, or an artifact/source/local binary,
        deployed first) that the test talks to: `expect`, `sendline`, `before`, `wait()`."""
        deployed, rest = self._split(args)
        shown = _shown(deployed, rest)
        self.log.note(f"started: {shown}")
        return self._start(deployed, rest, shown, timeout, encoding)

    def run(
        self,
        args: Sequence[Any],
        timeout: float = 60,
        input: str | bytes | None = None,
        check: bool = False,
        text: bool = True,
        max_output: int | None = OUTPUT_KEPT,
    ) -> RunResult:
        """Run to the end, as subprocess.run() does (returncode, stdout, stderr; -N for a
        signal; TimeoutExpired with what arrived; check=True raises CalledProcessError).
        Of stdout, max_output bytes are kept in memory (None: all): beyond it, its first and
        last halves, a line between them saying how much was left out, `dropped` on the
        result and an OutputDropped warning."""
        if max_output is not None and (not isinstance(max_output, int) or max_output < 0):
            raise ValueError(f"max_output must be a number of bytes (0 or more) or None, not {max_output!r}")
        deployed, rest = self._split(args)
        shown = _shown(deployed, rest)
        self.log.note(f"$ {shown}")
        label = self._label(shown)
        feed = self.log.stream(label)
        kept = _Kept(max_output)

        def on_bytes(data: bytes) -> None:
            feed(data)
            kept.add(data)

        data = _input_bytes(input)  # a wrong type is the test's error, raised here, not in the writer
        process = self._transport.spawn(deployed, rest)
        feeding = None
        try:
            feeding = _feed(process, data)
            end = drive(process, timeout, on_bytes, self._transport.stop, process.kill)
            err = process.errors()
        finally:
            process.close()
            feed(b"")
            if feeding is not None:
                feeding.join(INPUT_GONE_S)  # closed and ended: a blocked write has failed by now
                if feeding.is_alive():
                    self.log.note(f"{shown}: its input was still being written {INPUT_GONE_S:g} s after it ended")
        if err:
            self.log.stream(f"{label} stderr")(err + b"\n")
        out = kept.output(self._dropped_note(shown, kept))
        stdout, stderr = (out.decode("utf-8", "replace"), err.decode("utf-8", "replace")) if text else (out, err)
        if end.timed_out is not None:
            raise subprocess.TimeoutExpired(shown, timeout, output=stdout, stderr=stderr)
        code = returncode(end)
        self.log.note(f"{shown}: {end.abnormal() or f'exit {code}'}")
        dropped = kept.dropped()
        result = RunResult(list(map(str, args)), code if code is not None else -1, stdout, stderr, dropped)
        if check:
            result.check_returncode()
        return result

    def _dropped_note(self, shown: str, kept: _Kept) -> str:
        """The line put where stdout was cut, also said as a warning and in the device log."""
        if not kept.dropped():
            return ""
        what = (
            f"device.run: {shown}: {kept.dropped():,} of {kept.total:,} bytes of stdout left out in the "
            f"middle (kept: the first {len(kept.head):,} and the last {len(kept.tail):,}, max_output={kept.limit}; "
            "device.run(..., max_output=N) raises the bound, max_output=None lifts it)"
        )
        self.log.note(what)
        warnings.warn(OutputDropped(what), stacklevel=3)  # at the test's call of run()
        return f"\n[pytest-ondevice: {what}]\n"

    # -- files ---------------------------------------------------------------------------------
    def push(self, local: str | os.PathLike[str], remote: str | None = None) -> str:
        """Copy a file to the device (remote relative to the test's working directory there,
        where run() and start() run); the path it has on the device."""
        path = Path(local)
        target = self._transport.push(path, remote or path.name)
        self.log.note(f"pushed {path} to {target}")
        return target

    def pull(self, remote: str, local: str | os.PathLike[str]) -> Path:
        """Copy a file from the device (remote as push() takes it); the local path."""
        path = Path(local)
        self._transport.pull(remote, path)
        self.log.note(f"pulled {remote} to {path}")
        return path

    # -- the end of the test ------------------------------------------------------------------
    def close(self) -> None:
        """Everything the test started ends (however the test ended)."""
        for program in self._programs:
            self._end(program)
        self._programs.clear()
        self._console = None

    # -- helpers ------------------------------------------------------------------------------
    def _start(
        self, deployed: Deployed | None, args: list[str], shown: str, timeout: float, encoding: str | None = "utf-8"
    ) -> Console:
        process = self._transport.spawn(deployed, args)
        label = self._label(shown)
        console = Console(
            process, f"{self.where}: {shown}", self.log.stream(label), self._transport.stop, timeout, encoding
        )
        self._programs.append(console)
        return console

    def _end(self, console: Console) -> None:
        console.close()
        end = console.end
        what = end.abnormal() or f"exit {end.exit_code}" if end is not None else "closed"
        self.log.note(f"{console.what}: {what}")

    def _label(self, shown: str) -> str:
        self._count += 1
        word = shown.split(" ", 1)[0].rsplit("/", 1)[-1][:24] or "program"
        return f"{word}#{self._count}"

    def _split(self, args: Sequence[Any]) -> tuple[Deployed | None, list[str]]:
        if not args:
            raise ValueError("an empty command")
        first, rest = args[0], [str(a) for a in args[1:]]
        if isinstance(first, (Artifact, Path)):
            return self.deploy(first), rest
        return None, [str(first), *rest]

    def _source(self, source: str | os.PathLike[str]) -> Path:
        """A relative path is the test file's neighbour, else the project's (the rootdir's)."""
        path = Path(source)
        places = [path] if path.is_absolute() else [self._here / path, self._session.settings.rootdir / path]
        for place in places:
            if place.is_file():
                return place
        raise FileNotFoundError(f"{source}: no such file ({' nor '.join(map(str, dict.fromkeys(places)))})")

    def _artifact(self, program: Artifact | str | os.PathLike[str]) -> Artifact:
        if isinstance(program, Artifact):
            return program
        path = self._source(program)
        if path.suffix in SOURCE_SUFFIXES:
            return self.build(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()  # a prebuilt image: its content is its name
        return Artifact(path, digest)


def _input_bytes(input: str | bytes | None) -> bytes | None:
    if input is None or isinstance(input, bytes):
        return input
    if isinstance(input, bytearray | memoryview):
        return bytes(input)  # its bytes, whatever its item format: a frame's length counts bytes
    if isinstance(input, str):
        return input.encode()
    raise TypeError(f"input must be str or bytes, not {type(input).__name__}")


def _feed(process: Interactive, data: bytes | None) -> threading.Thread | None:
    """The input, written while the output is read, as subprocess.run() does: a program that
    answers as it reads (cat, a filter) stops reading once its own output is not read, so
    writing all the input first waited for good beyond a pipe's or a channel's buffer."""
    if not data:
        process.close_input()
        return None

    def write() -> None:
        # cut short by the program's end (it read no more), its close (a file closed under
        # the write) or a lost link: how the run ended says which, as the reading side sees it
        with contextlib.suppress(InfrastructureError, OSError, ValueError):
            process.write(data)
        with contextlib.suppress(InfrastructureError, OSError, ValueError):
            process.close_input()

    thread = threading.Thread(target=write, name="ondevice-input", daemon=True)
    thread.start()
    return thread


def _shown(deployed: Deployed | None, args: list[str]) -> str:
    return shlex.join([Path(deployed.path).name, *args] if deployed else args)
