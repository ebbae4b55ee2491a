"""Where a run died, as addresses: read from the host runtime's `#ondevice crash` line or
from a bare-metal fault line's `pc=`/`lr=`, and kept for the case that was running.

The addresses mean nothing here: the failure text turns them into functions and
`file:line` with the binary's ELF (build/symbolize.py). The parser only reads them, bounded
and tolerant of garbage: a line a test printed can at worst decorate a crash that did happen
(a crash line counts only when the run ended by the signal it names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..transports.contract import RunEnd

MAX_FRAMES = 32  # the runtime sends as many; more are dropped
MAX_LINE = 1200  # characters of a crash line read: 32 frames of 18 characters and the registers
_SIGNAL = re.compile(r"SIG[A-Z0-9]{1,8}$")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{1,16}$")
_FAULT_REGISTER = re.compile(r"\b(pc|lr|ra)=(0x[0-9a-fA-F]{1,16})\b")


@dataclass(frozen=True)
class Crash:
    """A death in the code: the faulting pc, the return address in the link register, the
    callers' return addresses (innermost first) and, for a position-independent binary,
    where its ELF header was loaded. `case`: the case that was running (None: none was)."""

    how: str  # "SIGSEGV", or the fault's name ("UsageFault (INVSTATE)")
    pc: int | None = None
    lr: int | None = None
    frames: tuple[int, ...] = ()
    base: int | None = None  # the runtime address of the ELF header (None: as linked)
    case: str | None = None


def _address(text: str) -> int | None:
    return int(text, 16) if _ADDRESS.match(text) else None


def parse_crash_line(body: str) -> Crash | None:
    """`SIGNAL pc=0x.. [lr=0x..] [base=0x..] [frames=0x..,0x..]` (the text after
    `#ondevice crash`); None when it does not start with a signal's name."""
    words = body[:MAX_LINE].split()
    if not words or not _SIGNAL.match(words[0]):
        return None
    fields = dict(w.partition("=")[::2] for w in words[1:] if "=" in w)
    frames = []
    for text in fields.get("frames", "").split(",")[:MAX_FRAMES]:
        address = _address(text)
        if address is None:
            break
        frames.append(address)
    return Crash(
        words[0],
        pc=_address(fields.get("pc", "")),
        lr=_address(fields.get("lr", "")),
        frames=tuple(frames),
        base=_address(fields.get("base", "")),
    )


def from_fault(text: str) -> Crash | None:
    """A fault line's registers (`UsageFault (INVSTATE) pc=0x00000000 lr=0x080017e5 CFSR=...`;
    RISC-V's has no lr); None when it names no pc."""
    found = {name: int(value, 16) for name, value in _FAULT_REGISTER.findall(text[:MAX_LINE])}
    if "pc" not in found:
        return None
    how = text.split(" pc=", 1)[0].strip() or "fault"
    return Crash(how, pc=found["pc"], lr=found.get("lr", found.get("ra")))


class CrashWatch:
    """The last crash line of a run (a forked child's, a death test's, may come before it)."""

    def __init__(self) -> None:
        self.last: Crash | None = None

    def line(self, body: str) -> None:
        crash = parse_crash_line(body)
        if crash is not None:
            self.last = crash

    def of(self, end: RunEnd, running: str | None) -> Crash | None:
        """The crash that ended this run, with the case it struck in: a fault's registers,
        or the crash line of the signal the run died of."""
        if end.timed_out is not None:
            return None
        crash = None
        if end.fault:
            crash = from_fault(end.fault)
        elif end.signal and self.last is not None and self.last.how == end.signal:
            crash = self.last
        return replace(crash, case=running) if crash is not None else None
