"""Stack high-water per case: measured on the device by painting the stack (micro_test.h),
checked against arrays of known size on four boards, an overflow named as one, limits
from the case, ondevice.toml and the board file, and the figure in the end-of-run memory
section, JUnit, the history and the baseline comparison."""

from __future__ import annotations

import json
import shutil
import sqlite3
import xml.etree.ElementTree as ET

import pytest
from conftest import case_outcomes

from pytest_ondevice.config.board import BoardRegistry
from pytest_ondevice.formats.benchline import stack_record
from pytest_ondevice.records.bench import measure, memory_lines

KNOWN = """
#include "micro_test.h"
__attribute__((noinline)) static int uses(int seed) {{
  volatile char buf[{size}];
  for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)(seed + i);
  return buf[0] + buf[sizeof buf - 1];
}}
__attribute__((noinline)) static int leaf(int x) {{ return x + 1; }}
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(KnownArray) {{ TF_LITE_MICRO_EXPECT(uses(3) != 1000); }}
TF_LITE_MICRO_TEST(Leaf) {{ TF_LITE_MICRO_EXPECT_EQ(leaf(1), 2); }}
TF_LITE_MICRO_TESTS_END
"""
OVERHEAD = 256  # main's frame and the callee's own registers, measured 16-160 bytes
NEEDS_QEMU = pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")


def junit_stack(path) -> dict[str, int]:
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "ondevice_stack_bytes":
                found[case.get("name").split("[", 1)[0]] = int(prop.get("value"))
    return found


@pytest.mark.parametrize(
    ("board", "size"),
    [
        ("host", 4096),
        pytest.param("mps2-an386", 4096, marks=[pytest.mark.slow, NEEDS_QEMU]),
        pytest.param("bluepill-qemu", 1024, marks=[pytest.mark.slow, NEEDS_QEMU]),  # its stack is 2 KiB
        pytest.param("riscv32-qemu", 4096, marks=pytest.mark.slow),
    ],
)
def test_a_known_array_is_measured_at_its_size_plus_a_small_overhead(project, board, size):
    project.write("known_test.c", KNOWN.format(size=size))
    junit = project.path / "junit.xml"
    result = project.run(f"--junitxml={junit}", board=board)
    result.assert_outcomes(passed=2)
    stack = junit_stack(junit)
    assert size <= stack["KnownArray"] < size + OVERHEAD, stack
    assert stack["Leaf"] < OVERHEAD, stack
    result.stdout.fnmatch_lines(
        ["*ondevice memory: stack high-water per case*", f"{board}: 2 cases, the deepest *", "  KnownArray *bytes"]
    )


WITH_BENCH = """
#include "micro_test.h"
static volatile int sink;
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(OneLine) { TF_LITE_MICRO_EXPECT(sink == 0); }
TF_LITE_MICRO_TEST(Bench) { ONDEVICE_BENCH("add", 1, 8) { sink = sink + 0; } }
TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.parametrize(
    "board",
    [
        "host",
        pytest.param("rpi", marks=pytest.mark.slow),
        pytest.param("bluepill-qemu", marks=[pytest.mark.slow, NEEDS_QEMU]),
    ],
)
def test_a_one_line_case_reads_main_s_frame_and_little_more_on_every_board(project, board):
    """Counted from the top of main's frame on every architecture (the frame pointer was its
    bottom on Arm: 68 bytes on a Pi), without the RSS sampler's 4 KiB buffer (inlined into
    main: 4 300 bytes on the host) or a bench's samples (in main's frame, in every case's figure)."""
    project.write("one_line_test.c", WITH_BENCH)
    junit = project.path / "junit.xml"
    args = ("--device=qemu",) if board == "rpi" else ()
    project.run(f"--junitxml={junit}", *args, board=board).assert_outcomes(passed=2)
    stack = junit_stack(junit)
    assert 160 <= stack["OneLine"] < 2 * OVERHEAD, stack  # measured 188-244 bytes


