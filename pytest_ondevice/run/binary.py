"""One test binary as it passes through the stages (what to build and run, for which
board) and what became of it (verdicts, or the error that kept it from them, and every
attempt cut short on the way): the records the session, the farm and the items share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..compiling.builder import Artifact
from ..config.board import Board
from ..farm.fleet import Device
from ..formats import NO_NEEDS, Needs
from ..formats.protocol import BinaryVerdicts, RunEnd


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

    @property
    def key(self) -> tuple[str, Path]:
        return (self.board.name, self.source)


@dataclass(frozen=True)
class Rerun:
    """An attempt cut short by an infrastructure error and run again (on the same device
    after a reconnect, or on another one): never hidden (terminal, JUnit, history)."""

    device: str
    cause: str
    log_path: Path | None
    binary_started: bool  # it broke while the binary ran: the binary may have done it

    def describe(self) -> str:
        log = f" (log: {self.log_path})" if self.log_path else ""
        return f"{self.device}: {self.cause}{log}"


@dataclass
class BinaryResult:
    verdicts: BinaryVerdicts | None = None
    build_error: str | None = None  # the binary's items fail with this
    infra_error: str | None = None  # the binary's items error with this
    log_path: Path | None = None
    end: RunEnd | None = None
    artifact: Artifact | None = None
    timeout: float | None = None
    device: Device | None = None  # where it ran (the last device tried)
    retried: list[str] | None = None  # "device: error" of the devices it failed on first
    reruns: list[Rerun] = field(default_factory=list)  # the attempts before this one, oldest first
    binary_started: bool = False  # the infra_error struck while the binary ran
    transient: bool = False  # the infra_error was a lost link (worth a fresh connection)
