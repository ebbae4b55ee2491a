"""A failure's headline in the history and the morning report (issue 50, item 5): a scripted
test's exception, not the first line of pytest's traceback (a fixture's repr), and a C case's
failure line as before. The reports are pytest's own, of tests run here in-process."""

from __future__ import annotations

import textwrap

import pytest
from _pytest.reports import TestReport

from pytest_ondevice.formats.failure import CaseFailureRepr, SourceSearch
from pytest_ondevice.records import report
from pytest_ondevice.records.failmessage import MESSAGE_MAX, failure_text, headline, is_traceback
from pytest_ondevice.records.history import Result, Run, append_run, connect, load
from pytest_ondevice.records.recorder import Reports

# a scripted test as a user writes it: the device fixture first in the traceback's locals, the
# console's expect raising the plugin's own ExpectTimeout with the message it builds
SCRIPTED = '''
import pytest
from pytest_ondevice.scripted.console import ExpectTimeout, _shown


class Device:
    where = "rpi@pi-2"

    def __repr__(self):
        return f"<Device {self.where}>"


class Console:
    what = "rpi@pi-2: ./calc --interactive"

    def expect(self, pattern, timeout):
        __tracebackhide__ = True
        raise ExpectTimeout(
            f"{self.what}: expected {_shown(pattern)} within {timeout:g}s; what arrived since the last match:\\n"
            "calc> 2+2\\r\\n= four\\r\\n"
        )


@pytest.fixture
def device():
    return Device()


def test_calc_answers(device):
    calc = Console()
    calc.expect(r"= \\d+\\r?\\n", timeout=3)


def _ask(device, console, question, answers):
    """A user's helper: the traceback goes through it, with its locals and its source."""
    for line in question.splitlines():
        # each line of the question is typed, then the calculator's answer awaited
        # (a long helper: a traceback of a few hundred characters before its exception)
        console.expect(answers[line], timeout=3)


def test_calc_answers_each_line(device):
    questions = "2+2\\n3*3\\n10/2\\n7-1"
    _ask(device, Console(), questions, {"2+2": r"= 4\\r?\\n", "3*3": r"= 9\\r?\\n", "10/2": "= 5", "7-1": "= 6"})


def test_assertion(device):
    answer = 3
    assert answer == 4, "the calculator's answer"
'''
HEADLINE = "ExpectTimeout: rpi@pi-2: ./calc --interactive: expected '= \\\\d+\\\\r?\\\\n' within 3s; what arrived"


@pytest.fixture
def failed(pytester) -> dict[str, TestReport]:
    """The call reports of SCRIPTED's tests, by test name."""
    pytester.makepyfile(test_scripted_calc=SCRIPTED)
    recorded = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:randomly")
    return {r.nodeid.rsplit("::", 1)[1]: r for r in recorded.getreports("pytest_runtest_logreport") if r.failed}


def test_pytest_s_traceback_of_a_scripted_test_opens_with_the_fixture_not_the_exception(failed):
    """What the report showed as the headline: the traceback's first line."""
    text = failed["test_calc_answers"].longreprtext
    assert text.splitlines()[0] == "device = <Device rpi@pi-2>"
    assert "E       pytest_ondevice.scripted.console.ExpectTimeout: rpi@pi-2" in text


def test_a_scripted_test_s_headline_is_its_exception_and_the_line_it_failed_on(failed):
    # the text as a history before failure_text kept it: the traceback's opening, cut
    kept = failed["test_calc_answers"].longreprtext[:MESSAGE_MAX]
    head, rest = headline(kept)
    assert head[0].startswith(HEADLINE), head
    assert head[1:] == ["calc> 2+2", "= four", '> test_scripted_calc.py:30  calc.expect(r"= \\d+\\r?\\n", timeout=3)']
    assert rest[0] == "device = <Device rpi@pi-2>"  # folded under "more", not lost
    cell = report._message_cell(kept)
    assert cell.startswith('<td class="msg">ExpectTimeout: rpi@pi-2: ./calc --interactive: expected')
    assert "<details><summary>more</summary><pre>device = &lt;Device rpi@pi-2&gt;" in cell


def test_an_assertion_s_headline_is_its_message_and_explanation(failed):
    head, _ = headline(failed["test_assertion"].longreprtext)
    assert head == [
        "AssertionError: the calculator's answer",
        "assert 3 == 4",
        '> test_scripted_calc.py:48  assert answer == 4, "the calculator\'s answer"',
    ]


