"""Which errors count against a device: its own, or ones more than one binary met there."""

from __future__ import annotations

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
