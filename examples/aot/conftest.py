"""What this example needs, asked before it is built: TensorFlow's tfcompile (an optional
install, `scripts/setup.sh --aot`), a board that XLA can compile for, and room for the model.

Without these, the plugin would make each item an error naming the fix, which is right for
a project whose tests need the model; an example among others is skipped instead, saying
why, so that `pytest --board=bluepill-qemu examples/` stays a clean run."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

# the float MLP linked in: ~19 KiB of weights whose section XLA aligns to 16 KiB, the
# kernels, float printf: 84.5 KiB of flash, measured on bluepill-qemu (64 KiB)
FLASH_NEEDED = 96 * 1024


def _why_not(board) -> str | None:
    cli = Path(sys.prefix, "bin", "saved_model_cli")
    if not cli.is_file() and shutil.which("saved_model_cli") is None:
        return "needs TensorFlow's tfcompile (saved_model_cli): scripts/setup.sh --aot"
    if not board.aot.triple:
        return f"{board.name} has no [aot] target triple: XLA does not compile for it"
    if board.memory.flash is not None and board.memory.flash < FLASH_NEEDED:
        return f"the model needs about 85 KiB of flash; {board.name} has {board.memory.flash // 1024} KiB"
    return None


def pytest_collection_modifyitems(config, items) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        spec = getattr(item, "spec", None)
        if spec is not None and here in Path(item.path).resolve().parents:  # the C test and the crate
            why = _why_not(spec.board)
            if why:
                item.add_marker(pytest.mark.skip(reason=why))
