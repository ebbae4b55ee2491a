"""A CMake project's tests as pytest items: the project's CMakeLists.txt (ondevice_cmake
in the ini) is configured for each selected board, CTest lists the tests, and each test
becomes one item per case of the framework its sources use, under the source that declares
the case, as a test file of ours would (`src/foo_test.cc::Suite.Case[rpi]`).

gtest_discover_tests' (and catch_discover_tests') one CTest test per case are run as one
binary again; a test whose
framework is not recognised is one item decided by its exit status, as CTest decides it;
LABELS are pytest markers (`-m fast`); DISABLED is a skip saying so. The project configured
or listed wrong is a collection error naming CMake's message, never a test's failure.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from .. import formats
from ..compiling import cmake, toolchain
from ..config import dirconfig
from ..config.keys import SESSION_KEY, selected_boards
from ..config.schema import ConfigError
from ..formats.discover import Case
from ..run.life import cmake_build_dir
from ..run.spec import BinarySpec, CTestRun
from .items import OnDeviceItem

# what a framework's discover_tests adds to run one case: gtest's, doctest's, Boost.Test's
# (catch_discover_tests gives the case's name itself)
PER_CASE = ("--gtest_filter=", "--gtest_also_run_disabled_tests", "--test-case=", "--run_test=")


def project_of(config: pytest.Config) -> cmake.CMakeProject | None:
    """The CMake project the run is for: the ini's ondevice_cmake (relative to the ini
    file), else the [cmake] table of the ondevice.toml beside it; None when neither says.
    Read once a session (every collected file asks)."""
    if PROJECT_KEY not in config.stash:
        config.stash[PROJECT_KEY] = _project(config)
    return config.stash[PROJECT_KEY]


def _project(config: pytest.Config) -> cmake.CMakeProject | None:
    base = config.inipath.parent if config.inipath else config.rootpath
    where = config.getini("ondevice_cmake")
    if where:
        cache = []
        for entry in config.getini("ondevice_cmake_cache"):
            name, _, value = entry.partition("=")
            cache.append((name.strip(), value.strip()))
        return cmake.CMakeProject(
            (base / where).resolve(),
            tuple(cache),
            tuple(config.getini("ondevice_cmake_targets")),
            tuple(config.getini("ondevice_cmake_labels")),
            tuple(config.getini("ondevice_cmake_exclude_labels")),
        )
    toml = base / "ondevice.toml"
    if not toml.is_file():
        return None
    try:
        table = dirconfig.cmake_table(toml)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    if table is None:
        return None
    return cmake.CMakeProject(
        table["source"],
        tuple((name, _cache_value(value)) for name, value in table.get("cache", {}).items()),
        tuple(table.get("targets", ())),
        tuple(table.get("labels", ())),
        tuple(table.get("exclude_labels", ())),
        tuple((name, tuple(paths)) for name, paths in table.get("data", {}).items()),
    )


def xdist_scope(config: pytest.Config) -> Callable[[str], str | None] | None:
    """xdist's unit of work for the project's items: one binary (its source on a board), or
    the whole project on a board when CTest's fixtures tie its tests together (they run on
    one worker, in order). Read from the board's build tree, which the workers' collection
    configured before the controller schedules."""
    project = project_of(config)
    if project is None:
        return None
    engine = config.stash.get(SESSION_KEY, None)
    root = config.rootpath
    tied: dict[str, bool] = {}

    def scope_of(nodeid: str) -> str | None:
        path, sep, name = nodeid.partition("::")
        if not sep or not name.endswith("]") or not (root / path).resolve().is_relative_to(project.source):
            return None
        board = name.rsplit("[", 1)[-1][:-1]
        if board not in tied:
            where = cmake_build_dir(engine, board, project) if engine is not None else None
            tied[board] = where is not None and _has_fixtures(where)
        return f"{project.source}::[{board}]" if tied[board] else f"{path}::[{board}]"

    return scope_of


def _has_fixtures(build_dir: Path) -> bool:
    return any("FIXTURES_" in f.read_text(errors="replace") for f in build_dir.rglob("CTestTestfile.cmake"))


def _cache_value(value: object) -> str:
    """A TOML value as CMake's cache takes it: true is ON."""
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    return str(value)


