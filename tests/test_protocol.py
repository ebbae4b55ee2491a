"""The streaming parser: TFLM v1/v2 output, our extensions, and how runs end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_ondevice.formats.lines import LineSplitter
from pytest_ondevice.formats.tflm_parser import parse_bytes
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

V1_OUTPUT = (
    b"Testing AddsUp\r\n"
    b"Testing OffByOne\r\n"
    b"got == 42 failed at kernels/add_test.cc:17 (41 vs 42)\r\n"
    b"Testing Skips\r\n"
    b"#ondevice skip no FPU\r\n"
    b"2/3 tests passed\r\n"
    b"~~~SOME TESTS FAILED~~~\n\r\n"
)
V1_CASES = ["AddsUp", "OffByOne", "Skips"]

V2_OUTPUT = b"""[==========] Running 3 tests.
[ RUN      ] Gemm.Int8
[       OK ] Gemm.Int8
[ RUN      ] Gemm.Float
gemm_test.cc:31: Failure
  Expression:  out[0] == 5.0f
  Evaluated:   4.500000 == 5.000000
[  FAILED  ] Gemm.Float
[ RUN      ] Gemm.Dsp
#ondevice skip needs SMLAD
[  SKIPPED ] Gemm.Dsp
[==========] 3 tests ran.
[  PASSED  ] 2 tests.
[  FAILED  ] 1 tests, listed below:
[  FAILED  ] Gemm.Float
"""
V2_CASES = ["Gemm.Int8", "Gemm.Float", "Gemm.Dsp"]


def outcomes(result):
    return {name: v.outcome for name, v in result.cases.items()}


def test_v1_pass_fail_skip_with_crlf():
    result = parse_bytes([V1_OUTPUT], V1_CASES, RunEnd(exit_code=1))
    assert outcomes(result) == {
        "AddsUp": Outcome.PASSED,
        "OffByOne": Outcome.FAILED,
        "Skips": Outcome.SKIPPED,
    }
    failed = result.cases["OffByOne"]
    assert failed.message == "got == 42 failed at kernels/add_test.cc:17 (41 vs 42)"
    assert failed.location == ("kernels/add_test.cc", 17)
    assert result.cases["Skips"].message == "no FPU"
    assert not result.problems and not result.unknown


def test_v2_ok_failed_skipped_and_failure_block():
    result = parse_bytes([V2_OUTPUT], V2_CASES, RunEnd(exit_code=1))
    assert outcomes(result) == {
        "Gemm.Int8": Outcome.PASSED,
        "Gemm.Float": Outcome.FAILED,
        "Gemm.Dsp": Outcome.SKIPPED,
    }
    msg = result.cases["Gemm.Float"].message
    assert msg.splitlines() == [
        "gemm_test.cc:31: Failure",
        "  Expression:  out[0] == 5.0f",
        "  Evaluated:   4.500000 == 5.000000",
    ]
    assert result.cases["Gemm.Float"].location == ("gemm_test.cc", 31)
    assert not result.problems


def test_v2_all_passed():
    out = (
        b"[ RUN      ] A.B\n[       OK ] A.B\n[==========] 1 tests ran.\n"
        b"[  PASSED  ] 1 tests.\n~~~ALL TESTS PASSED~~~\n"
    )
    result = parse_bytes([out], ["A.B"], RunEnd(exit_code=0))
    assert outcomes(result) == {"A.B": Outcome.PASSED}


@pytest.mark.parametrize("output,cases", [(V1_OUTPUT, V1_CASES), (V2_OUTPUT, V2_CASES)])
def test_chunks_split_anywhere_give_the_same_result(output, cases):
    whole = parse_bytes([output], cases, RunEnd(exit_code=1))
    bytewise = parse_bytes([output[i : i + 1] for i in range(len(output))], cases, RunEnd(exit_code=1))
    assert outcomes(bytewise) == outcomes(whole)
    assert [v.message for v in bytewise.cases.values()] == [v.message for v in whole.cases.values()]


def test_garbage_and_non_utf8_bytes_are_tolerated():
    noisy = (
        b"\xff\xfe\x00boot rom v1.2\x1b[0m\n"
        b"Testing A\n\xc3\x28 random \x80 bytes\n"
        b"Testing B\nsome log line failed at nothing\n"
        b"2/2 tests passed\n\x00\x00~~~ALL TESTS PASSED~~~\n"
    )
    result = parse_bytes([noisy], ["A", "B"], RunEnd(exit_code=0))
    assert outcomes(result) == {"A": Outcome.PASSED, "B": Outcome.PASSED}


def test_missing_closing_summary_is_no_verdict():
    result = parse_bytes([b"Testing A\nTesting B\n"], ["A", "B", "C"], RunEnd(exit_code=0))
    assert outcomes(result) == {"A": Outcome.PASSED, "B": Outcome.FAILED, "C": Outcome.FAILED}
    assert "no verdict" in result.cases["B"].message
    assert "not run: no verdict" in result.cases["C"].message


def test_crash_fails_the_running_case_and_blocks_the_rest():
    result = parse_bytes([b"Testing A\nTesting B\n"], ["A", "B", "C"], RunEnd(signal="SIGSEGV"))
    assert outcomes(result) == {"A": Outcome.PASSED, "B": Outcome.FAILED, "C": Outcome.FAILED}
    assert result.cases["B"].message == "crashed: killed by SIGSEGV while this case was running"
    assert result.cases["C"].message == "not run: crashed: killed by SIGSEGV before this case"


def test_fault_line_from_a_bare_metal_runtime_names_the_fault():
    out = b"Testing A\n#ondevice fault HardFault pc=0x08000120 CFSR=0x00008200\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=3))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert "fault: HardFault pc=0x08000120" in result.cases["A"].message


def test_timeout_message():
    result = parse_bytes([b"Testing A\n"], ["A", "B"], RunEnd(timed_out=2.0))
    assert result.cases["A"].message == "timed out after 2s while this case was running"
    assert result.cases["B"].message == "not run: timed out after 2s before this case"


@pytest.mark.parametrize(
    "end,expected",
    [
        (RunEnd(exit_code=3), "exited with code 3"),
        (RunEnd(signal="SIGABRT"), "crashed: killed by SIGABRT"),
    ],
)
def test_pass_string_then_bad_exit_is_not_a_pass(end, expected):
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A"], end)
    assert result.cases["A"].outcome is Outcome.FAILED
    assert expected in result.cases["A"].message


def test_pass_string_alone_without_exit_status_is_a_pass():
    """A UART has no exit code: the magic string and the tally decide."""
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=None))
    assert result.cases["A"].outcome is Outcome.PASSED


def test_tally_that_disagrees_with_the_lines_fails_the_passes():
    out = b"Testing A\nTesting B\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A": Outcome.FAILED, "B": Outcome.FAILED}
    assert "reports 1/2 tests passed, but its output shows 2/2" in result.cases["A"].message


def test_fail_string_with_exit_zero_disagrees():
    out = b"Testing A\nx failed at a.c:1\n0/1 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=0))
    assert result.problems == ["~~~SOME TESTS FAILED~~~ was printed, but the binary exited with code 0"]


def test_case_not_in_source_is_reported_as_unknown():
    out = b"Testing A\nTesting Generated\nfoo failed at g.c:3\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A": Outcome.PASSED}
    assert result.unknown["Generated"].outcome is Outcome.FAILED


def test_case_in_source_never_printed_is_not_run():
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A", "Hidden"], RunEnd(exit_code=0))
    assert result.cases["Hidden"].outcome is Outcome.FAILED
    assert result.cases["Hidden"].message.startswith("not run: the device never started")


def test_v2_ok_after_a_failure_block_is_a_failure():
    out = b"[ RUN      ] A.B\na.cc:3: Failure\n  Expression:  x\n[       OK ] A.B\n"
    result = parse_bytes([out], ["A.B"], RunEnd(exit_code=0))
    assert result.cases["A.B"].outcome is Outcome.FAILED


def test_per_case_log_holds_that_cases_lines():
    result = parse_bytes([V1_OUTPUT], V1_CASES, RunEnd(exit_code=1))
    assert result.cases["OffByOne"].log.splitlines() == [
        "Testing OffByOne",
        "got == 42 failed at kernels/add_test.cc:17 (41 vs 42)",
    ]


def test_long_line_without_newline_is_cut_into_bounded_pieces():
    splitter = LineSplitter(max_line=100)
    lines = list(splitter.feed(b"x" * 1050)) + list(splitter.close())
    assert [len(line) for line in lines] == [100] * 10 + [50]


FLOOD_SCRIPT = """
import resource, sys
from pytest_ondevice.formats.lines import LineSplitter
from pytest_ondevice.formats.tflm_parser import TestOutputParser
from pytest_ondevice.formats.verdicts import RunEnd

