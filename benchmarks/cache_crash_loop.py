"""kill -9 at random instants of cached builds, then check that no verdict is ever wrong.

    python benchmarks/cache_crash_loop.py [--rounds 30] [--seed 1]

A project whose library and header each come in a good and a buggy version. Each round
picks a random state, starts pytest and kills it with SIGKILL after a random delay
(often mid-compile, mid-store or mid-link), then runs the same state to the end and
checks the verdict against what that state must give. Prints the rounds, how many kills
landed before the run ended, and every wrong verdict (the bar: none).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST = """#include "micro_test.h"
#include "cfg.h"
int v(void);
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(LibraryAndHeaderAgree) { TF_LITE_MICRO_EXPECT_EQ(v() + OFFSET, 2); }
TF_LITE_MICRO_TESTS_END
"""
LIB = {True: "int v(void) { return 1; }\n", False: "int v(void) { return 5; }\n"}
HEADER = {True: "#define OFFSET 1\n", False: "#define OFFSET 0\n"}


def pytest_argv() -> list[str]:
    return [sys.executable, "-m", "pytest", "--board=host", "-q", "-p", "no:cacheprovider"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="ondevice-crashloop-"))
    (root / "lib").mkdir()
    (root / "pytest.ini").write_text(
        f"[pytest]\nondevice_build_dir = {root}/.build\nondevice_cache_dir = {root}/.cache\n"
    )
    (root / "ondevice.toml").write_text('sources = ["lib/*.c"]\n')
    (root / "agree_test.c").write_text(TEST)
    wrong, landed = [], 0
    for n in range(args.rounds):
        lib_ok, header_ok = rng.random() < 0.5, rng.random() < 0.5
        (root / "lib" / "v.c").write_text(LIB[lib_ok])
        (root / "cfg.h").write_text(HEADER[header_ok])
        victim = subprocess.Popen(pytest_argv(), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 1.2))
        if victim.poll() is None:
            landed += 1
            os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        out = subprocess.run(pytest_argv(), cwd=root, capture_output=True, text=True).stdout
        expected = "1 passed" if lib_ok and header_ok else "1 failed"
        got = out.strip().splitlines()[-1] if out.strip() else "(no output)"
        if expected not in got:
            wrong.append((n, lib_ok, header_ok, got))
    print(f"{args.rounds} rounds, {landed} kills landed mid-run, {len(wrong)} wrong verdicts")
    for n, lib_ok, header_ok, got in wrong:
        print(f"  round {n}: library {'good' if lib_ok else 'buggy'}, header {'good' if header_ok else 'buggy'}: {got}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
