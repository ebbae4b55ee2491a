"""Parser: text a test prints never moves a verdict to another case, and each verdict
rule of docs/protocol.md has a test of its own."""

from __future__ import annotations

import pytest

from pytest_ondevice.formats.casetracker import MAX_CASES
from pytest_ondevice.formats.lines import BoundedLines, LineSplitter
from pytest_ondevice.formats.tflm_parser import MAX_BENCHES_PER_CASE, TestOutputParser, parse_bytes
from pytest_ondevice.formats.verdicts import Outcome, RunEnd

NONCE = "3f9a6c0e1b2d4875"


def outcomes(result):
    return {name: v.outcome for name, v in result.cases.items()}


def stamped_v1(*cases: tuple[str, str, list[str]], nonce: str = NONCE, tally: str = "", magic: str = "") -> bytes:
    """Output as our header prints it: each case (name, verdict, body lines) between its
    stamped start and end markers, then the stamped summary."""
    lines = [f"#ondevice nonce {nonce}"]
    for name, verdict, body in cases:
        lines += [f"#ondevice {nonce} case {name}", f"Testing {name}", *body, f"#ondevice {nonce} end {name} {verdict}"]
    lines += [f"#ondevice {nonce} summary", tally, magic]
    return ("\r\n".join(lines) + "\r\n").encode()


# -- only the closing summary after the last case decides ---------------------------


