"""pytest nodes: a C/C++ test source is a File, each test case an Item per board."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from _pytest import nodes
from _pytest._code.code import TerminalRepr

from .. import formats
from ..compiling import toolchain
from ..config.board import Board
from ..config.keys import BASELINE_KEY, BUILT, CUDA_SUFFIX, SESSION_KEY, selected_boards
from ..config.schema import ConfigError
from ..formats import Format, FormatError
from ..formats.benchline import MEMORY_UNIT, RSS_NAME
from ..formats.devlog import describe_end
from ..formats.discover import Case
from ..formats.failure import CaseFailureRepr, SourceSearch, located
from ..formats.linemarkers import Expanded
from ..formats.verdicts import Outcome, Verdict
from ..records.bench import BenchRecordError, as_property, compare, measure
from ..records.bench import key as bench_key
from ..run.engine import Engine
from ..run.results import BinaryResult, BuildFailed, Built, InfraError, Ran
from ..run.spec import BinarySpec
from .quietphases import QuietPhases, quiet_callers

BINARY_ITEM = "binary"  # the item of a file whose cases the source scan cannot see


class CaseFailed(Exception):
    """A case failed on the device (or could not be built): shown without a traceback, with
    the source lines its failures name."""

    def __init__(self, message: str, footer: tuple[str, ...] = ()) -> None:
        super().__init__("\n".join([message, *footer]))
        self.message = message
        self.footer = footer


class DeviceInfrastructureError(Exception):
    """The device could not be used: reported as an error, not a test failure."""


def _session(node: nodes.Node) -> Engine:
    return node.config.stash[SESSION_KEY]


class OnDeviceFile(pytest.File):
    def collect(self):
        session = _session(self)
        text = self.path.read_text(encoding="utf-8", errors="replace")
        harness = _format_of(session, self.path, text)
        # No visible case (all made by a macro): one item still builds and runs the binary,
        # and every case the device prints is reported; a file is never silently dropped.
        found = harness.find_cases(text)
        cases = found or [Case(BINARY_ITEM, 1, "binary")]
        rel = _rel(self.path, self.config.rootpath)
        order, needs = harness.device_order(found), harness.needs(text)
        for board_name in selected_boards(self.config):
            board = session.registry.get(board_name)
            lines = tuple((c.name, c.line) for c in found)
            spec = BinarySpec(board, self.path.resolve(), rel, order, lines, harness.name, needs)
            for case in cases:
                name = f"{case.name}[{board.name}]"
                item = OnDeviceItem.from_parent(
                    self,
                    name=name,
                    # given as a string so pytest >= 9.2 parses "[board]" as parameters,
                    # as it does for the ids --lf reads back from its cache
                    nodeid=f"{self.nodeid}::{name}",
                    spec=spec,
                    case=case.name,
                    line=case.line,
                    also_at=case.also_at,
                )
                if case.bench:
                    item.add_marker("bench")
                if board.kind not in harness.kinds:
                    kinds = " or ".join(harness.kinds)
                    reason = f"{harness.name} tests need a {kinds} board; {board.name} is {board.kind}"
                    item.add_marker(pytest.mark.skip(reason=reason))
                elif self.path.suffix == CUDA_SUFFIX and not board.cuda.archs:
                    reason = f"a CUDA test needs a board with a GPU ([cuda] archs in its file); {board.name} has none"
                    item.add_marker(pytest.mark.skip(reason=reason))
                yield item


class RustFile(pytest.File):
    """A .rs file of a Cargo crate: its #[test]s are items; the test binary of the target
    that holds them (lib, bin or an integration test) runs once for all of them."""

    crate: Path  # set as it is made (collector)

    @classmethod
    def collector(cls, parent: pytest.Collector, path: Path) -> RustFile | None:
        crate = _crate_of(path, parent.config.rootpath)
        if crate is None:
            return None
        node = cls.from_parent(parent, path=path)
        node.crate = crate
        return node

    def collect(self) -> Iterator[pytest.Item]:
        from ..compiling import cargo

        try:
            targets = _targets(self.crate)
        except cargo.CargoError as e:
            raise self.CollectError(str(e)) from None
        mine = self.path.resolve()
        harness = formats.named("libtest")
        seen: set[str] = set()
        for target in targets:
            cases = [c for c in target.cases if c.file == mine and c.name not in seen]
            if target.all_unnamed and target.root.resolve() == mine:
                # every test is made by a macro: one item builds and runs the binary, and the
                # tests it runs are reported as found on the device (as for a C file)
                cases = [cargo.RustCase(BINARY_ITEM, mine, 1, False)]
            if not cases:
                continue
            seen.update(c.name for c in cases)
            order = tuple(sorted(c.name for c in target.cases))
            rel = _rel(target.root, self.config.rootpath)
            for board_name in selected_boards(self.config):
                board = _session(self).registry.get(board_name)
                spec = BinarySpec(
                    board,
                    target.root,
                    rel,
                    order,
                    (),
                    harness.name,
                    crate=target.crate,
                    target=(target.kind, target.name),
                )
                for case in cases:
                    name = f"{case.name}[{board.name}]"
                    item = OnDeviceItem.from_parent(
                        self, name=name, nodeid=f"{self.nodeid}::{name}", spec=spec, case=case.name, line=case.line
                    )
                    if board.kind not in harness.kinds:
                        item.add_marker(pytest.mark.skip(reason=f"Rust tests need std: {board.name} is {board.kind}"))
                    yield item


@functools.cache
def _targets(crate: Path):
    from ..compiling import cargo

    return cargo.find_targets(crate)


def _crate_of(path: Path, root: Path) -> Path | None:
    """The crate a .rs file belongs to: the nearest Cargo.toml above it, not above the rootdir."""
    root = root.resolve()
    for d in path.resolve().parents:
        if (d / "Cargo.toml").is_file():
            return d
        if d == root:
            return None
    return None


def _format_of(session: Engine, path: Path, text: str) -> Format:
    """The harness ondevice.toml declares for this source, else the one it includes. A
    broken ondevice.toml is reported when the binary is built (its items error there)."""
    try:
        cfg = session.dir_config(path)
        declared = cfg.for_file(path.resolve()).format
    except ConfigError:
        cfg, declared = None, None
    try:
        return formats.for_source(text, declared, str(cfg.path) if cfg is not None and cfg.path else "")
    except FormatError as e:
        raise pytest.Collector.CollectError(str(e)) from None


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


# (board, source) -> the item whose report shows the binary's build error in full
BUILD_ERROR_SHOWN = pytest.StashKey["dict[tuple, str]"]()


class DeviceVerdictItem(pytest.Item):
    """An item whose outcome is a device's verdict: a failure is shown with its source lines
    (pytest-cpp style), an unusable device as its cause, without a traceback of ours."""

    failure_line = 1  # where pytest's short summary and JUnit place a failure

    def raise_unless_passed(self, verdict: Verdict, failure: tuple[str, tuple[str, ...]]) -> None:
        """Skip or fail as the device said, with its log as the case's captured stdout."""
        if verdict.outcome is Outcome.PASSED:
            return
        if verdict.log:
            # as captured stdout: JUnit's system-out carries it (-o junit_logging=all)
            self.add_report_section("call", "stdout (device log)", verdict.log.rstrip("\n") + "\n")
        if verdict.outcome is Outcome.SKIPPED:
            raise pytest.skip.Exception(verdict.message or "skipped on device", _use_item_location=True)
        raise CaseFailed(*failure)

    def source_search(self) -> SourceSearch:
        """Where the files a failure line names are looked for: the project, the source's
        directory, its include path (ondevice.toml)."""
        dirs: tuple[Path, ...] = (self.path.parent,)
        included: tuple[Path, ...] = ()
        expanded: Expanded | None = None
        session, spec = self.config.stash.get(SESSION_KEY, None), getattr(self, "spec", None)
        if session is not None and spec is not None:
            with contextlib.suppress(ConfigError):
                dirs += session.dir_config(spec.source).for_file(spec.source, spec.board.name).flags.include_dirs
            if spec.crate is None and spec.ctest is None:  # a failure only: one -E or -MM a binary
                with contextlib.suppress(Exception):  # the line then shows as printed
                    cfg = session.dir_config(spec.source)
                    tc = toolchain.resolve(spec.board)
                    if spec.format == "unity":  # Unity names a wrapper's file with an included file's line
                        with contextlib.suppress(Exception):  # then the files' text is searched
                            expanded = session.builder.expanded(spec.board, tc, cfg, spec.source)
                    if expanded is None:
                        included = session.builder.included(spec.board, tc, cfg, spec.source)
        return SourceSearch(self.config.rootpath, dirs, getattr(self, "case", ""), included, expanded)

    def repr_failure(self, excinfo, style=None) -> str | TerminalRepr:
        if isinstance(excinfo.value, CaseFailed):
            where = (str(self.path), self.failure_line)
            return CaseFailureRepr(excinfo.value.message, self.source_search(), list(excinfo.value.footer), where)
        return super().repr_failure(excinfo, style=style)  # pytest's asks _repr_failure_py, below

    def _repr_failure_py(self, excinfo, style=None) -> str | TerminalRepr:  # type: ignore[override]  # pytest's own reprs return str too
        """What pytest asks of an error in setup, and repr_failure of one in the call: a
        device's trouble is its message, never a traceback of our plumbing. Formatting one
        cost about 50 ms an item (the source of every frame parsed): a quarantined board's
        70,000 remaining cases took 13 minutes to report."""
        if isinstance(excinfo.value, DeviceInfrastructureError):
            return str(excinfo.value)
        return super()._repr_failure_py(excinfo, style=style)


