"""The small test sources the deploy benchmarks push and run: one per binary, two cases each."""

from __future__ import annotations

from pathlib import Path

KERNEL_TEST = """
#include "micro_test.h"
static int dot(const int *a, const int *b, int n) {{
  int s = 0;
  for (int k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}}
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Dot{i}) {{
  const int a[4] = {{1, 2, 3, {i}}}, b[4] = {{4, 5, 6, 1}};
  TF_LITE_MICRO_EXPECT_EQ(dot(a, b, 4), 32 + {i});
}}
TF_LITE_MICRO_TEST(Identity{i}) {{ TF_LITE_MICRO_EXPECT_EQ({i}, {i}); }}
TF_LITE_MICRO_TESTS_END
"""


def write_kernel_tests(tests: Path, count: int) -> None:
    """tests/kernelNN_test.c for NN below count (each a distinct binary)."""
    tests.mkdir(parents=True)
    for i in range(count):
        (tests / f"kernel{i:02d}_test.c").write_text(KERNEL_TEST.format(i=i))
