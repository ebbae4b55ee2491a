"""What a binary's run comes to: one verdict per case, and the binary's own remarks.

Every format's parser produces these, and the run and the pytest items read them; the
parsers that make them are in tflm_parser.py and stream.py. How the run ended (RunEnd, the
transports') is named here too: no verdict is made from the output alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..transports.contract import RunEnd
from .benchline import BenchRecord
from .crashline import Crash

__all__ = [
    "NEVER_STARTED",
    "NOT_CLOSED",
    "NO_VERDICT",
    "BinaryVerdicts",
    "Outcome",
    "RunEnd",
    "Verdict",
]

# why a case has no verdict of its own (the run side tells a compiled-out case by NEVER_STARTED)
NO_VERDICT = "no verdict: output ended while this case was running"
NOT_CLOSED = "not run: no verdict (output ended without the closing summary)"
NEVER_STARTED = "not run: the device never started this case (is it compiled out, or registered under another name?)"


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(slots=True)  # one a case, kept to the session's end: no dict of its own for the collector to walk
class Verdict:
    """The outcome a pytest item reports, with the message a user reads."""

    outcome: Outcome
    message: str = ""
    location: tuple[str, int] | None = None  # file:line of the first failure
    log: str = ""


@dataclass
class BinaryVerdicts:
    """Everything one run of a binary decided: its cases' verdicts and what belongs to no case."""

    cases: dict[str, Verdict]
    unknown: dict[str, Verdict]  # printed by the device but not found in the source
    problems: list[str]  # binary-level remarks (tally mismatch, overflow)
    benches: dict[str, list[BenchRecord]] = field(default_factory=dict)  # per case
    counts: dict[str, bytes] = field(default_factory=dict)  # .gcda files sent over the output (bare metal)
    count_problems: list[str] = field(default_factory=list)  # those dropped on the way, and why
    crash: Crash | None = None  # where the run died, as addresses (its case: the one running then)
