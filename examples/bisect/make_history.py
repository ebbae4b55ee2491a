"""A throwaway git repository for trying `pytest-ondevice bisect`: 16 commits of a small C
library and its tests, where commit 6 does not build (7 fixes it), commit 8 brings a bug
(scale() multiplies by 3) and commit 12 makes the work() kernel 20 % slower.

    python examples/bisect/make_history.py DIR      # then: cd DIR; see demo.sh

The test suite builds the same repository (tests/test_bisect.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOES_NOT_BUILD = 6  # fixed by the next commit
FIRST_BAD = 8  # scale() multiplies by 3 from here on
SLOWER = 12  # work() does 20 % more rounds from here on
COMMITS = 16

SCALE = """#include "scale.h"
int scale(int x) {{ return x * {factor}; }}
unsigned work(unsigned n) {{
  volatile unsigned acc = 0;
  for (unsigned i = 0; i < n * {rounds}u; ++i) acc += i;
  return acc;
}}
"""
TEST = """#include "micro_test.h"
#include "scale.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(ScalesByTwo) { TF_LITE_MICRO_EXPECT_EQ(scale(3), 6); }
TF_LITE_MICRO_TEST(BenchWork) {
  ONDEVICE_BENCH("work_kernel", 100, 3) { work(100); }
}
TF_LITE_MICRO_TESTS_END
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def make(root: Path, cache: Path | None = None) -> dict[int, str]:
    """The repository in root (which must not exist); returns commit n's hash for n in 1..16."""
    (root / "lib").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "dev@example.com")
    git(root, "config", "user.name", "A Developer")
    (root / "lib" / "scale.h").write_text("int scale(int x);\nunsigned work(unsigned n);\n")
    (root / "scale_test.c").write_text(TEST)
    (root / "ondevice.toml").write_text('sources = ["lib/*.c"]\ninclude_dirs = ["lib"]\n')
    (root / "pytest.ini").write_text("[pytest]\n" + (f"ondevice_cache_dir = {cache}\n" if cache else ""))
    (root / ".gitignore").write_text(".ondevice/\n")
    commits = {}
    for n in range(1, COMMITS + 1):
        text = SCALE.format(factor=3 if n >= FIRST_BAD else 2, rounds=12 if n >= SLOWER else 10)
        if n == DOES_NOT_BUILD:
            text += "int broken( {\n"
        (root / "lib" / "scale.c").write_text(text)
        (root / "NOTES").write_text(f"revision {n}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"change {n}")
        commits[n] = git(root, "rev-parse", "HEAD").strip()
    return commits


if __name__ == "__main__":
    made = make(Path(sys.argv[1]))
    print(f"{sys.argv[1]}: {COMMITS} commits; the first: {made[1]}")
