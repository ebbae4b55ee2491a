"""The build cache on a TFLM-sized library: cold and warm, against the cache before it
(a git revision, default ea45000) and against ccache on the same compiles, side by side.

    python benchmarks/build_cache.py [--sources 160] [--runs 5] [--old ea45000]

A generated C++ library (kernels including shared headers and the C++ standard library)
and a few test files, compiled with the host board's flags. Each configuration is timed
as a whole process; warm runs of the three are interleaved, and medians compared, so the
machine's noise falls on all of them alike. The bar: warm with the stricter keys within
1.10 x the old cache's warm run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _revision import installed_layout
from _timing import timed

REPO = Path(__file__).resolve().parent.parent
KERNEL = """#include <cstdint>
#include <cmath>
#include <algorithm>
#include "common/types.h"
#include "common/quant.h"
namespace kernels {{
int32_t kernel_{n}(const int8_t* in, int len) {{
  int32_t acc = {n};
  for (int i = 0; i < len; ++i) acc += Requant(in[i] * {m}, {n} % 7);
  return std::max<int32_t>(acc, static_cast<int32_t>(std::lround(0.5 * {n})));
}}
}}  // namespace kernels
"""
TEST = """#include "micro_test.h"
#include <cstdint>
namespace kernels {{ int32_t kernel_{n}(const int8_t* in, int len); }}
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Kernel{n}) {{
  const int8_t in[4] = {{1, 2, 3, 4}};
  TF_LITE_MICRO_EXPECT_EQ(kernels::kernel_{n}(in, 0), {n});
}}
TF_LITE_MICRO_TESTS_END
"""


def make_tree(root: Path, sources: int) -> None:
    (root / "lib" / "common").mkdir(parents=True)
    (root / "lib" / "common" / "types.h").write_text("#pragma once\n#include <cstdint>\ntypedef int32_t acc_t;\n")
    (root / "lib" / "common" / "quant.h").write_text(
        '#pragma once\n#include "types.h"\ninline acc_t Requant(acc_t x, int s) { return (x + (1 << s >> 1)) >> s; }\n'
    )
    for n in range(sources):
        sub = root / "lib" / f"group{n % 8}"
        sub.mkdir(exist_ok=True)
        (sub / f"kernel_{n}.cc").write_text(KERNEL.format(n=n, m=n % 5 + 1))
    (root / "ondevice.toml").write_text('sources = ["lib/**/*.cc"]\ninclude_dirs = ["lib"]\n')
    for n in range(4):
        (root / f"kernel{n}_test.cc").write_text(TEST.format(n=n))
    flags = "-O2 -g -Wall -fno-exceptions -fno-rtti -Ilib"
    objs = " ".join(f"lib/group{n % 8}/kernel_{n}.o" for n in range(sources))
    (root / "Makefile").write_text(
        f"CXX ?= c++\nall: libk.a\nlibk.a: {objs}\n\tar qcsD $@ $^\n"
        f"%.o: %.cc\n\t$(CXX) {flags} -c $< -o $@\nclean:\n\trm -f libk.a {objs}\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=160)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--old", default="ea45000", help="the revision whose cache to compare with")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ondevice-cachebench-"))
    old = installed_layout(args.old, tmp / "old-plugin")
    try:
        trees = {name: tmp / name for name in ("old", "new", "ccache", "make")}
        for tree in trees.values():
            make_tree(tree, args.sources)
        for name in ("old", "new"):
            where = tmp / name
            (where / "pytest.ini").write_text(
                f"[pytest]\nondevice_build_dir = {tmp / name}-build\nondevice_cache_dir = {tmp / name}-cache\n"
            )
        pytest = [sys.executable, "-m", "pytest", "--board=host", "-q", "-p", "no:cacheprovider"]
        base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CCACHE_DIR")}
        envs = {
            "old": {**base_env, "PYTHONPATH": str(old)},
            "new": base_env,
            "ccache": {**base_env, "CCACHE_DIR": str(tmp / "ccache-dir"), "CXX": "ccache c++"},
            "make": base_env,
        }
        make = ["make", f"-j{os.cpu_count() or 2}"]
        commands = {"old": pytest, "new": pytest, "ccache": make, "make": make}
        cold = {name: timed(commands[name], trees[name], envs[name]) for name in trees}
        warm: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name in trees:
                if name == "make":
                    continue  # no cache: its cold build is the yardstick
                if name == "ccache":
                    timed(["make", "clean"], trees[name], envs[name])
                warm[name].append(timed(commands[name], trees[name], envs[name]))
        print(f"{args.sources} library sources + 4 tests, host board, {os.cpu_count()} cores, {args.runs} warm runs")
        print(f"{'':34s}{'cold s':>9s}{'warm s (median)':>18s}")
        label = {
            "old": f"pytest, cache of {args.old}",
            "new": "pytest, this cache",
            "ccache": "make + ccache (library only)",
            "make": "plain make (library only)",
        }
        touched = trees["new"] / "lib" / "group3" / "kernel_3.cc"
        touched.write_text(touched.read_text().replace("acc = 3;", "acc = 3 + 0;"))
        touch_one = timed(commands["new"], trees["new"], envs["new"])
        for name in trees:
            median = f"{statistics.median(warm[name]):18.2f}" if warm[name] else f"{'-':>18s}"
            print(f"{label[name]:34s}{cold[name]:9.2f}{median}")
        print(f"cold: this cache / plain make -j = {cold['new'] / cold['make']:.2f} (bar: <= 1.10; make builds the")
        print("      library only, pytest also the tests, links and runs)")
        print(f"one library source edited, rerun: {touch_one:.2f} s (bar: <= 10 s)")
        ratio = statistics.median(warm["new"]) / statistics.median(warm["old"])
        print(f"warm: this cache / the old one = {ratio:.2f} (bar: <= 1.10)")
        print(f"cold: this cache / the old one = {cold['new'] / cold['old']:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
