"""The one-line-per-reason summary of what did not run."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_ondevice.session.summaries import MAX_REASONS, skip_lines


def skipped(reason: str):
    return SimpleNamespace(skipped=True, longrepr=("a_test.c", 3, f"Skipped: {reason}"))


def test_most_frequent_reason_first_and_the_tail_counted_in_one_line():
    reports = [skipped("needs std")] * 12 + [skipped("no camera")] * 2
    reports += [skipped(f"reason {n}") for n in range(MAX_REASONS)]
    reports.append(SimpleNamespace(skipped=False, longrepr=None))  # a passed report is not counted
    lines = skip_lines(reports)
    assert lines[:2] == ["12 skipped: needs std", " 2 skipped: no camera"]
    assert len(lines) == MAX_REASONS + 1
    assert lines[-1] == " 2 skipped for 2 other reasons (-rs lists every one)"


def test_nothing_skipped_says_nothing():
    assert skip_lines([]) == []
