"""Our micro_test.h: tolerance checks fail on either side and just past the edge, in
both header generations, and pass at the edge; checked on the host board."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ondevice.formats.benchline import parse_record

# Every case named Fail_* must fail and every Pass_* must pass. Values are exact in
# binary floating point, so "the edge" is the edge, not a rounding accident.
V1_NEAR = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Pass_Inside) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 1.25, 0.5); }
    TF_LITE_MICRO_TEST(Pass_EdgeAbove) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 1.5, 0.5); }
    TF_LITE_MICRO_TEST(Pass_EdgeBelow) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 0.5, 0.5); }
    TF_LITE_MICRO_TEST(Pass_Float) { TF_LITE_MICRO_EXPECT_NEAR(1.0f, 1.01f, 0.1f); }
    TF_LITE_MICRO_TEST(Fail_Above) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 1.75, 0.5); }
    TF_LITE_MICRO_TEST(Fail_Below) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 0.25, 0.5); }
    TF_LITE_MICRO_TEST(Fail_XAbove) { TF_LITE_MICRO_EXPECT_NEAR(1.75, 1.0, 0.5); }
    TF_LITE_MICRO_TEST(Fail_JustPastAbove) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 1.5 + 0x1p-20, 0.5); }
    TF_LITE_MICRO_TEST(Fail_JustPastBelow) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 0.5 - 0x1p-20, 0.5); }
    TF_LITE_MICRO_TEST(Fail_Negative) { TF_LITE_MICRO_EXPECT_NEAR(-1.0, -1.75, 0.5); }
    TF_LITE_MICRO_TEST(Fail_ZeroTolerance) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 1.0 + 0x1p-30, 0.0); }
    TF_LITE_MICRO_TEST(Fail_NaN) { TF_LITE_MICRO_EXPECT_NEAR(1.0, 0.0 / 0.0, 0.5); }
    TF_LITE_MICRO_TESTS_END
"""

V2_NEAR = """
    #include "micro_test.h"
    TEST(Near, Pass_Inside) { EXPECT_NEAR(1.0, 1.25, 0.5); }
    TEST(Near, Pass_EdgeAbove) { EXPECT_NEAR(1.0, 1.5, 0.5); }
    TEST(Near, Pass_EdgeBelow) { EXPECT_NEAR(1.0, 0.5, 0.5); }
    TEST(Near, Fail_Above) { EXPECT_NEAR(1.0, 1.75, 0.5); }
    TEST(Near, Fail_Below) { EXPECT_NEAR(1.0, 0.25, 0.5); }
    TEST(Near, Fail_XAbove) { EXPECT_NEAR(1.75, 1.0, 0.5); }
    TEST(Near, Fail_JustPastAbove) { EXPECT_NEAR(1.0, 1.5 + 0x1p-20, 0.5); }
    TEST(Near, Fail_JustPastBelow) { EXPECT_NEAR(1.0, 0.5 - 0x1p-20, 0.5); }
    TEST(Near, Fail_Assert) { ASSERT_NEAR(1.0, 2.0, 0.5); }
    TEST(Near, Fail_NaN) { EXPECT_NEAR(1.0, 0.0 / 0.0, 0.5); }
    TEST(FloatEq, Pass_Same) { EXPECT_FLOAT_EQ(1.0f, 1.0f); }
    TEST(FloatEq, Pass_OneUlp) { EXPECT_FLOAT_EQ(1.0f, 1.0f + 0x1p-23f); }
    TEST(FloatEq, Pass_NearEdge) { EXPECT_FLOAT_EQ(1.0f, 1.0f + 0x1p-19f); }
    TEST(FloatEq, Pass_Large) { EXPECT_FLOAT_EQ(1048576.0f, 1048576.0f + 0.5f); }
    TEST(FloatEq, Fail_Above) { EXPECT_FLOAT_EQ(1.0f, 1.001f); }
    TEST(FloatEq, Fail_Below) { EXPECT_FLOAT_EQ(1.0f, 0.999f); }
    TEST(FloatEq, Fail_JustPastAbove) { EXPECT_FLOAT_EQ(1.0f, 1.0f + 0x1p-18f); }
    TEST(FloatEq, Fail_JustPastBelow) { EXPECT_FLOAT_EQ(1.0f, 1.0f - 0x1p-18f); }
    TEST(FloatEq, Fail_XAbove) { EXPECT_FLOAT_EQ(1.0f + 0x1p-18f, 1.0f); }
    TEST(FloatEq, Fail_Negative) { EXPECT_FLOAT_EQ(-1.0f, -1.001f); }
    TEST(FloatEq, Fail_Large) { EXPECT_FLOAT_EQ(1048576.0f, 1048576.0f + 4.0f); }
    TEST(FloatEq, Fail_Zero) { EXPECT_FLOAT_EQ(0.0f, 0x1p-18f); }
    TF_LITE_MICRO_TESTS_MAIN
"""