OVERFLOW = """
#include "micro_test.h"
__attribute__((noinline)) static int deep(volatile int n) {{
  volatile char pad[128];
  pad[0] = (char)n;
  pad[127] = (char)n;
  return n == 0 ? pad[0] : deep(n - 1) + pad[127];
}}
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Fits) {{ TF_LITE_MICRO_EXPECT(deep(2) >= 0); }}
TF_LITE_MICRO_TEST(Recurses) {{ TF_LITE_MICRO_EXPECT(deep({depth}) >= 0); }}
TF_LITE_MICRO_TEST(After) {{ TF_LITE_MICRO_EXPECT(1); }}
TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("board", "stack"),
    [
        pytest.param("bluepill-qemu", 2048, marks=NEEDS_QEMU),
        pytest.param("mps2-an386", 16384, marks=NEEDS_QEMU),
        ("riscv32-qemu", 8192),
    ],
)
def test_a_recursion_past_the_boards_stack_is_a_stack_overflow_not_a_random_crash(project, board, stack):
    depth = (stack + 512) // 128  # a little past the bottom: into the heap's room, not over the program
    project.write("deep_test.c", OVERFLOW.format(depth=depth))
    result = project.run("-v", board=board)
    assert case_outcomes(result) == {"Fits": "PASSED", "Recurses": "FAILED", "After": "PASSED"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*stack overflow: the case reached the last 256 bytes of the stack or ran past*"])


LIMITED = """
#include "micro_test.h"
__attribute__((noinline)) static int uses(int seed) {
  volatile char buf[1024];
  for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)(seed + i);
  return buf[0];
}
ONDEVICE_STACK_LIMIT(Budgeted, 512)
ONDEVICE_STACK_LIMIT(Roomy, 8192)
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Budgeted) { TF_LITE_MICRO_EXPECT(uses(1) != 1000); }
TF_LITE_MICRO_TEST(Roomy) { TF_LITE_MICRO_EXPECT(uses(2) != 1000); }
TF_LITE_MICRO_TEST(Unbudgeted) { TF_LITE_MICRO_EXPECT(uses(3) != 1000); }
TF_LITE_MICRO_TESTS_END
"""


def test_a_case_over_its_limit_fails_with_the_figure_and_where_the_limit_came_from(project):
    project.write("limit_test.c", LIMITED)
    result = project.run("-v")
    assert case_outcomes(result) == {"Budgeted": "FAILED", "Roomy": "PASSED", "Unbudgeted": "PASSED"}
    result.stdout.fnmatch_lines(
        ["*stack high-water 1??? bytes is over this case's limit of 512 (ONDEVICE_STACK_LIMIT)*"]
    )

    project.write("ondevice.toml", 'defines = ["ONDEVICE_STACK_LIMIT_DEFAULT=600"]\n')
    result = project.run("-v")
    assert case_outcomes(result) == {"Budgeted": "FAILED", "Roomy": "PASSED", "Unbudgeted": "FAILED"}
    result.stdout.fnmatch_lines(["*limit of 600 (ONDEVICE_STACK_LIMIT_DEFAULT)*"])

    (project.path / "ondevice.toml").unlink()
    project.write("boards/tight-host.toml", 'extends = "host"\n[memory]\nstack_limit = 700\n')
    result = project.run("-v", board="tight-host")
    assert case_outcomes(result) == {"Budgeted": "FAILED", "Roomy": "PASSED", "Unbudgeted": "FAILED"}
    result.stdout.fnmatch_lines(["*limit of 700 (the board's [[]memory[]] stack_limit)*"])


def test_the_history_keeps_each_cases_figure_and_a_deeper_stack_regresses_against_the_baseline(project):
    project.write("known_test.c", KNOWN.format(size=1024))
    first = project.run("--history=h.db", "--bench-save=before")
    first.assert_outcomes(passed=2)
    rows = dict(sqlite3.connect(project.path / "h.db").execute("SELECT name, median FROM benches WHERE unit='bytes'"))
    assert (
        set(rows) == {"stack:KnownArray", "stack:Leaf", "peak_rss:known_test.c"}
        and 1024 <= rows["stack:KnownArray"] < 1024 + OVERHEAD
    )

    project.write("known_test.c", KNOWN.format(size=2048))
    second = project.run("--bench-compare=before", "--bench-fail=10%", "-v")
    assert case_outcomes(second)["KnownArray"] == "FAILED"
    second.stdout.fnmatch_lines(["*stack:KnownArray on host: * bytes, baseline *"])


def test_the_stack_figure_rides_in_bench_json(project):
    project.write("known_test.c", KNOWN.format(size=1024))
    out = project.path / "bench.json"
    project.run(f"--bench-json={out}").assert_outcomes(passed=2)
    records = {r["name"]: r for r in json.loads(out.read_text())["records"]}
    assert records["stack:KnownArray"]["unit"] == "bytes" and records["stack:KnownArray"]["case"] == "KnownArray"


def test_a_cases_junit_entry_carries_its_stack_figure_once(project):
    """Every case has a stack record: in JUnit XML it is the figure and where it was
    measured, not a second raw copy (a 10,000-case run's file was 13 MB)."""
    project.write("known_test.c", KNOWN.format(size=1024))
    junit = project.path / "junit.xml"
    project.run(f"--junitxml={junit}").assert_outcomes(passed=2)
    case = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name").startswith("Leaf"))
    bench = [json.loads(p.get("value")) for p in case.iter("property") if p.get("name") == "ondevice_bench"]
    (record,) = [r for r in bench if r["name"] == "stack:Leaf"]
    assert set(record) == {
        "name",
        "board",
        "unit",
        "median",
        "min",
        "max",
        "repeats",
        "deterministic",
        "case",
        "binary_sha256",
        "device_name",
    }, record
    assert record["median"] == junit_stack(junit)["Leaf"] and record["unit"] == "bytes"
    size = sum(len(ET.tostring(p)) for p in case.iter("property"))
    assert size < 900, ET.tostring(case)


def test_a_stack_deeper_than_the_painted_region_is_shown_as_at_least_its_figure():
    """A hosted run paints a bounded region: a case that used all of it is reported as
    ">= N", through the record every case carries (JUnit, the history, the summary)."""
    board = BoardRegistry().get("host")
    clock = board.clock_for(board.transport)
    rows = [
        {**measure(stack_record(case, used, beyond), board, clock).as_dict(), "case": case}
        for case, used, beyond in (("Deep", 65536, True), ("Shallow", 96, False))
    ]
    assert rows[0]["lower_bound"] is True and "lower_bound" not in rows[1]
    assert memory_lines(rows, {"host": None})[1:] == ["  Deep     >= 65 536 bytes", "  Shallow  96 bytes"]


def test_disabled_it_prints_nothing(project):
    project.write("known_test.c", KNOWN.format(size=1024))
    project.write("ondevice.toml", 'defines = ["ONDEVICE_STACK_DISABLE=1", "ONDEVICE_RSS_DISABLE=1"]\n')
    result = project.run()
    result.assert_outcomes(passed=2)
    assert "ondevice memory" not in result.stdout.str()


def test_the_nightly_report_charts_each_cases_stack_and_names_one_that_grew(project):
    from pytest_ondevice.records import history, report

    project.write("known_test.c", KNOWN.format(size=1024))
    project.run("--history=h.db").assert_outcomes(passed=2)
    project.write("known_test.c", KNOWN.format(size=2048))
    project.run("--history=h.db").assert_outcomes(passed=2)
    page = report.render(history.load(project.path / "h.db"))
    section = page.split("<h2>Stack high-water per case</h2>", 1)[1]
    assert section.count('alt="stack:') == 2 and section.count('alt="peak_rss:known_test.c') == 1
    assert "Deeper than before" in section and "<td>KnownArray</td>" in section
    assert "No latency records" in page  # stack figures are not latency


V2_LIMIT = """
#include "micro_test.h"
__attribute__((noinline)) static int uses(int seed) {
  volatile char buf[1024];
  for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)(seed + i);
  return buf[0];
}
ONDEVICE_STACK_LIMIT(Kernels, Tight, 512)
TEST(Kernels, Tight) { EXPECT_NE(uses(1), 1000); }
TEST(Kernels, Loose) { EXPECT_NE(uses(2), 1000); }
TF_LITE_MICRO_TESTS_MAIN
"""


def test_a_v2_case_is_limited_by_suite_and_name(project):
    project.write("v2_test.cc", V2_LIMIT)
    result = project.run("-v")
    assert case_outcomes(result) == {"Kernels.Tight": "FAILED", "Kernels.Loose": "PASSED"}, result.stdout.str()
    result.stdout.fnmatch_lines(["*over this case*s limit of 512 (ONDEVICE_STACK_LIMIT)*"])


RSS = """
#include <stdlib.h>
#include <string.h>
#include "micro_test.h"
char *volatile kept; /* the compiler may not drop the allocation */
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(First) { TF_LITE_MICRO_EXPECT(1); }
TF_LITE_MICRO_TEST(TouchesEightMiB) {
  char *p = kept = malloc(8 << 20);
  TF_LITE_MICRO_EXPECT(p != NULL);
  memset(p, 1, 8 << 20);
  TF_LITE_MICRO_EXPECT_EQ(p[12345], 1);
}
TF_LITE_MICRO_TEST(Frees) { free(kept); }
TF_LITE_MICRO_TESTS_END
"""


def test_a_hosted_binarys_peak_resident_memory_is_its_own(project):
    """VmHWM of the binary itself: getrusage would report the forking Python's tens of MiB."""
    project.write("rss_test.c", RSS)
    junit = project.path / "junit.xml"
    result = project.run(f"--junitxml={junit}")
    result.assert_outcomes(passed=3)
    props = {
        case.get("name").split("[", 1)[0]: {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(junit).getroot().iter("testcase")
    }
    rss = int(props["First"]["ondevice_peak_rss_bytes"])  # the binary's figure rides on its first case
    assert 8 << 20 <= rss < 12 << 20, rss
    assert "ondevice_peak_rss_bytes" not in props["TouchesEightMiB"]
    result.stdout.fnmatch_lines(["*peak resident memory per binary*", "host: peak resident memory of 1 binary, *"])


def _stack_history(path, nights: list[dict[str, float]]):
    from pytest_ondevice.records.history import Bench, Result, Run, append_run, connect, load

    db = connect(path)
    for day, figures in enumerate(nights, start=1):
        run = Run(started=f"2026-11-{day:02d}T02:00:05+00:00", finished=f"2026-11-{day:02d}T02:14:09+00:00")
        result = Result("s_test.c::A[bluepill]", "A", "passed", board="bluepill")
        benches = [
            Bench(f"s_test.c::{c}[bluepill]", c, f"stack:{c}", "bytes", v, v, v, board="bluepill", deterministic=True)
            for c, v in figures.items()
        ]
        append_run(db, run, [result], benches)
    db.close()
    return load(path)


def test_the_report_lists_the_stacks_that_grew_and_draws_the_grown_then_the_deepest_first(tmp_path):
    import re

    from pytest_ondevice.records import report

    steady = {"Deep": 3000, "Steady": 500}
    history = _stack_history(
        tmp_path / "h.db", [{"Grows": 1000, **steady}, {"Grows": 1000, **steady}, {"Grows": 1200, **steady}]
    )
    page = report.render(history)
    assert re.search(r"</(div|p)><h2>Stack high-water per case</h2><p>", page)  # its own section, after latency
    section = page.split("<h2>Stack high-water per case</h2>", 1)[1]
    assert (
        '<p>Deeper than before by more than 5 %:</p><table class="deeper-stacks"><thead><tr><th>case</th>'
        "<th>board</th><th>reference (bytes)</th><th>latest (bytes)</th><th>change</th></tr></thead><tbody><tr>"
        '<td>Grows</td><td>bluepill</td><td class="num">1 000</td><td class="num">1 200</td>'
        '<td class="num bad">+20.0 %</td></tr></tbody></table>' in section
    )
    assert re.findall(r'alt="stack:(\w+) on bluepill', section) == ["Grows", "Deep", "Steady"]
    assert "more cases not drawn" not in section
    plain = report.render(_stack_history(tmp_path / "none.db", [{}]))  # no stack figures: no section at all
    assert "Stack high-water" not in plain and re.search(r"</(div|p)></body></html>\n$", plain)


def test_the_report_draws_at_most_its_panel_count_and_says_how_many_more(tmp_path):
    from pytest_ondevice.records import report

    many = {f"C{n:02d}": 100 + n for n in range(report.MAX_PANELS + 2)}
    page = report.render(_stack_history(tmp_path / "h.db", [many]))
    section = page.split("<h2>Stack high-water per case</h2>", 1)[1]
    assert section.count('<img class="chart"') == report.MAX_PANELS
    assert "<p>Deeper than before" not in section
    end = '</div><p class="muted">2 more cases not drawn (the deepest come first).</p></body></html>\n'
    assert section.endswith(end)
    assert f'alt="stack:C{report.MAX_PANELS + 1:02d} on bluepill' in section  # the deepest is drawn
    assert 'alt="stack:C00 on bluepill' not in section  # the shallowest is not
