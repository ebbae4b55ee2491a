"""Latency records: the device's bench lines, their units per board, the table, JSON and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_ondevice.config.board import BoardRegistry
from pytest_ondevice.formats.benchline import BenchRecordError, parse_record
from pytest_ondevice.formats.devlog import DeviceLog
from pytest_ondevice.formats.protocol import Outcome, RunEnd, TestOutputParser
from pytest_ondevice.records.bench import compare, measure, parse_threshold

LINE = "name=gemm_int8 unit=systick repeats=5 min=100 median=102 max=110 work=32768 work_unit=MAC overhead=7"


def test_a_record_parses_with_every_field():
    r = parse_record(LINE)
    assert (r.name, r.unit, r.repeats, r.min, r.median, r.max, r.work, r.work_unit, r.overhead) == (
        "gemm_int8",
        "systick",
        5,
        100,
        102,
        110,
        32768,
        "MAC",
        7,
    )


@pytest.mark.parametrize(
    "body, why",
    [
        ("name=g unit=systick repeats=5 min=1 max=3", "without median"),
        ("unit=systick repeats=5 min=1 median=2 max=3", "without name"),
        ("name=g unit=systick repeats=5 min=1 median=two max=3", "median='two', not a whole number"),
        ("name=g unit=furlongs repeats=5 min=1 median=2 max=3", "unknown unit 'furlongs'"),
        ("name=g unit=ns repeats=5 min=5 median=2 max=3", "min <= median <= max broken"),
        ("\x00\xff garbage", "without name, unit, repeats, min, median, max"),
    ],
)
def test_a_broken_record_is_a_clear_error_never_a_zero(body, why):
    with pytest.raises(BenchRecordError, match=why.replace("(", r"\(")):
        parse_record(body)


def _parse(chunks: list[bytes], tmp_path) -> TestOutputParser:
    parser = TestOutputParser()
    log = DeviceLog(tmp_path / "x.log", "host", parser.feed_line, None)
    for chunk in chunks:
        log.feed(chunk)
    log.close(RunEnd(exit_code=0))
    return parser


def test_records_belong_to_their_case_even_split_across_reads(tmp_path):
    text = f"Testing Gemm\r\n#ondevice bench {LINE}\r\n1/1 tests passed\r\n~~~ALL TESTS PASSED~~~\r\n".encode()
    parser = _parse([text[i : i + 7] for i in range(0, len(text), 7)], tmp_path)  # 7-byte reads
    verdicts = parser.verdicts(["Gemm"], RunEnd(exit_code=0))
    assert verdicts.cases["Gemm"].outcome is Outcome.PASSED
    assert verdicts.benches["Gemm"] == [parse_record(LINE)]


def test_a_broken_record_fails_its_case_with_the_reason(tmp_path):
    text = b"Testing Gemm\n#ondevice bench name=g unit=systick repeats=5 min=1 max=3\n~~~ALL TESTS PASSED~~~\n"
    verdicts = _parse([text], tmp_path).verdicts(["Gemm"], RunEnd(exit_code=0))
    assert verdicts.cases["Gemm"].outcome is Outcome.FAILED
    assert "bench record without median" in verdicts.cases["Gemm"].message
    assert verdicts.benches == {}


def test_units_come_from_the_board_file(tmp_path):
    (tmp_path / "chip.toml").write_text('extends = "bluepill"\nclock_hz = 40_000_000\n[transport]\nname = "local"\n')
    reg = BoardRegistry([tmp_path])
    record = parse_record(LINE)
    qemu = measure(
        record, reg.get("bluepill-qemu"), _clock(reg.get("bluepill-qemu"))
    )  # SysTick on icount: instructions
    assert qemu.unit == "instructions" and qemu.deterministic
    assert qemu.median == round(102 * 1e9 / (24_000_000 * 2**5), 1) and qemu.us is None
    silicon = measure(record, reg.get("chip"), _clock(reg.get("chip")))  # SysTick at the CPU clock on silicon: cycles
    assert silicon.unit == "cycles" and not silicon.deterministic
    assert silicon.us == pytest.approx(102 / 40_000_000 * 1e6)
    host = measure(parse_record(LINE.replace("systick", "ns")), reg.get("host"), _clock(reg.get("host")))
    assert host.unit == "ns" and host.us == pytest.approx(0.102)


GEMM = """
    #include <stdint.h>
    #include "micro_test.h"
    static int8_t a[16 * 16], b[16 * 16];
    static int32_t c[16 * 16];
    static void gemm(int n) {
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
          int32_t acc = 0;
          for (int k = 0; k < n; k++) acc += a[i * n + k] * b[k * n + j];
          c[i * n + j] = acc;
        }
    }
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Gemm16) {
      for (int i = 0; i < 256; i++) { a[i] = (int8_t)(i % 7 - 3); b[i] = (int8_t)(i % 5 - 2); }
      ONDEVICE_BENCH("gemm_s8_16", 16 * 16 * 16, 5) { gemm(16); ONDEVICE_KEEP(c); }
      TF_LITE_MICRO_EXPECT_EQ(c[0], -1);
    }
    TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.slow
