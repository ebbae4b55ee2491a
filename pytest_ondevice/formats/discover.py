"""Find the test cases a C/C++ source declares, without compiling it.

Names come from the source so that every case is a pytest item before anything
is built: `-k`, `--lf` and xdist then work per case. Comments, string literals
and preprocessor directives are blanked first (keeping line numbers), so a
commented-out test or a macro definition is not mistaken for a case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_BLANK = re.compile(
    r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""",
    re.DOTALL,
)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
_V1 = re.compile(r"\bTF_LITE_MICRO_TEST\s*\(\s*([A-Za-z_]\w*)\s*\)")
_BENCH = re.compile(r"\bONDEVICE_(?:CUDA_)?BENCH\s*\(")
_V2 = re.compile(r"\bTEST(?:_F)?\s*\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*\)")


@dataclass(frozen=True)
class Case:
    name: str  # as the device prints it: "Name" (v1) or "Suite.Name" (v2)
    line: int  # 1-based line of the declaration
    style: str  # "v1" or "v2"
    bench: bool = False  # its body uses ONDEVICE_BENCH: selected by -m bench / --bench-only
    also_at: tuple[int, ...] = ()  # lines of later v1 cases with the same name (a duplicate)


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def code_of(text: str) -> str:
    """The source with comments, literals and preprocessor lines blanked, lines kept."""
    return _DIRECTIVE.sub(_blank, _BLANK.sub(_blank, text))


def line_at(code: str, pos: int) -> int:
    return code.count("\n", 0, pos) + 1


def find_cases(text: str) -> list[Case]:
    code = code_of(text)
    found: list[tuple[int, Case]] = []
    for m in _V1.finditer(code):
        found.append((m.start(), Case(m.group(1), code.count("\n", 0, m.start()) + 1, "v1")))
    for m in _V2.finditer(code):
        name = f"{m.group(1)}.{m.group(2)}"
        found.append((m.start(), Case(name, code.count("\n", 0, m.start()) + 1, "v2")))
    found.sort(key=lambda x: x[0])
    cases: dict[str, Case] = {}
    for i, (start, case) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else len(code)
        first = cases.get(case.name)
        if first is None:
            bench = _BENCH.search(code, start, end) is not None
            cases[case.name] = Case(case.name, case.line, case.style, bench)
        elif case.style == "v1":  # v2 names cannot repeat: the compiler refuses them
            cases[case.name] = replace(first, also_at=(*first.also_at, case.line))
    return list(cases.values())


def device_names(cases: list[Case]) -> tuple[str, ...]:
    """The starts the device will print, in order: a duplicate name once per declaration."""
    return tuple(name for c in cases for name in [c.name] * (1 + len(c.also_at)))
