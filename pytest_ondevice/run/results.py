"""What became of one binary: one type per outcome, each carrying the attempts cut short on
the way. Every item of the binary reads the same result; the side process pickles it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..compiling.builder import Artifact
from ..farm.fleet import Device
from ..formats.verdicts import BinaryVerdicts, RunEnd


@dataclass(frozen=True)
class Rerun:
    """An attempt cut short by an infrastructure error and run again (on the same device
    after a reconnect, on another one, or here after the side process died): never hidden
    (terminal, JUnit, history)."""

    device: str
    cause: str
    log_path: Path | None
    binary_started: bool  # it broke while the binary ran: the binary may have done it

    def describe(self) -> str:
        log = f" (log: {self.log_path})" if self.log_path else ""
        return f"{self.device}: {self.cause}{log}"


@dataclass(frozen=True, kw_only=True)
class Attempts:
    """What every outcome carries: the attempts before it, oldest first, and the devices of
    a fleet it could not run on first ("device: error")."""

    reruns: tuple[Rerun, ...] = ()
    retried: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Ran(Attempts):
    """Verdicts: from a run, or decided without one (every case compiled out, or skipped)."""

    verdicts: BinaryVerdicts
    artifact: Artifact | None = None
    log_path: Path | None = None
    end: RunEnd | None = None
    timeout: float | None = None
    device: Device | None = None


@dataclass(frozen=True, kw_only=True)
class Built(Attempts):
    """--build-only: built and verified, never run."""

    artifact: Artifact


@dataclass(frozen=True, kw_only=True)
class BuildFailed(Attempts):
    """The code's own failure (it does not compile, link or fit): its items fail."""

    message: str


@dataclass(frozen=True, kw_only=True)
class InfraError(Attempts):
    """What kept the binary from a verdict that was not the code's (a device, a link, the
    cache, a missing toolchain): its items are errors naming the cause."""

    message: str
    artifact: Artifact | None = None
    log_path: Path | None = None
    device: Device | None = None
    binary_started: bool = False  # it struck while the binary ran
    transient: bool = False  # a lost link (worth a fresh connection)


BinaryResult = Ran | Built | BuildFailed | InfraError
