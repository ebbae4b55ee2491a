"""What the side process and pytest's process say to each other: small typed records,
pickled one per frame on a pipe and dispatched by type (sideprocess.py).

Its builds, told as they go (pytest waits for them only while a compiler runs):
    Building, Built, Go; and Say, a line for the person watching, written at once.
Its runs, in item order:
    Started (a binary is running now: the one to rerun if the process dies), Done (its
    result, what it counted, the log records it left), Ended (the last word).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

Progress = tuple[int, int, str]  # builds done, of all, the latest's name


@dataclass(frozen=True, slots=True)
class Building:
    """Builds still run: the progress line moves."""

    progress: Progress


@dataclass(frozen=True, slots=True)
class Built:
    """One binary is built (or its cache entry checked): pytest need not wait for it."""

    key: Any
    progress: Progress


@dataclass(frozen=True, slots=True)
class Go:
    """pytest may go on to the items: the cache was warm, or every build is done."""

    progress: Progress


@dataclass(frozen=True, slots=True)
class Say:
    """A line the side process would have written to the terminal (waiting for a lease)."""

    line: str


Told = Building | Built | Go | Say


@dataclass(frozen=True, slots=True)
class Started:
    index: int


@dataclass(frozen=True, slots=True)
class Done:
    index: int
    outcome: Any  # the binary's result, or the exception its run raised
    counted: tuple[int, ...]  # what the run added to the session's counters
    records: list[logging.LogRecord]


@dataclass(frozen=True, slots=True)
class Ended:
    handover: Any  # what the process built and held, for pytest's process to take over
    counted: tuple[int, ...]
