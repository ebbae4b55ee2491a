"""A probe plugin: the process's CPU (all its threads) at pytest's phases, and pytest's own
thread's, appended as one line of JSON to CPU_PHASES_OUT at exit. Where a run's CPU goes:

    CPU_PHASES_OUT=phases.jsonl PYTHONPATH=benchmarks pytest -p _cpu_phases ...

Keys: `start` (Python, pytest and the plugins given before it imported), then each phase's
CPU since the one before: `configure`, `collect`, `run` (the items), `finish` (the session's end to exit);
`main_*` the same for pytest's own thread; `children`, what waited-for children used."""

from __future__ import annotations

import atexit
import itertools
import json
import os
import resource
import time

import pytest

_marks: dict[str, tuple[float, float]] = {"start": (time.process_time(), time.thread_time())}


def _mark(name: str) -> None:
    _marks.setdefault(name, (time.process_time(), time.thread_time()))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart() -> None:
    _mark("configure")


@pytest.hookimpl(trylast=True)
def pytest_collection_finish() -> None:
    _mark("collect")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish() -> None:
    _mark("run")


@atexit.register
def _write() -> None:
    _mark("finish")
    names = list(_marks)
    out: dict[str, float] = {"start": _marks["start"][0]}
    for before, name in itertools.pairwise(names):
        out[name] = _marks[name][0] - _marks[before][0]
        out[f"main_{name}"] = _marks[name][1] - _marks[before][1]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out["children"] = children.ru_utime + children.ru_stime
    with open(os.environ["CPU_PHASES_OUT"], "a") as f:
        f.write(json.dumps(out) + "\n")
