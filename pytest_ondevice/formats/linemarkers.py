"""Where a Unity assertion is, read from what the compiler saw: a source's preprocessed text
(`cc -E`), whose line markers (`# 12 "file" 1 3`) say which file and line each line came from.

Unity prints the runner's file name (the one its UnityBegin was given) with the __LINE__ of
the assertion, so a test #included by a wrapper (CMSIS-NN's Unity/unity_test_x.c) fails as
`Unity/unity_test_x.c:115` though line 115 is the included file's. In the preprocessed text
each assertion is a call to Unity's reporting functions whose line argument is a literal
(real Unity: `UnityFail( ..., (UNITY_UINT)((115)))`, `UnityAssertEqualIntNumber(...,
(UNITY_UINT)((115)), ...)`), on a line the markers place in the file it was written in, and
inside a function whose body names the functions it calls: so the file of an assertion at
line 115 that the failing case reaches is known, not guessed from the files' text.

The reader streams the text once, in bounded pieces, keeping only the project's functions
(not the system headers', flag 3), the identifiers each names and the assertions' lines."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

CHUNK = 1 << 16  # characters read at a time: a line longer than this is read in pieces
MAX_SPAN = 200  # lines one macro invocation may cover (its __LINE__ is one of them)
MAX_NAMES = 4096  # identifiers kept per function body
MAX_FUNCTIONS = 50_000
MAX_ASSERTIONS = 200_000

# the functions a Unity assertion calls to report (UnityAssert*, UnityFail, UnityIgnore),
# each given the line it was written at
_REPORTS = re.compile(r"Unity(?:Assert\w*|Fail|Ignore)")
_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"([\s\d]*)$')
_TOKEN = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|[A-Za-z_]\w*|\d[\w.]*|::|\S")
_LINE_LITERAL = re.compile(r"([1-9]\d*)[uUlL]*")
_ESCAPE = re.compile(rb"\\([0-7]{1,3}|.)")
# words before a parenthesis at file scope that do not name the function being defined
_KEYWORDS = (
    "__attribute__ __attribute __declspec __asm__ __asm asm alignas _Alignas decltype noexcept throw typeof "
    "__typeof__ sizeof _Static_assert static_assert __extension__ operator if while for switch return void "
    "char short int long float double signed unsigned const volatile static extern inline struct union enum"
)
_NOT_NAMES = frozenset(_KEYWORDS.split())


@dataclass(frozen=True, eq=False)  # compared and hashed as itself: its tables are dicts
class Expanded:
    """One translation unit's Unity assertions: for each line number an assertion reported,
    the (file, function) pairs it was expanded in, and which functions each function names."""

    main: Path | None  # the source compiled: the file Unity names as the runner's
    asserts: dict[int, tuple[tuple[Path, str], ...]]
    names: dict[str, frozenset[str]]  # a function defined here -> the defined functions it names

    def file_at(self, printed: Path, number: int, case: str) -> Path | None:
        """The file whose assertion Unity printed as `printed:number` while `case` ran: one
        reached from the case's function wins over one elsewhere (another test's, at the
        same line number in another file); None when the compiled source is not the file
        printed, or no assertion or more than one file can be meant."""
        if self.main is None or printed != self.main:
            return None
        at = self.asserts.get(number, ())
        reached = self.reached(case)
        for pool in ([f for f, fn in at if fn in reached], [f for f, _ in at]):
            files = dict.fromkeys(pool)
            if printed in files:
                return printed
            if files:
                return next(iter(files)) if len(files) == 1 else None
        return None

    def reached(self, case: str) -> set[str]:
        """The functions a case's function names, and those they name, and so on."""
        if case not in self.names:
            return set()
        seen, todo = {case}, deque([case])
        while todo:
            for name in self.names.get(todo.popleft(), ()):
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
        return seen


def read(stream: TextIO, cwd: Path) -> Expanded:
    """Expanded from a preprocessed text (the compiler ran in cwd: its markers' relative
    names are from there)."""
    reader = _Reader(cwd)
    for line in _lines(stream):
        reader.line(line)
    return reader.result()


def _lines(stream: TextIO) -> Iterator[tuple[str, bool]]:
    """Each output line in pieces of at most CHUNK characters, and whether a piece ends it."""
    while piece := stream.readline(CHUNK):
        yield (piece[:-1], True) if piece.endswith("\n") else (piece, False)


