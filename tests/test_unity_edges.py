"""Unity's parser at its edges: the case the host runtime names at a crash or an exit, a
bare-metal fault line naming the case, verdict lines without a message or given twice,
tally lookalikes a case prints, and which lines make each case's log."""

from __future__ import annotations

from test_formats import UNITY, UNITY_NAMES, UNITY_NONCE, outcomes, parse, stamped

from pytest_ondevice.formats.unity import Unity
from pytest_ondevice.formats.verdicts import Outcome, RunEnd, Verdict

ABC = b"u.c:1:test_a:PASS\nu.c:2:test_b:PASS\nu.c:3:test_c:PASS\n"
TALLY = b"\n-----------------------\n%d Tests 0 Failures 0 Ignored\nOK\n"
ANOTHERS = " (its verdict line was another case's)"
NO_START = " (Unity prints no start line: the first case in run order without a verdict)"


def test_a_crash_is_the_named_cases_and_the_lines_it_printed_for_later_cases_fail():
    # test_b printed its own PASS line and test_c's, then crashed; a second crash line is not the first's
    stream = UNITY_NONCE + ABC + stamped("crashed-in test_b", "crashed-in test_c")
    v = parse(Unity(), stream, ["test_a", "test_b", "test_c", "test_d"], RunEnd(signal="SIGSEGV"))
    assert outcomes(v) == {"test_a": "passed", "test_b": "failed", "test_c": "failed", "test_d": "failed"}
    assert v.cases["test_b"].message == "crashed: killed by SIGSEGV while this case was running"
    assert (
        v.cases["test_c"].message == "not run: crashed: killed by SIGSEGV in case test_b, before this case" + ANOTHERS
    )
    assert v.cases["test_d"].message == "not run: crashed: killed by SIGSEGV before this case"
    assert v.problems == []


def test_a_crash_in_a_case_that_printed_no_line_fails_the_cases_after_it_in_run_order():
    stream = UNITY_NONCE + b"u.c:1:test_a:PASS\nu.c:3:test_c:PASS\nu.c:4:test_d:IGNORE\ndereferencing\n"
    names = ["test_a", "test_b", "test_c", "test_d", "test_e"]
    v = parse(Unity(), stream + stamped("crashed-in test_b"), names, RunEnd(signal="SIGSEGV"))
    assert outcomes(v) == {"test_a": "passed", **dict.fromkeys(names[1:], "failed")}
    assert v.cases["test_b"] == Verdict(
        Outcome.FAILED,
        "crashed: killed by SIGSEGV while this case was running (Unity's running case when it crashed)",
        None,
        "dereferencing",
    )
    why = "not run: crashed: killed by SIGSEGV in case test_b, before this case" + ANOTHERS
    assert [v.cases[n].message for n in ("test_c", "test_d")] == [why, why]
    assert v.cases["test_e"].message == "not run: crashed: killed by SIGSEGV before this case"


def test_a_crash_after_the_closing_summary_is_no_single_cases():
    stream = UNITY_NONCE + ABC + TALLY % 3 + stamped("crashed-in test_c")
    v = parse(Unity(), stream, ["test_a", "test_b", "test_c"], RunEnd(signal="SIGSEGV"))
    why = "every case that ran printed its verdict, but then the binary crashed: killed by SIGSEGV"
    assert {n: x.message for n, x in v.cases.items()} == dict.fromkeys(["test_a", "test_b", "test_c"], why)


def test_the_name_the_runtime_gives_at_a_crash_is_cut_at_200_characters():
    v = parse(Unity(), UNITY_NONCE + stamped("crashed-in " + "x" * 300), ["test_a"], RunEnd(signal="SIGBUS"))
    assert list(v.unknown) == ["x" * 200]
    assert v.cases["test_a"].message == "not run: crashed: killed by SIGBUS before this case"


