"""Latency records: `#ondevice bench ...` lines, turned into figures a user compares.

The device prints raw counts of its cycle source (`unit=systick|dwt|mcycle|ns`); what they mean
comes from the board and the clock its transport declares (transports.contract.Clock),
never from the device: on a virtual clock with a known time per instruction, SysTick
(or RISC-V cycle CSR) ticks become instructions (ticks x 1e9 / (clock_hz x ns per instruction)); otherwise
SysTick or DWT count CPU cycles at `clock_hz`. Figures on a virtual clock repeat exactly.

Every record names the build it was measured on (its variant): "plain", or what
instrumented the code ("gcov" for --ondevice-coverage, a sanitizer the device names). An
instrumented build's figures include the instrumentation: they are not latency, and are
compared only with a baseline of the same variant (docs/bench.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ..formats.benchline import MEMORY_UNIT, RSS_NAME, BenchRecord, BenchRecordError

if TYPE_CHECKING:
    from ..config.board import Board
    from ..transports.contract import Clock


MEMORY_FIELDS = ("name", "board", "unit", "median", "min", "max", "repeats", "deterministic")
PLAIN = "plain"  # the variant of a build nothing instrumented: its figures are latency
GCOV = "gcov"  # --ondevice-coverage's
NOISE_K = 3.0  # a noisy clock's verdict limit: at least this many times the two runs' spreads together


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
    variant: str = PLAIN  # the build: "plain", or what instrumented it ("gcov", "asan", "gcov+asan")
    batch: int = 1  # runs of the body per sample; the figures are per run
    dispersion: float = 0.0  # q3 - min: how far above its best a quarter of the samples strayed (noise model)

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
            if self.variant != PLAIN:  # absent: plain (one more field on every case's record otherwise)
                data["variant"] = self.variant
            return data
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["raw"] = {f.name: getattr(self.raw, f.name) for f in fields(self.raw)}
        return data


def as_property(data: dict) -> str:
    """A record as the `ondevice_bench` property carries it (JUnit XML shows it as is, one
    per case, escaped there: no spaces)."""
    return json.dumps(data, separators=(",", ":"))


def from_property(value: object) -> dict:
    """A record from its `ondevice_bench` property (a report's user_properties hold any
    object; this one is always as_property's text)."""
    assert isinstance(value, str), value
    return json.loads(value)


def variant_of(record: BenchRecord, coverage: bool = False) -> str:
    """The build a record was measured on: "plain", or what instrumented it, joined by "+"
    (coverage: the session built the board's code for gcov; the device names a sanitizer)."""
    parts = ([GCOV] if coverage else []) + ([record.variant] if record.variant else [])
    return "+".join(parts) or PLAIN


def measure(record: BenchRecord, board: Board, clock: Clock, coverage: bool = False) -> Measured:
    """clock: what the figures counted where they ran (the board's, or its emulator's);
    coverage: whether this session instrumented the board's code for gcov."""
    scale, unit, us_per_unit = 1.0, "cycles", None
    hz = board.clock_hz
    variant = variant_of(record, coverage)
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
            variant=variant,
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
    scale /= record.batch  # a sample was a batch of runs: the figures are per run
    values = [round(v * scale, 1) for v in (record.median, record.min, record.max)]
    upper = record.q3 if record.q3 is not None else record.max  # an older binary's: its whole range
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
        variant=variant,
        batch=record.batch,
        dispersion=round((upper - record.min) * scale, 1),
    )


def table(rows: list[dict]) -> list[str]:
    """The end-of-run table, one line per bench and board (rows: Measured.as_dict()); a
    "build" column when a row is of an instrumented build, and a note under the table."""
    builds = any(variant(m) != PLAIN for m in rows)
    header = ("kernel", "board", *(("build",) if builds else ()), "median", "min-max", "unit", "work/unit", "µs")
    header += ("vs baseline",)
    body = []
    for m in rows:
        throughput = m["work"] / m["median"] if m["work"] and m["median"] else None
        body.append(
            (
                m["name"],
                m["board"],
                *((variant(m),) if builds else ()),
                _num(m["median"]),
                f"{_num(m['min'])}-{_num(m['max'])}",
                m["unit"],
                f"{throughput:.3g} {m['work_unit']}" if throughput else "",
                f"{m['us']:.1f}" if m["us"] is not None else "",
                m.get("verdict", ""),
            )
        )
    widths = [max(len(str(r[i])) for r in (header, *body)) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *body)]
    return lines + variant_notes(rows)


def variant(row: dict) -> str:
    """A record's build; a record from before variants were recorded was of a plain one
    (or not known to be otherwise)."""
    return row.get("variant") or PLAIN


def variant_notes(rows: list[dict]) -> list[str]:
    """Under the table: what each instrumented build's figures are (not latency)."""
    found = sorted({variant(r) for r in rows} - {PLAIN})
    return [
        f"{v}: figures of a build instrumented by {_instrumentation(v)}: they include the instrumentation, "
        "they are not latency (compared only with a baseline of the same build)"
        for v in found
    ]