chunk = (b"Testing Flood\\n" + b"x" * 90 + b" failed at flood.c:1\\n" + b"noise " * 30 + b"\\n") * 400
parser, splitter = TestOutputParser(), LineSplitter()
for line in splitter.feed(chunk):  # warm up before the baseline
    parser.feed_line(line)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fed = 0
while fed < 100 * 1024 * 1024:
    for line in splitter.feed(chunk):
        parser.feed_line(line)
    for line in splitter.feed(b"\\xff" * 10_000):  # unterminated garbage too
        parser.feed_line(line)
    fed += len(chunk) + 10_000
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
verdict = parser.verdicts(["Flood"], RunEnd(exit_code=1)).cases["Flood"].outcome.value
print(fed, grown, verdict)
"""


def test_hundred_megabytes_of_output_in_bounded_memory():
    """A runaway program printing 100 MB must not grow the parser's memory."""
    proc = subprocess.run([sys.executable, "-c", FLOOD_SCRIPT], capture_output=True, text=True, check=True)
    fed, grown_kib, verdict = proc.stdout.split()
    assert int(fed) >= 100 * 1024 * 1024
    assert verdict == "failed"
    assert int(grown_kib) < 8 * 1024, f"max RSS grew by {grown_kib} KiB while parsing 100 MB"
