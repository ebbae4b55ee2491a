"""Latency records: `#ondevice bench ...` lines, turned into figures a user compares.

The device prints raw counts of its cycle source (`unit=systick|dwt|mcycle|ns`); what they mean
comes from the board and the clock its transport declares (transports.contract.Clock),
never from the device: on a virtual clock with a known time per instruction, SysTick
(or RISC-V cycle CSR) ticks become instructions (ticks x 1e9 / (clock_hz x ns per instruction)); otherwise
SysTick or DWT count CPU cycles at `clock_hz`. Figures on a virtual clock repeat exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ..formats.benchline import MEMORY_UNIT, BenchRecord, BenchRecordError

if TYPE_CHECKING:
    from ..config.board import Board
    from ..transports.contract import Clock


MEMORY_FIELDS = ("name", "board", "unit", "median", "min", "max", "repeats", "deterministic")


@dataclass(frozen=True)
class Measured:
    """A record in the units a user reads, for one board."""

    name: str
    board: str
    unit: str  # "instructions", "cycles" or "ns"
    median: float
    min: float
    max: float
    repeats: int
    work: int
    work_unit: str
    us: float | None  # the median in microseconds, when the unit allows it
    deterministic: bool  # on a virtual clock: equal figures every run
    raw: BenchRecord

    def as_dict(self) -> dict:
        """The figures, the raw record nested as a dict too: what asdict() gives, without its
        deep copy of every value (a run of 100,000 cases makes one per case).

        A memory figure (bytes) is read as the device printed it: no raw copy, no work or
        time. Every case has one (its stack high-water), in JUnit XML and the history: with
        the copy, a 10,000-case run's JUnit file was 13.0 MB, without it 8.5 MB."""
        if self.unit == MEMORY_UNIT:  # lower_bound, only when true: at least this (past the painted region)
            data = {f: getattr(self, f) for f in MEMORY_FIELDS}
            if self.raw.lower_bound:
                data["lower_bound"] = True
            return data
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["raw"] = {f.name: getattr(self.raw, f.name) for f in fields(self.raw)}
        return data


def as_property(data: dict) -> str:
    """A record as the `ondevice_bench` property carries it (JUnit XML shows it as is, one
    per case, escaped there: no spaces)."""
    return json.dumps(data, separators=(",", ":"))


def measure(record: BenchRecord, board: Board, clock: Clock) -> Measured:
    """clock: what the figures counted where they ran (the board's, or its emulator's)."""
    scale, unit, us_per_unit = 1.0, "cycles", None
    hz = board.clock_hz
    if record.unit == MEMORY_UNIT:  # a stack high-water: the same figure on every run of the binary
        return Measured(
            name=record.name,
            board=board.name,
            unit=MEMORY_UNIT,
            median=record.median,
            min=record.min,
            max=record.max,
            repeats=record.repeats,
            work=0,
            work_unit="",
            us=None,
            deterministic=True,
            raw=record,
        )
    if record.max == 0 and record.work:
        raise BenchRecordError(
            f"{record.name}: the cycle counter never advanced (every repeat took 0 {record.unit}): this core "
            "has no running counter of that kind (DWT CYCCNT disabled, or absent as on an emulator); build "
            "without -DONDEVICE_CYCLES_DWT to count SysTick"
        )
    if record.unit == "ns":
        unit, us_per_unit = "ns", 1e-3
    elif record.unit in ("systick", "mcycle") and clock.instruction_ns:  # counters of virtual time
        if not hz:
            raise BenchRecordError(f"{board.path}: clock_hz is needed to turn {record.unit} ticks into instructions")
        scale, unit = 1e9 / (hz * clock.instruction_ns), "instructions"
    elif hz:
        us_per_unit = 1e6 / hz
    values = [round(v * scale, 1) for v in (record.median, record.min, record.max)]
    return Measured(
        name=record.name,
        board=board.name,
        unit=unit,
        median=values[0],
        min=values[1],
        max=values[2],
        repeats=record.repeats,
        work=record.work,
        work_unit=record.work_unit,
        us=values[0] * us_per_unit if us_per_unit else None,
        deterministic=clock.deterministic,
        raw=record,
    )


