"""What a build raises: every step (compiling, archiving, linking, models) and the builder share them."""

from __future__ import annotations

from pathlib import Path


class BuildError(Exception):
    """A compile or link failed; the message carries the compiler's diagnostics."""


class LinkError(BuildError):
    """Every object compiled, and the link failed."""


class EntryLost(Exception):
    """A cache entry this session already had is gone (removed by hand, or by a tool that
    ignores holds): what used it is built again, never reported as the code's failure."""

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path