def _verdicts(result) -> dict[str, str]:
    found = {}
    for line in result.outlines:
        m = re.search(r"::(\S+)\[host\] (PASSED|FAILED)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def _check(result) -> None:
    got = _verdicts(result)
    assert got, result.stdout.str()
    wrong = {n: v for n, v in got.items() if v != ("PASSED" if n.rsplit(".", 1)[-1].startswith("Pass_") else "FAILED")}
    assert not wrong, f"cases with the wrong verdict: {wrong}"


def test_v1_expect_near_fails_on_either_side_and_past_the_edge(project):
    project.write("near_test.c", V1_NEAR)
    result = project.run("-v")
    _check(result)
    assert len(_verdicts(result)) == 12
    result.stdout.fnmatch_lines(["*1.0 (1.000000) near 1.75 (1.750000) failed at *near_test.c:8*"])


def test_v2_expect_near_and_float_eq_fail_on_either_side_and_past_the_edge(project):
    project.write("near_test.cc", V2_NEAR)
    result = project.run("-v")
    _check(result)
    assert len(_verdicts(result)) == 22


def test_v2_expect_near_and_float_eq_in_c_too(project):
    project.write("near_c_test.c", V2_NEAR)
    result = project.run("-v")
    _check(result)
    assert len(_verdicts(result)) == 22


def test_header_declares_the_nonce_first_and_stamps_its_markers(project):
    project.write(
        "stamp_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(A) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(B) { TF_LITE_MICRO_SKIP("why"); }
        TF_LITE_MICRO_TEST(C) { TF_LITE_MICRO_EXPECT(0); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    project.write(
        "stamp2_test.c", '#include "micro_test.h"\nTEST(S, A) { EXPECT_EQ(1, 1); }\nTF_LITE_MICRO_TESTS_MAIN\n'
    )
    project.run()
    logs = project.path / "_build" / "host" / "logs"
    nonces = []
    for name, expected in (
        (
            "stamp_test.c",
            [
                "case A",
                "stack A",
                "end A passed",
                "case B",
                "stack B",
                "end B skipped",
                "case C",
                "stack C",
                "end C failed",
                "rss",
                "summary",
            ],
        ),
        ("stamp2_test.c", ["case S.A", "stack S.A", "end S.A passed", "rss", "summary"]),
    ):
        lines = (logs / f"{name}.log").read_text().splitlines()
        m = re.fullmatch(r"#ondevice nonce ([0-9a-f]{16})", lines[0])
        assert m, lines[:3]
        nonces.append(m.group(1))
        stamped = [x.split(" ", 2)[2] for x in lines if x.startswith(f"#ondevice {m.group(1)} ")]
        assert [re.sub(r"^(stack \S+|rss) \d+$", r"\1", x) for x in stamped] == expected  # the bytes vary
    assert nonces[0] != nonces[1]


BENCH_MEDIAN = r"""
#include <stdio.h>
#include <unistd.h>
#include "micro_test.h"
/* A scripted clock: the calibration loop takes 17 reads (a start read at each odd one),
 * the measured loop starts on the next read (a start read at each even one). Every start
 * read advances the clock by the next duration, so each sample is that duration. */
static const uint64_t durations[] = {10, 12, 10, 11, 10, 10, 13, 10, /* measured: */ 710, 110, 510, 310, 410, 210, 610};
static unsigned reads, next_duration;
static uint64_t clock_now;
void ondevice_write(const char *data, size_t len) { fwrite(data, 1, len, stdout); }
void ondevice_cycles_init(void) {}
const uint64_t ondevice_cycles_mask = ~(uint64_t)0;
const char ondevice_cycles_unit[] = "ns";
uint64_t ondevice_cycles(void) {
  uint64_t now = clock_now;
  unsigned i = reads++;
  if (i < 17 ? i % 2 == 1 : i % 2 == 0) clock_now += durations[next_duration++];
  return now;
}
int main(void) {
  volatile int sink = 0;
  ONDEVICE_BENCH("scripted", 1000, 7) { sink++; }
  return 0;
}
"""


def test_bench_median_of_known_distinct_samples(tmp_path):
    """Samples 700, 100, 500, 300, 400, 200, 600 (overhead 10 subtracted): min 100,
    median 400, max 700; the parser keeps the record for the running case."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no host C compiler")
    src = tmp_path / "median.c"
    src.write_text(BENCH_MEDIAN)
    include = Path(__file__).resolve().parent.parent / "pytest_ondevice" / "include"
    unbatched = ["-DONDEVICE_BENCH_MIN_SAMPLE_NS=0", "-DONDEVICE_BENCH_MIN_REPEATS_WALL=1"]  # one run a sample
    args = [cc, "-std=c11", "-O1", *unbatched, f"-I{include}", str(src), "-o", str(tmp_path / "median")]
    subprocess.run(args, check=True)
    out = subprocess.run([str(tmp_path / "median")], capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("#ondevice bench "))
    record = parse_record(line.removeprefix("#ondevice bench "))
    assert (record.min, record.median, record.max) == (100, 400, 700), line
    assert "overhead=10" in line and "repeats=7" in line
