"""Collection of TFLM's whole kernel tree, warm, against pytest's own start-up, side by side.

    python benchmarks/tflm_collect.py --tflm PATH [--deps PATH] [--runs 7]

PATH is a TFLM checkout set up as docs/tflm.md says (its `ondevice.toml`; --deps the
directory holding flatbuffers, gemmlowp and ruy, default PATH/../tflm-deps). Timed as
whole processes, alternating: `pytest --board=host tensorflow/lite/micro/kernels
--ignore-glob=*.py --collect-only` (every kernel test file read, its cases found, its
ondevice.toml settings resolved; target: <= 1 s warm), and `pytest --version`, the floor
any pytest run pays. The first run of each is not counted (it writes bytecode).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from _timing import timed_with_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tflm", type=Path, required=True)
    parser.add_argument("--deps", type=Path)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    tflm = args.tflm.resolve()
    deps = (args.deps or tflm.parent / "tflm-deps").resolve()
    if not (tflm / "ondevice.toml").is_file():
        raise SystemExit(f"{tflm} has no ondevice.toml: set it up as docs/tflm.md says")
    env = {
        **os.environ,
        "FLATBUFFERS_DIR": str(deps / "flatbuffers"),
        "GEMMLOWP_DIR": str(deps / "gemmlowp"),
        "RUY_DIR": str(deps / "ruy"),
    }
    pytest = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    collect = [*pytest, "-q", "--board=host", "tensorflow/lite/micro/kernels", "--ignore-glob=*.py", "--collect-only"]
    commands = {"collect": collect, "pytest --version": [*pytest, "--version"]}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for argv in commands.values():
        timed_with_cpu(argv, tflm, env)  # not counted: bytecode written, caches warm
    for _ in range(args.runs):
        for name, argv in commands.items():
            figures[name].append(timed_with_cpu(argv, tflm, env))
    files = sorted(tflm.glob("tensorflow/lite/micro/kernels/**/*_test.cc"))
    out = subprocess.run(collect, cwd=tflm, env=env, capture_output=True, text=True).stdout
    items = re.search(r"(\d+) tests? collected", out)
    print(f"TFLM kernel tree: {len(files)} test files, {items.group(1) if items else '?'} items; median of {args.runs}")
    for name, runs in figures.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"  {name:18s} {wall:.3f} s wall, {cpu:.3f} s CPU")
    whole = statistics.median(r[0] for r in figures["collect"])
    floor = statistics.median(r[0] for r in figures["pytest --version"])
    print(f"collection {whole:.2f} s (target <= 1 s), of which pytest's own start-up {floor:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
