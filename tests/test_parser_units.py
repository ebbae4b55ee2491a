"""Plain unit tests: the device log file's bound, the source scan's duplicates, and whose stack record is whose."""

from __future__ import annotations

from pytest_ondevice.formats.devlog import DeviceLog
from pytest_ondevice.formats.discover import device_names, find_cases
from pytest_ondevice.formats.verdicts import RunEnd


def _log(tmp_path, max_bytes, lines):
    seen: list[str] = []
    log = DeviceLog(tmp_path / "logs" / "x.log", "host", seen.append, max_bytes=max_bytes)
    for line in lines:
        log.feed(line.encode() + b"\n")
    log.close(RunEnd(exit_code=0, duration=0.5))
    return log, seen, (tmp_path / "logs" / "x.log").read_text()


def test_device_log_within_its_bound_is_whole(tmp_path):
    lines = [f"line {i:03d}" for i in range(10)]
    log, seen, text = _log(tmp_path, 1000, lines)
    assert seen == lines
    assert text.splitlines() == [*lines, "# pytest-ondevice: the binary exited with code 0 after 0.50s"]
    assert log.cut_lines == 0


def test_device_log_keeps_head_and_tail_and_counts_the_cut(tmp_path):
    lines = [f"line {i:03d}" for i in range(100)]  # 9 bytes each with the newline
    log, seen, text = _log(tmp_path, 90, lines)
    assert seen == lines, "the parser sees every line, whatever the file keeps"
    kept = text.splitlines()
    assert kept[:5] == lines[:5]  # 45 bytes of head
    assert kept[5] == (
        "# pytest-ondevice: 90 lines (810 bytes) cut here: the log keeps the first and the last "
        "45 bytes of the output (ondevice_log_max)"
    )
    assert kept[6:-1] == lines[-5:]
    assert (log.cut_lines, log.cut_bytes) == (90, 810)


def test_device_log_keeps_a_last_line_larger_than_its_share(tmp_path):
    log, _, text = _log(tmp_path, 20, ["a", "b" * 50])
    assert text.splitlines()[:2] == ["a", "b" * 50]
    assert log.cut_lines == 0


def test_discovery_names_a_v1_duplicate_with_its_lines():
    src = (
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
        "TF_LITE_MICRO_TEST(Same) {}\nTF_LITE_MICRO_TEST(Other) {}\nTF_LITE_MICRO_TEST(Same) {}\n"
        "TF_LITE_MICRO_TESTS_END\n"
    )
    cases = find_cases(src)
    assert [(c.name, c.line, c.also_at) for c in cases] == [("Same", 3, (5,)), ("Other", 4, ())]
    assert device_names(cases) == ("Same", "Same", "Other")


def test_discovery_of_a_file_whose_cases_are_made_by_a_macro_is_empty():
    src = "#define MYTEST(n) TF_LITE_MICRO_TEST(n)\nTF_LITE_MICRO_TESTS_BEGIN\nMYTEST(A) {}\nTF_LITE_MICRO_TESTS_END\n"
    assert find_cases(src) == []
    assert device_names([]) == ()


def test_a_stack_record_belongs_to_the_running_case_and_a_malformed_one_is_log():
    from pytest_ondevice.formats.tflm_parser import TestOutputParser

    n = "0123456789abcdef"
    parser = TestOutputParser()
    for line in [
        f"#ondevice nonce {n}",
        f"#ondevice {n} case A",
        f"#ondevice {n} stack B 999",  # names another case: not A's figure, nor B's
        f"#ondevice {n} stack A 12x",  # not a number
        f"#ondevice {n} stack A 400 limit=300",
        f"#ondevice {n} end A failed",
        f"#ondevice {n} case C",
        f"#ondevice {n} stack C 64 beyond",
        f"#ondevice {n} end C passed",
        f"#ondevice {n} rss 2097152",
        f"#ondevice {n} summary",
        "~~~SOME TESTS FAILED~~~",
    ]:
        parser.feed_line(line)
    benches = parser.verdicts(["A", "C"], RunEnd(exit_code=1)).benches
    assert [(b.name, b.median, b.lower_bound) for b in benches["A"]] == [
        ("stack:A", 400, False),
        ("peak_rss", 2097152, False),  # the binary's, on its first case
    ]
    assert [(b.name, b.median, b.lower_bound) for b in benches["C"]] == [("stack:C", 64, True)]
    assert "B" not in benches