class OnDeviceItem(DeviceVerdictItem):
    def __init__(self, *, spec: BinarySpec, case: str, line: int, also_at: tuple[int, ...] = (), **kw) -> None:
        super().__init__(**kw)
        self.spec = spec
        self.case = case
        self.line = self.failure_line = line
        self.also_at = also_at  # lines of other cases with this name
        self.add_marker("ondevice")
        self.user_properties.append(("board", spec.board.name))
        self._result: BinaryResult | None = None
        self._quiet: QuietPhases | None = None

    @property
    def ihook(self):
        """The quiet phases' hooks for a case going without capture (quietphases)."""
        return self._quiet or super().ihook

    def decide_phases(self, nextitem: pytest.Item | None) -> None:
        """At the start of its protocol: quiet, or pytest's capture in all three phases (its
        log plugin drops in teardown what its setup left on the item)."""
        callers = quiet_callers(self, nextitem, _session(self).has_result(self.spec))
        self._quiet = QuietPhases(super().ihook, callers) if callers is not None else None

    def phases_done(self) -> None:
        """Its protocol is over: the proxy goes, not kept (with its dict) to the session's end."""
        self._quiet = None

    def setup(self) -> None:
        session = _session(self)
        self._result, fresh = session.result(self.spec)
        result = self._result
        self.user_properties.extend(_ran_on(result))
        if result.retried:  # infrastructure trouble first, then a verdict from another device
            self.user_properties.append(("retried_after", "; ".join(result.retried)))
        self.user_properties.extend(_rerun_properties(result))
        if fresh and isinstance(result, Ran):
            _report_found_on_device(self, result)
        if isinstance(result, InfraError):
            raise DeviceInfrastructureError(f"{self.spec.board.name}: {result.message}")
        if result.reruns and _strict_reruns(self.config) and self._verdict().outcome is Outcome.PASSED:
            raise DeviceInfrastructureError(
                f"{self.spec.board.name}: {self.case} passed only after its binary was tried "
                f"{len(result.reruns) + 1} times (--strict-reruns makes that an error): "
                + "; ".join(f"cut short on {r.describe()}" for r in result.reruns)
            )

    def runtest(self) -> None:
        result = self._result
        assert result is not None
        if isinstance(result, BuildFailed):
            shown = self.config.stash.setdefault(BUILD_ERROR_SHOWN, {})
            first = shown.setdefault(self.spec.key, self.nodeid)
            if first != self.nodeid:  # one error for the whole binary: in full once
                raise CaseFailed(
                    f"build failed for board {self.spec.board.name}: the error is shown in full at {first}"
                )
            raise CaseFailed(f"build failed for board {self.spec.board.name}:\n{result.message}")
        if isinstance(result, Built):  # --build-only: reported as built (plugin.pytest_report_teststatus)
            self.user_properties.append((BUILT, str(result.artifact.path)))
            return
        assert isinstance(result, Ran)  # an InfraError stopped in setup
        verdict = self._verdict()
        if self.also_at and verdict.outcome is Outcome.FAILED:
            lines = ", ".join(map(str, (self.line, *self.also_at)))
            verdict = replace(verdict, message=f"{self.case} is declared at lines {lines}\n{verdict.message}")
        regressions = self._attach_benches(result)
        if verdict.outcome is Outcome.PASSED and regressions:
            raise CaseFailed("\n".join(regressions))
        if verdict.outcome is not Outcome.PASSED:  # a pass needs no source lines looked up
            failure = _failure_text(verdict, result, self.source_search(), self.case, self.spec.board)
            self.raise_unless_passed(verdict, failure)

    def _verdict(self) -> Verdict:
        result = self._result
        assert result is not None
        if not isinstance(result, Ran):
            return Verdict(Outcome.FAILED, result.message if isinstance(result, BuildFailed) else "")
        return result.verdicts.cases[self.case] if self.spec.cases else _binary_verdict(result)

    def _attach_benches(self, result: Ran) -> list[str]:
        """Latency records ride on the report (JUnit XML properties, xdist, --bench-json);
        returns the regressions against the --bench-compare baseline."""
        baseline = self.config.stash.get(BASELINE_KEY, None)
        regressions = []
        session = _session(self)
        coverage = session.builder.covered(self.spec.board)  # a gcov build's figures are not latency
        for record in result.verdicts.benches.get(self.case, []):
            try:
                clock = session.devices.clock_for(self.spec.board, result.device)
                measured = measure(record, self.spec.board, clock, coverage)
            except BenchRecordError as e:
                raise CaseFailed(str(e)) from None
            data = measured.as_dict()
            if record.name == RSS_NAME:  # the binary's, not this case's: named after the source
                data["name"] = f"{RSS_NAME}:{self.spec.rel}"
            data.update(case=self.case, binary_sha256=result.artifact.sha256 if result.artifact else None)
            if result.device is not None:
                data["device_name"] = result.device.name
            if baseline is not None:
                base = baseline[0].get(bench_key(data))
                if base is None:
                    data["verdict"] = "new (no baseline)"
                else:
                    data["baseline"] = base["median"]
                    data["verdict"], failure = compare(data, base, baseline[1])
                    if failure:
                        regressions.append(failure)
            self.user_properties.append(("ondevice_bench", as_property(data)))
            if record.name == RSS_NAME:
                self.user_properties.append(("ondevice_peak_rss_bytes", str(record.median)))
            elif record.unit == MEMORY_UNIT:  # the stack high-water, plainly, for a CI that reads JUnit
                self.user_properties.append(("ondevice_stack_bytes", str(record.median)))
        return regressions

    def reportinfo(self) -> tuple[Path, int, str]:
        # Not the node name itself: pytest would show "Suite.Name" as "Suite::Name",
        # a node id that cannot be pasted back onto the command line.
        return self.path, self.line - 1, f"{self.case} on {self.spec.board.name}"


