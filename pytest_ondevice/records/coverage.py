"""Coverage of the code under test, measured on the device: gcov's counts turned into a
report by gcovr, per board and merged across boards.

The build instruments each object and notes, beside the counts, where its notes file
(.gcno) is (compiling/builder.py); an instrumented program writes its counts (.gcda) under
GCOV_PREFIX, named after its object. A bare-metal program has no files: it sends them over
its output (formats/gcda.py), each run's are kept apart under sent/<board>/, and the
board's gcov-tool merges them before the report. At the end of the run each board's notes and counts
are put side by side and gcovr, with the board's own gcov, reads them: a summary on the
terminal, Cobertura XML for CI, HTML for people. Test sources are left out: the report
is about the code they test.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
    kind: str = ""  # the board's: bare metal sends its counts over the output
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


def gcov_tool_for(compiler: list[str]) -> str:
    """The gcov-tool that merges what this compiler's programs counted: arm-none-eabi-gcc ->
    arm-none-eabi-gcov-tool (only GCC's bare-metal builds send counts to merge)."""
    gcov = gcov_for(compiler)[0]
    head, _, tail = Path(gcov).name.rpartition("gcov")
    name = f"{head}gcov-tool{tail}"
    return str(Path(gcov).with_name(name)) if "/" in gcov else name


def count_sets(data: Path) -> list[Path]:
    """Where counts are: this machine's programs', each remote device session's, and what
    each bare-metal board sent (merged by fold_sent)."""
    remote = sorted(p for p in data.glob("remote-*") if p.is_dir())
    return [data, *remote, *sorted(p for p in (data / "sent").glob("*.merged") if p.is_dir())]


def keep_sent(data: Path, board: str, binary: str, files: dict[str, bytes], problems: list[str]) -> None:
    """One run's counts, sent over its output: a directory of their own (runs of one
    board, on several devices or xdist workers, never write into each other's)."""
    where = data / "sent" / board
    where.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=where))
    for name, content in files.items():
        (run / name).write_bytes(content)
    (run / "run.json").write_text(json.dumps({"binary": binary, "files": len(files), "problems": problems}))


@dataclass
class SentRuns:
    runs: int = 0
    silent: list[str] = field(default_factory=list)  # binaries that sent no counts
    problems: list[str] = field(default_factory=list)


