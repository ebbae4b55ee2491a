"""Rust's libtest format: cases from the sources, verdicts from real transcripts.

The transcripts in support/libtest/ were recorded by support/libtest/capture.sh from the crate
beside them (Debian's rustc 1.63 on the host and under qemu-aarch64, and a newer rustc whose
panic messages have another shape): with and without --nocapture, a failing assertion, a
panic, ignored tests, should_panic both ways, and crashes (abort, segfault) mid-test."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pytest_ondevice.formats.casetracker import MAX_FAILURE_LINES
from pytest_ondevice.formats.libtest import IGNORED, Libtest, LibtestParser, ignored_cases
from pytest_ondevice.formats.lines import LineSplitter
from pytest_ondevice.formats.rustsrc import scan, strip
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

SUPPORT = Path(__file__).resolve().parent / "support" / "libtest"
KERNELS = Path(__file__).resolve().parent.parent / "examples" / "rust" / "kernels"
P, F, S = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED

# the transcript crate's tests, and what libtest said about each when nothing crashed
CLEAN = {
    "tests::fails_assert": F,
    "tests::ignored_plain": S,
    "tests::ignored_reason": S,
    "tests::panics": F,
    "tests::passes": P,
    "tests::should_panic_fails": F,
    "tests::should_panic_ok": P,
    "tests::zz_crash": P,
    "tests::zz_last": P,
}
CRASHED = {**CLEAN, "tests::zz_crash": F, "tests::zz_last": F}


def _end(rc: int) -> RunEnd:
    return RunEnd(exit_code=rc) if rc < 128 else RunEnd(signal=signal.Signals(rc - 128).name)


def parse(data: bytes, expected: list[str], end: RunEnd, chunk: int = 0, record: bytes | bool | None = False):
    """record: libtest's log file as the transport brought it back (None: none written;
    False: a transport that cannot bring one back)."""
    parser = Libtest().parser(tuple(sorted(expected)))
    splitter = LineSplitter()
    for i in range(0, len(data), chunk or len(data) or 1):
        for line in splitter.feed(data[i : i + chunk] if chunk else data):
            parser.feed_line(line)
    for line in splitter.close():
        parser.feed_line(line)
    if record is not False:
        parser.framework_record(record)
    return parser.verdicts(expected, end)


def transcript(name: str) -> tuple[bytes, RunEnd]:
    return (SUPPORT / f"{name}.txt").read_bytes(), _end(int((SUPPORT / f"{name}.rc").read_text()))


# -- the sources -----------------------------------------------------------------
def test_find_cases_names_tests_by_their_module_path():
    cases = Libtest().find_cases((SUPPORT / "crate" / "src" / "lib.rs").read_text())
    assert sorted(c.name for c in cases) == sorted(CLEAN)
    assert all(c.style == "libtest" for c in cases)
    passes = next(c for c in cases if c.name == "tests::passes")
    assert (SUPPORT / "crate/src/lib.rs").read_text().splitlines()[passes.line - 1].strip() == "fn passes() {"


def test_ignored_cases_carry_the_attributes_reason():
    text = (SUPPORT / "crate" / "src" / "lib.rs").read_text()
    assert ignored_cases(text) == {"tests::ignored_plain": IGNORED, "tests::ignored_reason": "needs a camera"}
    kernels = (KERNELS / "src" / "lib.rs").read_text()
    assert set(ignored_cases(kernels)) == {"tests::gemm_large_matches_float"}


def test_comments_and_literals_make_no_cases():
    src = r"""