def test_what_a_history_keeps_of_a_long_traceback_opens_with_the_exception(failed):
    r = failed["test_calc_answers_each_line"]
    assert r.longreprtext.index("ExpectTimeout") > MESSAGE_MAX  # the traceback's first 500 characters lack it
    assert "ExpectTimeout" not in headline(r.longreprtext[:MESSAGE_MAX])[0][0]  # the old kept text had lost it
    kept = failure_text(r)
    assert len(kept) <= MESSAGE_MAX
    assert kept.startswith("pytest_ondevice.scripted.console.ExpectTimeout: rpi@pi-2: ./calc --interactive")
    assert "\n…\n" in kept  # the traceback's opening cut, its end kept
    head, rest = headline(kept)
    assert head[0].startswith("ExpectTimeout: rpi@pi-2: ./calc --interactive: expected '= 4") and head[1] == "calc> 2+2"
    assert head[-1] == "> test_scripted_calc.py:38  console.expect(answers[line], timeout=3)"
    assert not any(line.startswith("pytest_ondevice.scripted.console.ExpectTimeout") for line in rest)  # once
    assert failure_text(r, limit=60) == r.longrepr.reprcrash.message[:60]  # the exception first, whatever the limit


def test_a_c_case_s_failure_and_an_infrastructure_error_are_kept_as_they_read(tmp_path):
    (tmp_path / "add_test.cc").write_text(
        "#include <x>\nTEST(Add, Saturates) {\n  int8_t out[1];\n  EXPECT_EQ(out[0], 127);\n}\n"
    )
    message = "out[0] == 127 failed at add_test.cc:4 (-56 vs 127)"
    repr_ = CaseFailureRepr(message, SourceSearch(tmp_path), ["device log: /tmp/add.log"], ("add_test.cc", 4))
    c_case = TestReport("add_test.cc::Add.Saturates[rpi]", ("add_test.cc", 3, ""), {}, "failed", repr_, "call")
    kept = failure_text(c_case)
    source = "> add_test.cc:4       EXPECT_EQ(out[0], 127);"  # the source lines CaseFailureRepr shows
    assert kept.splitlines()[0] == message and source in kept.splitlines()
    assert headline(kept)[0] == [message, source]
    assert not is_traceback(kept)

    infra = "infrastructure error, not the test's failure: pi-2: connection lost after 2.1 s (ssh: EOF)"
    lost = TestReport("t.py::test_x[rpi]", ("t.py", 1, ""), {}, "failed", infra, "call")
    assert failure_text(lost) == infra and headline(infra) == ([infra], []) and not is_traceback(infra)
    skipped = TestReport("t.py::test_y", ("t.py", 1, ""), {}, "skipped", ("t.py", 2, "Skipped: no rpi"), "setup")
    assert failure_text(skipped) == "Skipped: no rpi"


def test_the_new_failures_table_shows_the_exception_of_a_scripted_test_recorded_by_the_history(failed, tmp_path):
    """Through the recorder's own path: a night that passed, then the night the test failed."""
    nodeid = failed["test_calc_answers"].nodeid
    reports = Reports()
    reports.note(failed["test_calc_answers"], "call")
    results, _ = reports.records()
    db = connect(tmp_path / "h.db")
    passed = Result(nodeid, "test_calc_answers", "passed")
    for day, night in ((1, [passed]), (2, results)):
        append_run(
            db, Run(started=f"2026-11-0{day}T02:00:00+00:00", finished=f"2026-11-0{day}T02:10:00+00:00"), night, []
        )
    db.close()
    page = report._failures_section(report.new_failures(load(tmp_path / "h.db")))
    cell = page[page.index('<td class="msg">') :]
    assert cell.startswith('<td class="msg">ExpectTimeout: rpi@pi-2: ./calc --interactive: expected'), cell[:200]


def test_a_traceback_s_last_exception_is_the_headline_and_other_styles_read_too():
    chained = textwrap.dedent(
        """\
        device = <Device rpi@pi-2>

            def test_x(device):
        >       device.run(["false"])
        E       OSError: the link dropped

        t.py:4: OSError

        The above exception was the direct cause of the following exception:

        device = <Device rpi@pi-2>

            def test_x(device):
        >       raise RuntimeError("rerun failed") from e
        E       RuntimeError: rerun failed

        t.py:7: RuntimeError"""
    )
    assert headline(chained)[0] == ["RuntimeError: rerun failed", '> t.py:7  raise RuntimeError("rerun failed") from e']
    short = "t.py:4: in test_x\n    device.run(['false'])\nE   OSError: the link dropped"
    assert headline(short)[0] == ["OSError: the link dropped", "> t.py:4  device.run(['false'])"]
    native = 'Traceback (most recent call last):\n  File "t.py", line 4, in test_x\n    x()\nmod.OSError: gone'
    assert headline(native) == (["OSError: gone"], native.splitlines()[:-1])
    assert is_traceback(short) and is_traceback(native) and not is_traceback("E\nExpected: 1")
    long_line = "E   ValueError: " + "x" * 600
    head, rest = headline(long_line)
    assert len(head[0]) == 400 and head[0].endswith("…") and rest == [long_line]  # the whole line folded