def _instrumentation(name: str) -> str:
    what = {GCOV: "gcov (--ondevice-coverage)", "asan": "AddressSanitizer", "tsan": "ThreadSanitizer"}
    what["msan"] = "MemorySanitizer"
    return " and ".join(what.get(part, part) for part in name.split("+"))


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
        cases = f"{len(mine)} case{'' if len(mine) == 1 else 's'}"
        lines.append(f"{board}: {cases}, the deepest {_num(deepest)} bytes{of}")
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
        binaries = "1 binary" if len(mine) == 1 else f"{len(mine)} binaries"
        lines.append(f"{board}: peak resident memory of {binaries}, the largest {_kib(mine[0]['median'])}")
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

    Only like with like: a record of another build (variant) or unit is not compared.
    Exact clocks (both runs on a virtual clock) compare the medians as they are; any other
    clock goes through the noise model (noisy())."""
    mine, theirs = variant(row), variant(base)
    if mine != theirs:
        return f"{NOT_COMPARED} ({mine} build, baseline {theirs})", None
    if base["unit"] != row["unit"]:
        return f"baseline in {base['unit']}", None
    if row["name"].startswith(RSS_NAME + ":"):
        return resident(row, base, threshold)
    if row.get("deterministic") and base.get("deterministic"):
        return exact(row, base, threshold)
    return noisy(row, base, threshold)


NOT_COMPARED = "not compared"


def exact(row: dict, base: dict, threshold: float) -> tuple[str, str | None]:
    """Figures that repeat exactly (instructions under QEMU's icount): any change is the
    code's, and one over the threshold fails."""
    old, new = base["median"], row["median"]
    change = _change(new, old)
    if change > threshold:
        figures = f"{_num(new)} {row['unit']}, baseline {_num(old)} ({change:+.1f} %"
        return f"{change:+.1f} % REGRESSED", f"{row['name']} on {row['board']}: {figures} > {threshold:g} %)"
    return f"{change:+.1f} %", None


def resident(row: dict, base: dict, threshold: float) -> tuple[str, str | None]:
    """A hosted binary's peak resident memory: the kernel maps its shared libraries' pages in
    batches, so the same binary's figure moves by up to ~170 KiB run to run (measured on the
    host); a growth counts past the larger of the threshold and RSS_NOISE."""
    old, new = base["median"], row["median"]
    change = _change(new, old)
    if change > threshold and new - old > RSS_NOISE:
        figures = f"{_num(new)} bytes, baseline {_num(old)} ({change:+.1f} %"
        why = f"{threshold:g} % and {RSS_NOISE // 1024} KiB"
        return f"{change:+.1f} % REGRESSED", f"{row['name']} on {row['board']}: {figures} > {why})"
    return f"{change:+.1f} %" + (" (within noise)" if change > threshold else ""), None


RSS_NOISE = 256 * 1024  # bytes of peak RSS that move run to run with the same binary


def noisy(row: dict, base: dict, threshold: float) -> tuple[str, str | None]:
    """A clock shared with everything else the machine does (ns on Linux and the host;
    cycles on silicon): the best samples (min) are compared, the least disturbed of each run,
    and a rise counts only past the larger of the threshold and NOISE_K times the two runs'
    spreads together (dispersion(): q3 - min, as a share of the baseline's min). Noisy runs
    therefore do not fail, and say so; a slowdown that both runs measured tightly does."""
    old, new = base["min"], row["min"]
    change = _change(new, old)
    noise = NOISE_K * (dispersion(row) + dispersion(base)) / old * 100 if old else 0.0
    limit = max(threshold, noise)
    if change > limit:
        figures = f"min {_num(new)} {row['unit']}, baseline min {_num(old)} ({change:+.1f} %"
        why = f"{limit:.1f} %: --bench-fail {threshold:g} %, noise ±{noise:.1f} %"
        return f"{change:+.1f} % REGRESSED (min)", f"{row['name']} on {row['board']}: {figures} > {why})"
    if change > threshold:
        return f"{change:+.1f} % (min, within noise ±{noise:.1f} %)", None
    return f"{change:+.1f} % (min)", None


def dispersion(row: dict) -> float:
    """How far above its best the run's samples strayed (q3 - min, per run of the body): what
    a record carries for the noise model; a record from before has its whole range (max - min)."""
    found = row.get("dispersion")
    return float(found) if found is not None else max(0.0, row["max"] - row["min"])


def _change(new: float, old: float) -> float:
    return (new - old) / old * 100 if old else 0.0


def parse_threshold(text: str) -> float:
    value = text.strip().rstrip("%").strip()
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"--bench-fail={text!r}: expected a percentage such as 5%") from None
    if number < 0:
        raise ValueError(f"--bench-fail={text!r}: a slowdown threshold cannot be negative")
    return number