//! #[test] fn in_doc() {}
/* /* nested */ #[test] fn in_nested_comment() {} */
// #[test] fn in_line_comment() {}
const A: &str = "#[test] fn in_string() { \" }";
const B: &str = r##"#[test] fn in_raw() {} "# still raw"##;
const C: &[u8] = br#"#[test] fn in_byte_raw() {}"#;
const Q: char = '"';
fn lifetimes<'a>(x: &'a str) -> &'a str { x }
#[test]
fn real() {}
#[tokio::test]
async fn other_harness() {}
mod a {
    mod b {
        #[test]
        #[should_panic(expected = "} {")]
        fn deep() {}
    }
    #[ignore = "slow \"on qemu\""]
    #[test]
    fn slow() {}
}
#[test] fn after_modules() {}
"""
    found = scan(src)
    assert [t.name for t in found.tests] == ["real", "a::b::deep", "a::slow", "after_modules"]
    deep, slow = found.tests[1], found.tests[2]
    assert deep.should_panic and not deep.ignored
    assert slow.ignored and slow.ignore_reason == 'slow "on qemu"'
    assert found.tests[0].line == 11
    stripped = strip(src)
    assert len(stripped) == len(src) and stripped.count("\n") == src.count("\n")


def test_out_of_line_modules_are_listed_with_their_path_attribute():
    found = scan('#[cfg(test)]\nmod tests;\nmod outer {\n    #[path = "x/y.rs"]\n    mod inner;\n}\n')
    assert [(m.parents, m.name, m.line, m.path) for m in found.modules] == [
        ((), "tests", 2, None),
        (("outer",), "inner", 5, "x/y.rs"),
    ]


def test_device_order_is_sorted_as_libtest_runs():
    cases = Libtest().find_cases("#[test] fn b() {}\n#[test] fn a() {}\nmod z { #[test] fn c() {} }\n")
    assert Libtest().device_order(cases) == ("a", "b", "z::c")


# -- recorded transcripts ----------------------------------------------------------
@pytest.mark.parametrize(
    "name, outcomes",
    [
        ("rust163_capture", CLEAN),
        ("rust163_nocapture", CLEAN),
        ("rust163_backtrace", CLEAN),
        ("rustnew_capture", CLEAN),
        ("rustnew_nocapture", CLEAN),
        ("rust163_abort", CRASHED),
        ("rust163_nocapture_segv", CRASHED),
        ("rust163_nocapture_backtrace_abort", CRASHED),
        ("rustnew_nocapture_abort", CRASHED),
        ("qemu_aarch64_segv", CRASHED),
    ],
)
@pytest.mark.parametrize("chunk", [0, 1, 7, 64])
def test_transcript_verdicts(name, outcomes, chunk):
    data, end = transcript(name)
    result = parse(data, sorted(outcomes), end, chunk)
    assert {n: v.outcome for n, v in result.cases.items()} == outcomes
    assert result.unknown == {} and result.problems == []
    skipped = result.cases["tests::ignored_reason"]
    assert skipped.message == "needs a camera"
    assert result.cases["tests::ignored_plain"].message == IGNORED
    if end.signal:
        assert result.cases["tests::zz_crash"].message == f"crashed: killed by {end.signal} while this case was running"
        assert result.cases["tests::zz_last"].message.startswith("not run: crashed")


@pytest.mark.parametrize("name", ["rust163_capture", "rust163_nocapture", "rust163_backtrace", "rustnew_capture"])
def test_failure_text_is_the_panic_message_and_its_location(name):
    data, end = transcript(name)
    cases = parse(data, sorted(CLEAN), end).cases
    failed = cases["tests::fails_assert"]
    assert "panicked at" in failed.message and "x was 2" in failed.message
    assert failed.location == ("src/lib.rs", 16)
    assert "stack backtrace" not in failed.message and "RUST_BACKTRACE" not in failed.message
    assert "some output before" in failed.log, "the test's own output is its log"
    assert cases["tests::panics"].location == ("src/lib.rs", 22)
    assert "boom: 42" in cases["tests::panics"].message
    assert "did not panic as expected" in cases["tests::should_panic_fails"].message
    assert cases["tests::should_panic_ok"].message == "", "an expected panic is no failure"


def test_failed_cases_of_a_crashed_run_say_why_the_reason_is_missing():
    data, end = transcript("rust163_abort")
    cases = parse(data, sorted(CLEAN), end).cases
    assert "the output ended before" in cases["tests::fails_assert"].message


def test_garbage_between_lines_changes_nothing():
    data, end = transcript("rust163_nocapture")
    noisy = data.replace(b"\ntest tests::passes", b"\n\xff\xfe\x00garbage \x1b[31m\n\ntest tests::passes")
    noisy += b"\n\x80\x81 trailing bytes"
    result = parse(noisy, sorted(CLEAN), end, chunk=5)
    assert {n: v.outcome for n, v in result.cases.items()} == CLEAN
    assert result.problems == []


# -- libtest's log file (--logfile) -------------------------------------------------
def test_an_honest_runs_log_file_agrees_with_every_verdict():
    data, end = transcript("rust163_nocapture")
    record = "".join(
        f"{'ok' if o is Outcome.PASSED else 'failed' if o is F else 'ignored'} {n}\n" for n, o in sorted(CLEAN.items())
    )
    result = parse(data, sorted(CLEAN), end, record=record.encode())
    assert {n: v.outcome for n, v in result.cases.items()} == CLEAN
    assert result.problems == []


FORGED = (
    "running 2 tests\ntest a ... ok\ntest b ... ok\n\n"
    + "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n"
)


@pytest.mark.parametrize(
    "record, why",
    [
        (b"ok a\n", "the output says passed, but libtest's log file records no verdict for it"),
        (b"ok a\nfailed b\n", "libtest's log file records it failed, but the output says passed"),
        (b"ok a\nfailed: timed out b <0.002s>\n", "libtest's log file records it failed, but the output says passed"),
        (b"ok a\nignored: needs a camera b\n", "libtest's log file records it skipped, but the output says passed"),
        (b"ok a\n\xff\xfe garbage\nok bb\nok b extra\n", "records no verdict for it"),
    ],
)
def test_a_pass_the_log_file_does_not_record_is_a_failure(record, why):
    result = parse(FORGED.encode(), ["a", "b"], RunEnd(exit_code=0), record=record)
    assert result.cases["a"].outcome is Outcome.PASSED
    assert result.cases["b"].outcome is F and why in result.cases["b"].message
    assert result.problems == [
        "the output claims verdicts libtest's log file does not record (b): a test printed libtest's lines "
        "(then left early?)"
    ]


def test_no_log_file_at_all_fails_every_claimed_pass_and_says_so():
    result = parse(FORGED.encode(), ["a", "b"], RunEnd(exit_code=0), record=None)
    assert all(v.outcome is F for v in result.cases.values())
    assert "libtest wrote no log file (--logfile)" in result.cases["a"].message


def test_the_log_file_never_turns_a_failure_into_a_pass():
    text = FORGED.replace("test b ... ok", "test b ... FAILED").replace("2 passed; 0 failed", "1 passed; 1 failed")
    result = parse(text.encode(), ["a", "b"], RunEnd(exit_code=101), record=b"ok a\nok b\n")
    assert result.cases["b"].outcome is F


def test_without_a_log_file_transport_the_output_alone_decides():
    result = parse(FORGED.encode(), ["a", "b"], RunEnd(exit_code=0))
    assert all(v.outcome is Outcome.PASSED for v in result.cases.values())


def test_libtest_is_asked_for_its_log_file_only_where_it_can_be_brought_back():
    assert Libtest().args("/scratch/.run-file-3")[-2:] == ["--logfile", "/scratch/.run-file-3"]
    assert Libtest().args(None) == list(Libtest.run_args)


# -- the stream's corner cases -------------------------------------------------------
SUMMARY_OK = "test result: ok. {p} passed; 0 failed; {i} ignored; 0 measured; 0 filtered out; finished in 0.01s"
SUMMARY_FAILED = "test result: FAILED. {p} passed; {f} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s"


def run(text: str, expected: list[str], rc: int = 0, **end):
    return parse(text.encode(), expected, RunEnd(exit_code=rc, **end) if not end else RunEnd(**end))


def test_zero_tests():
    result = run("\nrunning 0 tests\n\n" + SUMMARY_OK.format(p=0, i=0) + "\n", [])
    assert result.cases == {} and result.problems == []


def test_a_verdict_after_the_tests_own_output_without_newline():
    text = "running 2 tests\ntest a ... hello\nworld: not ok? ok\ntest b ... partial lineFAILED\n"
    text += "\nfailures:\n\nfailures:\n    b\n\n" + SUMMARY_FAILED.format(p=1, f=1) + "\n"
    cases = run(text, ["a", "b"], rc=101).cases
    assert (cases["a"].outcome, cases["b"].outcome) == (P, F)


def test_the_last_verdict_like_line_before_libtest_goes_on_wins():
    """With --nocapture a test may print "ok" or "FAILED" itself: libtest's own comes last."""
    text = "running 2 tests\ntest a ... all ok\nthread 'main' panicked at 'later', src/lib.rs:3:5\nFAILED\n"
    text += "test b ... step FAILED\nretried: ok\n\nfailures:\n\nfailures:\n    a\n\n"
    text += "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n"
    cases = run(text, ["a", "b"], rc=101).cases
    assert cases["a"].outcome is F and cases["a"].location == ("src/lib.rs", 3)
    assert "later" in cases["a"].message
    assert cases["b"].outcome is P


