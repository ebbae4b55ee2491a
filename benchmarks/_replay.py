"""A pytest plugin for `suite_scale.py --floor`: the plugin's own items, with every binary's
result made beforehand. ONDEVICE_REPLAY=record runs the suite and keeps each result in
ONDEVICE_REPLAY_FILE; =replay hands the kept results out without checking a build or
running anything. A replayed run costs what the items cost in pytest (collection, the
protocol, reports, JUnit XML): the floor under the build check, the runs and the parsing."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from pytest_ondevice.run import engine, life, ways

MODE = os.environ.get("ONDEVICE_REPLAY", "")
FILE = Path(os.environ.get("ONDEVICE_REPLAY_FILE", "replay.pickle"))
_kept: dict[str, object] = {}

if MODE == "replay":
    _kept = pickle.loads(FILE.read_bytes())
    life.live = lambda engine, spec, earlier=(): _kept[str(spec.key)]
    life.build = lambda engine, spec: _kept[str(spec.key)].artifact
    ways.SideProcess.started = classmethod(lambda cls, *args: None)  # handed out here, in pytest's process
elif MODE == "record":
    _result = engine.Engine.result  # where results arrive, from the side process too

    def _recorded(self, spec):
        result, fresh = _result(self, spec)
        _kept[str(spec.key)] = result
        return result, fresh

    engine.Engine.result = _recorded


def pytest_unconfigure(config) -> None:
    if MODE == "record":
        FILE.write_bytes(pickle.dumps(_kept))
