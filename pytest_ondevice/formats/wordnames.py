"""Case names that are sentences (Catch2's, doctest's: "adds two numbers"): read from the
source's string literals, and carried as one word on our stamped lines.

A stamped line is `fail NAME TEXT` (docs/protocol.md): a name ends at the first space. So our
hooks write space, '%' and control characters as %XX; a parser of such a format keeps its
cases under those words (its text mode turns a printed name into one too) and gives its
verdicts under the names the source declares.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .stream import CaseStream
from .verdicts import BinaryVerdicts, RunEnd

_ESCAPED = re.compile(r"%([0-9A-Fa-f]{2})")
_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
MAX_NAME_CHARS = 1000  # a literal read from the source: longer is not a name
EMPTY = "%00"  # a name of no characters (a C string holds no NUL: it cannot be one)


def as_word(name: str) -> str:
    """The name as our hooks print it: space, '%' and control characters as %XX."""
    if not name:
        return EMPTY
    return "".join(f"%{ord(c):02X}" if ord(c) <= 0x20 or c in "%\x7f" else c for c in name)


def from_word(word: str) -> str:
    """The name a word stands for (a %XX our hooks never write is read all the same)."""
    if word == EMPTY:
        return ""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), word)


def literal_at(text: str, code: str, at: int) -> str | None:
    """The string literal that starts the macro argument at `at` (after its `(` or `,`),
    adjacent literals joined ("a" "b"), with C's escapes; None when the argument is not a
    literal. `code` is the source with literals blanked (discover.code_of): where it holds
    a space, `text` holds the literal."""
    value: list[str] = []
    found = False
    i = at
    while i < len(code) and code[i].isspace():
        if text[i] != '"':
            i += 1
            continue
        found = True
        i += 1
        while i < len(text) and text[i] not in '"\n' and len(value) < MAX_NAME_CHARS:
            if text[i] == "\\" and i + 1 < len(text):
                value.append(_C_ESCAPES.get(text[i + 1], text[i + 1]))
                i += 2
            else:
                value.append(text[i])
                i += 1
        if i >= len(text) or text[i] != '"':
            return None  # unterminated, or too long to be a name
        i += 1
    return "".join(value) if found else None


def after_first_argument(code: str, at: int) -> int:
    """Where a macro's second argument starts (after the comma that ends the first, which
    may be `Fixture<int, 2>`), or -1."""
    depth = 0
    for i in range(at, min(len(code), at + 500)):
        c = code[i]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
            if depth < 0:
                return -1
        elif c == "," and depth == 0:
            return i + 1
    return -1


def name_argument(text: str, code: str, at: int, fixture_first: bool) -> str | None:
    """The string literal a case-declaring macro names its case with (at: after its `(`): the
    first argument, or the second where the first is the fixture's class (`TEST_CASE_METHOD`,
    `TEST_CASE_FIXTURE`); None when it is no literal."""
    if fixture_first:
        at = after_first_argument(code, at)
        if at < 0:
            return None
    return literal_at(text, code, at)


class WordNamedStream(CaseStream):
    """A CaseStream whose cases are kept under their words (as_word)."""

    def __init__(self, order: tuple[str, ...] = ()) -> None:
        super().__init__(tuple(as_word(n) for n in order))

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        names = {as_word(n): n for n in expected}
        result = super().verdicts(list(names), end)

        def name(word: str) -> str:
            return names.get(word) or from_word(word)

        crash = result.crash
        if crash is not None and crash.case is not None:
            crash = replace(crash, case=name(crash.case))
        return replace(
            result,
            cases={name(w): v for w, v in result.cases.items()},
            unknown={name(w): v for w, v in result.unknown.items()},
            benches={name(w): v for w, v in result.benches.items()},
            crash=crash,
        )
