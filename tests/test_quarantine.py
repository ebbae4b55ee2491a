"""Which errors count against a device: its own, or ones more than one binary met there."""

from __future__ import annotations

import pytest

from pytest_ondevice.farm.quarantine import Quarantine


def test_confirmed_errors_quarantine_after_k(tmp_path):
    q = Quarantine(tmp_path, after=2)
    assert q.strike("pi-1", "cannot connect") is False
    assert q.strike("pi-1", "cannot connect again") is True  # this one puts it out
    assert q.is_out("pi-1") and q.out() == {"pi-1": ["cannot connect", "cannot connect again"]}
    assert q.strike("pi-1", "more") is False  # already out: said once


def test_one_binary_alone_never_quarantines_a_device(tmp_path):
    q = Quarantine(tmp_path, after=2)
    for _ in range(5):
        q.strike("pi-1", "connection lost while the binary ran", binary="rpi:bad_test.c")
    assert not q.is_out("pi-1")
    assert q.reasons("pi-1") == []


def test_two_binaries_meeting_errors_on_one_device_count_once_each(tmp_path):
    q = Quarantine(tmp_path, after=2)
    q.strike("pi-1", "lost (a)", binary="rpi:a.c")
    q.strike("pi-1", "lost (a again)", binary="rpi:a.c")
    assert not q.is_out("pi-1")
    assert q.strike("pi-1", "lost (b)", binary="rpi:b.c") is True
    assert q.reasons("pi-1") == ["lost (a)", "lost (b)"]


def test_a_suspects_errors_are_withdrawn_from_every_device(tmp_path):
    q = Quarantine(tmp_path, after=2)
    q.strike("pi-1", "lost (a)", binary="rpi:a.c")
    q.strike("pi-1", "lost (b)", binary="rpi:b.c")
    assert q.is_out("pi-1")
    q.accuse("rpi:a.c")
    assert not q.is_out("pi-1")  # b alone is one binary
    assert q.out() == {}
    q.strike("pi-1", "refused", binary=None)
    q.strike("pi-1", "refused", binary=None)
    assert q.out() == {"pi-1": ["refused", "refused"]}  # confirmed errors stay


def test_the_state_is_shared_through_the_run_dir(tmp_path):
    Quarantine(tmp_path, after=1).strike("pi-1", "dead")
    assert Quarantine(tmp_path, after=1).is_out("pi-1")  # another xdist worker sees it


def test_a_reason_is_kept_on_one_line_cut_at_300_characters(tmp_path):
    q = Quarantine(tmp_path, after=1)
    q.strike("pi1", "lost:\n" + "x" * 400)
    (reason,) = q.reasons("pi1")
    assert reason == ("lost: " + "x" * 400)[:300]


def test_undecodable_text_in_a_reason_or_the_state_file_is_replaced_not_a_crash(tmp_path):
    q = Quarantine(tmp_path, after=2)
    q.strike("pi1", "output \udcff from a device")  # a lone surrogate: bytes that were not UTF-8
    with (tmp_path / "strikes" / "pi1").open("ab") as state:  # written by hand, or half by a crash
        state.write(b"\tgarbage \xff\xfe\n")
    assert q.reasons("pi1") == ["output ? from a device", "garbage \ufffd\ufffd"]
    assert q.is_out("pi1")


# -- a run without a fleet: its device's errors are said once, and nothing is set aside ---------

THREE_CASES = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(A{i}) {{ TF_LITE_MICRO_EXPECT(1); }}
    TF_LITE_MICRO_TEST(B{i}) {{ TF_LITE_MICRO_EXPECT(1); }}
    TF_LITE_MICRO_TEST(C{i}) {{ TF_LITE_MICRO_EXPECT(1); }}
    TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_an_unreachable_device_is_said_once_in_full_and_every_item_is_still_an_error(project, workers):
    """Four binaries on one --device that refuses connections: each item an error, the
    message in full on one item, a pointer to it on the others; no quarantine talk in a run
    that has no fleet (the third binary's items said "every device of board ... is
    quarantined", and the summary "set aside after 2 infrastructure errors")."""
    project.write("boards/pi.toml", 'extends = "rpi"\n[transport]\nconnect_timeout = 2.0\n')
    for i in range(4):
        project.write(f"k{i}_test.c", THREE_CASES.format(i=i))
    result = project.run("--device=ci@127.0.0.1:1", *workers, board="pi")
    result.assert_outcomes(errors=12)
    text = result.stdout.str()
    full = "pi: ci@127.0.0.1:1: cannot connect: [Errno 111] Connection refused"
    assert sum(line == full for line in result.outlines) == 1, text
    pointers = [line for line in result.outlines if line.startswith(full) and "(the same error as " in line]
    assert len(pointers) == 11, text
    assert "quarantine" not in text and "set aside" not in text


def test_each_different_error_is_shown_in_full_once_and_workers_agree_through_the_run_dir(tmp_path):
    from pytest_ondevice.session.activate import ErrorsShown

    worker1, worker2 = ErrorsShown(tmp_path), ErrorsShown(tmp_path)  # two xdist workers of one run
    down = "pi: cannot connect: refused. Check the cable; or the power"
    assert worker1.text("a.c::A", down) == down
    assert (
        worker2.text("b.c::B", down)
        == "pi: cannot connect: refused ... (the same error as a.c::A: shown there in full)"
    )
    assert worker1.text("a.c::A", down) == down  # the item itself, asked again
    other = "pi: pushing b failed: disk full"
    assert worker2.text("b.c::C", other) == other
    alone = ErrorsShown(None)  # no run dir: this process alone decides
    assert alone.text("c.c::A", down) == down
    assert alone.text("c.c::B", down).endswith("(the same error as c.c::A: shown there in full)")
    assert list((tmp_path / "errors-shown").iterdir()) and all(
        "." not in p.name for p in (tmp_path / "errors-shown").iterdir()
    )  # no claim file left behind half made