def test_a_case_that_printed_the_rest_of_the_run_and_called_exit_fails_with_those_it_printed():
    stream = UNITY_NONCE + ABC.replace(b"u.c:2", b"in b\nu.c:2") + TALLY % 3 + stamped("exit-in test_b")
    v = parse(Unity(), stream, ["test_a", "test_b", "test_c"], RunEnd(exit_code=0))
    assert outcomes(v) == {"test_a": "passed", "test_b": "failed", "test_c": "failed"}
    assert v.cases["test_b"] == Verdict(
        Outcome.FAILED,
        "the program exited while this case was running (exit() in the test?), after printing "
        "the verdict lines of the cases after it",
        None,
        "in b\nu.c:2:test_b:PASS",
    )
    assert v.cases["test_c"].message == "not run: the program exited in case test_b, before this case" + ANOTHERS


def test_a_case_that_called_exit_before_the_summary_leaves_the_run_without_it():
    v = parse(
        Unity(), UNITY_NONCE + ABC + stamped("exit-in test_b"), ["test_a", "test_b", "test_c"], RunEnd(exit_code=0)
    )
    assert {x.message for x in v.cases.values()} == {"the binary ended without its closing summary"}


def test_without_the_runtimes_closing_line_nothing_of_the_run_is_believed():
    v = parse(Unity(), UNITY_NONCE + UNITY, UNITY_NAMES, RunEnd(exit_code=1))  # a test called _exit()
    why = (
        "the binary ended without the runtime's closing line: a test left with _exit(), "
        "so the lines before cannot be believed"
    )
    assert v.cases["test_passes"].message == why
    assert v.cases["test_fails"].message == "u_test.c:6: Expected 5 Was 4"  # it had failed by its own line
    assert v.problems == [why]


def test_a_bare_metal_fault_line_names_the_case_and_the_lines_it_printed_for_later_cases_fail():
    fault = b"#ondevice fault UsageFault (UNDEFINSTR) pc=0x158 case=test_b\n"
    v = parse(Unity(), ABC + fault, ["test_a", "test_b", "test_c"], RunEnd(exit_code=None))
    assert outcomes(v) == {"test_a": "passed", "test_b": "failed", "test_c": "failed"}
    headline = "fault: UsageFault (UNDEFINSTR) pc=0x158 case=test_b"
    assert v.cases["test_b"].message == f"{headline} while this case was running"
    assert v.cases["test_c"].message == f"not run: {headline} in case test_b, before this case" + ANOTHERS
    told = parse(Unity(), ABC + fault, ["test_a", "test_b", "test_c"], RunEnd(fault="HardFault"))
    assert told.cases["test_b"].message == "fault: HardFault while this case was running"  # the transport's word
    assert told.cases["test_c"].message == "not run: fault: HardFault in case test_b, before this case" + ANOTHERS


def test_the_running_case_without_the_runtimes_word_is_the_first_in_run_order_without_a_verdict():
    stream = b"u.c:1:test_a:PASS\nabout to dereference\n"
    crashed = parse(Unity(), stream, ["test_a", "test_b"], RunEnd(signal="SIGSEGV"))
    assert crashed.cases["test_b"] == Verdict(
        Outcome.FAILED,
        "crashed: killed by SIGSEGV while this case was running" + NO_START,
        None,
        "about to dereference",
    )
    ended = parse(Unity(), stream, ["test_a", "test_b"], RunEnd(exit_code=0))
    assert ended.cases["test_b"].message == "no verdict: output ended while this case was running" + NO_START


def test_the_exit_status_is_the_users_main_and_need_not_count_the_failures():
    v = parse(Unity(), UNITY, UNITY_NAMES, RunEnd(exit_code=0))  # one case failed
    assert v == parse(Unity(), UNITY, UNITY_NAMES, RunEnd(exit_code=1))
    assert v.problems == []


def test_verdict_lines_without_a_message():
    stream = b"u.c:3:test_f:FAIL\nu.c:4:test_i:IGNORE\n\n-----------------------\n2 Tests 1 Failures 1 Ignored\nFAIL\n"
    v = parse(Unity(), stream, ["test_f", "test_i"], RunEnd(exit_code=1))
    assert v.cases["test_f"] == Verdict(Outcome.FAILED, "u.c:3: FAIL", ("u.c", 3), "u.c:3:test_f:FAIL")
    assert v.cases["test_i"] == Verdict(
        Outcome.SKIPPED, "ignored in the source (TEST_IGNORE)", None, "u.c:4:test_i:IGNORE"
    )


