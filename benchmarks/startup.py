"""What the plugin costs a repository that does not use it: plain pytest on 50 trivial
Python tests, the plugin installed vs disabled (-p no:ondevice), side by side.

    python benchmarks/startup.py [--runs 21]

Runs alternate between the two so the machine's noise falls on both; medians compared,
of the wall time and of the CPU time each run used (less at the mercy of what else the
machine does). The bar: within 2 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import timed, timed_with_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ondevice-startup-"))
    (root / "test_many.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(50)))
    (root / "pytest.ini").write_text("[pytest]\n")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    with_plugin, without = [], []
    timed(base, root)  # writes the bytecode of whatever has none yet
    for i in range(args.runs):  # which goes first swaps each round: neither gets the warmer slot
        for runs, argv in ((with_plugin, base), (without, [*base, "-p", "no:ondevice"]))[:: 1 if i % 2 else -1]:
            runs.append(timed_with_cpu(argv, root))
    print(f"50 trivial tests, {args.runs} runs each, alternating")
    for i, what in enumerate(("wall", "CPU")):
        a, b = statistics.median(r[i] for r in with_plugin), statistics.median(r[i] for r in without)
        print(
            f"  {what:4s}: plugin installed {a:.3f} s (median), disabled (-p no:ondevice) {b:.3f} s: "
            f"installed / disabled = {a / b:.3f} (bar: <= 1.02)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
