"""One whole process, timed as a user waits for it: the benchmarks' only stopwatch."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def timed(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> float:
    """Seconds from start to exit; a failed run ends the benchmark with its output."""
    return timed_with_cpu(argv, cwd, env)[0]


def timed_with_cpu(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds the process and its children used). The CPU figure is
    what a run costs the machine, and far less at the mercy of what else runs on it.

    Modules run from their bytecode, as on a user's machine (pip compiles an installed
    package; an editable one writes it on first import): a machine that sets
    PYTHONDONTWRITEBYTECODE would otherwise compile the plugin from source on every
    timed run, about 0.3 s of CPU that no user pays."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"failed in {cwd}: {' '.join(argv)}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu
