"""Find the #[test] functions and out-of-line modules a Rust source declares, without rustc.

Collection must not wait for a build (as with C/C++, every case is a pytest item before
anything is compiled), so the names libtest will print are read from the sources: a test's
module path within its file plus the path of the file's module in the crate (cargo.py walks
the `mod foo;` tree). Comments (nested ones too), string, raw-string and char literals are
blanked first, keeping every offset, so a commented-out or quoted `#[test]` is no case and
an attribute's literal (an ignore reason, a #[path]) is read back from the original text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPECIAL = re.compile(r"""//|/\*|(?<!\w)b?r#*"|"|'""")
_CHAR = re.compile(r"""'(?:\\(?:u\{[0-9a-fA-F_]{1,8}\}|x[0-9a-fA-F]{2}|[^\n])|[^'\\\n])'""")
_TOKEN = re.compile(
    r"""(?P<attr>\#!?\s*\[)
    | \bmod\s+(?:r\#)?(?P<mod>[A-Za-z_]\w*)\s*(?P<modend>[{;])
    | \bfn\s+(?:r\#)?(?P<fn>[A-Za-z_]\w*)
    | (?P<open>\{) | (?P<close>\}) | (?P<semi>;)""",
    re.VERBOSE,
)
_TEST_ATTR = re.compile(r"#\s*\[\s*test\s*\]")
# matched on the blanked code: a literal's span is read back from the original text
_IGNORE_ATTR = re.compile(r'#\s*\[\s*ignore\s*(?:=\s*("[^"]*")\s*)?\]')
_SHOULD_PANIC_ATTR = re.compile(r"#\s*\[\s*should_panic\b")
_PATH_ATTR = re.compile(r'#\s*\[\s*path\s*=\s*("[^"]*")\s*\]')
MAX_DEPTH = 64  # nested modules kept track of; deeper braces still count


@dataclass(frozen=True)
class RustTest:
    name: str  # module path within the file, as libtest prints it: "tests::dot_product"
    line: int  # 1-based line of the function's name
    ignored: bool = False  # #[ignore]: libtest reports it ignored unless run with --include-ignored
    ignore_reason: str = ""  # #[ignore = "reason"]
    should_panic: bool = False


@dataclass(frozen=True)
class ModDecl:
    """`mod name;` whose body is another file (cargo.py resolves which)."""

    parents: tuple[str, ...]  # the inline modules it is declared in, within this file
    name: str
    line: int
    path: str | None = None  # its #[path = "..."] attribute, if any


@dataclass(frozen=True)
class Scan:
    tests: tuple[RustTest, ...]
    modules: tuple[ModDecl, ...]
    # #[test]s on no `fn name` (in a macro_rules! body: `fn $name`): tests libtest will run
    # under names only the macro's expansion knows
    unnamed: int = 0


_NOT_NEWLINE = re.compile(r"[^\n]")


def strip(text: str) -> str:
    """The source with comments and the insides of literals blanked; offsets and lines kept."""
    spans: list[tuple[int, int]] = []  # what to blank
    pos, n = 0, len(text)
    while True:
        m = _SPECIAL.search(text, pos)
        if m is None:
            break
        tok, start = m.group(0), m.start()
        if tok == "//":
            end = text.find("\n", start)
            end = n if end < 0 else end
            spans.append((start, end))
        elif tok == "/*":
            end = _block_comment_end(text, start)
            spans.append((start, end))
        elif tok == "'":
            c = _CHAR.match(text, start)
            if c is None:  # a lifetime or a label
                pos = start + 1
                continue
            end = c.end()
            spans.append((start + 1, end - 1))
        elif tok.endswith('"') and "r" in tok:  # raw string: no escapes, ends at "###
            close = '"' + "#" * tok.count("#")
            found = text.find(close, m.end())
            end = n if found < 0 else found + len(close)
            spans.append((m.end(), n if found < 0 else found))
        else:  # "...": escapes, may span lines
            end = _string_end(text, m.end())
            spans.append((m.end(), max(m.end(), end - 1)))
        pos = max(end, start + 1)
    parts, kept = [], 0
    for start, end in spans:
        parts += [text[kept:start], _NOT_NEWLINE.sub(" ", text[start:end])]
        kept = end
    parts.append(text[kept:])
    return "".join(parts)