def test_v1_pass_string_inside_a_case_body_does_not_steal_the_verdict():
    out = (
        b"Testing Chatty\n~~~ALL TESTS PASSED~~~\ngot == 42 failed at t.c:5 (41 vs 42)\n"
        b"Testing Fine\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    )
    result = parse_bytes([out], ["Chatty", "Fine"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Chatty": Outcome.FAILED, "Fine": Outcome.PASSED}
    assert result.cases["Chatty"].message == "got == 42 failed at t.c:5 (41 vs 42)"
    assert result.cases["Chatty"].location == ("t.c", 5)
    assert not result.problems


def test_v1_tally_and_pass_string_inside_a_body_keep_that_cases_failure():
    """A replayed log prints the tally (which ends a v1 case) and the pass string; the
    case's own failure that follows is still its own, and a later start reopens the run."""
    out = (
        b"Testing Replays\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\nx failed at t.c:9\n"
        b"Testing Fine\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    )
    result = parse_bytes([out], ["Replays", "Fine"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Replays": Outcome.FAILED, "Fine": Outcome.PASSED}
    assert result.cases["Replays"].message == "x failed at t.c:9"


def test_v2_summary_and_pass_string_inside_a_body_are_that_cases_log():
    out = (
        b"[ RUN      ] A.Chatty\n[==========] 2 tests ran.\n~~~ALL TESTS PASSED~~~\n"
        b"t.cc:7: Failure\n  Expression:  x == 1\n[  FAILED  ] A.Chatty\n"
        b"[ RUN      ] A.Fine\n[       OK ] A.Fine\n[==========] 2 tests ran.\n"
        b"[  PASSED  ] 1 tests.\n[  FAILED  ] 1 tests, listed below:\n[  FAILED  ] A.Chatty\n"
    )
    result = parse_bytes([out], ["A.Chatty", "A.Fine"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A.Chatty": Outcome.FAILED, "A.Fine": Outcome.PASSED}
    assert result.cases["A.Chatty"].message.splitlines() == ["t.cc:7: Failure", "  Expression:  x == 1"]
    assert not result.problems


def test_v2_early_ok_line_does_not_hide_the_failure_that_follows():
    out = (
        b"[ RUN      ] A.Early\n[       OK ] A.Early\nt.cc:3: Failure\n  Expression:  y\n[  FAILED  ] A.Early\n"
        b"[==========] 1 tests ran.\n[  PASSED  ] 0 tests.\n"
    )
    result = parse_bytes([out], ["A.Early"], RunEnd(exit_code=1))
    assert result.cases["A.Early"].outcome is Outcome.FAILED
    assert result.cases["A.Early"].message == "t.cc:3: Failure"


def test_v2_verdict_line_about_another_case_is_log():
    out = (
        b"[ RUN      ] A.One\n[  FAILED  ] A.One\n"
        b"[ RUN      ] A.Two\n[       OK ] A.One\n[       OK ] A.Two\n"
        b"[==========] 2 tests ran.\n"
    )
    result = parse_bytes([out], ["A.One", "A.Two"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A.One": Outcome.FAILED, "A.Two": Outcome.PASSED}


# -- a printed `Testing OTHER` -------------------------------------------------------


FORGED_V1 = (
    b"Testing Liar\nTesting Victim\ngot == 42 failed at t.c:5 (41 vs 42)\n"
    b"Testing Victim\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
)


def test_v1_case_printing_the_start_of_a_later_case_is_not_passed():
    """Without a nonce (TFLM's own header) the parser cannot tell whose lines follow a
    printed start, but it sees the later case start twice and fails both cases."""
    result = parse_bytes([FORGED_V1], ["Liar", "Victim"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Liar": Outcome.FAILED, "Victim": Outcome.FAILED}
    assert result.cases["Liar"].message.splitlines() == [
        "while this case was running, the output announced case Victim (did it print 'Testing Victim'?): "
        "its later lines were charged to Victim, so this case cannot be judged",
        "the device reports 1/2 tests passed, but its output shows 2/3",
    ]
    assert result.cases["Victim"].message.splitlines() == [
        "case Victim was started 2 times but is declared once: a case may have printed 'Testing Victim', "
        "so this output cannot be attributed",
        "got == 42 failed at t.c:5 (41 vs 42)",
    ]
    assert result.cases["Victim"].location == ("t.c", 5)


def test_v1_case_printing_the_start_of_a_case_not_yet_due_is_not_passed():
    """The announced case never runs for real (compiled out), but it starts out of turn."""
    out = b"Testing A\nTesting C\nx failed at t.c:3\nTesting B\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A", "B", "C"], RunEnd(exit_code=1))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert result.cases["A"].message.startswith("while this case was running, the output announced case C ")
    assert result.cases["C"].message.splitlines()[0] == (
        "case C started before its turn in the source (before B): a case may have printed 'Testing C', "
        "so this output cannot be attributed"
    )
    assert result.cases["B"].outcome is Outcome.FAILED  # the tally cannot match either


def test_stamped_markers_attribute_each_line_to_its_own_case():
    out = stamped_v1(
        ("Liar", "failed", ["Testing Victim", "got == 42 failed at t.c:5 (41 vs 42)"]),
        ("Victim", "passed", []),
        tally="1/2 tests passed",
        magic="~~~SOME TESTS FAILED~~~",
    )
    result = parse_bytes([out], ["Liar", "Victim"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Liar": Outcome.FAILED, "Victim": Outcome.PASSED}
    assert result.cases["Liar"].message == "got == 42 failed at t.c:5 (41 vs 42)"
    assert not result.problems


def test_stamped_run_ignores_unstamped_and_wrongly_stamped_markers():
    """Once a nonce is declared, lookalike markers (a replayed log of another run, a test
    printing our format) are only log: they neither start, end nor close anything."""
    body = [
        "#ondevice nonce 0000000000000000",
        "#ondevice 0000000000000000 end Quiet passed",
        f"#ondevice {NONCE[:-1]}0 summary",
        "[       OK ] Quiet",
        "0/0 tests passed",
        "~~~ALL TESTS PASSED~~~",
    ]
    out = stamped_v1(
        ("Quiet", "failed", [*body, "x failed at q.c:2"]),
        ("Next", "passed", []),
        tally="1/2 tests passed",
        magic="~~~SOME TESTS FAILED~~~",
    )
    result = parse_bytes([out], ["Quiet", "Next"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Quiet": Outcome.FAILED, "Next": Outcome.PASSED}
    assert result.cases["Quiet"].message == "x failed at q.c:2"


def test_stamped_failed_end_without_a_failure_line_still_fails():
    out = stamped_v1(("A", "failed", []), tally="0/1 tests passed", magic="~~~SOME TESTS FAILED~~~")
    result = parse_bytes([out], ["A"], RunEnd(exit_code=1))
    assert result.cases["A"].outcome is Outcome.FAILED


def test_stamped_skip_is_skipped_with_its_reason():
    out = stamped_v1(
        ("A", "skipped", ["#ondevice skip no FPU"]), tally="1/1 tests passed", magic="~~~ALL TESTS PASSED~~~"
    )
    result = parse_bytes([out], ["A"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome is Outcome.SKIPPED
    assert result.cases["A"].message == "no FPU"


def test_stamped_case_without_its_end_marker_has_no_verdict():
    out = f"#ondevice nonce {NONCE}\n#ondevice {NONCE} case A\nTesting A\n#ondevice {NONCE} summary\n".encode()
    result = parse_bytes([out], ["A"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert result.cases["A"].message == "no verdict: the closing summary began while this case was running"


def test_nonce_declared_after_a_case_started_is_ignored():
    out = b"Testing A\n#ondevice nonce 0123456789abcdef\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    parser = TestOutputParser()
    for line in out.decode().splitlines():
        parser.feed_line(line)
    assert parser.nonce is None
    assert parser.verdicts(["A"], RunEnd(exit_code=0)).cases["A"].outcome is Outcome.PASSED


def test_malformed_nonce_is_ignored():
    parser = TestOutputParser()
    parser.feed_line("#ondevice nonce not-hex!")
    assert parser.nonce is None


# -- duplicate names ---------------------------------------------------------------


def test_v1_duplicate_name_is_named_and_the_others_keep_their_verdict():
    """Two cases declared with one name: the discovery lists it twice; the duplicate fails
    naming itself, the tally counts both runs, the other case passes."""
    out = b"Testing Same\nTesting Same\nTesting Other\n3/3 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["Same", "Same", "Other"], RunEnd(exit_code=0))
    assert outcomes(result) == {"Same": Outcome.FAILED, "Other": Outcome.PASSED}
    assert result.cases["Same"].message == (
        "case Same ran 2 times: more than one case in this file has this name, and their results "
        "cannot be told apart; give each a unique name"
    )
    assert not result.problems


def test_stamped_duplicate_name_is_named():
    out = stamped_v1(
        ("Same", "passed", []), ("Same", "passed", []), tally="2/2 tests passed", magic="~~~ALL TESTS PASSED~~~"
    )
    result = parse_bytes([out], ["Same"], RunEnd(exit_code=0))
    assert result.cases["Same"].outcome is Outcome.FAILED
    assert "ran 2 times" in result.cases["Same"].message
    assert not result.problems


# -- one test per verdict rule in docs/protocol.md -------------------------------------


def test_rule_pass_string_with_exit_code_1_is_not_a_pass():
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=1))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert result.problems == ["~~~ALL TESTS PASSED~~~ was printed, but the binary exited with code 1"]


@pytest.mark.parametrize("end", [RunEnd(timed_out=5.0), RunEnd(fault="HardFault")])
def test_rule_pass_string_then_timeout_or_fault_is_not_a_pass(end):
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A"], end)
    assert result.cases["A"].outcome is Outcome.FAILED
    assert result.problems[0].startswith("~~~ALL TESTS PASSED~~~ was printed, but then the binary")


def test_rule_pass_string_after_a_failed_case_is_not_a_pass():
    out = b"Testing A\nx failed at a.c:1\nTesting B\n1/2 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=0))
    assert outcomes(result) == {"A": Outcome.FAILED, "B": Outcome.FAILED}
    assert result.problems == ["~~~ALL TESTS PASSED~~~ was printed, but a case reported a failure"]


def test_rule_v1_failure_then_skip_is_a_failure():
    out = b"Testing A\nx failed at a.c:4\n#ondevice skip later\n0/1 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=1))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert result.cases["A"].message == "x failed at a.c:4"


def test_rule_v2_failure_then_skipped_line_is_a_failure():
    out = (
        b"[ RUN      ] S.A\na.cc:4: Failure\n  Expression:  x\n[  SKIPPED ] S.A\n"
        b"[==========] 1 tests ran.\n[  PASSED  ] 0 tests.\n"
    )
    result = parse_bytes([out], ["S.A"], RunEnd(exit_code=1))
    assert result.cases["S.A"].outcome is Outcome.FAILED
    assert result.cases["S.A"].location == ("a.cc", 4)


def test_rule_v2_all_ok_without_the_pass_string_fails():
    out = b"[ RUN      ] S.A\n[       OK ] S.A\n[==========] 1 tests ran.\n[  PASSED  ] 1 tests.\n"
    result = parse_bytes([out], ["S.A"], RunEnd(exit_code=0))
    assert result.cases["S.A"].outcome is Outcome.FAILED
    assert result.problems == ["no case failed, but ~~~ALL TESTS PASSED~~~ was not printed"]


def test_rule_v2_failed_case_with_exit_code_0_fails_saying_so():
    out = b"[ RUN      ] S.A\n[  FAILED  ] S.A\n[ RUN      ] S.B\n[       OK ] S.B\n[==========] 2 tests ran.\n"
    result = parse_bytes([out], ["S.A", "S.B"], RunEnd(exit_code=0))
    assert outcomes(result) == {"S.A": Outcome.FAILED, "S.B": Outcome.FAILED}
    assert result.problems == ["a case failed, but the binary exited with code 0"]


def test_rule_v2_count_that_disagrees_fails():
    out = b"[ RUN      ] S.A\n[       OK ] S.A\n[==========] 2 tests ran.\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["S.A"], RunEnd(exit_code=0))
    assert result.problems == ["the device reports 2 tests ran, but its output shows 1"]


def test_rule_tally_without_magic_string_fails():
    out = b"Testing A\n1/1 tests passed\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert result.problems == ["the tally was printed without ~~~ALL TESTS PASSED~~~/~~~SOME TESTS FAILED~~~"]


def test_rule_tally_total_that_disagrees_fails():
    out = b"Testing A\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=1))
    assert result.problems == ["the device reports 1/2 tests passed, but its output shows 1/1"]


def test_rule_fail_string_alone_fails_nothing_that_passed_with_a_nonzero_exit():
    out = b"Testing A\nTesting B\nx failed at b.c:2\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A": Outcome.PASSED, "B": Outcome.FAILED}
    assert not result.problems


def test_rule_v1_skip_counts_as_passed_in_the_tally():
    out = b"Testing A\n#ondevice skip why\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome is Outcome.SKIPPED
    assert not result.problems


def test_rule_v2_next_start_before_a_verdict_fails_the_running_case():
    out = b"[ RUN      ] S.A\n[ RUN      ] S.B\n[       OK ] S.B\n[==========] 2 tests ran.\n"
    result = parse_bytes([out], ["S.A", "S.B"], RunEnd(exit_code=1))
    assert result.cases["S.A"].outcome is Outcome.FAILED
    assert result.cases["S.A"].message == "no verdict: the next case started before this one ended"


def test_rule_no_exit_status_lets_the_closing_lines_decide():
    out = b"Testing A\nx failed at a.c:1\n0/1 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A"], RunEnd(exit_code=None))
    assert result.cases["A"].outcome is Outcome.FAILED
    assert not result.problems


# -- line handling -----------------------------------------------------------------


def test_nul_before_a_start_line_still_starts_the_case():
    out = b"\x00\x00Testing A\nx failed at a.c:2\n\x00Testing B\n1/2 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A": Outcome.FAILED, "B": Outcome.PASSED}
    assert not result.unknown


def test_bounded_lines_counts_what_it_does_not_show():
    lines = BoundedLines(head=2, tail=3)
    for i in range(10):
        lines.append(f"l{i}")
    assert len(lines) == 5
    assert lines.text().splitlines() == [
        "l0",
        "l1",
        "... 5 lines not shown (see the full log file) ...",
        "l7",
        "l8",
        "l9",
    ]


def test_bounded_lines_that_fit_show_everything():
    lines = BoundedLines(head=2, tail=3)
    for i in range(5):
        lines.append(f"l{i}")
    assert lines.text().splitlines() == ["l0", "l1", "l2", "l3", "l4"]


def test_splitter_keeps_crlf_lines_whole_across_chunks():
    splitter = LineSplitter(max_line=8)
    got = [*splitter.feed(b"ab\r"), *splitter.feed(b"\ncd\n12345678\n123456789\n"), *splitter.close()]
    assert got == ["ab", "cd", "12345678", "12345678", "9"]


def test_splitter_close_yields_an_unterminated_tail_once():
    splitter = LineSplitter(max_line=4)
    assert list(splitter.feed(b"abcdef")) == ["abcd"]
    assert list(splitter.close()) == ["ef"]
    assert list(splitter.close()) == []


def test_splitter_replaces_bad_utf8_and_drops_nul():
    splitter = LineSplitter()
    assert list(splitter.feed(b"a\x00b\xffc\n")) == ["ab\ufffdc"]


# -- found by mutation testing -------------------------------------------------------


def test_failure_lines_are_capped_and_the_rest_counted():
    body = b"".join(b"x%d failed at f.c:%d\n" % (i, i + 1) for i in range(45))
    out = b"Testing A\n" + body + b"0/1 tests passed\n~~~SOME TESTS FAILED~~~\n"
    message = parse_bytes([out], ["A"], RunEnd(exit_code=1)).cases["A"].message.splitlines()
    assert message[:40] == [f"x{i} failed at f.c:{i + 1}" for i in range(40)]
    assert message[40:] == ["... 5 more failure lines"]


def test_tildes_that_are_not_a_magic_string_are_log():
    out = (
        b"~~~ boot ~~~\nTesting A\nTesting B\nx failed at b.c:2\n"
        b"1/2 tests passed\n~~~SOME TESTS FAILED~~~\n~~~ bye ~~~\n"
    )
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=1))
    assert outcomes(result) == {"A": Outcome.PASSED, "B": Outcome.FAILED}
    assert not result.problems


def test_stamped_summary_tally_that_disagrees_fails():
    out = stamped_v1(("A", "passed", []), tally="1/2 tests passed", magic="~~~SOME TESTS FAILED~~~")
    result = parse_bytes([out], ["A"], RunEnd(exit_code=1))
    assert result.problems == ["the device reports 1/2 tests passed, but its output shows 1/1"]


def test_stamped_summary_without_a_closing_line_is_no_verdict():
    out = stamped_v1(("A", "passed", []))
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome is Outcome.PASSED
    assert result.cases["B"].message.startswith("not run: no verdict")


def test_stamped_v2_summary_count_that_disagrees_fails():
    lines = [
        f"#ondevice nonce {NONCE}",
        f"#ondevice {NONCE} case S.A",
        "[ RUN      ] S.A",
        "[       OK ] S.A",
        f"#ondevice {NONCE} end S.A passed",
        f"#ondevice {NONCE} summary",
        "[==========] 2 tests ran.",
        "[  PASSED  ] 1 tests.",
        "~~~ALL TESTS PASSED~~~",
    ]
    result = parse_bytes(["\n".join(lines).encode() + b"\n"], ["S.A"], RunEnd(exit_code=0))
    assert result.problems == ["the device reports 2 tests ran, but its output shows 1"]
    fixed = "\n".join(lines).replace("2 tests ran", "1 tests ran").encode() + b"\n"
    result = parse_bytes([fixed], ["S.A"], RunEnd(exit_code=0))
    assert outcomes(result) == {"S.A": Outcome.PASSED} and not result.problems


def test_skip_line_outside_a_case_is_ignored():
    out = b"#ondevice skip early\nTesting A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n#ondevice skip late\n"
    assert outcomes(parse_bytes([out], ["A"], RunEnd(exit_code=0))) == {"A": Outcome.PASSED}


def test_skip_without_a_reason_says_skipped_on_device():
    v1 = b"Testing A\n#ondevice skip\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    assert parse_bytes([v1], ["A"], RunEnd(exit_code=0)).cases["A"].message == "skipped on device"
    v2 = b"[ RUN      ] S.A\n[  SKIPPED ] S.A\n[==========] 1 tests ran.\n~~~ALL TESTS PASSED~~~\n"
    assert parse_bytes([v2], ["S.A"], RunEnd(exit_code=0)).cases["S.A"].message == "skipped on device"
    stamped = stamped_v1(("A", "skipped", []), tally="1/1 tests passed", magic="~~~ALL TESTS PASSED~~~")
    result = parse_bytes([stamped], ["A"], RunEnd(exit_code=0))
    assert (result.cases["A"].outcome, result.cases["A"].message) == (Outcome.SKIPPED, "skipped on device")


def test_v2_skip_keeps_its_reason():
    out = (
        b"[ RUN      ] S.A\n#ondevice skip needs SMLAD\n[  SKIPPED ] S.A\n"
        b"[==========] 1 tests ran.\n~~~ALL TESTS PASSED~~~\n"
    )
    assert parse_bytes([out], ["S.A"], RunEnd(exit_code=0)).cases["S.A"].message == "needs SMLAD"


def test_fault_line_fails_the_running_case_and_names_the_fault_once():
    out = b"Testing A\n#ondevice fault HardFault pc=0x10\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=None))
    assert result.cases["A"].message.splitlines() == ["fault: HardFault pc=0x10 while this case was running"]
    assert result.cases["B"].message == "not run: fault: HardFault pc=0x10 before this case"


def test_fault_line_between_cases_ends_the_run():
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n#ondevice fault Lockup\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=None))
    assert result.cases["A"].message == "~~~ALL TESTS PASSED~~~ was printed, but then the binary fault: Lockup"
    assert result.cases["B"].message == "not run: fault: Lockup before this case"


def test_bench_record_belongs_to_the_running_case_and_a_broken_one_fails_it():
    record = b"#ondevice bench name=g unit=ns repeats=3 min=1 median=2 max=3 work=8 work_unit=MAC\n"
    out = b"Testing A\n" + record + b"Testing B\n#ondevice bench name=g unit=ns\n2/2 tests passed\n"
    parser = TestOutputParser()
    for line in out.decode().splitlines():
        parser.feed_line(line)
    result = parser.verdicts(["A", "B"], RunEnd(exit_code=0))
    assert [r.median for r in result.benches["A"]] == [2]
    assert "B" not in result.benches
    assert result.cases["B"].message.splitlines()[0] == (
        "bench record without repeats, min, median, max: 'name=g unit=ns'"
    )


def test_bench_records_outside_a_case_and_beyond_the_limit():
    record = "#ondevice bench name=g unit=ns repeats=3 min=1 median=2 max=3"
    parser = TestOutputParser()
    parser.feed_line(record)
    parser.feed_line("#ondevice bench broken")  # outside a case: nobody to fail
    parser.feed_line("Testing A")
    for _ in range(MAX_BENCHES_PER_CASE + 1):
        parser.feed_line(record)
    result = parser.verdicts(["A"], RunEnd())
    assert len(result.benches[""]) == 1
    assert len(result.benches["A"]) == MAX_BENCHES_PER_CASE


def test_stamped_next_case_before_an_end_fails_the_running_one():
    lines = [f"#ondevice nonce {NONCE}", f"#ondevice {NONCE} case A", f"#ondevice {NONCE} case B"]
    lines += [f"#ondevice {NONCE} end B passed", f"#ondevice {NONCE} summary", "2/2 tests passed"]
    result = parse_bytes(["\n".join(lines).encode()], ["A", "B"], RunEnd(exit_code=0))
    assert result.cases["A"].message.startswith("no verdict: the next case started before this one ended")


def test_stamped_end_for_another_case_or_no_case_is_ignored():
    lines = [f"#ondevice nonce {NONCE}", f"#ondevice {NONCE} end A passed", f"#ondevice {NONCE} case A"]
    lines += [f"#ondevice {NONCE} end B passed", f"#ondevice {NONCE} end A maybe", f"#ondevice {NONCE} end A passed"]
    lines += [f"#ondevice {NONCE} summary", "1/1 tests passed", "~~~ALL TESTS PASSED~~~"]
    result = parse_bytes(["\n".join(lines).encode()], ["A"], RunEnd(exit_code=0))
    assert outcomes(result) == {"A": Outcome.PASSED} and not result.problems
    unended = [*lines[:5], *lines[6:]]
    result = parse_bytes(["\n".join(unended).encode()], ["A"], RunEnd(exit_code=0))
    assert result.cases["A"].outcome is Outcome.FAILED


def test_v2_verdict_line_for_another_case_does_not_end_the_running_one():
    for forged in (b"[  SKIPPED ] S.Other", b"[  FAILED  ] S.Other"):
        out = (
            b"[ RUN      ] S.A\n" + forged + b"\n[       OK ] S.A\n[==========] 1 tests ran.\n~~~ALL TESTS PASSED~~~\n"
        )
        result = parse_bytes([out], ["S.A"], RunEnd(exit_code=0))
        assert outcomes(result) == {"S.A": Outcome.PASSED} and not result.problems


def test_v2_late_failed_line_fails_the_case_that_printed_ok_early():
    out = b"[ RUN      ] S.A\n[       OK ] S.A\n[  FAILED  ] S.A\n[==========] 1 tests ran.\n"
    result = parse_bytes([out], ["S.A"], RunEnd(exit_code=1))
    assert result.cases["S.A"].outcome is Outcome.FAILED
    assert result.cases["S.A"].message == "failed on device"


def test_v2_summary_printed_inside_a_case_does_not_close_the_run():
    out = b"[ RUN      ] S.A\n[==========] 1 tests ran.\n[       OK ] S.A\n"
    result = parse_bytes([out], ["S.A", "S.B"], RunEnd(exit_code=0))
    assert result.cases["S.B"].message.startswith("not run: no verdict")


def test_v2_stray_verdict_lines_between_cases_change_nothing():
    out = (
        b"[  FAILED  ] S.B\n[ RUN      ] S.A\n[  FAILED  ] S.A\n[ RUN      ] S.B\n[       OK ] S.B\n"
        b"[  FAILED  ] S.A\n[       OK ] S.B\n[==========] 2 tests ran.\n[  FAILED  ] 1 tests, listed below:\n"
        b"[  FAILED  ] S.A\n"
    )
    result = parse_bytes([out], ["S.A", "S.B"], RunEnd(exit_code=1))
    assert outcomes(result) == {"S.A": Outcome.FAILED, "S.B": Outcome.PASSED}
    assert not result.problems


def test_v2_ok_after_a_failure_says_so():
    out = b"[ RUN      ] A.B\na.cc:3: Failure\n  Expression:  x\n[       OK ] A.B\n"
    message = parse_bytes([out], ["A.B"], RunEnd(exit_code=0)).cases["A.B"].message
    assert message.splitlines()[-1] == "the device printed [       OK ] after a failure"


@pytest.mark.parametrize(
    "code,note", [(3, "; the binary exited with code 3"), (1, "; the binary exited with code 1"), (0, ""), (None, "")]
)
def test_no_verdict_notes_a_nonzero_exit_code(code, note):
    result = parse_bytes([b"Testing A\n"], ["A", "B"], RunEnd(exit_code=code))
    assert result.cases["B"].message == "not run: no verdict (output ended without the closing summary)" + note


def test_last_line_without_a_newline_is_parsed():
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~"
    assert outcomes(parse_bytes([out], ["A"], RunEnd(exit_code=0))) == {"A": Outcome.PASSED}


def test_timeout_of_a_virtual_clock_names_it():
    result = parse_bytes([b"Testing A\n"], ["A"], RunEnd(timed_out=2.0, clock="virtual time"))
    assert result.cases["A"].message == "timed out after 2s of virtual time while this case was running"


def test_indented_line_after_a_v1_failure_is_log():
    out = b"Testing A\nx failed at a.c:1\n   detail\n0/1 tests passed\n~~~SOME TESTS FAILED~~~\n"
    assert parse_bytes([out], ["A"], RunEnd(exit_code=1)).cases["A"].message == "x failed at a.c:1"


def test_cases_beyond_the_limit_are_counted_not_kept():
    parser = TestOutputParser()
    for i in range(MAX_CASES + 2):
        parser.feed_line(f"Testing C{i}")
    result = parser.verdicts([], RunEnd(exit_code=1))
    assert len(result.unknown) == MAX_CASES
    assert result.problems[-1] == "2 more cases were printed than the parser keeps"


def test_name_started_twice_but_declared_more_or_not_at_all():
    out = b"Testing A\nTesting Gen\nTesting Gen\nTesting A\nTesting A\n5/5 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A", "A", "A", "A"], RunEnd(exit_code=0))
    assert result.unknown["Gen"].message.startswith("case Gen was started 2 times but is not declared in the source:")
    assert result.cases["A"].message.startswith("case A ran 3 times: more than one case")
    result = parse_bytes([out], ["A", "A"], RunEnd(exit_code=0))
    assert result.cases["A"].message.startswith("case A was started 3 times but is declared 2 times:")


def test_v2_starts_out_of_source_order_are_not_flagged():
    out = (
        b"[ RUN      ] S.B\n[       OK ] S.B\n[ RUN      ] S.A\n[       OK ] S.A\n"
        b"[==========] 2 tests ran.\n~~~ALL TESTS PASSED~~~\n"
    )
    result = parse_bytes([out], ["S.A", "S.B"], RunEnd(exit_code=0))
    assert outcomes(result) == {"S.A": Outcome.PASSED, "S.B": Outcome.PASSED}


def test_v1_case_not_in_source_between_known_cases_is_not_out_of_turn():
    out = b"Testing A\nTesting Gen\nTesting B\n3/3 tests passed\n~~~ALL TESTS PASSED~~~\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(exit_code=0))
    assert outcomes(result) == {"A": Outcome.PASSED, "B": Outcome.PASSED}
    assert result.unknown["Gen"].outcome is Outcome.PASSED


def test_splitter_holds_a_piece_of_exactly_max_bytes_until_it_ends():
    splitter = LineSplitter(max_line=4)
    assert list(splitter.feed(b"abcd")) == []
    assert list(splitter.feed(b"\n")) == ["abcd"]
    assert list(splitter.feed(b"abcdefghij\nk")) == ["abcd", "efgh", "ij"]
    assert list(splitter.close()) == ["k"]


def test_splitter_keeps_empty_lines_wherever_they_are():
    splitter = LineSplitter(max_line=2)
    assert list(splitter.feed(b"\na\n\nbcd\n")) == ["", "a", "", "bc", "d"]
    assert list(splitter.feed(b"\n")) == [""]
    assert list(splitter.close()) == []


def test_splitter_strips_only_carriage_returns():
    assert list(LineSplitter().feed(b"\rXmarkX\r\r\n")) == ["XmarkX"]


def test_duplicate_whose_first_run_failed_and_second_passed_keeps_the_tally():
    out = b"Testing Same\nx failed at s.c:1\nTesting Same\nTesting Other\n2/3 tests passed\n~~~SOME TESTS FAILED~~~\n"
    result = parse_bytes([out], ["Same", "Same", "Other"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Same": Outcome.FAILED, "Other": Outcome.PASSED}
    assert not result.problems
    assert result.cases["Same"].location == ("s.c", 1)


def test_starts_kept_for_attribution_are_bounded():
    parser = TestOutputParser()
    for _ in range(MAX_CASES + 3):
        parser.feed_line("Testing Again")
    assert len(parser.starts) == MAX_CASES
    assert parser.cases["Again"].starts == MAX_CASES + 3


def test_indented_line_right_after_a_v2_start_is_log():
    out = b"[ RUN      ] S.A\n  indented log\n[       OK ] S.A\n[==========] 1 tests ran.\n~~~ALL TESTS PASSED~~~\n"
    assert outcomes(parse_bytes([out], ["S.A"], RunEnd(exit_code=0))) == {"S.A": Outcome.PASSED}


def test_the_transports_fault_wins_over_a_printed_one():
    out = b"Testing A\n#ondevice fault printed\n"
    result = parse_bytes([out], ["A", "B"], RunEnd(fault="lockup seen by the emulator"))
    assert result.cases["B"].message == "not run: fault: lockup seen by the emulator before this case"


def test_running_case_keeps_its_location_and_log_when_the_run_ends():
    out = b"Testing A\nx failed at a.c:3\n"
    for end, reason in (
        (RunEnd(exit_code=0), "no verdict: output ended while this case was running"),
        (RunEnd(signal="SIGSEGV"), "crashed: killed by SIGSEGV while this case was running"),
    ):
        verdict = parse_bytes([out], ["A"], end).cases["A"]
        assert verdict.message.splitlines() == ["x failed at a.c:3", reason]
        assert verdict.location == ("a.c", 3)
        assert verdict.log.splitlines() == ["Testing A", "x failed at a.c:3"]


def test_verdicts_changed_by_the_run_keep_each_cases_log():
    tally = parse_bytes([b"Testing A\n2/1 tests passed\n~~~ALL TESTS PASSED~~~\n"], ["A"], RunEnd(exit_code=0))
    assert tally.cases["A"].log.splitlines() == ["Testing A", "2/1 tests passed"]
    forged = parse_bytes([FORGED_V1], ["Liar", "Victim"], RunEnd(exit_code=1))
    assert forged.cases["Liar"].log.splitlines() == ["Testing Liar"]


def test_case_never_started_says_how_it_may_be_missing():
    out = b"Testing A\n1/1 tests passed\n~~~ALL TESTS PASSED~~~\n"
    assert parse_bytes([out], ["A", "Hidden"], RunEnd(exit_code=0)).cases["Hidden"].message == (
        "not run: the device never started this case (is it compiled out, or registered under another name?)"
    )


def test_name_started_twice_in_a_row_is_flagged_without_blaming_another():
    out = b"Testing X\nTesting A\nTesting A\n3/3 tests passed\n~~~ALL TESTS PASSED~~~\n"
    forged = parse_bytes([out], ["X", "A"], RunEnd(exit_code=0))
    assert forged.cases["A"].message.startswith("case A was started 2 times but is declared once")
    assert forged.cases["X"].message.startswith("while this case was running, the output announced case A")
    genuine = parse_bytes([out], ["X", "A", "A"], RunEnd(exit_code=0))
    assert outcomes(genuine) == {"X": Outcome.PASSED, "A": Outcome.FAILED}
    alone = parse_bytes(
        [b"Testing A\nTesting A\n2/2 tests passed\n~~~ALL TESTS PASSED~~~\n"], ["A"], RunEnd(exit_code=0)
    )
    assert alone.cases["A"].message.startswith("case A was started 2 times but is declared once")


def test_passed_and_skipped_verdicts_carry_their_log_and_no_location():
    result = parse_bytes([V1_STYLE_MIXED], ["Ok", "Skips"], RunEnd(exit_code=0))
    ok, skips = result.cases["Ok"], result.cases["Skips"]
    assert (ok.outcome, ok.message, ok.location, ok.log) == (Outcome.PASSED, "", None, "Testing Ok")
    assert (skips.outcome, skips.message, skips.location) == (Outcome.SKIPPED, "why", None)
    assert skips.log.splitlines() == ["Testing Skips", "#ondevice skip why", "2/2 tests passed"]


V1_STYLE_MIXED = b"Testing Ok\nTesting Skips\n#ondevice skip why\n2/2 tests passed\n~~~ALL TESTS PASSED~~~\n"


def test_duplicate_whose_runs_both_failed_counts_two_failures_in_the_tally():
    out = (
        b"Testing Same\nx failed at s.c:1\nTesting Same\ny failed at s.c:2\nTesting Other\n"
        b"1/3 tests passed\n~~~SOME TESTS FAILED~~~\n"
    )
    result = parse_bytes([out], ["Same", "Same", "Other"], RunEnd(exit_code=1))
    assert outcomes(result) == {"Same": Outcome.FAILED, "Other": Outcome.PASSED}
    assert not result.problems
