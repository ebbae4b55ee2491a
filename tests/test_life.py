"""One binary's life (run/life.py) where its retries are decided: the rebuild after cache
entries vanished. The next device and the reconnect: tests/test_placement.py and
tests/test_rerun.py; the side process's lost run: tests/test_side_runs.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ondevice.compiling.builder import Builder, EntryLost
from pytest_ondevice.compiling.store import CacheError
from pytest_ondevice.run import life


class Store:
    root = Path("/var/cache/ondevice")


def engine_losing(times: int):
    """An engine whose builds lose a cache entry `times` times, then build."""
    calls = {"build": 0, "forgot": 0}
    builder = SimpleNamespace(
        store=Store(),
        forget_vanished=lambda: calls.__setitem__("forgot", calls["forgot"] + 1),
        vanishing=lambda lost: Builder.vanishing(builder, lost),
    )

    def build():
        calls["build"] += 1
        if calls["build"] <= times:
            raise EntryLost(Path(f"/var/cache/ondevice/objects/{calls['build']}.o"))
        return "artifact"

    return SimpleNamespace(builder=builder), build, calls


@pytest.mark.parametrize("times", range(life.LOST_RETRIES + 1))
def test_a_build_whose_cache_entries_vanished_is_built_again(times):
    engine, build, calls = engine_losing(times)
    assert life.rebuilt_while_lost(engine, build) == "artifact"
    assert calls == {"build": times + 1, "forgot": min(times, life.LOST_RETRIES)}


def test_entries_that_keep_vanishing_are_the_stores_error_naming_the_culprit():
    engine, build, calls = engine_losing(life.LOST_RETRIES + 1)
    with pytest.raises(CacheError) as error:
        life.rebuilt_while_lost(engine, build)
    assert calls["build"] == life.LOST_RETRIES + 1
    assert str(error.value) == (
        f"cache entries vanish while this session uses them (/var/cache/ondevice/objects/{life.LOST_RETRIES + 1}.o): "
        "something besides pytest-ondevice removes files from /var/cache/ondevice; stop it, or set "
        "ondevice_cache_dir to a directory only pytest-ondevice manages"
    )
