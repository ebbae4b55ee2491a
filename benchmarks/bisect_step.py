"""What a bisection step costs, against a cold build and run of the same revision.

    python benchmarks/bisect_step.py [--runs 5] [--board bluepill-qemu]

On examples/bisect's repository: a step is pytest at a revision right after the revision
before it was run (the build store holds everything but the one changed library source);
a cold run is the same pytest with an empty cache. Both are timed as whole processes, in
turn, and the median of the runs' ratios is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import timed

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("make_history", REPO / "examples" / "bisect" / "make_history.py")
make_history = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--board", default="bluepill-qemu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        commits = make_history.make(root)
        cache = Path(tmp) / "cache"
        run = [sys.executable, "-m", "pytest", f"--board={args.board}", "-q", "-p", "no:cacheprovider",
               "scale_test.c::BenchWork"]  # fmt: skip

        def at(n: int, cold: bool) -> list[str]:
            if cold:
                shutil.rmtree(cache, ignore_errors=True)
            subprocess.run(["git", "checkout", "-q", commits[n]], cwd=root, check=True)
            return [*run, "-o", f"ondevice_cache_dir={cache}"]

        steps, colds = [], []
        for _ in range(args.runs):
            timed(at(8, cold=False), root)  # an earlier step: its objects are in the store
            steps.append(timed(at(12, cold=False), root))  # the next step: one library source changed
            colds.append(timed(at(12, cold=True), root))
        ratio = statistics.median(s / c for s, c in zip(steps, colds, strict=True))
        print(
            f"bisection step {statistics.median(steps):.2f} s, cold build and run {statistics.median(colds):.2f} s "
            f"of the same revision on {args.board}: ratio {ratio:.2f} (median of {args.runs})"
        )


if __name__ == "__main__":
    main()
