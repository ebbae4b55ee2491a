"""Cases the preprocessor removed for a board (an `#ifdef` around a case): skipped, saying
which directive, never reported as "not run". Asked only about cases the device never
started after a normal end, and about a file with nothing left to link."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config.dirconfig import DirConfig
from ..config.schema import ConfigError
from ..formats.verdicts import NEVER_STARTED, BinaryVerdicts, Outcome, Verdict
from . import toolchain
from .builder import Builder, BuildError
from .store import CacheError

if TYPE_CHECKING:  # a type only: the session's record of the binary
    from ..run.spec import BinarySpec

Config = Callable[[], DirConfig]  # the source's ondevice.toml settings, read when needed


def skip_compiled_out(builder: Builder, spec: BinarySpec, config: Config, verdicts: BinaryVerdicts) -> None:
    """Each case the device never started that the board's preprocessor removes is skipped."""
    if spec.crate is not None:  # a #[test] the binary lacks: removed by #[cfg] for this target
        for name, v in verdicts.cases.items():
            if v.outcome is Outcome.FAILED and v.message.startswith(NEVER_STARTED):
                verdicts.cases[name] = Verdict(
                    Outcome.SKIPPED, f"not in the test binary for {spec.board.name} (left out by a #[cfg]?)"
                )
        return
    never = {
        name: line
        for name, line in spec.lines
        if verdicts.cases.get(name) is not None and verdicts.cases[name].message.startswith(NEVER_STARTED)
    }
    removed = _removed(builder, spec, config, never) if never else None
    if removed:  # None: cannot tell, the case stays "not run"
        verdicts.cases.update(_skips(spec, removed))


def all_compiled_out(builder: Builder, spec: BinarySpec, config: Config) -> BinaryVerdicts | None:
    """For a file that did not link (no main left): its skips, when an #ifdef removed every case."""
    removed = _removed(builder, spec, config, dict(spec.lines))
    if spec.cases and removed is not None and set(removed) >= set(spec.cases):
        return BinaryVerdicts(_skips(spec, removed, " (every case of the file: nothing to run)"), {}, [])
    return None


def _removed(builder: Builder, spec: BinarySpec, config: Config, cases: dict[str, int]) -> dict[str, str] | None:
    """Which of these cases the preprocessor removes for the board, with the directive."""
    try:
        return builder.compiled_out(spec.board, toolchain.resolve(spec.board), config(), spec.source, cases)
    except (BuildError, toolchain.ToolchainError, CacheError, ConfigError):
        return None


def _skips(spec: BinarySpec, removed: dict[str, str], note: str = "") -> dict[str, Verdict]:
    return {
        name: Verdict(Outcome.SKIPPED, f"compiled out on {spec.board.name}: `{condition}`{note}")
        for name, condition in removed.items()
    }