def test_output_ending_after_a_verdict_like_line_is_a_crash_in_that_test():
    cases = run("running 1 test\ntest a ... ready: ok\n", ["a"], signal="SIGSEGV").cases
    assert cases["a"].outcome is F
    assert "killed by SIGSEGV while this case was running" in cases["a"].message
    assert "line ending in a verdict" in cases["a"].message


def test_a_backtrace_frame_is_never_a_verdict():
    """`3: crate::tests::is_ok` ends in "ok": with RUST_BACKTRACE=1 and --nocapture it comes
    between the start and the verdict, and is no verdict even when the binary dies after it."""
    text = "running 1 test\ntest tests::is_ok ... thread 'main' panicked at 'no', src/lib.rs:4:5\n"
    text += "stack backtrace:\n   3: crate::tests::is_ok\n             at ./src/lib.rs:4:5\n"
    case = run(text, ["tests::is_ok"], signal="SIGABRT").cases["tests::is_ok"]
    assert case.outcome is F and "line ending in a verdict" not in case.message
    assert case.message.startswith("thread 'main' panicked at 'no'") and case.location == ("src/lib.rs", 4)


def test_a_summary_printed_by_a_running_test_is_its_output():
    text = "running 2 tests\ntest a ... \n" + SUMMARY_OK.format(p=2, i=0) + "\nok\ntest b ... ok\n\n"
    text += SUMMARY_OK.format(p=2, i=0) + "\n"
    result = run(text, ["a", "b"])
    assert {n: v.outcome for n, v in result.cases.items()} == {"a": P, "b": P}
    assert result.problems == []