PROJECT_KEY = pytest.StashKey["cmake.CMakeProject | None"]()


class ProjectError(Exception):
    """The project could not be configured, built or listed for a board: the collection's error."""


Entry = tuple[BinarySpec, list[Case], tuple[str, ...], bool]  # spec, cases, labels, disabled


@dataclass(frozen=True)
class ProjectTests:
    by_source: dict[Path, list[Entry]]  # set-ups first, clean-ups last
    unbuilt: list[tuple[str, str, str]]  # test targets not built whose tests are unknown: (target, board, why)
    notes: list[str]  # said as warnings (a cache variable the project never read)


def project_tests(config: pytest.Config) -> ProjectTests:
    """Each selected board's tests, by the source that declares them, and what else the
    collection says. Once a session: the CMakeLists.txt asks, and so does a source named on
    the command line."""
    if TESTS_KEY not in config.stash:
        config.stash[TESTS_KEY] = _project_tests(config)
    return config.stash[TESTS_KEY]


def _project_tests(config: pytest.Config) -> ProjectTests:
    engine = config.stash[SESSION_KEY]
    project = project_of(config)
    assert project is not None
    by_source: dict[Path, list[Entry]] = {}
    unbuilt = []
    notes: list[str] = []
    for board_name in selected_boards(config):
        board = engine.registry.get(board_name)
        where = cmake_build_dir(engine, board.name, project)
        try:
            tc = toolchain.resolve(board)
            built = cmake.configured_and_built(project, board, tc, where, engine.settings.jobs)
        except (toolchain.ToolchainError, cmake.CMakeError) as e:
            raise ProjectError(str(e)) from None
        configured, failed = engine.builder.once(("cmake", board.name, project.source), lambda b=built: b)
        if not configured.tests:
            raise ProjectError(
                f"CTest lists no test in {where} (for {board.name}): is testing on (enable_testing() or "
                "include(CTest)), and the project's own option for its tests? What CMake said: "
                f"{where / cmake.CONFIGURE_LOG}"
            )
        for name in configured.unused:
            notes.append(f"{board.name}: the project did not read the cache variable {name} (misspelt?)")
        runs = _runs(project, configured)
        listed = {run.target for run, _ in runs}
        for target in sorted(set(failed) - listed - {""}):  # a test target nothing else would name
            if configured.targets[target].kind == "EXECUTABLE" and configured.discovered(target):
                why = f"CMake did not build {target} for {board.name}, so its discovery step listed no test:"
                unbuilt.append((target, board.name, f"{why}\n{failed[target]}"))
        for run, tests in runs:
            target = configured.targets[run.target]
            spec, source, cases = _spec(config.rootpath, board, run, target, tests)
            labels = tuple(dict.fromkeys(label for t in tests for label in t.labels))
            by_source.setdefault(source, []).append((spec, cases, labels, all(t.disabled for t in tests)))
    for entries in by_source.values():  # CTest's fixtures: set-ups first, clean-ups last
        entries.sort(key=_phase)
    ordered = dict(sorted(by_source.items(), key=lambda kv: min(_phase(e) for e in kv[1])))
    return ProjectTests(ordered, unbuilt, notes)


TESTS_KEY = pytest.StashKey[ProjectTests]()


class CMakeFile(pytest.File):
    """The project's CMakeLists.txt: each selected board's tests, grouped by source."""

    def collect(self) -> Iterator[pytest.Collector | pytest.Item]:
        try:
            found = project_tests(self.config)
        except ProjectError as e:
            raise self.CollectError(str(e)) from None
        for note in found.notes:
            self.warn(pytest.PytestWarning(note))
        for target, board, why in found.unbuilt:
            yield NotBuilt.from_parent(self, name=f"{target}[{board}]", why=why)
        for source, specs in found.by_source.items():
            yield CTestSource.from_parent(self, path=source, nodeid=_rel(source, self.config.rootpath), specs=specs)


