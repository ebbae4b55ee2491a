"""Coverage of the code under test, measured on the device: gcov's counts turned into a
report by gcovr, per board and merged across boards.

The build instruments each object and notes, beside the counts, where its notes file
(.gcno) is (build/builder.py); an instrumented program writes its counts (.gcda) under
GCOV_PREFIX, named after its object. At the end of the run each board's notes and counts
are put side by side and gcovr, with the board's own gcov, reads them: a summary on the
terminal, Cobertura XML for CI, HTML for people. Test sources are left out: the report
is about the code they test.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

GCOVR_TIMEOUT = 600.0


class CoverageError(Exception):
    """The report could not be made (gcovr missing or failing): said, never a traceback."""


@dataclass
class BoardData:
    objects: list[tuple[Path, str]] = field(default_factory=list)  # (object, its .gcda name)
    compiler: list[str] = field(default_factory=list)
    counted: int = 0  # objects whose counts came back


def gcov_for(compiler: list[str]) -> list[str]:
    """The gcov that reads what this compiler wrote: aarch64-linux-gnu-gcc-12 ->
    aarch64-linux-gnu-gcov-12; clang -> llvm-cov gcov."""
    name = Path(compiler[-1]).name if compiler else "gcc"
    if "clang" in name:
        return ["llvm-cov", "gcov"]
    head, sep, tail = name.rpartition("gcc")
    gcov = f"{head}gcov{tail}" if sep else "gcov"
    directory = Path(compiler[-1]).parent if compiler and "/" in compiler[-1] else None
    return [str(directory / gcov) if directory else gcov]


def count_sets(data: Path) -> list[Path]:
    """Where counts are: this machine's programs', then each remote device session's."""
    return [data, *sorted(p for p in data.glob("remote-*") if p.is_dir())]


def gather(data: Path) -> dict[str, BoardData]:
    """What each board compiled with instrumentation, and which counts came back."""
    boards: dict[str, BoardData] = {}
    sets = count_sets(data)
    for note in sorted(data.glob("*.where")):
        try:
            info = json.loads(note.read_text())
        except (OSError, ValueError):
            continue
        board = boards.setdefault(info["board"], BoardData(compiler=info.get("compiler", [])))
        gcda = note.name.removesuffix(".where") + ".gcda"
        board.objects.append((Path(info["object"]), gcda))
        board.counted += any((s / gcda).is_file() for s in sets)
    return boards


class CoverageReport:
    """--ondevice-coverage: registered on the controller; writes the report at the end."""

    def __init__(
        self, data: Path, rootdir: Path, out: Path, test_patterns: tuple[str, ...], bare: tuple[str, ...] = ()
    ) -> None:
        self.data, self.rootdir, self.out, self.test_patterns = data, rootdir, out, test_patterns
        self.bare = bare  # the selected bare-metal boards: not instrumented

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.section("ondevice coverage")
        for line in self.write():
            terminalreporter.write_line(line)

    def write(self) -> list[str]:
        boards = gather(self.data)
        lines = [f"{name}: not measured (bare metal is not instrumented yet)" for name in self.bare]
        if not boards:
            return lines or ["no instrumented code was built"]
        traces = []
        for name, board in sorted(boards.items()):
            if not board.counted:
                lines.append(f"{name}: no counts came back from the device (its transport does not bring them back)")
                continue
            try:
                trace, summary = self._board(name, board)
            except CoverageError as e:
                lines.append(f"{name}: {e}")
                continue
            traces.append(trace)
            lines.append(f"{name}: {summary} ({self.out / name / 'index.html'})")
        if traces:
            try:
                summary = self._merged(traces)
                lines.append(f"all boards: {summary}")
                lines.append(f"reports: {self.out / 'coverage.xml'} (Cobertura), {self.out / 'index.html'}")
            except CoverageError as e:
                lines.append(f"merged report: {e}")
        return lines

    def _board(self, name: str, board: BoardData) -> tuple[Path, str]:
        """The board's notes beside each set of its counts (this machine's, each device
        session's), read by its own gcov; the sets merged into the board's report."""
        where = self.out / name
        shutil.rmtree(where, ignore_errors=True)
        gcov = " ".join(gcov_for(board.compiler))
        parts = []
        for n, counts in enumerate(count_sets(self.data)):
            mine = [(obj, gcda) for obj, gcda in board.objects if (counts / gcda).is_file()]
            if not mine:
                continue
            work = where / f"gcov-data-{n}"
            work.mkdir(parents=True)
            for obj, gcda in board.objects:  # every object's notes: one never run counts as 0 %
                notes = obj.with_name(obj.name.removesuffix(".o") + ".gcno")
                if notes.is_file():
                    shutil.copyfile(notes, work / gcda.replace(".gcda", ".gcno"))
            for _, gcda in mine:
                shutil.copyfile(counts / gcda, work / gcda)
            part = where / f"part-{n}.json"
            self._gcovr([str(work), "--gcov-executable", gcov, "--json", str(part)])
            parts.append(part)
        trace = where / "coverage.json"
        return trace, self._report(parts, where, ["--json", str(trace)])

    def _merged(self, traces: list[Path]) -> str:
        return self._report(traces, self.out)

    def _report(self, traces: list[Path], where: Path, more: tuple[str, ...] | list[str] = ()) -> str:
        """The traces merged into one report in where (Cobertura, HTML, and more), its
        summary line read from the same gcovr run."""
        adds = [arg for t in traces for arg in ("--add-tracefile", str(t))]
        summary = where / "summary.json"
        self._gcovr(
            [
                *adds,
                *more,
                "--cobertura",
                str(where / "coverage.xml"),
                "--html-details",
                str(where / "index.html"),
                "--json-summary",
                str(summary),
            ]
        )
        try:
            data = json.loads(summary.read_text())
        except (OSError, ValueError) as e:
            raise CoverageError(f"gcovr's summary {summary} cannot be read: {e}") from None
        parts = []
        for what, plural in (("line", "lines"), ("function", "functions"), ("branch", "branches")):
            total, covered = data.get(f"{what}_total", 0), data.get(f"{what}_covered", 0)
            if total:
                parts.append(f"{plural} {covered / total:.1%} ({covered} of {total})")
        return ", ".join(parts) or "no code under test was compiled with instrumentation"

    def _gcovr(self, args: list[str]) -> None:
        excluded = [arg for p in self.test_patterns for arg in ("--exclude", fnmatch.translate(f"*{p}"))]
        # our header's lines (in a test's own object) are mapped to ondevice-include/: not the code under test
        argv = [
            sys.executable,
            "-m",
            "gcovr",
            "--root",
            str(self.rootdir),
            *excluded,
            *args,
            "--gcov-ignore-errors=no_working_dir_found",
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=GCOVR_TIMEOUT, cwd=self.rootdir)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CoverageError(f"gcovr did not finish: {e}") from None
        if proc.returncode != 0:
            if "No module named gcovr" in proc.stderr:
                raise CoverageError("the report needs gcovr: pip install 'pytest-ondevice[coverage]'")
            raise CoverageError(f"gcovr failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
