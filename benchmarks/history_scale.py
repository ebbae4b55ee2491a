"""A farm's history at scale: 90 nights of a 10,000-case suite over 8 devices, then one
more night appended, and the morning report drawn from it.

    python benchmarks/history_scale.py [--nights 90] [--cases 10000] [--devices 8] [--runs 5] [--fresh]

The history is built night by night through the plugin's own path: each case's setup,
call and teardown reports with the properties the items give them (board, device, binary
hash, bench records, reruns), gathered by recorder.Reports and appended by history.append,
as --history does at the session's end. The suite: 1,000 binaries of 10 cases on three
boards (a Pi fleet with wall-clock figures; two emulated Cortex-M boards whose cases also
record their stack high-water, and whose clock is exact), 50 kernels measured on each board,
a few failures, flaky cases, reruns, a device that is down some nights, binaries rebuilt
now and then, and every 30th night a wave (10 % rebuilt: new failures, slower kernels).
Built once and kept in the temp directory (--fresh builds it again).

Then, on a fresh copy of that file each time, it times, --runs times: appending night
N+1 (what the session's end does: the records made from the gathered reports, written in
one transaction; bar: 1 s), and `pytest-ondevice report DB --html OUT` as a whole process
(bar: 10 s). Medians of wall and CPU time (CPU: less at the mercy of what else the machine
does), side by side with the bar, and the sizes of the database and of the page.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # run as a script: this checkout's plugin, whichever copy is installed
    sys.path.insert(0, str(REPO))
from pytest_ondevice.formats.benchline import MEMORY_UNIT, BenchRecord  # noqa: E402
from pytest_ondevice.records import history, recorder  # noqa: E402
from pytest_ondevice.records.bench import Measured, as_property  # noqa: E402

GENERATOR = 1  # bump when the suite's shape changes: the cached history is built again
CASES_PER_BINARY = 10
WAVE_EVERY = 30  # nights
AREAS = ["nn", "dsp", "gemm", "io", "codec", "crypto", "fs", "net", "sched", "alloc", "math", "image"]
OPS = ["gemm_s8", "gemm_f32", "conv2d_s8", "dwconv_s8", "fc_s8", "softmax_s8", "fft_q15", "fir_q31", "crc32", "aes128"]
SIZES = ["16", "32", "64", "128", "256"]
KERNELS = [f"{op}_{size}" for op in OPS for size in SIZES]  # 50
# board -> (unit, deterministic clock, harness, device name)
BOARDS = {
    "rpi": ("ns", False, "gtest", "pi-{}"),
    "mps2-an386": ("instructions", True, "micro", "mps2-{}"),
    "bluepill-qemu": ("instructions", True, "micro", "bluepill-{}"),
}


@dataclass
class Binary:
    source: str
    board: str
    harness: str
    cases: list[str]
    kernel: str | None  # measured by its first case
    rss: int  # peak resident bytes (a hosted binary's)
    stacks: list[int]  # per case, bytes (a micro_test binary's)
    version: int = 0
    broken: set[int] = field(default_factory=set)  # cases that fail on this version


@dataclass
class Suite:
    """The farm and its binaries, and what changes night to night (seeded: the same every build)."""

    nights: int
    binaries: list[Binary]
    devices: dict[str, list[str]]  # board -> its devices
    latency: dict[tuple[str, str], float]  # (board, kernel) -> its median now
    flaky: set[tuple[int, int]]  # (binary, case) that fail now and then on one binary
    skipped: set[tuple[int, int]]
    rnd: random.Random


def suite(cases: int, devices: int, seed: int = 33) -> Suite:
    rnd = random.Random(seed)
    quarter = devices // 4  # half the devices are Pis, a quarter each emulated board
    counts = {"rpi": devices - 2 * quarter, "mps2-an386": quarter, "bluepill-qemu": quarter}
    fleet = {board: [BOARDS[board][3].format(i + 1) for i in range(n)] for board, n in counts.items() if n}
    boards = [b for b, devs in fleet.items() for _ in devs]  # binaries spread as the devices are
    binaries = []
    for b in range(max(1, cases // CASES_PER_BINARY)):
        board = boards[b % len(boards)]
        harness = BOARDS[board][2]
        area = AREAS[b % len(AREAS)]
        ext = "cc" if harness == "gtest" else "c"
        suite_name = f"{area.capitalize()}{b:04d}"
        names = [f"{suite_name}.Case{c}" if harness == "gtest" else f"{area}_case_{b}_{c}" for c in range(10)]
        source = f"tests/{area}/{area}_{b:04d}_test.{ext}"
        stacks = [rnd.randrange(384, 6144, 8) for _ in names]
        binaries.append(Binary(source, board, harness, names, None, rnd.randrange(2, 40) << 20, stacks))
    for board in fleet:  # each kernel measured on each board, by the first case of a binary of its own
        mine = [x for x in binaries if x.board == board]
        for kernel, binary in zip(KERNELS, mine, strict=False):
            binary.kernel = kernel
    latency = {}
    for board in fleet:
        for k, kernel in enumerate(KERNELS):
            latency[(board, kernel)] = float(rnd.randrange(2_000, 400_000) * (1 + k % 5))
    everyone = [(b, c) for b in range(len(binaries)) for c in range(len(binaries[b].cases))]
    flaky = set(rnd.sample(everyone, max(1, len(everyone) // 200)))
    skipped = set(rnd.sample(everyone, max(1, len(everyone) // 100)))
    return Suite(0, binaries, fleet, latency, flaky, skipped, rnd)


def _sha(*parts) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


class Report:
    """What pytest hands --history for one phase of one item (the attributes it reads)."""

    __slots__ = ("duration", "longrepr", "longreprtext", "nodeid", "outcome", "user_properties", "when")

    def __init__(self, nodeid, when, outcome, duration, props, text="", longrepr=None):
        self.nodeid, self.when, self.outcome, self.duration = nodeid, when, outcome, duration
        self.user_properties, self.longreprtext, self.longrepr = props, text, longrepr


def _failure(binary: Binary, case: str, rnd: random.Random) -> str:
    line = rnd.randrange(20, 400)
    want = rnd.randrange(-128, 128)
    if binary.harness == "gtest":
        return (
            f"{binary.source}:{line}: Failure\nExpected equality of these values:\n  expected[{line % 16}]\n"
            f"    Which is: {want}\n  out[{line % 16}]\n    Which is: {want + 1}\n{case}: output differs from the "
            "reference at 1 of 256 positions"
        )
    return (
        f"output[{line % 16}] == {want} failed at {binary.source.rsplit('/', 1)[-1]}:{line} ({want + 1} vs {want})\n"
        f">     TF_LITE_MICRO_EXPECT_EQ({want}, output[{line % 16}]);\n"
        f"device log: {case} ran 1.8 ms, stack 2 304 bytes of 16 384"
    )


def night(s: Suite, n: int) -> tuple[history.Run, list[Report]]:
    """Night n of the suite: its run, and every report the session's items made. Changes the
    suite's state (rebuilt binaries, what is broken, the kernels' figures) as a night does."""
    rnd = s.rnd
    wave = n > 0 and n % WAVE_EVERY == WAVE_EVERY - 1
    rebuilt = 0.10 if wave else 0.03
    slow = set(rnd.sample(KERNELS, 8)) if wave else set()
    for (board, kernel), value in s.latency.items():
        if kernel in slow and rnd.random() < 0.5:
            s.latency[(board, kernel)] = value * rnd.uniform(1.08, 1.3)
    devices_up = {board: list(devs) for board, devs in s.devices.items()}
    down = None
    if n % 10 == 7 and len(devices_up.get("rpi", ())) > 1:  # a Pi cannot be reached some nights
        down = devices_up["rpi"].pop()
    reason = f"{down}: cannot connect to 10.0.0.{20 + n % 7}:22: timed out after 10 s"
    reports: list[Report] = []
    for b, binary in enumerate(s.binaries):
        if rnd.random() < rebuilt:
            binary.version += 1
            fixed = {c for c in binary.broken if rnd.random() < 0.6}
            binary.broken -= fixed
            binary.broken |= {c for c in range(len(binary.cases)) if rnd.random() < (0.05 if wave else 0.004)}
            binary.stacks = [x + rnd.choice((0, 0, 0, 8, -8, 64)) for x in binary.stacks]
            if binary.kernel and binary.board != "rpi" and rnd.random() < 0.5:  # an exact clock: any change shows
                key = (binary.board, binary.kernel)
                s.latency[key] = round(s.latency[key] * rnd.uniform(0.995, 1.006))
        devs = s.devices[binary.board]
        device = devs[(b + n) % len(devs)]  # the fleet spreads binaries over the board's devices
        moved = device == down
        if moved:  # tried there first, then run on another
            up = devices_up[binary.board]
            device = up[(b + n) % len(up)]
        sha = _sha(binary.source, binary.board, binary.version)
        where = [("board", binary.board), ("device", device), ("binary_sha256", sha)]
        if moved:
            where.append(("retried_after", reason))
        cut_short = rnd.random() < 0.003  # a lost connection: the binary ran again
        if cut_short:
            where.append(("rerun", f"{device}: the connection was lost after {rnd.randrange(2, 40)} s"))
            if rnd.random() < 0.3:
                where.append(("flaky", f"it broke off on {device} while the binary ran, then ran again"))
        infra = moved and n % 30 == 17 and b % 3 == 0  # no other device could take it either
        for c, case in enumerate(binary.cases):
            nodeid = f"{binary.source}::{case}[{binary.board}]"
            duration = rnd.uniform(0.002, 0.08)
            if infra:
                text = f"DeviceInfrastructureError: rpi: {reason}; then no other device"
                reports.append(Report(nodeid, "setup", "failed", duration, where, text))
                reports.append(Report(nodeid, "teardown", "passed", 0.0, where))
                continue
            reports.append(Report(nodeid, "setup", "passed", 0.0, where))
            if (b, c) in s.skipped:
                skip = (binary.source, 1, "Skipped: needs an FPU (this board has none)")
                reports.append(Report(nodeid, "call", "skipped", 0.0, where, longrepr=skip))
                reports.append(Report(nodeid, "teardown", "passed", 0.0, where))
                continue
            failed = c in binary.broken or ((b, c) in s.flaky and rnd.random() < 0.08)
            props = list(where)
            if c == 0 and binary.kernel and not failed:
                median = s.latency[(binary.board, binary.kernel)]
                if binary.board == "rpi":
                    median *= rnd.uniform(0.98, 1.02)
                props.append(("ondevice_bench", _bench(binary, binary.kernel, round(median, 1), case, sha, device)))
            if binary.harness == "micro" and not failed:
                used = binary.stacks[c]
                props.append(("ondevice_bench", _bench(binary, f"stack:{case}", used, case, sha, device, MEMORY_UNIT)))
                props.append(("ondevice_stack_bytes", str(used)))
            if c == 0 and binary.harness == "gtest":
                rss = binary.rss + rnd.randrange(0, 1 << 16)
                rss_name = f"peak_rss:{binary.source}"
                props.append(("ondevice_bench", _bench(binary, rss_name, rss, case, sha, device, MEMORY_UNIT)))
                props.append(("ondevice_peak_rss_bytes", str(rss)))
            text = _failure(binary, case, rnd) if failed else ""
            reports.append(Report(nodeid, "call", "failed" if failed else "passed", duration, props, text))
            reports.append(Report(nodeid, "teardown", "passed", 0.0, props))
    day = time.strftime("%Y-%m-%d", time.gmtime(1767225600 + 86400 * n))  # from 2026-01-01
    failed = any(r.outcome == "failed" for r in reports)
    run = history.Run(
        started=f"{day}T02:00:00+00:00",
        finished=f"{day}T03:47:12+00:00",
        git_rev=_sha("rev", n)[:40],
        git_dirty=False,
        host="nightly-1",
        args=["--fleet=farm.toml", "--board=rpi,mps2-an386,bluepill-qemu", "-n", "8", "--history=out/history.db"],
        exitstatus=1 if failed else 0,
    )
    return run, reports


def _bench(binary: Binary, name: str, median: float, case: str, sha: str, device: str, unit: str | None = None) -> str:
    """An `ondevice_bench` property as items.py writes it (Measured.as_dict and what it adds)."""
    clock_unit, deterministic, *_ = BOARDS[binary.board]
    unit = unit or clock_unit
    memory = unit == MEMORY_UNIT
    raw = BenchRecord(name, MEMORY_UNIT if memory else "ns" if unit == "ns" else "systick", 1 if memory else 21,
                      median, median, median, 0 if memory else 4096, "" if memory else "MAC")  # fmt: skip
    spread = 0 if deterministic or memory else round(median * 0.01, 1)
    measured = Measured(
        name=name,
        board=binary.board,
        unit=unit,
        median=median,
        min=median - spread,
        max=median + spread,
        repeats=raw.repeats,
        work=raw.work,
        work_unit=raw.work_unit,
        us=median / 1000 if unit == "ns" else None,
        deterministic=deterministic or memory,
        raw=raw,
    )
    return as_property({**measured.as_dict(), "case": case, "binary_sha256": sha, "device_name": device})


def gathered(reports: list[Report]) -> recorder.Reports:
    """The reports as --history gathers them while the session runs."""
    gather = recorder.Reports()
    for report in reports:
        gather.note(report, report.when)
    return gather


def build(path: Path, nights: int, cases: int, devices: int, say=None) -> Suite:
    """A history of that many nights at path; returns the suite as it stands after them."""
    s = suite(cases, devices)
    start = time.perf_counter()
    for n in range(nights):
        run, reports = night(s, n)
        history.append(path, run, *gathered(reports).records())
        if say and (n + 1) % 10 == 0:
            say(f"  built {n + 1} of {nights} nights ({time.perf_counter() - start:.0f} s)")
    s.nights = nights
    return s


def cached(nights: int, cases: int, devices: int, fresh: bool) -> tuple[Path, Suite]:
    """The built history, from the temp directory when an identical one was built before (the
    generator, its sizes and the source of history.py and recorder.py name it)."""
    code = (Path(history.__file__).read_bytes(), Path(recorder.__file__).read_bytes(), Path(__file__).read_bytes())
    key = hashlib.sha256(b"".join(code) + f"{GENERATOR} {nights} {cases} {devices}".encode()).hexdigest()[:16]
    where = Path(tempfile.gettempdir()) / "ondevice-history-scale"
    path = where / f"{nights}n-{cases}c-{devices}d-{key}.db"
    if fresh or not path.is_file():
        where.mkdir(exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        print(f"building {nights} nights of {cases} cases over {devices} devices in {partial.parent}", flush=True)
        s = build(partial, nights, cases, devices, say=lambda line: print(line, flush=True))
        partial.rename(path)
        return path, s
    s = suite(cases, devices)  # the state after those nights, without writing them again
    for n in range(nights):
        night(s, n)
    s.nights = nights
    return path, s


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nights", type=int, default=90)
    parser.add_argument("--cases", type=int, default=10_000, help="per night (10 per binary)")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fresh", action="store_true", help="build the history again, not from the temp directory")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="leave the last report and database here")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from _timing import timed_with_cpu

    source, s = cached(args.nights, args.cases, args.devices, args.fresh)
    run, reports = night(s, args.nights)  # the night to append
    results = sum(r.when == "teardown" for r in reports)
    tool = Path(sys.executable).parent / "pytest-ondevice"
    report_cmd = [str(tool)] if tool.exists() else [sys.executable, "-m", "pytest_ondevice.commands.cli"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's plugin in the child too
    appends, pages = [], []
    with tempfile.TemporaryDirectory() as tmp:
        db, out = Path(tmp) / "history.db", Path(tmp) / "nightly.html"
        for _ in range(args.runs):
            shutil.copyfile(source, db)
            gather = gathered(reports)  # during the session, one report at a time
            wall, cpu = time.perf_counter(), _cpu()
            history.append(db, run, *gather.records())
            appends.append((time.perf_counter() - wall, _cpu() - cpu))
            shutil.copyfile(source, db)
            pages.append(timed_with_cpu([*report_cmd, "report", str(db), "--html", str(out)], Path(tmp), env))
        db_size, html_size = source.stat().st_size, out.stat().st_size
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, args.keep / "nightly.html")
    print(
        f"history of {args.nights} nights x {results} results ({len(s.binaries)} binaries) over "
        f"{sum(map(len, s.devices.values()))} devices: {_mb(db_size)}; {args.runs} runs each, medians"
    )
    for what, figures, bar in (("append one night", appends, 1.0), ("report (whole process)", pages, 10.0)):
        wall, cpu = statistics.median(f[0] for f in figures), statistics.median(f[1] for f in figures)
        print(f"  {what:24s} wall {wall:6.2f} s  CPU {cpu:6.2f} s  bar {bar:g} s: wall / bar = {wall / bar:.2f}")
    print(f"  the page: {html_size / 1e3:.0f} KB")


if __name__ == "__main__":
    main()
