"""Resolving a board's toolchain: done once, however many build threads ask at once."""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor

from pytest_ondevice.build import toolchain
from pytest_ondevice.config.board import BoardRegistry


def test_build_threads_asking_at_once_probe_the_compiler_once(monkeypatch):
    probes = []

    def slow_identity(cc):  # `cc --version`: long enough for every thread to arrive meanwhile
        probes.append(cc)
        time.sleep(0.05)
        return "identity"

    monkeypatch.setattr(toolchain, "_identity", slow_identity)
    monkeypatch.setattr(toolchain, "_resolve", functools.cache(toolchain._resolve.__wrapped__))
    board = BoardRegistry().get("rpi")
    with ThreadPoolExecutor(max_workers=8) as pool:
        resolved = list(pool.map(lambda _: toolchain.resolve(board), range(8)))
    assert probes == [("aarch64-linux-gnu-gcc",)]
    assert all(r is resolved[0] for r in resolved)
