"""Recorded runs of a framework's binaries, read back as the runner reads a live one.

A transcript in support/<framework>/ is a pair: NAME.txt, the binary's output byte for byte,
and NAME.rc, how the run ended (capture.sh wrote both). The formats' tests replay them in
one way, so that what differs between two formats' results is the parser's doing.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from pytest_ondevice.formats.lines import LineSplitter
from pytest_ondevice.formats.verdicts import BinaryVerdicts, Outcome, RunEnd


def shell_status(rc: str) -> RunEnd:
    """An .rc holding the shell's $?: an exit code below 128, else 128 + the signal that killed it."""
    code = int(rc)
    return RunEnd(exit_code=code) if code < 128 else RunEnd(signal=signal.Signals(code - 128).name)


def code_or_signal(rc: str) -> RunEnd:
    """An .rc holding an exit code, or the name of the signal that killed the run (where an
    exit code may be 128 or more: Boost.Test's 201)."""
    rc = rc.strip()
    return RunEnd(exit_code=int(rc)) if rc.isdigit() else RunEnd(signal=rc)


def replay(
    transcript: Path,
    parser,
    expected: list[str],
    chunk: int = 0,
    end_of: Callable[[str], RunEnd] = shell_status,
) -> BinaryVerdicts:
    """The verdicts parser gives a transcript (its path without .txt or .rc): the output fed
    through a LineSplitter chunk bytes at a time (0: all at once), as a transport hands it on."""
    data = transcript.with_name(f"{transcript.name}.txt").read_bytes()
    end = end_of(transcript.with_name(f"{transcript.name}.rc").read_text())
    splitter = LineSplitter()
    for i in range(0, len(data), chunk or len(data)):
        for line in splitter.feed(data[i : i + chunk] if chunk else data):
            parser.feed_line(line)
    for line in splitter.close():
        parser.feed_line(line)
    return parser.verdicts(expected, end)


def outcomes(v: BinaryVerdicts) -> dict[str, Outcome]:
    """Each case's outcome alone."""
    return {name: verdict.outcome for name, verdict in v.cases.items()}
