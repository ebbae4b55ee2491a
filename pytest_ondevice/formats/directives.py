"""What a source's preprocessor lines ask for, read without compiling it.

A framework's main is asked for by a macro the source defines (`CATCH_CONFIG_MAIN`,
`DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN`, `BOOST_TEST_MODULE`) or a header it includes
(`boost/test/included/unit_test.hpp`), so a format decides from them what it links.
Comments are ignored (string literals are kept: an #include names its file in one);
conditions are not evaluated, and a macro given on the command line is not seen.
"""

from __future__ import annotations

import re

from . import has_main
from .discover import code_of

# a comment, or a literal that may hold what looks like one ("/*", "//")
_COMMENT_OR_LITERAL = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.DOTALL)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.MULTILINE)


def _without_comments(text: str) -> str:
    def blank(m: re.Match[str]) -> str:
        found = m.group(0)
        return found if found[0] in "\"'" else re.sub(r"[^\n]", " ", found)

    return _COMMENT_OR_LITERAL.sub(blank, text)


def defined(text: str) -> set[str]:
    """The macros the source #defines."""
    return set(_DEFINE.findall(_without_comments(text)))


def has_own_main(text: str, implementing: set[str]) -> bool:
    """Does the source have its framework's main: a main of its own, or one of the macros by
    which the framework's header implements it (implementing)? Then ours is not linked."""
    return has_main(code_of(text)) or bool(implementing & defined(text))


def included(text: str) -> set[str]:
    """The headers the source #includes, as written (`boost/test/unit_test.hpp`)."""
    return {h.strip() for h in _INCLUDE.findall(_without_comments(text))}