def test_bluepill_qemu_figures_are_identical_run_to_run_in_the_table_json_and_junit(project):
    project.write("gemm_test.c", GEMM)
    runs = []
    for i in range(2):
        project.run(board="bluepill-qemu").assert_outcomes(passed=1)  # build, then rerun the same binary
        result = project.run(f"--bench-json=b{i}.json", f"--junitxml=j{i}.xml", board="bluepill-qemu")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            [
                "*= ondevice bench =*",
                "kernel*board*median*min-max*unit*work/unit*",
                "gemm_s8_16*bluepill-qemu*instructions*MAC*",
            ]
        )
        record = json.loads((project.path / f"b{i}.json").read_text())["records"][0]
        assert record["raw"]["median"] > 0 and record["unit"] == "instructions"
        junit = ET.parse(project.path / f"j{i}.xml").getroot()
        prop = next(p for p in junit.iter("property") if p.get("name") == "ondevice_bench")
        assert json.loads(prop.get("value"))["median"] == record["median"]
        runs.append(record)
    assert runs[0]["raw"] == runs[1]["raw"]  # -icount: the same figures every run
    data = json.loads((project.path / "b0.json").read_text())
    assert data["boards"]["bluepill-qemu"]["toolchain"]["cc"] == "arm-none-eabi-gcc"
    assert len(runs[0]["binary_sha256"]) == 64


def test_host_bench_is_in_nanoseconds(project):
    project.write("gemm_test.c", GEMM)
    result = project.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gemm_s8_16*host*ns*MAC*"])


def _row(median, lo, hi, deterministic=True, unit="instructions"):
    return {
        "name": "g",
        "board": "b",
        "case": "C",
        "unit": unit,
        "median": median,
        "min": lo,
        "max": hi,
        "deterministic": deterministic,
    }


def test_compare_is_exact_on_deterministic_boards_and_noise_aware_on_others():
    assert compare(_row(100, 100, 100), _row(100, 100, 100), 5) == ("+0.0 %", None)
    verdict, failure = compare(_row(106, 106, 106), _row(100, 100, 100), 5)
    assert verdict == "+6.0 % REGRESSED"
    assert failure == "g on b: 106 instructions, baseline 100 (+6.0 % > 5 %)"
    assert compare(_row(104, 104, 104), _row(100, 100, 100), 5)[1] is None  # under the threshold
    noisy = compare(_row(130, 90, 150, False, "ns"), _row(100, 80, 120, False, "ns"), 5)
    assert noisy == ("+30.0 % (within noise)", None)
    assert compare(_row(200, 195, 205, False, "ns"), _row(100, 98, 102, False, "ns"), 5)[1] is not None
    assert parse_threshold("5%") == 5 and parse_threshold(" 2.5 ") == 2.5
    with pytest.raises(ValueError, match="expected a percentage"):
        parse_threshold("five")


