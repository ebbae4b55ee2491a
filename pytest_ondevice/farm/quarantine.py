"""Devices set aside for the rest of a run after K infrastructure errors, and the binaries
suspected of causing them.

A test can break its device's link (kill its parent, exhaust memory) as surely as a dead
board can, so the run (run/failover.py) charges an error to a device only when it is the
device's own: met before the binary started and not a lost link (it refused the file, the
push failed), or the device failed a health check right after it. A lost link or an error
while the binary ran, after which the device answers, is no strike; where the transport
cannot tell, such errors count once more than one binary met them there (one per binary).
A binary whose errors two healthy devices met is the suspect: its errors are withdrawn
from every device, and it is not moved again.

The state is shared by every process of the run (xdist workers) through a directory the
controller makes: one file per device, one appended line per error, and a file of suspects.
"""

from __future__ import annotations

import os
from pathlib import Path

REASON_MAX = 300  # characters kept of each error
SUSPECTS = ".suspects"  # not a device name: fleet names start with a letter or digit


class Quarantine:
    def __init__(self, run_dir: Path, after: int) -> None:
        self.dir = run_dir / "strikes"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.after = after

    def strike(self, device: str, reason: str, binary: str | None = None) -> bool:
        """Count an infrastructure error (binary: the one that may have caused it, when the
        device looked healthy after it; None: confirmed); True when this one quarantines it."""
        before = self.is_out(device)
        _append(self.dir / device, f"{binary or ''}\t{' '.join(reason.split())[:REASON_MAX]}")
        return not before and self.is_out(device)

    def accuse(self, binary: str) -> None:
        """The binary, not a device, caused its errors: none of them counts against a device."""
        _append(self.dir / SUSPECTS, binary)

    def suspects(self) -> set[str]:
        return set(_lines(self.dir / SUSPECTS))

    def reasons(self, device: str) -> list[str]:
        """The errors that count against the device, oldest first."""
        confirmed: list[str] = []
        by_binary: dict[str, str] = {}
        suspects = self.suspects()
        for line in _lines(self.dir / device):
            binary, _, reason = line.partition("\t")
            if not binary:
                confirmed.append(reason)
            elif binary not in suspects:
                by_binary.setdefault(binary, reason)
        return confirmed + (list(by_binary.values()) if len(by_binary) > 1 else [])

    def is_out(self, device: str) -> bool:
        return len(self.reasons(device)) >= self.after

    def out(self) -> dict[str, list[str]]:
        """Every quarantined device and its errors."""
        found = {}
        for path in sorted(self.dir.iterdir()):
            if path.name == SUSPECTS:
                continue
            reasons = self.reasons(path.name)
            if len(reasons) >= self.after:
                found[path.name] = reasons
        return found


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode(errors="replace"))
    finally:
        os.close(fd)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