def test_the_runtimes_stack_watch_gives_the_case_that_just_ended_its_figure_and_an_overflow_fails_it_alone():
    """TFLM's own header has no markers of ours: the bare-metal runtime prints an unstamped
    record after each verdict line. It belongs to the case that just ended, by name; an
    overflow fails that case without blaming the binary, whose own summary could not know."""
    from pytest_ondevice.formats.tflm_parser import TestOutputParser

    parser = TestOutputParser()
    for line in [
        "[==========] Running tests.",
        "[ RUN      ] S.A",
        "[       OK ] S.A",
        "#ondevice stack S.B 999",  # names another case: nobody's figure
        "#ondevice stack S.A 4192",
        "[ RUN      ] S.C",
        "[       OK ] S.C",
        "#ondevice stack S.C 16100 overflow",
        "[==========] 2 tests ran.",
        "[  PASSED  ] 2 tests.",
        "~~~ALL TESTS PASSED~~~",
    ]:
        parser.feed_line(line)
    result = parser.verdicts(["S.A", "S.C"], RunEnd(exit_code=0))
    assert result.cases["S.A"].outcome.value == "passed"
    assert result.cases["S.C"].outcome.value == "failed"
    assert "stack overflow: the case reached the last 256 bytes of the stack (16100 bytes" in str(
        result.cases["S.C"].message
    )
    assert [(b.name, b.median) for b in result.benches["S.A"]] == [("stack:S.A", 4192)]
    assert "S.B" not in result.benches
    assert result.problems == []  # the binary as a whole is not blamed


def test_an_unstamped_stack_record_in_a_run_of_our_header_is_log():
    """Our header stamps its records: an unstamped one there is the test's own output."""
    from pytest_ondevice.formats.tflm_parser import TestOutputParser

    n = "0123456789abcdef"
    parser = TestOutputParser()
    for line in [
        f"#ondevice nonce {n}",
        f"#ondevice {n} case A",
        "#ondevice stack A 10 overflow",
        f"#ondevice {n} end A passed",
        f"#ondevice {n} summary",
        "~~~ALL TESTS PASSED~~~",
    ]:
        parser.feed_line(line)
    result = parser.verdicts(["A"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome.value == "passed"
    assert "A" not in result.benches


def test_a_case_that_times_a_cuda_kernel_is_a_bench_case():
    src = (
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
        'TF_LITE_MICRO_TEST(Gpu) { ONDEVICE_CUDA_BENCH("k", 1, 3) { k<<<1, 1>>>(); } }\n'
        "TF_LITE_MICRO_TEST(Plain) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }\nTF_LITE_MICRO_TESTS_END\n"
    )
    assert [(c.name, c.bench) for c in find_cases(src)] == [("Gpu", True), ("Plain", False)]


def test_a_binarys_attempt_logs_from_another_session_are_removed_and_no_other_files(tmp_path):
    from pytest_ondevice.formats.devlog import attempt_log, remove_attempt_logs

    log = tmp_path / "kernel_test.c.log"
    stale = [attempt_log(log, n) for n in (1, 2, 3)]
    kept = [log, attempt_log(tmp_path / "other_test.c.log", 1), tmp_path / "kernel_test.c.attempt-notes.txt"]
    for path in (*stale, *kept):
        path.write_text("x")
    remove_attempt_logs(log)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)