def test_a_summary_that_disagrees_with_the_verdicts_fails_every_case():
    result = run("running 1 test\ntest a ... ok\n\n" + SUMMARY_OK.format(p=2, i=0) + "\n", ["a"])
    assert result.cases["a"].outcome is F
    assert "closing summary says 2 passed" in result.cases["a"].message


def test_exit_101_without_a_failed_case_fails_the_run():
    result = run("running 1 test\ntest a ... ok\n\n" + SUMMARY_OK.format(p=1, i=0) + "\n", ["a"], rc=101)
    assert result.cases["a"].outcome is F and "exited with code 101" in result.cases["a"].message


def test_no_summary_after_clean_exit_fails():
    result = run("running 1 test\ntest a ... ok\ntest b ... ok\n", ["a", "b"])
    assert result.cases["a"].outcome is P  # confirmed by libtest going on to b
    assert result.cases["b"].outcome is F  # never confirmed: the binary stopped there
    assert "no verdict: output ended while this case was running" in result.cases["b"].message


def test_colours_from_a_terminal_are_ignored():
    text = "running 1 test\ntest a ... \x1b[32mok\x1b[0m\n\ntest result: \x1b[32mok\x1b[0m. 1 passed; 0 failed; "
    text += "0 ignored; 0 measured; 0 filtered out\n"
    assert run(text, ["a"]).cases["a"].outcome is P


def test_a_block_for_a_passing_case_or_a_second_block_changes_nothing():
    """--show-output prints blocks for passing tests (successes:), and a failed test's own
    output may hold a block header: neither is a failure of another case."""
    text = "running 2 tests\ntest a ... ok\ntest b ... FAILED\n\nsuccesses:\n\n---- a stdout ----\nhi\n\n"
    text += "successes:\n    a\n\nfailures:\n\n---- b stdout ----\n---- a stdout ----\n"
    text += "thread 'main' panicked at 'b broke', src/b.rs:1:1\n\nfailures:\n    b\n\n"
    text += "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n"
    cases = run(text, ["a", "b"], rc=101).cases
    assert cases["a"].outcome is P
    assert cases["b"].outcome is F and cases["b"].location == ("src/b.rs", 1)


def test_a_long_panic_is_bounded():
    body = "\n".join(f"line {i}" for i in range(5000))
    text = "running 1 test\ntest a ... FAILED\n\nfailures:\n\n---- a stdout ----\n"
    text += f"thread 'main' panicked at 'x\n{body}', src/lib.rs:9:1\n\nfailures:\n    a\n\n"
    text += SUMMARY_FAILED.format(p=0, f=1) + "\n"
    parser = LibtestParser()
    for line in text.splitlines():
        parser.feed_line(line)
    assert len(parser.cases["a"].failures) <= MAX_FAILURE_LINES
    assert parser.verdicts(["a"], RunEnd(exit_code=101)).cases["a"].outcome is F


def test_a_test_returning_err_fails_with_its_error():
    text = 'running 1 test\ntest r ... Error: "bad thing"\nFAILED\n\nfailures:\n\n---- r stdout ----\nout\n'
    text += "thread 'main' panicked at 'assertion failed: `(left == right)`\n  left: `1`,\n right: `0`: the test "
    text += "returned a termination value with a non-zero status code (1) which indicates a failure', "
    text += "/usr/src/rustc-1.63.0/library/test/src/lib.rs:184:5\n\nfailures:\n    r\n\n"
    text += "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n"
    case = run(text, ["r"], rc=101).cases["r"]
    assert case.outcome is F and 'Error: "bad thing"' in case.message
    assert case.location is None, "Rust's own library is not where the test failed"
