"""A run that shows its device cannot run the binary at all: an infrastructure error (or,
for a missing GPU, a skip when asked), never the code's failure and never a pass.

Decided only from what the test cannot write: our header's stamped `unavailable` line,
printed before the first case (no usable CUDA GPU), or the loader's own message with its
exit status 127 before the program printed anything of ours (a shared library missing
on the device)."""

from __future__ import annotations

from ..config.board import Board
from ..formats.parser import Parser
from ..formats.verdicts import BinaryVerdicts, Outcome, Verdict
from ..transports import RunEnd
from .spec import BinarySpec

LOADER_EXIT = 127


def device_unusable(parser: Parser, end: RunEnd, board: Board) -> str | None:
    """Why the device could not run this binary, or None."""
    if parser.unavailable:
        return parser.unavailable
    library = parser.missing_library
    if library and end.exit_code == LOADER_EXIT and parser.nonce is None:
        fix = "install it on the device, or link it into the binary"
        if board.cuda.archs and library.startswith("libcudart"):
            fix = (
                "install the CUDA runtime on the device, or link it statically "
                f'([cuda] cudart = "static" in {board.path.name})'
            )
        return f"the device's loader could not find {library} (exit {LOADER_EXIT}, before the program started): {fix}"
    return None


def skip_all(spec: BinarySpec, why: str) -> BinaryVerdicts:
    """Every case of the binary skipped, saying why (--ondevice-no-gpu=skip)."""
    return BinaryVerdicts({n: Verdict(Outcome.SKIPPED, why) for n in spec.cases}, {}, [])
