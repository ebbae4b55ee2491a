"""Transports: how a built binary reaches a device and runs there.

A transport is two parts behind one small interface: a **loader** (how the binary
gets there: nothing, SFTP, adb push, Renode's LoadELF, a flash probe) and a
**console** (how its output and its end come back: process pipes, SSH exec, adb
shell, a UART). Most transports are both; a board file may take the loader of one
and the console of another (`loader = "..."`, `console = "..."` in [transport])
without a new class.

Every transport, ours included, registers through the `pytest_ondevice.transports`
entry-point group and declares its board-file options (types, defaults, ini keys)
and the `--device` forms it accepts, so the core names none of them. Importing a
transport module must stay cheap: libraries it drives are imported in open().
"""

from __future__ import annotations

import difflib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pytest_ondevice.config import own_metadata

from .contract import (
    CacheEntryLost,
    Clock,
    ConnectionLost,
    Deployed,
    InfrastructureError,
    OnBytes,
    RunEnd,
)
from .runloop import Interactive

__all__ = [
    "CacheEntryLost",
    "Clock",
    "ConnectionLost",
    "Deployed",
    "InfrastructureError",
    "Interactive",
    "OnBytes",
    "Option",
    "RunEnd",
    "Transport",
]

GROUP = "pytest_ondevice.transports"


@dataclass(frozen=True)
class Option:
    """One key a transport reads from its board table.

    kind: a schema type (str, int, float, bool, list, "seconds", "table", or a tuple of
    allowed strings); ini: the pytest ini option that may set it for a whole project
    (a "path" ini value is relative to the rootdir)."""

    kind: Any
    default: Any = None
    help: str = ""
    ini: str | None = None
    ini_kind: str = "string"  # "string", "bool" or "path"


COMMON = {
    "name": Option(str, help="the transport"),
    "loader": Option(str, help="take the loader (how the binary gets there) from this transport"),
    "console": Option(str, help="take the console (how output and the end come back) from this transport"),
    "device_jobs": Option(int, 1, "binaries the device runs at once"),
}