def fold_sent(data: Path, board: str, compiler: list[str]) -> SentRuns:
    """Every run's counts of a board merged into sent/<board>.merged by its gcov-tool."""
    seen = SentRuns()
    data = data.resolve()  # gcov-tool enters the first directory before it reads the second
    runs = sorted(p for p in (data / "sent" / board).glob("run-*") if p.is_dir())
    merged = data / "sent" / f"{board}.merged"
    shutil.rmtree(merged, ignore_errors=True)
    tool = [gcov_tool_for(compiler)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GCOV_")}  # gcov-tool would write under them
    for run in runs:
        try:
            info = json.loads((run / "run.json").read_text())
        except (OSError, ValueError):
            continue
        seen.runs += 1
        seen.problems += [f"{info['binary']}: {p}" for p in info.get("problems", [])]
        if not info.get("files"):
            seen.silent.append(info["binary"])
            continue
        if not merged.exists():
            shutil.copytree(run, merged, ignore=shutil.ignore_patterns("run.json"))
            continue
        out = merged.with_name(merged.name + ".next")
        shutil.rmtree(out, ignore_errors=True)
        try:
            proc = subprocess.run(
                [*tool, "merge", str(merged), str(run), "-o", str(out)],
                env=clean,
                capture_output=True,
                text=True,
                timeout=GCOVR_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CoverageError(f"{tool[0]} could not merge the runs' counts: {e}") from None
        if proc.returncode != 0 or not out.is_dir():
            said = (proc.stderr.strip() or proc.stdout.strip())[-400:]
            raise CoverageError(f"{tool[0]} merge failed ({proc.returncode}): {said}")
        shutil.rmtree(merged)
        out.rename(merged)
    return seen


def gather(data: Path) -> dict[str, BoardData]:
    """What each board compiled with instrumentation."""
    boards: dict[str, BoardData] = {}
    for note in sorted(data.glob("*.where")):
        try:
            info = json.loads(note.read_text())
        except (OSError, ValueError):
            continue
        board = boards.setdefault(
            info["board"], BoardData(compiler=info.get("compiler", []), kind=info.get("kind", ""))
        )
        board.objects.append((Path(info["object"]), note.name.removesuffix(".where") + ".gcda"))
    return boards


def count(data: Path, boards: dict[str, BoardData]) -> None:
    """Which objects' counts came back, once every board's sent counts are merged."""
    sets = count_sets(data)
    for board in boards.values():
        board.counted = sum(any((s / gcda).is_file() for s in sets) for _, gcda in board.objects)


def _sent_notes(board: str, sent: SentRuns | None) -> list[str]:
    """What a reader must know of a bare-metal board's figures: runs that sent nothing (they
    ended before their summary) and files damaged on the way count as never run."""
    if sent is None:
        return []
    lines = []
    if sent.silent:
        names = ", ".join(sent.silent[:5]) + (f" and {len(sent.silent) - 5} more" if len(sent.silent) > 5 else "")
        lines.append(
            f"{board}: {len(sent.silent)} of {sent.runs} runs sent no counts (they ended before their summary: "
            f"{names}); their code counts as never run"
        )
    for problem in sent.problems[:5]:
        lines.append(f"{board}: counts dropped: {problem}")
    return lines


KINDS = (("line", "lines"), ("function", "functions"), ("branch", "branches"))
FILES_LISTED = 12  # a report of at most this many files lists each on the terminal


@dataclass
class Figures:
    """Covered and total lines, functions and branches: of a whole report or of one file."""

    line_covered: int = 0
    line_total: int = 0
    function_covered: int = 0
    function_total: int = 0
    branch_covered: int = 0
    branch_total: int = 0

    @classmethod
    def of(cls, summary: dict) -> Figures:
        """From gcovr's JSON summary (the whole, or one entry of its "files")."""
        values = {}
        for what, _ in KINDS:
            for part in ("covered", "total"):
                value = summary.get(f"{what}_{part}", 0)
                values[f"{what}_{part}"] = value if isinstance(value, int) and value >= 0 else 0
        return cls(**values)

    def summary(self) -> str:
        parts = []
        for what, plural in KINDS:
            total, covered = getattr(self, f"{what}_total"), getattr(self, f"{what}_covered")
            if total:
                parts.append(f"{plural} {covered / total:.1%} ({covered} of {total})")
        return ", ".join(parts) or "no code under test was compiled with instrumentation"


@dataclass
class Measured:
    """One report's figures: the whole, and each source file's (path under the rootdir)."""

    total: Figures
    files: dict[str, Figures] = field(default_factory=dict)


class CoverageReport:
    """--ondevice-coverage: registered on the controller; writes the report once the devices'
    counts are in (finish(), from the session's end), says it in the terminal summary, and
    keeps the figures for the history (per board, None for all boards together)."""

    def __init__(
        self,
        data: Path,
        rootdir: Path,
        out: Path,
        test_patterns: tuple[str, ...],
        unmeasured: dict[str, str] | None = None,
        filters: tuple[str, ...] = (),
    ) -> None:
        self.data, self.rootdir, self.out, self.test_patterns = data, rootdir, out, test_patterns
        self.unmeasured = unmeasured or {}  # selected boards this session cannot instrument, and why
        self.filters = filters
        self.figures: dict[str | None, Measured] = {}
        self.lines: list[str] | None = None

    def finish(self) -> list[str]:
        """The report, written once."""
        if self.lines is None:
            self.lines = self.write()
        return self.lines

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.section("ondevice coverage")
        for line in self.finish():
            terminalreporter.write_line(line)

    def write(self) -> list[str]:
        boards = gather(self.data)
        lines = [f"{name}: not measured ({why})" for name, why in self.unmeasured.items()]
        if not boards:
            return lines or ["no instrumented code was built"]
        sent: dict[str, SentRuns] = {}
        for name, board in boards.items():
            if (self.data / "sent" / name).is_dir():
                try:
                    sent[name] = fold_sent(self.data, name, board.compiler)
                except CoverageError as e:
                    lines.append(f"{name}: {e}")
        count(self.data, boards)
        traces = []
        for name, board in sorted(boards.items()):
            lines += _sent_notes(name, sent.get(name))
            if not board.counted:
                why = (
                    "no run sent them"
                    if name in sent
                    else "none of its binaries ran"
                    if board.kind == "baremetal"
                    else "its transport does not bring them back"
                )
                lines.append(f"{name}: no counts came back from the device ({why})")
                continue
            try:
                trace, self.figures[name] = self._board(name, board)
            except CoverageError as e:
                lines.append(f"{name}: {e}")
                continue
            traces.append(trace)
            lines.append(f"{name}: {self.figures[name].total.summary()} ({self.out / name / 'index.html'})")
        if traces:
            try:
                merged = self.figures[None] = self._merged(traces)
                lines.append(f"all boards: {merged.total.summary()}")
                if len(merged.files) <= FILES_LISTED:
                    lines += [f"  {path}: {f.summary()}" for path, f in sorted(merged.files.items())]
                lines.append(f"reports: {self.out / 'coverage.xml'} (Cobertura), {self.out / 'index.html'}")
            except CoverageError as e:
                lines.append(f"merged report: {e}")
        return lines

    def _board(self, name: str, board: BoardData) -> tuple[Path, Measured]:
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

    def _merged(self, traces: list[Path]) -> Measured:
        return self._report(traces, self.out)

    def _report(self, traces: list[Path], where: Path, more: tuple[str, ...] | list[str] = ()) -> Measured:
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
            files = {str(f["filename"]): Figures.of(f) for f in data.get("files", []) if isinstance(f, dict)}
            return Measured(Figures.of(data), files)
        except (OSError, ValueError, KeyError, AttributeError) as e:
            raise CoverageError(f"gcovr's summary {summary} cannot be read: {e}") from None

    def _gcovr(self, args: list[str]) -> None:
        excluded = [arg for p in self.test_patterns for arg in ("--exclude", fnmatch.translate(f"*{p}"))]
        excluded += [arg for f in self.filters for arg in ("--filter", f)]
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