def _binary_verdict(result: Ran) -> Verdict:
    """The verdict of a file with no visible case: its cases are reported one by one
    (as unlisted), and the binary fails when it printed none or the run itself is wrong."""
    if result.verdicts.problems:
        return Verdict(Outcome.FAILED, "\n".join(result.verdicts.problems))
    if not result.verdicts.unknown:
        how = describe_end(result.end) if result.end is not None else "the binary ended"
        return Verdict(
            Outcome.FAILED,
            "the source scan found no test case, and the device printed none either "
            f"({how.removeprefix('pytest-ondevice: ')})",
        )
    return Verdict(Outcome.PASSED)


def _failure_text(
    verdict: Verdict, result: Ran, search: SourceSearch, case: str, board: Board
) -> tuple[str, tuple[str, ...]]:
    lines = [verdict.message or "failed on device"]
    crash = result.verdicts.crash
    if crash is not None and crash.case == case and result.artifact is not None:
        from .crashtext import crash_lines  # only a crash needs addr2line

        lines += crash_lines(crash, result.artifact.path, board, search)
    if verdict.location:
        printed = f"{verdict.location[0]}:{verdict.location[1]}"
        found = located(printed, search)
        lines.append(f"at {found[0]}:{found[1]}" if found else f"at {printed}")
    return "\n".join(lines), ((f"device log: {result.log_path}",) if result.log_path else ())


