"""The line a benchmark prints, `#ondevice bench name=... unit=... repeats=N min=A
median=B max=C [work=W work_unit=U overhead=O batch=K q3=Q variant=V]`, read into a record or
refused: its meaning in time or instructions is the records' (records/bench.py), which know
the board's clock. batch: runs of the body per sample (a wall clock's samples are batches);
variant: the instrumentation the binary was built with, as the device knows it (a sanitizer)."""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUIRED = ("name", "unit", "repeats", "min", "median", "max")
NUMBERS = ("repeats", "min", "median", "max", "work", "overhead", "batch", "q3")
SOURCES = ("systick", "dwt", "mcycle", "ns")  # mcycle: RISC-V's cycle CSR
_PAIR = re.compile(r"(\w+)=(\S+)")


class BenchRecordError(ValueError):
    """A bench line that cannot be trusted: a clear error, never a silent zero."""


@dataclass(frozen=True, slots=True)  # a case's stack record, kept to the session's end: no dict of its own
class BenchRecord:
    name: str
    unit: str  # the device's cycle source
    repeats: int
    min: int
    median: int
    max: int
    work: int = 0
    work_unit: str = ""
    overhead: int = 0
    lower_bound: bool = False  # the figure is at least this (a stack deeper than the painted region)
    batch: int = 1  # runs of the body per sample: min, median and max are of whole batches
    q3: int | None = None  # the samples' upper quartile (None: not printed, as by older binaries)
    variant: str = ""  # what instrumented the build, as the device says ("": nothing it knows of)


def parse_record(body: str) -> BenchRecord:
    """`name=... unit=... repeats=N min=A median=B max=C [work=W work_unit=U overhead=O batch=K q3=Q variant=V]`."""
    fields = dict(_PAIR.findall(body))
    missing = [k for k in REQUIRED if k not in fields]
    if missing:
        raise BenchRecordError(f"bench record without {', '.join(missing)}: {body[:200]!r}")
    values: dict = {}
    for key in NUMBERS:
        if key in fields:
            if not fields[key].isdigit():
                raise BenchRecordError(f"bench record with {key}={fields[key]!r}, not a whole number: {body[:200]!r}")
            values[key] = int(fields[key])
    if fields["unit"] not in SOURCES:
        raise BenchRecordError(f"bench record with unknown unit {fields['unit']!r}: {body[:200]!r}")
    if not values["min"] <= values["median"] <= values["max"]:
        raise BenchRecordError(f"bench record with min <= median <= max broken: {body[:200]!r}")
    if "q3" in values and not values["min"] <= values["q3"] <= values["max"]:
        raise BenchRecordError(f"bench record with min <= q3 <= max broken: {body[:200]!r}")
    if values.get("batch", 1) < 1:
        raise BenchRecordError(f"bench record with batch=0, no run of the body: {body[:200]!r}")
    return BenchRecord(
        name=fields["name"],
        unit=fields["unit"],
        work_unit=fields.get("work_unit", ""),
        variant=fields.get("variant", ""),
        **values,
    )


STACK_PREFIX = "stack:"
MEMORY_UNIT = "bytes"  # a memory figure's (stack high-water, peak RSS): read as printed


def stack_record(case: str, used: int, beyond: bool = False) -> BenchRecord:
    """A case's stack high-water as a record like latency (its table row, JUnit property,
    history and baseline): `stack:CASE`, in bytes; beyond: at least that (a hosted run
    paints a bounded region)."""
    return BenchRecord(
        name=f"{STACK_PREFIX}{case}", unit=MEMORY_UNIT, repeats=1, min=used, median=used, max=used, lower_bound=beyond
    )


RSS_NAME = "peak_rss"


def rss_record(used: int) -> BenchRecord:
    """A hosted binary's peak resident memory (its first case carries it), in bytes."""
    return BenchRecord(name=RSS_NAME, unit=MEMORY_UNIT, repeats=1, min=used, median=used, max=used)