def test_a_second_verdict_line_for_a_case_is_a_conflict_and_not_its_log():
    stream = b"u.c:1:test_a:PASS\nu.c:1:test_a:FAIL: late\n" + TALLY % 1
    v = parse(Unity(), stream, ["test_a"], RunEnd(exit_code=0))
    assert v.cases["test_a"] == Verdict(
        Outcome.FAILED,
        "case test_a was given a second verdict (failed): its output cannot be attributed",
        None,
        "u.c:1:test_a:PASS",
    )


def test_a_tally_a_case_prints_is_its_log_not_the_closing_summary():
    # the real tally comes after the rule; a case's lookalike (first, or right after a verdict) is its output
    stream = (
        UNITY_NONCE + b"1 Tests 0 Failures 0 Ignored\n\nu.c:1:test_a:PASS\n"
        b"0 Tests 0 Failures 0 Ignored\nu.c:2:test_b:PASS\n" + TALLY % 2 + stamped("exit-in test_b")
    )
    v = parse(Unity(), stream, ["test_a", "test_b"], RunEnd(exit_code=0))
    assert outcomes(v) == {"test_a": "passed", "test_b": "passed"}
    assert v.problems == []
    assert v.cases["test_a"].log == "1 Tests 0 Failures 0 Ignored\nu.c:1:test_a:PASS"  # no nonce, no blank line
    assert v.cases["test_b"].log == "0 Tests 0 Failures 0 Ignored\nu.c:2:test_b:PASS"


def test_a_file_without_main_gets_our_runner_calling_the_hooks_the_file_defines():
    src = (
        "void setUp(void) {}\nvoid tearDown(void) {}\nvoid suiteSetUp(void) {}\n"
        "int suiteTearDown(int failures) { return failures; }\n"
        "void spec_adds(void) {}\nstatic void test_helper(void) {}\nvoid should_wrap(void) {}\n"
    )
    assert Unity().needs(src).defines == (
        "ONDEVICE_UNITY_TESTS(X)=X(spec_adds,5)X(should_wrap,7)",
        "ONDEVICE_UNITY_HAS_SETUP=1",
        "ONDEVICE_UNITY_HAS_TEARDOWN=1",
        "ONDEVICE_UNITY_HAS_SUITE_SETUP=1",
        "ONDEVICE_UNITY_HAS_SUITE_TEARDOWN=1",
    )


def test_an_exit_in_a_case_then_a_hang_on_the_way_out_is_still_that_cases():
    """A destructor that loops (or kills its own process) after exit() in test_b: the lines
    test_b printed for test_c are not test_c's, and the hang is test_b's, not test_d's."""
    stream = UNITY_NONCE + ABC + stamped("exit-in test_b")
    for end in (RunEnd(timed_out=10), RunEnd(signal="SIGKILL")):
        v = parse(Unity(), stream, ["test_a", "test_b", "test_c", "test_d"], end)
        assert outcomes(v) == {"test_a": "passed", "test_b": "failed", "test_c": "failed", "test_d": "failed"}
        assert v.cases["test_b"].message.startswith(
            f"the program exited while this case was running (exit() in the test?), then {end.abnormal()}"
        )
        assert v.cases["test_c"].message == "not run: the program exited in case test_b, before this case" + ANOTHERS
        assert v.cases["test_d"].message.startswith("not run")


def test_a_chatty_cases_log_says_truly_how_many_lines_it_leaves_out():
    chatter = b"".join(b"line %d\n" % n for n in range(150))
    stream = UNITY_NONCE + chatter + b"u.c:1:test_a:PASS\n" + TALLY % 1 + stamped("exit-in -")
    log = parse(Unity(), stream, ["test_a"], RunEnd(exit_code=0)).cases["test_a"].log.splitlines()
    assert log[:20] == [f"line {n}" for n in range(20)]
    assert log[20] == "... 51 lines not shown (see the full log file) ..."  # lines 20 to 70
    assert log[21:] == [f"line {n}" for n in range(71, 150)] + ["u.c:1:test_a:PASS"]
