"""A failing case as pytest and pytest-cpp users expect to read it: each failure in order,
with the failing source line and a little context, then where the full device log is."""

from __future__ import annotations

import re
from pathlib import Path

from _pytest._code.code import ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter

_LOCATION = re.compile(r"(?P<file>[\w./+-]+\.(?:c|cc|cpp|cxx|c\+\+|C|h|hh|hpp)):(?P<line>\d+)")
CONTEXT = 2  # lines shown above and below a failing line
MAX_BLOCKS = 10  # a case failing in a loop shows its first failures with source, the rest as text


class CaseFailureRepr(TerminalRepr):
    def __init__(self, message: str, root: Path, footer: list[str], where: tuple[str, int]) -> None:
        self.message = message
        self.root = root
        self.footer = footer
        # what pytest's short summary ("FAILED x - <first line>") and JUnit's message read
        first = message.splitlines()[0] if message else ""
        self.reprcrash = ReprFileLocation(where[0], where[1], first)

    def toterminal(self, tw: TerminalWriter) -> None:
        shown: set[tuple[str, int]] = set()
        for line in self.message.splitlines():
            tw.line(line, red=True, bold=True)
            source = _source_for(line, self.root) if len(shown) < MAX_BLOCKS else None
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


def _source_for(line: str, root: Path) -> tuple[str, int, list[str]] | None:
    """The source file a failure line names (relative to the project, as our builds write
    __FILE__), its line number and its lines; None when it cannot be read here."""
    found = _LOCATION.search(line)
    if found is None:
        return None
    name, number = found.group("file"), int(found.group("line"))
    path = Path(name) if Path(name).is_absolute() else root / name
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not 1 <= number <= len(text):
        return None
    return name.removeprefix("./"), number, text