def cmake_source(parent: pytest.Collector, path: Path) -> pytest.Collector | None:
    """A source of the project named on the command line (`pytest tests/x.c::case[host]`):
    its items, as the CMakeLists.txt would give them."""
    try:
        by_source = project_tests(parent.config).by_source
    except ProjectError:
        return CMakeFile.from_parent(parent, path=project_of(parent.config).source / "CMakeLists.txt")  # type: ignore[union-attr]
    if path not in by_source:
        return None
    return CTestSource.from_parent(parent, path=path, specs=by_source[path])


class NotBuilt(pytest.Item):
    """A test target CMake did not build, whose tests are unknown (its discovery runs it): an
    error naming the build's message, and the other tests run."""

    def __init__(self, *, why: str, **kw) -> None:
        super().__init__(**kw)
        self.why = why

    def setup(self) -> None:
        raise ProjectError(self.why)

    def runtest(self) -> None:  # pragma: no cover - setup always raises
        raise ProjectError(self.why)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value) if excinfo.errisinstance(ProjectError) else super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


def _phase(entry: tuple) -> int:
    return entry[0].ctest.phase


class CTestSource(pytest.File):
    """A source of the project that declares cases (or the first source of a test's target)."""

    def __init__(self, *, specs: list, **kw) -> None:
        super().__init__(**kw)
        self.specs = specs

    def collect(self) -> Iterator[pytest.Item]:
        for spec, cases, labels, disabled in self.specs:
            harness = formats.named(spec.format)
            for case in cases:
                name = f"{case.name}[{spec.board.name}]"
                item = OnDeviceItem.from_parent(
                    self, name=name, nodeid=f"{self.nodeid}::{name}", spec=spec, case=case.name, line=case.line
                )
                for label in labels:
                    self.config.addinivalue_line("markers", f"{label}: a CTest label")
                    item.add_marker(label)
                if disabled:
                    item.add_marker(pytest.mark.skip(reason="DISABLED in CTest (set_tests_properties)"))
                elif spec.board.kind not in harness.kinds:
                    kinds = " or ".join(harness.kinds)
                    why = f"{harness.name} tests need a {kinds} board; {spec.board.name} is {spec.board.kind}"
                    item.add_marker(pytest.mark.skip(reason=why))
                yield item


def _runs(project: cmake.CMakeProject, configured: cmake.Configured) -> list[tuple[CTestRun, list[cmake.CTestTest]]]:
    """One run per executable and argument set: gtest_discover_tests' entries of one
    binary (each filtered to its case) are one run of all its cases again."""
    groups: dict[tuple, tuple[CTestRun, list[cmake.CTestTest]]] = {}
    for test in configured.tests:
        if not project.selects(test.labels):
            continue
        found = _executable(configured, test.command)
        if found is None:  # not built (the run says why), or not the project's (a script, cmake -E)
            found = _unbuilt(configured, test)
        if found is None:
            continue
        index, target = found
        if project.targets and target.name not in project.targets:  # not built: asked for others
            continue
        executable = Path(test.command[index]) if index >= 0 else target.artifacts[0]
        args = tuple(a for a in test.command[index + 1 :] if not a.startswith(PER_CASE) and a != test.name)
        key = (target.name, args, test.cwd, test.env, test.sets_up, test.cleans_up)
        if key not in groups:
            run = CTestRun(
                project,
                target.name,
                executable,
                args,
                test.cwd,
                test.env,
                _data(test, project),
                test.timeout,
            )
            groups[key] = (run, [])
        groups[key][1].append(test)
    setups: dict[str, list[str]] = {}
    for test in configured.tests:
        for name in test.sets_up:
            setups.setdefault(name, []).append(test.name)
    return [(_with_fixtures(run, tests, setups), tests) for run, tests in groups.values()]


