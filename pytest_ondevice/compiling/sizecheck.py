"""Refuse a binary that does not fit the board, with the figures, before any deploy."""

from __future__ import annotations

import re
from pathlib import Path

from ..config.board import Board
from .elf import read

_OVERFLOW = re.compile(r"region [`'](\w+)' overflowed by (\d+) bytes")


class SizeError(Exception):
    """The binary is too big for the board; the message gives both figures."""


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n / 1024:.1f} KiB"


def _message(board: Board, what: str, needed: int, have: int, rel: str) -> str:
    msg = f"{rel} needs {_kib(needed)} {what}, {board.name} has {_kib(have)}"
    if what == "RAM" and board.memory.note:
        msg += f" ({board.memory.note})"
    return msg


def check_elf(board: Board, elf: Path, rel: str) -> None:
    mem = board.memory
    if mem.flash is None and mem.ram is None:
        return
    info = read(elf)
    if mem.flash is not None and info.flash_bytes() > mem.flash:
        raise SizeError(_message(board, "flash", info.flash_bytes(), mem.flash, rel))
    if mem.ram is not None and info.ram_bytes() > mem.ram:
        raise SizeError(_message(board, "RAM", info.ram_bytes(), mem.ram, rel))


def from_link_output(board: Board, output: str, rel: str) -> SizeError | None:
    """The linker refuses an overflowing region first: turn its words into our figures."""
    sizes = {"FLASH": ("flash", board.memory.flash), "RAM": ("RAM", board.memory.ram)}
    problems = []
    for region, over in _OVERFLOW.findall(output):
        what, have = sizes.get(region, (region, None))
        if have is not None:
            problems.append(_message(board, what, have + int(over), have, rel))
    return SizeError("; ".join(problems)) if problems else None
