"""Latency records across the run: the end-of-run table, --bench-json, --bench-save and
the --bench-compare baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..compiling import toolchain
from ..config.keys import BASELINE_KEY
from ..config.options import registry
from ..formats.benchline import MEMORY_UNIT, RSS_NAME, STACK_PREFIX
from . import bench


def bench_dir(config: pytest.Config) -> Path:
    return config.rootpath / ".ondevice" / "benchmarks"


def load_baseline(config: pytest.Config) -> tuple[dict[str, dict], float] | None:
    name = config.getoption("bench_compare")
    if not name:
        return None
    try:
        threshold = bench.parse_threshold(config.getoption("bench_fail"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    path = bench_dir(config) / f"{name}.json"
    if not path.is_file():
        saved = sorted(p.stem for p in bench_dir(config).glob("*.json"))
        raise pytest.UsageError(
            f"--bench-compare={name}: no baseline {path} (saved: {', '.join(saved) or 'none'}; "
            f"store one with --bench-save={name})"
        )
    records = json.loads(path.read_text())["records"]
    return {bench.key(r): r for r in records}, threshold


class BenchReport:
    """Latency records from the reports (on an xdist controller they come from the workers):
    the end-of-run table and --bench-json."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: list[dict] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.rows.extend(bench.from_property(v) for name, v in report.user_properties if name == "ondevice_bench")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.rows:
            return
        latency = [r for r in self.rows if r["unit"] != MEMORY_UNIT]
        stack = [r for r in self.rows if r["name"].startswith(STACK_PREFIX)]
        rss = [r for r in self.rows if r["name"].startswith(RSS_NAME + ":")]
        if latency:
            terminalreporter.section("ondevice bench")
            for line in bench.table(latency):
                terminalreporter.write_line(line)
        baseline = self.config.stash.get(BASELINE_KEY, None)
        if baseline is not None:
            for line in not_compared(self.rows, baseline[0], self.config.getoption("bench_compare")):
                terminalreporter.write_line(line, yellow=True)
        if stack:
            terminalreporter.section("ondevice memory: stack high-water per case")
            reg = registry(self.config)
            stacks = {name: _stack_of(reg, name) for name in {r["board"] for r in stack}}
            for line in bench.memory_lines(stack, stacks, every=self.config.getoption("verbose") > 0):
                terminalreporter.write_line(line)
        if rss:
            terminalreporter.section("ondevice memory: peak resident memory per binary")
            for line in bench.rss_lines(rss, every=self.config.getoption("verbose") > 0):
                terminalreporter.write_line(line)
        path, name = self.config.getoption("bench_json"), self.config.getoption("bench_save")
        if not (path or name):
            return
        text = json.dumps(self._document(), indent=2) + "\n"
        if path:
            _write(Path(path), text)
            terminalreporter.write_line(f"bench records written to {path}")
        if name:
            saved = bench_dir(self.config) / f"{name}.json"
            _write(saved, text)
            terminalreporter.write_line(f"bench baseline saved as {name} ({saved}){_builds(self.rows)}")

    def _document(self) -> dict:
        """The records with what produced them: device, and each board's toolchain and flags."""
        reg = registry(self.config)
        boards = {}
        for name in sorted({r["board"] for r in self.rows}):
            board = reg.get(name)
            try:
                tc = toolchain.resolve(board)
                compiler = {"kind": tc.kind, "cc": tc.description, "identity": tc.identity}
            except toolchain.ToolchainError as e:
                compiler = {"error": str(e)}
            boards[name] = {
                "clock_hz": board.clock_hz,
                "toolchain": compiler,
                "cflags": list(board.toolchain.cflags),
                "cxxflags": list(board.toolchain.cxxflags),
                "ldflags": list(board.toolchain.ldflags),
            }
        # --device as given (one value, or several BOARD=WHERE); each record names its device
        device = ", ".join(self.config.getoption("device")) or None
        return {"device": device, "fleet": self.config.getoption("fleet"), "boards": boards, "records": self.rows}


def not_compared(rows: list[dict], baseline: dict[str, dict], name: str) -> list[str]:
    """One line per pair of builds (variants) that --bench-compare kept apart: the run says
    what it did not compare, and why, without failing."""
    pairs: dict[tuple[str, str], int] = {}
    for row in rows:
        base = baseline.get(bench.key(row))
        if base is not None and bench.variant(base) != bench.variant(row):
            pair = (bench.variant(row), bench.variant(base))
            pairs[pair] = pairs.get(pair, 0) + 1
    return [
        f"ondevice bench: {count} record{'s' * (count != 1)} of the {mine} build not compared with baseline {name}, "
        f"which is of the {theirs} build: only like is compared with like (an instrumented build's figures are "
        f"not latency); --bench-save a baseline of the {mine} build to compare those"
        for (mine, theirs), count in sorted(pairs.items())
    ]


def _builds(rows: list[dict]) -> str:
    """What a saved baseline of an instrumented build will be compared with: only its like."""
    builds = sorted({bench.variant(r) for r in rows} - {bench.PLAIN})
    return f": records of the {', '.join(builds)} build, compared only with runs of that build" if builds else ""


def _stack_of(reg, board: str) -> int | None:
    """The board's stack in bytes, where its file states one (bare metal: the linker's)."""
    try:
        b = reg.get(board)
    except Exception:
        return None
    return b.memory.stack if b.kind == "baremetal" else None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