class Transport(ABC):
    """Open once per session, deploy and run many binaries, close at the end.

    The loader side is deploy()/prefetch()/start(); the console side is run()."""

    name: str = ""
    # On the class, the board-file keys it reads (an Option each), beside COMMON; on an
    # instance, their values (__init__ sets them over the class's): hence Any, not Option
    options: dict[str, Any] = {}
    device_forms: tuple[str, ...] = ()  # how --device names a device, for help texts ("adb:SERIAL")
    # Whether runs are queued on a thread of their own while pytest reports (the device works
    # meanwhile). Not worth it for a local process that ends in a millisecond: the two threads
    # hand the interpreter lock back and forth at each of the run's system calls, which costs
    # more than the overlap gains (1,000 host cases: 21,000 futex calls, gone when not ahead).
    runs_ahead: bool = True
    # Whether the binary runs on this machine's file system (a process here): a CMake
    # project's test then runs in its own working directory, as CTest runs it
    runs_here: bool = False

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        self.board = board
        self.device = device
        # --ondevice-coverage: (GCOV_PREFIX_STRIP for the binaries, the local directory their
        # counts are brought back to); a transport whose device writes files elsewhere than
        # this machine brings its .gcda files back there when it closes
        self.coverage: tuple[int, Path] | None = None
        # where scratch on this machine goes (a local run's cwd): the run's own dir, which
        # whoever made the run removes, even after this process was killed (an xdist worker)
        self.local_dir: Path | None = None
        self.options = {**{k: o.default for k, o in self.options.items() if o.default is not None}, **options}
        self.stop = threading.Event()  # set when the session ends: a running binary is ended

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        """One line for `pytest-ondevice boards`: can this transport be used here?"""
        return "ready"

    @classmethod
    def claims(cls, device: str) -> bool:
        """Whether `--device=DEVICE` names a device of this transport (an [emulator]
        table is used instead of the board's [transport] when its transport claims it)."""
        return False

    @classmethod
    def clock(cls, options: dict[str, Any]) -> Clock | None:
        """What timing figures count under this transport; None: the board's own clock."""
        return None

    @classmethod  # noqa: B027 - optional hook
    def import_libraries(cls) -> None:
        """Import what open() needs (paramiko, adbutils, pyOCD), on the calling thread.

        Called on the main thread just before open() starts in the background: an import
        is CPU work, and done in the background it would share the interpreter with
        collection, while the handshake after it, mostly waiting on the network, would
        then wait alone. A missing library is open()'s to report."""

    def open(self) -> None:  # noqa: B027 - optional hook
        """Connect; raise InfrastructureError when the device cannot be reached."""

    # -- loader ----------------------------------------------------------------------
    @abstractmethod
    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        """Put the binary (and the data files its test reads) where it can run."""

    def prefetch(self, artifact: Path, sha256: str) -> None:  # noqa: B027 - optional hook
        """Start moving a binary that will run soon, while the device runs the one before.

        Best effort: errors are the later deploy()'s to report. May be called from another
        thread than deploy() and run()."""

    def start(self, deployed: Deployed) -> None:
        """Make the deployed program begin, for a console that only listens (a UART)."""
        raise InfrastructureError(f"the {self.name} transport cannot start a program for another console")

    def attach_console(self, console: Transport) -> None:  # noqa: B027 - optional hook
        """Told which console will read the program (a loader may have to route output there)."""

    def stop_program(self) -> None:  # noqa: B027 - optional hook
        """End what start() started (after the console's run, however it ended)."""

    # -- console ---------------------------------------------------------------------
    @abstractmethod
    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        """Run to completion or timeout, streaming output to on_bytes as it arrives.

        start: given when another transport loaded the program and must start it once
        this console listens; None when this transport deployed it too."""

    def run_file(self, deployed: Deployed) -> str | None:
        """A fresh path on the device that the next run of deployed may write, for
        read_run_file() to bring back: a framework's own record of its verdicts reaches us
        there, on a channel the test's output does not share. None: cannot bring one back."""
        return None

    def read_run_file(self, path: str, limit: int) -> bytes | None:
        """The first limit bytes of what a run wrote at run_file()'s path (the file is
        removed); None when the run wrote no such file."""
        return None

    # -- scripted tests (the `device` fixture) -------------------------------------------
    def spawn(self, deployed: Deployed | None, args: list[str]) -> Interactive:
        """Start a program a test talks to: the deployed binary with args, or (deployed None)
        the command args as the device finds it (a Linux device's PATH; a bare-metal board
        has no such thing). Its output is the caller's to read; close() ends it."""
        raise InfrastructureError(f"the {self.name} transport cannot start a program for a scripted test")

    def listen(self, start: Callable[[], None], stop: Callable[[], None]) -> Interactive:
        """For a console that only listens (a UART): the program another transport starts
        (start(), once the console listens; stop() ends it), as spawn() gives one."""
        raise InfrastructureError(f"the {self.name} console cannot listen to a program another transport starts")

    def push(self, local: Path, remote: str) -> str:
        """Copy a file to the device (remote: relative to the session's working directory,
        where spawn() runs); the path it has there."""
        raise InfrastructureError(f"the {self.name} transport cannot copy files to the device")

    def pull(self, remote: str, local: Path) -> None:
        """Copy a file from the device (remote as push() takes it)."""
        raise InfrastructureError(f"the {self.name} transport cannot copy files from the device")

    def collect_counts(self) -> None:  # noqa: B027 - optional hook
        """--ondevice-coverage: bring the counts the device's binaries wrote back to
        self.coverage's directory (nothing to do where they run on this machine)."""

    def reopen(self) -> None:
        """Connect again after a dropped connection, cleaning up what the lost one left."""
        self.close()
        self.open()

    def healthy(self) -> bool | None:
        """Whether the device answers now (asked after an error that struck while a binary
        ran, to tell a device's fault from the binary's); None: this transport cannot tell."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the device; remove scratch files; never raise."""


class Combined(Transport):
    """One transport's loader with another's console (flash over SWD, read a UART)."""

    def __init__(self, loader: Transport, console: Transport) -> None:
        self.loader, self.console = loader, console
        super().__init__(loader.board, loader.device, {})
        self.name = f"{loader.name}+{console.name}"
        self.stop = loader.stop
        console.stop = loader.stop
        loader.attach_console(console)

    @property
    def local_dir(self) -> Path | None:
        return self.loader.local_dir

    @local_dir.setter
    def local_dir(self, where: Path | None) -> None:
        self.loader.local_dir = self.console.local_dir = where

    def open(self) -> None:
        self.loader.open()
        try:
            self.console.open()
        except BaseException:
            self.loader.close()
            raise

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        return self.loader.deploy(artifact, sha256, data)

    def prefetch(self, artifact: Path, sha256: str) -> None:
        self.loader.prefetch(artifact, sha256)

    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        try:
            return self.console.run(deployed, args, timeout, on_bytes, start or (lambda: self.loader.start(deployed)))
        finally:
            self.loader.stop_program()

    def spawn(self, deployed: Deployed | None, args: list[str]) -> Interactive:
        if deployed is None:
            raise InfrastructureError(
                f"{self.board.name} runs its firmware only (device.flash(...)), no command {args!r}"
            )
        return self.console.listen(lambda: self.loader.start(deployed), self.loader.stop_program)

    def collect_counts(self) -> None:
        self.loader.collect_counts()

    def reopen(self) -> None:
        self.loader.reopen()
        self.console.reopen()

    def healthy(self) -> bool | None:
        answers = [self.loader.healthy(), self.console.healthy()]
        return False if False in answers else (True if True in answers else None)

    def close(self) -> None:
        self.console.close()
        self.loader.close()


