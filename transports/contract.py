"""What every transport hands the rest of the plugin, and nothing else.

The runner and the parser read these types; transports produce them. Keeping them
here (not in the parser, not in one transport) is what lets a transport be written
without importing the parser, and the parser judge a run without knowing how it got
there.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable
from dataclasses import dataclass

OnBytes = Callable[[bytes], None]


class InfrastructureError(Exception):
    """The device or the way to it failed (down, refused, dropped): not the test's fault."""

    retryable = False  # True: a fresh connection may well succeed (a dropped link)
    # True: it struck while the binary ran, so the binary itself may have caused it (killed
    # its parent, exhausted the device's memory): the runner asks the device's health
    # before it blames the device, and a rerun after it is flagged
    binary_started = False


class ConnectionLost(InfrastructureError):
    """The connection dropped mid-run: worth one more try on a fresh connection."""

    retryable = True


class CacheEntryLost(InfrastructureError):
    """A binary vanished from the device cache before it ran: pushed again on the retry."""

    retryable = True


@dataclass
class RunEnd:
    """How the program on the device ended, as the transport saw it."""

    exit_code: int | None = None  # None: the transport cannot know (e.g. a bare UART)
    signal: str | None = None  # "SIGSEGV"
    fault: str | None = None  # a CPU fault the bare-metal runtime or the emulator reported
    timed_out: float | None = None  # the timeout in seconds, when it struck
    duration: float = 0.0
    clock: str = ""  # which clock the timeout counted, when not the wall clock ("virtual time")

    def abnormal(self) -> str | None:
        if self.timed_out is not None:
            return f"timed out after {self.timed_out:g}s" + (f" of {self.clock}" if self.clock else "")
        if self.fault:
            return f"fault: {self.fault}"
        if self.signal:
            return f"crashed: killed by {self.signal}"
        return None


@dataclass(frozen=True)
class Deployed:
    """A binary as the device holds it."""

    path: str
    sha256: str
    pushed: bool | None  # False: the device already held this content; None: nothing to push
    cwd: str | None = None  # where the binary runs (its data files are there)
    env: tuple[tuple[str, str], ...] = ()  # set for the binary beside what the transport sets (a CTest test's)


@dataclass(frozen=True)
class Clock:
    """What a board's timing figures count: decides whether they repeat exactly.

    "virtual": an emulator's instruction-driven time (QEMU -icount, Renode): equal on
    every run; "cycles": a cycle counter on silicon; "wall": a Linux clock, shared with
    everything else the device runs."""

    kind: str = "wall"
    instruction_ns: float | None = None  # virtual ns per instruction, when kind is "virtual"

    @property
    def deterministic(self) -> bool:
        return self.kind == "virtual"


CLOCKS = ("virtual", "cycles", "wall")


def signal_name(num: int) -> str:
    try:
        return _signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def end_from_status(status: int) -> RunEnd:
    """A shell's exit status: 128+N is how `sh` (and adbd) report a death by signal N.

    Only for consoles that give nothing better (SSH has "exit-signal"; a local child has
    a negative returncode): a program that itself exits 139 reads as SIGSEGV there."""
    if 128 < status < 128 + 65:
        return RunEnd(exit_code=None, signal=signal_name(status - 128))
    return RunEnd(exit_code=status)