@pytest.mark.slow
def test_a_deliberate_slowdown_fails_the_compare_with_the_figures(project):
    project.write(
        "gemm_test.c",
        GEMM.replace("gemm(16); ONDEVICE_KEEP(c);", "gemm(16);\n#ifdef SLOWER\n gemm(16);\n#endif\n ONDEVICE_KEEP(c);"),
    )
    saved = project.run("--bench-save=main", board="bluepill-qemu")
    saved.assert_outcomes(passed=1)
    assert (project.path / ".ondevice" / "benchmarks" / "main.json").is_file()
    same = project.run("--bench-compare=main", board="bluepill-qemu")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["gemm_s8_16*bluepill-qemu*+0.0 %"])
    project.write("ondevice.toml", 'defines = ["SLOWER=1"]\n')  # the kernel got slower
    slower = project.run("--bench-compare=main", "--bench-fail=5%", board="bluepill-qemu")
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(
        ["*gemm_s8_16 on bluepill-qemu: * instructions, baseline * (+9*.* % > 5 %)*", "gemm_s8_16*REGRESSED*"]
    )
    missing = project.run("--bench-compare=nosuch", board="bluepill-qemu")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*no baseline*nosuch.json (saved: main; store one with --bench-save=nosuch)*"])


PLAIN = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Plain) { TF_LITE_MICRO_EXPECT(1); }
    TF_LITE_MICRO_TESTS_END
"""


def test_bench_cases_are_marked_selectable_and_can_run_as_plain_tests(project):
    project.write("gemm_test.c", GEMM)
    project.write("plain_test.c", PLAIN)
    for args in (["-m", "bench"], ["--bench-only"]):
        only = project.run(*args, "-v")
        only.assert_outcomes(passed=1, deselected=1)
        only.stdout.fnmatch_lines(["*gemm_test.c::Gemm16[[]host[]] PASSED*"])
    plain = project.run("--bench-disable", "--device-log=live")
    plain.assert_outcomes(passed=2)
    assert "#ondevice bench" not in plain.stdout.str() and "ondevice bench" not in plain.stdout.str()


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "bluepill-qemu", "mps2-an386", "rpi"])
def test_gemm_examples_agree_with_their_reference_and_bench_both(project, board):
    project.copy_examples("gemm")
    device = ["--device=qemu"] if board == "rpi" else []  # the Pi binary, under qemu-aarch64
    result = project.run("examples/gemm", "-v", *device, board=board)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*Int8OptimizedMatchesReferenceOnAllShapes*PASSED*"])
    for name in ("gemm_s8_naive_32", "gemm_s8_opt_32", "gemm_f32_naive_16", "gemm_f32_opt_16"):
        result.stdout.fnmatch_lines([f"{name}*{board}*"])


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "bluepill-qemu"])
def test_the_two_layer_model_matches_its_generator_and_fits_the_board(project, board):
    project.copy_examples("gemm", "model")
    result = project.run("examples/model", "-v", board=board)
    result.assert_outcomes(passed=2)  # a binary that did not fit would fail before running
    result.stdout.fnmatch_lines(["*MlpOutputsMatchTheGenerator*PASSED*", f"mlp_int8_64_32_10*{board}*"])


def _clock(board):
    return board.clock_for(board.transport)


def test_a_counter_that_never_advanced_is_an_error_not_zero_cycles(tmp_path):
    """DWT CYCCNT reads 0 where it is absent or off (QEMU): "0 cycles" for a GEMM is a lie."""
    from pytest_ondevice.formats.benchline import BenchRecordError

    (tmp_path / "chip.toml").write_text('extends = "bluepill"\n[transport]\nname = "local"\n')
    board = BoardRegistry([tmp_path]).get("chip")
    dead = parse_record(
        LINE.replace("unit=systick", "unit=dwt").replace("min=100 median=102 max=110", "min=0 median=0 max=0")
    )
    with pytest.raises(BenchRecordError, match=r"the cycle counter never advanced.*without -DONDEVICE_CYCLES_DWT"):
        measure(dead, board, _clock(board))