# -- the registry ---------------------------------------------------------------------
_loaded: dict[str, type[Transport]] = {}


_registered: dict[str, Any] | None = None
_ours: dict[str, Any] | None = None


def _entry_points() -> dict[str, Any]:
    """Name -> entry point, from one scan of every installed distribution (~10-15 ms)."""
    global _registered
    if _registered is None:
        _registered = {ep.name: ep for ep in entry_points(group=GROUP)}
    return _registered


def _our_entry_points() -> dict[str, Any]:
    """The transports this package registers: a run on one of them never pays for the
    scan of every distribution."""
    global _ours
    if _ours is None:
        _ours = {ep.name: ep for ep in own_metadata.entry_points(GROUP)}
    return _ours


def known() -> list[str]:
    return sorted(_entry_points())


def load(name: str) -> type[Transport]:
    """The transport class registered under `name`; InfrastructureError listing the known ones."""
    cls = _loaded.get(name)
    if cls is not None:
        return cls
    ep = _our_entry_points().get(name) or _entry_points().get(name)
    if ep is not None:
        try:
            cls = ep.load()
        except Exception as e:  # a broken third-party package: say which
            raise InfrastructureError(f"transport '{name}' ({ep.value}) cannot be loaded: {e}") from None
        _loaded[name] = cls
        return cls
    names = known()
    hint = difflib.get_close_matches(name, names, n=1)
    also = f" (did you mean '{hint[0]}'?)" if hint else ""
    raise InfrastructureError(f"unknown transport '{name}'{also}; known transports: {', '.join(names)}")


def parts(table: dict[str, Any]) -> tuple[type[Transport], type[Transport]]:
    """The classes giving a table's loader and console (the same one unless combined)."""
    main = load(table["name"])
    loader = load(table["loader"]) if table.get("loader") else main
    console = load(table["console"]) if table.get("console") else main
    return loader, console


def runs_ahead(table: dict[str, Any]) -> bool:
    """Whether a board table's runs are queued ahead (Transport.runs_ahead)."""
    return any(cls.runs_ahead for cls in parts(table))


def accepted(table: dict[str, Any]) -> dict[str, Option]:
    """Every key a board table for this transport (or combination) may hold."""
    out = dict(COMMON)
    for cls in {*parts(table), load(table["name"])}:
        out.update(cls.options)
    return out


def import_libraries(table: dict[str, Any]) -> None:
    """What a board table's transports need to open, imported now (Transport.import_libraries)."""
    for cls in dict.fromkeys(parts(table)):
        cls.import_libraries()


def create(
    board: Any,
    table: dict[str, Any],
    device: str | None,
    ini: Callable[[str, str], Any] = lambda n, k: None,
    console: str | None = None,
) -> Transport:
    """A ready-to-open transport for a board table; `ini(name, kind)` reads the project's
    ini; `console` ("uart:/dev/ttyUSB0@115200", from --console) replaces the table's console."""
    loader_cls, console_cls = parts(table)
    own = {k: v for k, v in table.items() if k not in ("name", "loader", "console")}

    def make(cls: type[Transport], where: str | None) -> Transport:
        values = {key: ini(o.ini, o.ini_kind) for key, o in cls.options.items() if o.ini}
        from_ini = {key: v for key, v in values.items() if v is not None}
        return cls(board, where, {**from_ini, **{k: v for k, v in own.items() if k in cls.options or k in COMMON}})

    if console:
        chosen = load(console.split(":", 1)[0])
        if not chosen.claims(console):
            raise InfrastructureError(f"--console={console}: expected {' or '.join(chosen.device_forms)}")
        return Combined(make(loader_cls, device), make(chosen, console))
    if loader_cls is console_cls:
        return make(loader_cls, device)
    return Combined(make(loader_cls, device), make(console_cls, device))


def clock_of(table: dict[str, Any]) -> Clock | None:
    _, console = parts(table)
    return console.clock({k: v for k, v in table.items() if k != "name"})


def declared_ini() -> dict[str, Option]:
    """The ini options of every installed transport (registered with pytest at start-up)."""
    out: dict[str, Option] = {}
    for name in known():
        try:
            cls = load(name)
        except InfrastructureError:
            continue  # reported when a board uses it
        for option in cls.options.values():
            if option.ini:
                out.setdefault(option.ini, option)
    return out


def status(table: dict[str, Any]) -> str:
    try:
        loader, console = parts(table)
    except InfrastructureError as e:
        return str(e)
    said = [c.status({k: v for k, v in table.items() if k != "name"}) for c in dict.fromkeys((loader, console))]
    return "; ".join(said)
