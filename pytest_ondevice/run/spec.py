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
    def key(self) -> tuple[str, Path]:
        return (self.board.name, self.source)
