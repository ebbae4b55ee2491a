"""One whole process, timed as a user waits for it: the benchmarks' only stopwatch."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def timed(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> float:
    """Seconds from start to exit; a failed run ends the benchmark with its output.

    Modules run from their bytecode, as on a user's machine (pip compiles an installed
    package; an editable one writes it on first import): a machine that sets
    PYTHONDONTWRITEBYTECODE would otherwise compile the plugin from source on every
    timed run, about 0.3 s of CPU that no user pays."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed in {cwd}: {' '.join(argv)}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return elapsed
