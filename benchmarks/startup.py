"""What the plugin costs a repository that does not use it: plain pytest on 50 trivial
Python tests, the plugin installed vs disabled (-p no:ondevice), side by side.

    python benchmarks/startup.py [--runs 21]

Runs alternate between the two so the machine's noise falls on both; medians compared.
The bar: within 2 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import timed


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
    for _ in range(args.runs):
        with_plugin.append(timed(base, root))
        without.append(timed([*base, "-p", "no:ondevice"], root))
    a, b = statistics.median(with_plugin), statistics.median(without)
    print(f"50 trivial tests, {args.runs} runs each, alternating")
    print(f"  plugin installed: {a:.3f} s (median)   disabled (-p no:ondevice): {b:.3f} s")
    print(f"  installed / disabled = {a / b:.3f} (bar: <= 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
