"""A failing case as pytest and pytest-cpp users expect to read it: each failure in order,
with the failing source line and a little context, then where the full device log is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from _pytest._code.code import ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter

from .linemarkers import Expanded

_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
_LOCATION = re.compile(r"(?P<file>[\w./+-]+\.(?:c|cc|cpp|cxx|c\+\+|C|h|hh|hpp)):(?P<line>\d+)")
CONTEXT = 2  # lines shown above and below a failing line
MAX_BLOCKS = 10  # a case failing in a loop shows its first failures with source, the rest as text


@dataclass(frozen=True)
class SourceSearch:
    """Where a failure line's file may be: a framework prints the name it was given (Unity's
    runner, generated where its build ran, prints `test/test_x.c`; a test #included into a
    wrapper is named after the wrapper), our builds the path from the project's root."""

    root: Path
    dirs: tuple[Path, ...] = ()  # the test source's directory, then its include path
    case: str = ""  # the failing case: its function's file wins over a wrapper that includes it
    # the files the compiler read for the binary's source (its dependency list): a line a
    # framework prints under the wrapper's name is looked up in the file that has it; the
    # guess made only when the source's preprocessed text could not be read (`expanded`)
    included: tuple[Path, ...] = ()
    # where the source's Unity assertions were expanded, from its preprocessed text
    expanded: Expanded | None = None

    def locate(self, name: str, number: int) -> tuple[Path, str] | None:
        """The file a printed `name:number` means, and how to show it (as printed when it is
        that file under the root, else from the root, else in full), or None when no such
        file with that many lines is here."""
        path = self._find(name)
        if path is None:
            return None
        path = self._through_includes(path, number) or self._defining_include(path) or path
        if not 1 <= number <= len(_lines(path)):
            return None
        root = self.root.resolve()
        if path == (root / name).resolve():
            return path, name.removeprefix("./")
        return path, (path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path))

    def _find(self, name: str) -> Path | None:
        given = Path(name)
        if given.is_absolute():
            return given.resolve() if given.is_file() else None
        tails = [Path(*given.parts[i:]) for i in range(len(given.parts))]  # leading build-dir parts dropped
        for tail in tails:
            for base in (self.root, *self.dirs):
                if (base / tail).is_file():
                    return (base / tail).resolve()
        return None

    def _through_includes(self, path: Path, number: int) -> Path | None:
        """A framework that names the file it was started from (Unity's runner, a wrapper
        that #includes the tests) prints the included file's __LINE__ under the wrapper's
        name. The preprocessor's line markers say in which file an assertion with that
        __LINE__ was expanded, the one the failing case reaches first (linemarkers.py);
        without them, the line is the one file of those the compiler read that has an
        assertion there by its text, when the named file has none."""
        if self.expanded is not None:
            return self.expanded.file_at(path, number, self.case)
        if not self.included or _asserts_at(path, number):
            return None
        found = [p for p in self.included if p != path and _asserts_at(p, number)]
        return found[0] if len(found) == 1 else None

    def _defining_include(self, path: Path) -> Path | None:
        """When the case's function is not in `path` but in a file it #includes by quotes."""
        if not self.case:
            return None
        defines = re.compile(rf"\b{re.escape(self.case)}\s*\([^;{{]*\)\s*\{{")
        text = "\n".join(_lines(path))
        if defines.search(text):
            return None
        for included in _QUOTED_INCLUDE.findall(text):
            for base in (path.parent, *self.dirs):
                candidate = base / included
                if candidate.is_file() and defines.search("\n".join(_lines(candidate))):
                    return candidate.resolve()
        return None


_ASSERTION = re.compile(r"\b(TEST_ASSERT|TEST_FAIL|TEST_IGNORE|TF_LITE_MICRO_EXPECT|ASSERT_|EXPECT_|CHECK|REQUIRE)")


def _asserts_at(path: Path, number: int) -> bool:
    lines = _lines(path)
    return 1 <= number <= len(lines) and _ASSERTION.search(lines[number - 1]) is not None


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def located(line: str, search: SourceSearch) -> tuple[str, int] | None:
    """A failure line's `file:line` as it can be opened here (see SourceSearch)."""
    found = _LOCATION.search(line)
    if found is None:
        return None
    where = search.locate(found.group("file"), int(found.group("line")))
    return (where[1], int(found.group("line"))) if where else None


class CaseFailureRepr(TerminalRepr):
    def __init__(self, message: str, search: SourceSearch, footer: list[str], where: tuple[str, int]) -> None:
        self.message = message
        self.search = search
        self.footer = footer
        # what pytest's short summary ("FAILED x - <first line>") and JUnit's message read
        first = message.splitlines()[0] if message else ""
        self.reprcrash = ReprFileLocation(where[0], where[1], first)

    def toterminal(self, tw: TerminalWriter) -> None:
        shown: set[tuple[str, int]] = set()
        for line in self.message.splitlines():
            tw.line(line, red=True, bold=True)
            source = _source_for(line, self.search) if len(shown) < MAX_BLOCKS else None
            if source is None or source[:2] in shown:
                continue
            path, number, text = source
            shown.add((path, number))
            first = max(1, number - CONTEXT)
            for n, code in enumerate(text[first - 1 : number + CONTEXT], start=first):
                marker = ">" if n == number else " "
                tw.line(f"{marker} {path}:{n:<5d} {code}", bold=n == number)
        for line in self.footer:
            tw.line(line)


def _source_for(line: str, search: SourceSearch) -> tuple[str, int, list[str]] | None:
    """The source file a failure line names, its line number and its lines; None when it
    cannot be read here."""
    found = _LOCATION.search(line)
    if found is None:
        return None
    number = int(found.group("line"))
    where = search.locate(found.group("file"), number)
    if where is None:
        return None
    return where[1], number, _lines(where[0])
