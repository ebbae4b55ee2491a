"""Digests remembered across sessions (build/digestmemo.py): a file as it was is not read
again; a file written since, one changed just before it was hashed, and a memo anyone
else could have written are never believed."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from pytest_ondevice.build import digestmemo, store


@pytest.fixture
def hashed(monkeypatch) -> list[int]:
    """How many files the store reads to hash them."""
    calls: list[int] = []
    real = hashlib.sha256

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(store.hashlib, "sha256", counting)
    return calls


def session_digest(root, path) -> str:
    s = store.Store(root)
    try:
        return s.digest(path)
    finally:
        s.close()


def memo_file(root):
    return next((root / store.LAYOUT / "digests").iterdir())


def test_a_file_hashed_in_one_session_is_not_read_in_the_next(tmp_path, monkeypatch, hashed):
    monkeypatch.setattr(digestmemo, "RACY_NS", 0)
    source = tmp_path / "kernel_test.c"
    source.write_text("int main(void) { return 0; }\n")
    first = session_digest(tmp_path / "cache", source)
    assert first == hashlib.new("sha256", source.read_bytes()).hexdigest()
    assert len(hashed) == 1
    assert session_digest(tmp_path / "cache", source) == first
    assert len(hashed) == 1  # the second session only stat'ed it


def test_a_file_written_since_is_hashed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(digestmemo, "RACY_NS", 0)
    source = tmp_path / "kernel_test.c"
    source.write_text("int a = 1;\n")
    session_digest(tmp_path / "cache", source)
    time.sleep(0.05)  # past the timestamp tick it was written in
    source.write_text("int a = 2;\n")  # the same size, the same inode
    assert session_digest(tmp_path / "cache", source) == hashlib.new("sha256", b"int a = 2;\n").hexdigest()


def test_a_file_changed_just_before_it_was_hashed_is_not_remembered(tmp_path, hashed):
    source = tmp_path / "kernel_test.c"
    source.write_text("int a = 1;\n")  # a second write within the same tick would keep every field
    session_digest(tmp_path / "cache", source)
    session_digest(tmp_path / "cache", source)
    assert len(hashed) == 2


def test_a_memo_anyone_else_could_have_written_is_not_believed(tmp_path, monkeypatch):
    monkeypatch.setattr(digestmemo, "RACY_NS", 0)
    source = tmp_path / "kernel_test.c"
    source.write_text("int a = 1;\n")
    real = session_digest(tmp_path / "cache", source)
    memo = memo_file(tmp_path / "cache")
    forged = "0" * 64
    memo.write_text(memo.read_text().replace(real, forged))
    assert session_digest(tmp_path / "cache", source) == forged  # this account's own memo: believed
    memo.chmod(0o664)
    assert session_digest(tmp_path / "cache", source) == real  # the group could have written it
    memo.write_text(memo.read_text().replace(real, forged))
    memo.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(memo, 65534, -1)
        assert session_digest(tmp_path / "cache", source) == real  # another account's
