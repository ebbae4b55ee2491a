"""Where a crash struck, in the failing case's report: each frame as `function at file:line`.

The parser hands over addresses (formats/crashline.py), the build's ELF and the board's
addr2line say what they are (build/symbolize.py); this turns them into the lines under
the case's "crashed: killed by SIGSEGV" or "fault: ..." headline, one frame a line, the
innermost first, so the failure names the code as a test's own failure line does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..compiling.symbolize import Frame, Image, SymbolizeError, image, symbolize
from ..config.board import Board
from ..formats.crashline import MAX_FRAMES, Crash
from ..formats.failure import SourceSearch, located

MAX_LINES = 16  # frames shown; a deep recursion is its innermost frames
NULL_PAGE = 0x1000  # a pc below it: a call through a null (or nearly null) function pointer
NULL_CALL = "not in the program (a call through a null function pointer?)"
OUTSIDE = "outside the program's code (a shared library?)"
_LAST = {"main"}  # frames beyond it are the C library's start-up: not shown


@dataclass(frozen=True)
class _Address:
    label: str  # "pc", "lr" or "" (a caller's return address)
    runtime: int
    returns: bool  # a return address: the call is the instruction before it


def crash_lines(crash: Crash, elf: Path, board: Board, search: SourceSearch) -> list[str]:
    """The frames of a crash, innermost first; a line saying why when they cannot be had."""
    try:
        loaded = image(elf, crash.base)
    except SymbolizeError as e:
        return [f"  (where it struck is not known: {e})"]
    addresses = _addresses(crash, loaded.arm)
    if not addresses:
        return []
    try:
        lookups = [_lookup(loaded, a) for a in addresses]
        resolved = symbolize(board, elf, [a for a in lookups if a is not None])
    except SymbolizeError as e:
        raw = " ".join(f"{a.label or 'frame'}=0x{a.runtime:x}" for a in addresses)
        return [f"  {raw} (not resolved: {e})"]
    shown = _Shown()
    pc_function: str | None = None
    for address, lookup in zip(addresses, lookups, strict=True):
        frames = (resolved.get(lookup) if lookup is not None else None) or [Frame(None)]
        if address.label == "lr" and frames[0].function and frames[0].function == pc_function:
            continue  # the lr of a function that had called another: not its caller
        if frames[0].function is None and not _in_code(loaded, lookup) and not _null(address):
            shown.outside(address)  # a shared library's frame (a dynamic binary's C library)
            continue
        if address.label == "pc":
            pc_function = frames[0].function
        for frame in frames:
            shown.frame(_describe(address, frame, loaded, lookup, search))
        if any(f.function in _LAST for f in frames) or shown.full:
            break
    else:
        if len(crash.frames) >= MAX_FRAMES:
            shown.note(f"(the runtime sends the innermost {MAX_FRAMES} callers)")
    return shown.lines()


class _Shown:
    """The lines so far: a run of frames outside the program is one line, a recursion's
    repeated frame is one line with its count."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._number = 0
        self._outside: list[_Address] = []
        self._repeats = 0
        self._last = ""  # the last frame's text: the same again is a recursion

    @property
    def full(self) -> bool:
        return len(self._lines) >= MAX_LINES

    def frame(self, text: str) -> None:
        self._flush_outside()
        if self._lines and self._last == text:
            self._repeats += 1
            self._number += 1
            return
        self._flush_repeats()
        self._last = text
        self._lines.append(f"#{self._number} {text}")
        self._number += 1

    def note(self, text: str) -> None:
        self._flush_repeats()
        self._flush_outside()
        self._lines.append(f"   {text}")

    def outside(self, address: _Address) -> None:
        self._flush_repeats()
        self._outside.append(address)
        self._number += 1

    def lines(self) -> list[str]:
        self._flush_repeats()
        self._flush_outside()
        return [f"  {line}" for line in self._lines[:MAX_LINES]]

    def _flush_repeats(self) -> None:
        if self._repeats:
            self._lines.append(f"   ... the same {self._repeats} more time{'s' if self._repeats > 1 else ''}")
            self._repeats = 0

    def _flush_outside(self) -> None:
        if not self._outside:
            return
        n, pc = len(self._outside), next((a for a in self._outside if a.label == "pc"), None)
        first = self._number - n
        what = f"#{first}" if n == 1 else f"#{first}-#{first + n - 1}"
        at = f" (pc=0x{pc.runtime:x})" if pc else ""
        self._lines.append(f"{what} {n} frame{'s' if n > 1 else ''} {OUTSIDE}{at}")
        self._outside = []
        self._last = ""


def _null(address: _Address) -> bool:
    return address.label == "pc" and address.runtime < NULL_PAGE


def _addresses(crash: Crash, arm: bool) -> list[_Address]:
    found = []
    if crash.pc is not None:
        found.append(_Address("pc", crash.pc, returns=False))
    exc_return = arm and crash.lr is not None and crash.lr >= 0xF0000000  # a Cortex-M handler's lr
    if crash.lr is not None and not crash.frames and not exc_return:
        found.append(_Address("lr", crash.lr, returns=True))
    found += [_Address("", a, returns=True) for a in crash.frames]
    return found


def _lookup(loaded: Image, address: _Address) -> int | None:
    """The linked address to ask about (None: below the binary, nothing to ask): a return
    address names the instruction after the call, so the call's own line is one byte before
    (and Arm's Thumb bit is not an address)."""
    linked = loaded.linked(address.runtime)
    if loaded.arm:
        linked &= ~1
    if address.returns:
        linked -= 1
    return linked if linked >= 0 else None


def _in_code(loaded: Image, lookup: int | None) -> bool:
    return lookup is not None and loaded.has_code_at(lookup)


def _describe(address: _Address, frame: Frame, loaded: Image, lookup: int | None, search: SourceSearch) -> str:
    register = f" ({address.label}=0x{address.runtime:x})" if address.label else ""
    if frame.function is None:
        if _null(address):
            return f"pc=0x{address.runtime:x}: {NULL_CALL}"
        where = OUTSIDE if not _in_code(loaded, lookup) else "no function of the program known there"
        return f"0x{address.runtime:x}: {where}{register}"
    text = frame.function
    if frame.file and frame.line:
        shown = located(f"{frame.file}:{frame.line}", search)
        text += f" at {shown[0]}:{shown[1]}" if shown else f" at {frame.file}:{frame.line}"
    if frame.inlined:
        return f"{text} (inlined)"
    if address.label == "lr":
        return f"{text}{register}: the caller"
    return text + register