class _Reader:
    """A single pass over the preprocessed lines: where each comes from (the markers), the
    brace depth and the function it is in (file scope's `name(...) {` opens one), the
    identifiers a function's body names, and each Unity report call's literals."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.paths: dict[str, Path | None] = {}
        self.main: str | None = None
        self.file = ""
        self.system = True
        self.number = 1  # the line number of the current output line in self.file
        self.started = True  # the current piece starts an output line
        self.stopped = False  # a limit was reached: no more is recorded
        # file scope: the scopes open ('init' for an initializer's braces), the name a
        # parenthesis follows, the parentheses' depth, whether an '=' was seen
        self.scopes: list[str] = []
        self.candidate: str | None = None
        self.frozen = False  # a constructor's initializer list: its name is kept
        self.paren = 0
        self.after_eq = False
        self.prev = ""
        # inside a function: its name and the depth its body opened at
        self.function: str | None = None
        self.body_depth = 0
        self.names: dict[str, set[str]] = {}
        # a Unity report call being read: its parentheses' depth, its literals, where it is
        self.call_depth = 0
        self.call_literals: list[int] = []
        self.call_at: tuple[str, str, int] = ("", "", 0)  # file, function, line
        self.pending: list[tuple[str, str, int, list[int]]] = []  # calls whose span is not known yet
        self.asserts: dict[int, dict[tuple[Path, str], None]] = {}
        self.count = 0

    def line(self, piece: tuple[str, bool]) -> None:
        text, ends = piece
        if self.started and text.lstrip().startswith("#"):
            marker = _MARKER.match(text.strip())
            if marker is not None and ends:
                self._marker(int(marker.group(1)), _unescape(marker.group(2)), marker.group(3).split())
                return
            # a #pragma the preprocessor kept: a line of its own, not code
        elif text.strip():
            self._settle(self.number)
            # a system header's lines are skipped, but not a system macro's expansion in a
            # function of ours (GCC marks NULL's `((void *)0)` in an assertion with flag 3)
            if not self.stopped and (not self.system or self.function is not None):
                for token in _TOKEN.findall(text):
                    self._token(token)
        self.started = ends
        if ends:
            self.number += 1

    def _marker(self, number: int, name: str, flags: list[str]) -> None:
        self._settle(number if name == self.file else self.number)
        if self.main is None and not name.startswith("<"):
            self.main = name
        self.file, self.number = name, number
        self.system = "3" in flags or name.startswith("<")  # <built-in>, <command-line>

    def _settle(self, upto: int) -> None:
        """The calls read so far cover the lines up to `upto` (the next line with code): a
        literal among a call's arguments is its __LINE__ when it is one of the lines the
        invocation spans (GCC gives its first, clang the closing parenthesis's)."""
        for file, function, at, literals in self.pending:
            span = min(max(upto - at, 1), MAX_SPAN)
            for n in literals:
                if at <= n < at + span:
                    self._assert(file, function, n)
        self.pending.clear()

    def _assert(self, file: str, function: str, n: int) -> None:
        path = self._path(file)
        if path is None:
            return
        if self.count >= MAX_ASSERTIONS:
            self.stopped = True
            return
        self.count += 1
        self.asserts.setdefault(n, {})[(path, function)] = None

    def _path(self, name: str) -> Path | None:
        if name not in self.paths:
            path = self.cwd / name
            self.paths[name] = path.resolve() if path.is_file() else None
        return self.paths[name]

    def _token(self, token: str) -> None:
        if self.call_depth:
            self._in_call(token)
        if self.function is not None:
            self._in_function(token, self.function)
        else:
            self._at_file_scope(token)
        self.prev = token

    def _in_call(self, token: str) -> None:
        if token == "(":
            self.call_depth += 1
        elif token == ")":
            self.call_depth -= 1
            if self.call_depth == 0:  # the call's own parenthesis closed
                self.pending.append((*self.call_at, self.call_literals))
        elif (literal := _LINE_LITERAL.fullmatch(token)) is not None:
            self.call_literals.append(int(literal.group(1)))

    def _in_function(self, token: str, function: str) -> None:
        if token == "{":
            self.scopes.append("body")
        elif token == "}":
            if self.scopes:
                self.scopes.pop()
            if len(self.scopes) == self.body_depth:
                self.function, self.call_depth = None, 0  # a call left open (a piece's cut) ends here
        elif token == "(" and _REPORTS.fullmatch(self.prev) and not self.call_depth and not self.system:
            self.call_depth, self.call_literals, self.call_at = 1, [], (self.file, function, self.number)
        elif token[0].isalpha() or token[0] == "_":
            names = self.names[function]
            if len(names) < MAX_NAMES:
                names.add(token)

    def _at_file_scope(self, token: str) -> None:
        if token == "(":
            if self.paren == 0 and not self.after_eq and not self.frozen and _is_name(self.prev):
                self.candidate = self.prev
            self.paren += 1
        elif token == ")":
            self.paren = max(0, self.paren - 1)
        elif self.paren:
            return
        elif token == "{":
            initializer = self.after_eq or (bool(self.scopes) and self.scopes[-1] == "init")
            if self.candidate and not initializer and len(self.names) < MAX_FUNCTIONS:
                self.function, self.body_depth = self.candidate, len(self.scopes)
                self.names.setdefault(self.candidate, set())
                self.scopes.append("body")
            else:
                self.scopes.append("init" if initializer else "scope")
            self._reset()
        elif token == "}":
            if self.scopes:
                self.scopes.pop()
            self._reset()
        elif token in (";", ","):
            self._reset()
        elif token == "=":
            self._reset()
            self.after_eq = True
        elif token == ":" and self.candidate:
            self.frozen = True  # Foo::Foo(int x) : a(x) {  is Foo's body

    def _reset(self) -> None:
        self.candidate, self.frozen, self.after_eq = None, False, False

    def result(self) -> Expanded:
        self._settle(self.number)
        defined = set(self.names)
        return Expanded(
            main=self._path(self.main) if self.main else None,
            asserts={n: tuple(at) for n, at in self.asserts.items()},
            names={f: frozenset(names & defined) for f, names in self.names.items()},
        )


def _is_name(token: str) -> bool:
    return (token[0].isalpha() or token[0] == "_") and token not in _NOT_NAMES


def _unescape(name: str) -> str:
    """A marker's file name from the C string it is written as (`\\\\`, `\\"` and a
    byte's octal escape)."""
    raw = name.encode("utf-8", "surrogateescape")
    raw = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]) if m.group(1).isdigit() else m.group(1), raw)
    return raw.decode("utf-8", "replace")