def _rerun_properties(result: BinaryResult) -> list[tuple[str, str]]:
    """Each attempt cut short and run again, and whether the binary may have caused it:
    ("rerun", ...) once per attempt, ("flaky", ...) once (JUnit, --history, the terminal)."""
    props = [("rerun", rerun.describe()) for rerun in result.reruns]
    started = [r.device for r in result.reruns if r.binary_started]
    if started:
        props.append(
            (
                "flaky",
                f"it broke off on {', '.join(dict.fromkeys(started))} while the binary ran (the binary may "
                "have caused it), then ran again",
            )
        )
    return props


def _strict_reruns(config: pytest.Config) -> bool:
    return bool(config.getoption("strict_reruns", False) or config.getini("ondevice_strict_reruns"))


def _ran_on(result: BinaryResult) -> list[tuple[str, str]]:
    """The device and binary a report is about (JUnit properties, --history)."""
    where = []
    device = result.device if isinstance(result, (Ran, InfraError)) else None
    artifact = result.artifact if isinstance(result, (Ran, InfraError, Built)) else None
    if device is not None:
        where.append(("device", device.name))
    if artifact is not None:
        where.append(("binary_sha256", artifact.sha256))
    return where


# items made while the run goes on, run by active.py right after the item that found them
FOUND_AT_RUN = pytest.StashKey["list[pytest.Item]"]()


