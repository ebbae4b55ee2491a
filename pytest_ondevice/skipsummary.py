"""What did not run, and why, in one line per reason: pytest shows skip reasons only with
-rs, and a board that cannot run a format (GoogleTest or Rust on bare metal) skips many
items for the same few reasons."""

from __future__ import annotations

from collections import Counter
from typing import Any

MAX_REASONS = 10  # lines shown; the rest are counted in one


def skip_lines(skipped: list[Any]) -> list[str]:
    """One line per reason, the most frequent first ("15 skipped: Rust tests need std: …")."""
    reasons = Counter(_reason(report) for report in skipped if getattr(report, "skipped", False))
    if not reasons:
        return []
    ranked = reasons.most_common()
    width = len(str(ranked[0][1]))
    lines = [f"{count:>{width}} skipped: {reason}" for reason, count in ranked[:MAX_REASONS]]
    rest = sum(count for _, count in ranked[MAX_REASONS:])
    if rest:
        lines.append(f"{rest:>{width}} skipped for {len(ranked) - MAX_REASONS} other reasons (-rs lists every one)")
    return lines


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")
