"""GEMM and model latency on emulated boards: optimized vs naive int8 GEMM at 32x32x32, three runs.

    python benchmarks/gemm_latency.py [--boards bluepill-qemu,mps2-an386] [--runs 3]

Runs `pytest examples/gemm --bench-json` per board and run, then prints each kernel's
median (instructions under QEMU's -icount: the same every run), whether the runs agreed
exactly, and the optimized/naive ratio (the bar: <= 0.5 on bluepill-qemu).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(board: str, out: Path) -> dict[str, float]:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--board={board}",
        f"--bench-json={out}",
        str(REPO / "examples" / "gemm"),
        str(REPO / "examples" / "model"),
    ]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed on {board}:\n{proc.stdout[-3000:]}")
    return {r["name"]: r["median"] for r in json.loads(out.read_text())["records"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boards", default="bluepill-qemu,mps2-an386")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ondevice-gemm-"))
    for board in args.boards.split(","):
        runs = [run(board, tmp / f"{board}-{i}.json") for i in range(args.runs)]
        same = all(r == runs[0] for r in runs)
        first = runs[0]
        print(f"{board}: {args.runs} runs, figures {'identical' if same else 'DIFFER: ' + repr(runs)}")
        for name, median in first.items():
            print(f"  {name:20s} {median:12,.0f}")
        ratio = first["gemm_s8_opt_32"] / first["gemm_s8_naive_32"]
        print(f"  int8 32x32x32 optimized / naive = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