def _with_fixtures(run: CTestRun, tests: list[cmake.CTestTest], setups: dict[str, list[str]]) -> CTestRun:
    """The run's CTest names and fixtures: what it needs set up first (and by which tests),
    what it sets up, what it cleans up after the others."""
    requires = tuple(dict.fromkeys(f for t in tests for f in t.fixtures))
    return replace(
        run,
        tests=tuple(t.name for t in tests),
        requires=requires,
        setup_tests=tuple(dict.fromkeys(name for f in requires for name in setups.get(f, ()))),
        sets_up=tuple(dict.fromkeys(f for t in tests for f in t.sets_up)),
        cleans_up=tuple(dict.fromkeys(f for t in tests for f in t.cleans_up)),
    )


def _executable(configured: cmake.Configured, command: tuple[str, ...]) -> tuple[int, cmake.Target] | None:
    """Where the project's executable is in a test's command (after an emulator, if any)."""
    for index, word in enumerate(command):
        target = configured.target_of(Path(word))
        if target is not None and target.kind == "EXECUTABLE":
            return index, target
    return None


def _unbuilt(configured: cmake.Configured, test: cmake.CTestTest) -> tuple[int, cmake.Target] | None:
    """A test whose executable CMake did not build: CTest lists it with no command. Its
    target, when its name says it, so that its items are errors naming the build's."""
    if test.command:
        return None
    for name in (test.name, test.name.split("_NOT_BUILT")[0]):  # catch_discover_tests adds -HASH
        target = configured.targets.get(name)
        if target is not None and target.kind == "EXECUTABLE" and target.artifacts:
            return -1, target
    return None


def _data(test: cmake.CTestTest, project: cmake.CMakeProject) -> tuple[Path, ...]:
    """What a test reads from its working directory: what [cmake.data] says it reads, and
    each of its REQUIRED_FILES (or the directory below the working directory that holds it,
    so that its path from there is the same)."""
    if test.cwd is None:
        return ()
    found: dict[Path, None] = {}
    for pattern, paths in project.data:
        if fnmatch.fnmatchcase(test.name, pattern):
            found.update(dict.fromkeys(test.cwd / p for p in paths))
    for path in test.required_files:
        try:
            rel = path.relative_to(test.cwd)
        except ValueError:
            continue
        found[test.cwd / rel.parts[0]] = None
    return tuple(found)


def _spec(
    root: Path, board, run: CTestRun, target: cmake.Target, tests: list[cmake.CTestTest]
) -> tuple[BinarySpec, Path, list[Case]]:
    """The binary's spec, the source its items sit under, and its cases: the framework's
    that the target's sources declare, else one case per CTest test decided by exit status."""
    ours = {*board.toolchain.runtime, *(formats.HARNESS_DIR / h for *_, h in cmake.FRAMEWORK_HOOKS.values())}
    sources = [
        s
        for s in target.sources
        if s.suffix in (".c", ".cc", ".cpp", ".cxx", ".C") and s not in ours and s.is_file()  # not our hooks
    ]
    for source in sources:
        text = source.read_text(encoding="utf-8", errors="replace")
        harness = formats.for_source(text)
        found = harness.find_cases(text) if _recognised(harness, text) else []
        if found:
            spec = BinarySpec(
                board,
                source,
                _rel(source, root),
                harness.device_order(found),
                tuple((c.name, c.line) for c in found),
                harness.name,
                ctest=run,
            )
            return spec, source, found
    source = sources[0] if sources else (run.project.source / "CMakeLists.txt")
    will_fail = len(tests) == 1 and tests[0].will_fail
    name = tests[0].name if len(tests) == 1 else target.name
    spec = BinarySpec(
        board,
        source,
        f"{_rel(source, root)}.{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}",  # one executable may be several tests
        (name,),
        ((name, tests[0].line or 1),),
        "exitcode_will_fail" if will_fail else "exitcode",
        ctest=run,
    )
    return spec, source, [Case(name, tests[0].line or 1, "ctest")]


def _recognised(harness: formats.Format, text: str) -> bool:
    """Whether the source includes a framework's header whose hook CMake builds get (its
    verdicts are then believed); any other test is decided by its exit status."""
    return harness.name in cmake.RECOGNISED and any(h in text for h in harness.headers)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name
