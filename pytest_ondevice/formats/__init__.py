"""Output into verdicts. In: a binary's output line by line and how it ended (transports).
Out: one verdict per test case (BinaryVerdicts); also how a source declares its cases.

Test harness formats: how a source declares its cases and how its binary reports them.
One small class per format. Ours (TFLM v1/v2 with our header, GoogleTest, CppUTest,
Unity) are built in; a third party registers its own in the entry-point group
`pytest_ondevice.formats` (`name = "package.module:FormatClass"`). A test source's format
is the one ondevice.toml declares for it (`format = "gtest"`), else the first whose
header the source includes, else TFLM. Every format's parser gives the same guarantees
(see stream.py and docs/protocol.md).
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import ClassVar

from .discover import Case, code_of, device_names, line_at
from .parser import MinimalParser

GROUP = "pytest_ondevice.formats"
HARNESS_DIR = Path(__file__).resolve().parent / "harness"
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.MULTILINE)


MAX_RECORD_BYTES = 1 << 20  # of a framework's record file brought back (see Format.record_args)


@dataclass(frozen=True)
class Needs:
    """What a binary of this format links besides the project's code, per board."""

    pkg_config: tuple[str, ...] = ()  # found with the board's pkg-config settings
    sources: tuple[Path, ...] = ()  # compiled into the binary (a main the source lacks)
    debian_package: str = ""  # where the library comes from on Debian (":ARCH" for a cross board)
    # -D flags for compiling `sources` alone (the test file's directory is on their include path)
    defines: tuple[str, ...] = ()


NO_NEEDS = Needs()


class Format:
    """A harness: subclasses say how to find cases, how to run and how to parse."""

    name: ClassVar[str] = ""
    headers: ClassVar[tuple[str, ...]] = ()  # including one of these selects the format
    run_args: ClassVar[tuple[str, ...]] = ()  # given to every binary of this format
    kinds: ClassVar[tuple[str, ...]] = ("host", "linux", "baremetal")  # boards it can run on
    # arguments that make the framework write its own record of the verdicts to a file
    # ("{file}": a path the transport brings back after the run), read by the parser's
    # framework_record(): a channel the test's printed output cannot reach
    record_args: ClassVar[tuple[str, ...]] = ()

    def args(self, record: str | None) -> list[str]:
        """The binary's arguments; record: where its framework may write its record (None: nowhere)."""
        extra = [a.replace("{file}", record) for a in self.record_args] if record else []
        return [*self.run_args, *extra]

    def find_cases(self, text: str) -> list[Case]:
        raise NotImplementedError

    def device_order(self, cases: list[Case]) -> tuple[str, ...]:
        """The names the device will print, in the order it runs them."""
        return device_names(cases)

    def parser(self, order: tuple[str, ...]) -> MinimalParser:
        """A fresh parser for one run (parser.complete_parser gives the runner all of Parser)."""
        raise NotImplementedError

    def needs(self, text: str) -> Needs:
        return NO_NEEDS


class FormatError(Exception):
    """An unknown format name (ondevice.toml) or a broken third-party format."""


@dataclass(frozen=True)
class Builtin:
    """One of our formats, known without importing it: a run imports only those its
    sources use (all five: 3 ms a run)."""

    module: str
    cls: str
    headers: tuple[str, ...]


# ours, in the order a source's includes are matched against their headers
BUILTIN = {
    "gtest": Builtin("gtest", "GoogleTest", ("gtest/gtest.h", "gmock/gmock.h")),
    "cpputest": Builtin("cpputest", "CppUTest", ("CppUTest/TestHarness.h", "CppUTest/CommandLineTestRunner.h")),
    "catch2": Builtin("catch2", "Catch2", ("catch2/catch.hpp", "catch.hpp")),
    "doctest": Builtin("doctest", "Doctest", ("doctest/doctest.h", "doctest.h")),
    "boosttest": Builtin("boosttest", "BoostTest", ("boost/test/unit_test.hpp", "boost/test/included/unit_test.hpp")),
    "unity": Builtin("unity", "Unity", ("unity.h",)),
    "tflm": Builtin("tflm", "Tflm", ("micro_test.h",)),
    "libtest": Builtin("libtest", "Libtest", ()),
    # a CMake project's test in no framework we read: decided by its exit status (session/cmake.py)
    "exitcode": Builtin("exitcode", "ExitCode", ()),
    "exitcode_will_fail": Builtin("exitcode", "ExitCodeWillFail", ()),
}


@functools.cache
def _builtin(name: str) -> type[Format]:
    entry = BUILTIN[name]
    return getattr(importlib.import_module(f"{__name__}.{entry.module}"), entry.cls)


@functools.cache
def known() -> dict[str, type[Format]]:
    """Ours, then the entry points' (which may not shadow ours). The entry points cost a
    scan of every installed distribution: asked only when ours do not answer."""
    formats = {name: _builtin(name) for name in BUILTIN}
    for ep in entry_points(group=GROUP):
        if ep.name in formats:
            continue
        try:
            cls = ep.load()
        except Exception as e:  # a broken plug-in names itself, not a traceback of ours
            raise FormatError(f"test format {ep.name!r} ({ep.value}) could not be loaded: {e}") from None
        formats[ep.name] = cls
    return formats


def named(name: str, where: str = "") -> Format:
    if name in BUILTIN:
        return _builtin(name)()
    formats = known()
    if name not in formats:
        raise FormatError(
            f"{where}{': ' if where else ''}unknown test format {name!r}; known: {', '.join(sorted(formats))}"
        )
    return formats[name]()


def for_source(text: str, declared: str | None = None, where: str = "") -> Format:
    """The declared format, else the first whose header the source includes, else TFLM."""
    if declared:
        return named(declared, where)
    named_ = _INCLUDE.findall(text)
    included = {Path(h).name for h in named_} | set(named_)
    for name, entry in BUILTIN.items():
        if any(h in included for h in entry.headers):
            return _builtin(name)()
    for name, cls in known().items():  # the entry points' (ours were asked above: theirs cannot shadow them)
        if name not in BUILTIN and any(h in included for h in cls.headers):
            return cls()
    return named("tflm")


def declared_cases(text: str, pattern: re.Pattern[str], name_of, style: str) -> list[Case]:
    """The cases a pattern finds in the (comment-free) source, each once, at its first line."""
    code = code_of(text)
    cases: dict[str, Case] = {}
    for m in pattern.finditer(code):
        name = name_of(m)
        cases.setdefault(name, Case(name, line_at(code, m.start()), style))
    return list(cases.values())


def has_main(code: str) -> bool:
    """Does the (comment-free) source define main? Then the harness's own main is not linked."""
    return re.search(r"\bint\s+main\s*\(", code) is not None
