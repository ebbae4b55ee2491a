"""What to build and run for one board: the record every stage of a binary's life reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..compiling.cmake import CMakeProject
from ..config.board import Board
from ..formats import NO_NEEDS, Needs


@dataclass(frozen=True)
class CTestRun:
    """One run of a CMake project's test executable: the CTest tests it stands for (one, or
    every case gtest_discover_tests listed apart), as CTest would run them."""

    project: CMakeProject
    target: str  # the CMake target that makes the executable
    executable: Path  # as CTest names it, in the board's build tree
    args: tuple[str, ...]
    cwd: Path | None  # WORKING_DIRECTORY: what the test reads from there is pushed beside it
    env: tuple[tuple[str, str], ...] = ()  # ENVIRONMENT
    data: tuple[Path, ...] = ()  # files and directories the run's directory holds
    timeout: float | None = None  # TIMEOUT
    tests: tuple[str, ...] = ()  # the CTest names
    requires: tuple[str, ...] = ()  # CTest fixtures: run after the tests that set them up
    setup_tests: tuple[str, ...] = ()  # ... those tests, by name
    sets_up: tuple[str, ...] = ()
    cleans_up: tuple[str, ...] = ()  # run after the tests that require them

    @property
    def phase(self) -> int:
        """Where CTest's fixtures put the run: set-ups first, clean-ups last."""
        return 0 if self.sets_up else 2 if self.cleans_up else 1


@dataclass(frozen=True)
class BinarySpec:
    board: Board
    source: Path
    rel: str  # source path relative to the project root, for output names
    cases: tuple[str, ...]  # as the device prints them, in its run order
    lines: tuple[tuple[str, int], ...] = ()  # (case, line of its declaration)
    format: str = "tflm"  # the test harness (formats/): how it is run and its output read
    needs: Needs = NO_NEEDS  # what the harness links
    crate: Path | None = None  # a Rust crate's directory: built by cargo, not by us
    target: tuple[str, str] | None = None  # its test binary: (kind, cargo target name)
    ctest: CTestRun | None = None  # a CMake project's test: built by CMake, not by us

    @property
    def key(self) -> tuple:
        """One binary's run: its source on a board (a CMake project may run one executable
        as several CTest tests, each with its own arguments)."""
        if self.ctest is not None:
            return (self.board.name, self.source, self.ctest.tests)
        return (self.board.name, self.source)