def _block_comment_end(text: str, start: int) -> int:
    depth, i, n = 0, start, len(text)
    while i < n:
        two = text[i : i + 2]
        if two == "/*":
            depth += 1
            i += 2
        elif two == "*/":
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return n


def _string_end(text: str, i: int) -> int:
    """Just past the closing quote of a string whose body starts at i."""
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
        elif ch == '"':
            return i + 1
        else:
            i += 1
    return n


def _attr_end(code: str, start: int) -> int:
    """Just past the `]` that closes the attribute opened at start (literals are blank)."""
    depth = 0
    for i in range(code.index("[", start), len(code)):
        if code[i] == "[":
            depth += 1
        elif code[i] == "]":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(code)


def _unquote(literal: str) -> str:
    body = literal[1:-1] if len(literal) >= 2 else ""
    return re.sub(r"\\(.)", r"\1", body).strip()


def scan(text: str) -> Scan:
    """The file's #[test] functions (with their module path in this file) and its `mod x;`."""
    code = strip(text)
    tests: list[RustTest] = []
    modules: list[ModDecl] = []
    stack: list[tuple[str, int]] = []  # inline modules: (name, brace depth of its body)
    depth = 0
    attrs: list[tuple[int, int]] = []  # outer attributes since the last item: their spans

    def literal(pattern: re.Pattern[str]) -> tuple[bool, str | None]:
        """Does an attribute match, and the text of its string literal (if it has one)."""
        for start, end in attrs:
            a = pattern.fullmatch(code, start, end)
            if a:
                return True, _unquote(text[a.start(1) : a.end(1)]) if a.lastindex and a.group(1) else None
        return False, None

    counted = [0, 1]  # lines are asked for in increasing offsets: count from the last one

    def line_at(offset: int) -> int:
        counted[1] += code.count("\n", counted[0], offset)
        counted[0] = offset
        return counted[1]

    test_attrs = 0
    pos = 0
    while True:
        m = _TOKEN.search(code, pos)
        if m is None:
            break
        pos = m.end()
        kind = m.lastgroup if m.lastgroup != "modend" else "mod"
        if kind == "attr":
            end = _attr_end(code, m.start())
            if "!" not in m.group("attr"):
                attrs.append((m.start(), end))
                test_attrs += _TEST_ATTR.fullmatch(code, m.start(), end) is not None
            pos = end
        elif kind == "mod":
            parents = tuple(name for name, _ in stack)
            if m.group("modend") == "{":
                if len(stack) < MAX_DEPTH:
                    stack.append((m.group("mod"), depth))
                depth += 1
            else:
                path = literal(_PATH_ATTR)[1]
                modules.append(ModDecl(parents, m.group("mod"), line_at(m.start("mod")), path))
            attrs = []
        elif kind == "fn":
            if literal(_TEST_ATTR)[0]:
                ignored, reason = literal(_IGNORE_ATTR)
                tests.append(
                    RustTest(
                        "::".join([*(name for name, _ in stack), m.group("fn")]),
                        line_at(m.start("fn")),
                        ignored=ignored,
                        ignore_reason=reason or "",
                        should_panic=any(_SHOULD_PANIC_ATTR.match(code, s, e) for s, e in attrs),
                    )
                )
            attrs = []
        else:
            attrs = []
            if kind == "open":
                depth += 1
            elif kind == "close":
                depth = max(0, depth - 1)
                if stack and stack[-1][1] == depth:
                    stack.pop()
    return Scan(tuple(tests), tuple(modules), test_attrs - len(tests))
