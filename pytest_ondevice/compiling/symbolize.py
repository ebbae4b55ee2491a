"""Addresses of a test binary into functions and `file:line`, with the board's own tools.

A crash on the device leaves addresses (a fault's pc and lr, a hosted binary's backtrace);
the ELF with its debug info is here, in the build. The toolchain's `addr2line` reads it
(`arm-none-eabi-addr2line` for a Cortex-M board, the host's for host), else LLVM's, which
reads every architecture. No Python ELF/DWARF library is needed.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..config.board import Board
from . import toolchain
from .elf import ElfError, Segment, header_address, loaded_segments, read

TIMEOUT = 30.0  # seconds addr2line may take (a large C++ binary's DWARF)
_ADDRESS_LINE = re.compile(r"0x[0-9a-fA-F]+$")
_LOCATION = re.compile(r"(?P<file>.*?):(?P<line>\d+|\?)(?::\d+)?(?: \(discriminator \d+\))?$")


@dataclass(frozen=True)
class Frame:
    """One function at an address: innermost first, an inlined one before the function it
    was inlined into (all at the same address)."""

    function: str | None  # None: no function of the program is there
    file: str | None = None
    line: int | None = None
    inlined: bool = False  # inlined into the next frame of the same address


def addr2line(board: Board) -> tuple[str, ...] | None:
    """The command that reads this board's ELF: its toolchain's, else LLVM's (None: neither
    is installed)."""
    tc = board.toolchain
    candidates: list[tuple[str, ...]] = []
    if tc.gnu == "":
        candidates.append(("addr2line",))
    elif tc.gnu:
        candidates.append((f"{tc.gnu}-addr2line",))
    ndk = toolchain._ndk_bin(tc)
    if ndk is not None:
        candidates.append((str(ndk / "llvm-addr2line"),))
    candidates += [("llvm-addr2line",), ("llvm-symbolizer", "--output-style=GNU")]
    return next((c for c in candidates if shutil.which(c[0])), None)


def install_hint(board: Board) -> str:
    tc = board.toolchain
    if tc.gnu:
        return f"install {tc.gnu}-addr2line (binutils-{tc.gnu}) or llvm"
    return "install binutils or llvm"


class SymbolizeError(Exception):
    """addr2line is missing, failed or took too long: the addresses stay as they are."""


def symbolize(board: Board, elf: Path, addresses: list[int]) -> dict[int, list[Frame]]:
    """Each address (as linked) with its frames, innermost first."""
    command = addr2line(board)
    if command is None:
        raise SymbolizeError(f"no addr2line for board {board.name}: {install_hint(board)}")
    wanted = list(dict.fromkeys(addresses))
    argv = [*command, "-a", "-f", "-C", "-i", "-e", str(elf), *(hex(a) for a in wanted)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SymbolizeError(f"{command[0]} failed: {e}") from None
    if done.returncode != 0:
        raise SymbolizeError(f"{command[0]} failed: {done.stderr.strip()[:300]}")
    return _parse(done.stdout, wanted)


def _parse(output: str, wanted: list[int]) -> dict[int, list[Frame]]:
    """`-a -f -i` output: per address its line, then (function, file:line) pairs."""
    found: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    pending: str | None = None
    for line in output.splitlines():
        line = line.strip()
        if pending is None and _ADDRESS_LINE.match(line):
            current = found.setdefault(int(line, 16), [])
        elif current is not None and pending is None:
            pending = line
        elif current is not None:
            current.append(_frame(pending or "??", line))
            pending = None
    for frames in found.values():
        frames[:] = [Frame(f.function, f.file, f.line, inlined=i < len(frames) - 1) for i, f in enumerate(frames)]
    return {a: found.get(a, [Frame(None)]) for a in wanted}


def _frame(function: str, location: str) -> Frame:
    m = _LOCATION.match(location)
    file = m.group("file") if m else None
    number = int(m.group("line")) if m and m.group("line").isdigit() else None
    if not file or file == "??" or not number:
        file, number = None, None
    else:
        file = posixpath.normpath(file)  # "././x.c" as the compile named it: "x.c"
    return Frame(None if function in ("??", "") else function, file, number)


@dataclass(frozen=True)
class Image:
    """A binary as it was loaded: its segments as linked, and how far it was moved."""

    segments: tuple[Segment, ...]
    bias: int  # runtime address less linked address (a PIE's load address)
    arm: bool  # 32-bit Arm: code addresses carry the Thumb bit

    def linked(self, runtime: int) -> int:
        return runtime - self.bias

    def has_code_at(self, linked: int) -> bool:
        return any(s.executable and s.holds(linked) for s in self.segments)


def image(elf: Path, base: int | None) -> Image:
    """The binary a crash line's addresses are in; base: where its ELF header was at run
    time (None: where it was linked, as for a static or bare-metal binary)."""
    try:
        segments, machine = loaded_segments(elf), read(elf).arch
    except (OSError, ElfError, ValueError, struct.error) as e:
        raise SymbolizeError(f"{elf}: {e}") from None
    header = header_address(segments)
    bias = base - header if base is not None and header is not None else 0
    return Image(segments, bias, machine == "arm")