class FoundOnDevice(DeviceVerdictItem):
    """What a binary's run showed beyond its collected cases: a case the device ran that
    the source scan did not find, or a problem of the binary as a whole (exit status and
    summary disagree). Made at run time and run through pytest's own protocol, so it
    reports like any item (terminal, JUnit, xdist, --lf) under a name that says what it is."""

    def __init__(self, *, verdict: Verdict, note: str, board: str, where: list[tuple[str, str]], **kw) -> None:
        super().__init__(**kw)
        self.verdict = verdict
        self.note = note
        self.user_properties.extend([("board", board), *where, ("found_on_device", note)])

    def runtest(self) -> None:
        self.raise_unless_passed(self.verdict, (self.verdict.message or "failed on device", (f"({self.note})",)))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.name}: {self.note}"


def _report_found_on_device(item: OnDeviceItem, result: Ran) -> None:
    """Cases the device ran that the source scan did not find, and problems of the binary
    as a whole, become items of their own, never dropped and never folded into a case."""
    board = item.spec.board.name
    found = [
        (name, verdict, f"case {name!r} ran on the device but was not found in the source")
        for name, verdict in result.verdicts.unknown.items()
    ]
    if result.verdicts.problems and item.spec.cases:  # a file without cases: its binary item says it
        problems = Verdict(Outcome.FAILED, "\n".join(result.verdicts.problems))
        found.append((BINARY_ITEM, problems, "a problem of the binary as a whole, not of one case"))
    file = item.parent
    assert file is not None  # an item's parent is its file
    extra = item.stash.setdefault(FOUND_AT_RUN, [])
    for name, verdict, note in found:
        node = f"{name}[{board}]"
        extra.append(
            FoundOnDevice.from_parent(
                file,
                name=node,
                nodeid=f"{file.nodeid}::{node}",
                verdict=verdict,
                note=note,
                board=board,
                where=_ran_on(result),
            )
        )
