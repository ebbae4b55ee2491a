"""Devices set aside for the rest of a run after K infrastructure errors.

The count is shared by every process of the run (xdist workers) through a directory
the controller makes: one file per device, one appended line per error. A device one
worker found dead is not tried again by the others.
"""

from __future__ import annotations

import os
from pathlib import Path

REASON_MAX = 300  # characters kept of each error


class Quarantine:
    def __init__(self, run_dir: Path, after: int) -> None:
        self.dir = run_dir / "strikes"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.after = after

    def strike(self, device: str, reason: str) -> bool:
        """Count an infrastructure error; True when this one quarantines the device."""
        line = " ".join(reason.split())[:REASON_MAX] + "\n"
        fd = os.open(self.dir / device, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return len(self.reasons(device)) == self.after

    def reasons(self, device: str) -> list[str]:
        try:
            return (self.dir / device).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []

    def is_out(self, device: str) -> bool:
        return len(self.reasons(device)) >= self.after

    def out(self) -> dict[str, list[str]]:
        """Every quarantined device and its errors."""
        found = {}
        for path in sorted(self.dir.iterdir()):
            reasons = self.reasons(path.name)
            if len(reasons) >= self.after:
                found[path.name] = reasons
        return found