def table(rows: list[dict]) -> list[str]:
    """The end-of-run table, one line per bench and board (rows: Measured.as_dict())."""
    header = ("kernel", "board", "median", "min-max", "unit", "work/unit", "µs", "vs baseline")
    body = []
    for m in rows:
        throughput = m["work"] / m["median"] if m["work"] and m["median"] else None
        body.append(
            (
                m["name"],
                m["board"],
                _num(m["median"]),
                f"{_num(m['min'])}-{_num(m['max'])}",
                m["unit"],
                f"{throughput:.3g} {m['work_unit']}" if throughput else "",
                f"{m['us']:.1f}" if m["us"] is not None else "",
                m.get("verdict", ""),
            )
        )
    widths = [max(len(str(r[i])) for r in (header, *body)) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *body)]


MEMORY_SHOWN = 5  # deepest cases per board in the memory section (-v: every case)


def memory_lines(rows: list[dict], stacks: dict[str, int | None], every: bool = False) -> list[str]:
    """The end-of-run stack high-water, per board: the deepest cases (all of them with
    every), against the board's stack (stacks: board -> bytes, None when not stated)."""
    lines = []
    for board in dict.fromkeys(r["board"] for r in rows):
        mine = sorted((r for r in rows if r["board"] == board), key=lambda r: -r["median"])
        size = stacks.get(board)
        deepest = mine[0]["median"]
        of = f" of its {_num(size)}-byte stack ({deepest / size:.0%})" if size else ""
        lines.append(f"{board}: {len(mine)} cases, the deepest {_num(deepest)} bytes{of}")
        shown = mine if every else mine[:MEMORY_SHOWN]
        width = max(len(r.get("case", "")) for r in shown)
        for r in shown:
            at_least = ">= " if r.get("lower_bound") else ""
            verdict = f"  {r['verdict']}" if r.get("verdict") else ""
            lines.append(f"  {r.get('case', ''):<{width}}  {at_least}{_num(r['median'])} bytes{verdict}")
        if len(mine) > len(shown):
            lines.append(f"  ... {len(mine) - len(shown)} more (-v lists every case; --bench-json has them all)")
    return lines


def rss_lines(rows: list[dict], every: bool = False) -> list[str]:
    """Peak resident memory per binary (Linux boards, the host), the largest first."""
    lines = []
    for board in dict.fromkeys(r["board"] for r in rows):
        mine = sorted((r for r in rows if r["board"] == board), key=lambda r: -r["median"])
        lines.append(f"{board}: peak resident memory of {len(mine)} binaries, the largest {_kib(mine[0]['median'])}")
        shown = mine if every else mine[:MEMORY_SHOWN]
        for r in shown:
            lines.append(f"  {r['name'].split(':', 1)[1]}  {_kib(r['median'])}")
        if len(mine) > len(shown):
            lines.append(f"  ... {len(mine) - len(shown)} more (-v lists every binary)")
    return lines


def _kib(value: float) -> str:
    return f"{_num(value / 1024)} KiB"


def _num(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ") if value >= 100 else f"{value:g}"


def key(row: dict) -> str:
    """A bench is known by its board, its test case and its name."""
    return f"{row['board']}::{row.get('case', '')}::{row['name']}"


def compare(row: dict, base: dict, threshold: float) -> tuple[str, str | None]:
    """(verdict, failure message or None) for one record against its baseline.

    Deterministic boards compare the figures as they are; noisy ones (Linux) treat a change
    smaller than the spread (max - min) of either run as noise."""
    old, new = base["median"], row["median"]
    if base["unit"] != row["unit"]:
        return f"baseline in {base['unit']}", None
    change = (new - old) / old * 100 if old else 0.0
    figures = f"{_num(new)} {row['unit']}, baseline {_num(old)} ({change:+.1f} %"
    if not row.get("deterministic"):
        noise = max(row["max"] - row["min"], base["max"] - base["min"])
        if abs(new - old) <= noise:
            return f"{change:+.1f} % (within noise)", None
    if change > threshold:
        return (
            f"{change:+.1f} % REGRESSED",
            f"{row['name']} on {row['board']}: {figures} > {threshold:g} %)",
        )
    return f"{change:+.1f} %", None


def parse_threshold(text: str) -> float:
    value = text.strip().rstrip("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"--bench-fail={text!r}: expected a percentage such as 5%") from None
    if number < 0:
        raise ValueError(f"--bench-fail={text!r}: a slowdown threshold cannot be negative")
    return number
