"""gcov's counts sent over a bare-metal board's output: decoded into the same bytes, and a
file cut short, damaged, forged without the nonce or over its bounds is never counted."""

from __future__ import annotations

import base64
import zlib

import pytest

from pytest_ondevice.formats import gcda
from pytest_ondevice.formats.tflm_parser import TestOutputParser
from pytest_ondevice.formats.verdicts import RunEnd

NONCE = "0123456789abcdef"


def sent(name: str, content: bytes, *, size: int | None = None, crc: int | None = None) -> list[str]:
    """What coverage.c prints for one file: 180 bytes per data line."""
    lines = [f"#ondevice {NONCE} gcda {name}"]
    for at in range(0, len(content), 180):
        lines.append(f"#ondevice {NONCE} gcdata {base64.b64encode(content[at : at + 180]).decode()}")
    size = len(content) if size is None else size
    crc = zlib.crc32(content) if crc is None else crc
    lines.append(f"#ondevice {NONCE} gcda-end {size} {crc:08x}")
    return lines


def parse(*lines: str):
    parser = TestOutputParser()
    for line in (f"#ondevice nonce {NONCE}", f"#ondevice {NONCE} case A", *lines):
        parser.feed_line(line)
    for line in (f"#ondevice {NONCE} end A passed", f"#ondevice {NONCE} summary", "~~~ALL TESTS PASSED~~~"):
        parser.feed_line(line)
    return parser.verdicts(["A"], RunEnd(exit_code=0))


CONTENT = bytes(range(256)) * 3 + b"\x00" * 7  # not a multiple of 180 or of 3


def test_files_arrive_byte_for_byte_and_the_case_is_untouched():
    verdicts = parse(*sent("lib.c.abc.gcda", CONTENT), *sent("b.gcda", b"x"))
    assert verdicts.counts == {"lib.c.abc.gcda": CONTENT, "b.gcda": b"x"}
    assert verdicts.count_problems == []
    assert verdicts.cases["A"].outcome.value == "passed"


@pytest.mark.parametrize(
    "lines, why",
    [
        (sent("a.gcda", CONTENT, crc=zlib.crc32(CONTENT) ^ 1), "damaged on the way"),
        (sent("a.gcda", CONTENT, size=len(CONTENT) + 1), "damaged on the way"),
        ([*sent("a.gcda", CONTENT)[:3], *sent("a.gcda", CONTENT)[4:]], "damaged on the way"),  # a line lost
        (sent("a.gcda", CONTENT)[:-1], "the output ended before the file did"),
        (
            [*sent("a.gcda", CONTENT)[:1], f"#ondevice {NONCE} gcdata not*base64", *sent("a.gcda", CONTENT)[-1:]],
            "base64",
        ),
        (sent("../etc/passwd.gcda", b"x"), "not a .gcda file's name"),
        (sent("a.gcno", b"x"), "not a .gcda file's name"),
        ([*sent("a.gcda", b"x")[:2], f"#ondevice {NONCE} gcda-end one two"], "malformed"),
    ],
)
def test_a_file_that_did_not_arrive_whole_is_dropped_and_named(lines, why):
    verdicts = parse(*lines)
    assert verdicts.counts == {}
    assert len(verdicts.count_problems) == 1 and why in verdicts.count_problems[0]


def test_a_file_interrupted_by_the_next_is_dropped_and_the_next_kept():
    first = sent("a.gcda", CONTENT)[:-1]
    verdicts = parse(*first, *sent("b.gcda", b"yz"))
    assert verdicts.counts == {"b.gcda": b"yz"}
    assert verdicts.count_problems == ["a.gcda: the output ended before the file did"]


def test_lines_the_test_prints_without_the_nonce_are_its_log_not_counts():
    forged = [line.replace(f"#ondevice {NONCE} ", "#ondevice 1111111111111111 ") for line in sent("a.gcda", b"x")]
    verdicts = parse(*forged)
    assert verdicts.counts == {} and verdicts.count_problems == []


def test_a_file_over_its_bound_is_dropped_without_holding_it(monkeypatch):
    monkeypatch.setattr(gcda, "MAX_FILE_BYTES", 100)
    receiver = gcda.GcdaReceiver()
    for line in sent("big.gcda", CONTENT):
        verb, _, body = line.split(" ", 2)[2].partition(" ")
        receiver.line(verb, body)
        assert len(receiver._data) <= 100
    assert receiver.files == {} and "over" in receiver.problems[0]
