"""--history: each run appended to SQLite (placeholder; see HistoryRecorder)."""

from __future__ import annotations


class HistoryRecorder:
    def __init__(self, config, path) -> None:
        self.config = config
        self.path = path
