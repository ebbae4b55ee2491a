"""What the runner asks of a format's parser, so that it reads every member plainly.

A parser is streaming: one line at a time, in bounded memory; its verdicts need how the run
ended too. Besides the lines, the runner tells it whether the binary holds our header and
hands it the framework's own record; it reads back whether the device could run the
binary at all. Every parser of ours has all of it (ParserBase, under CaseTracker); a
third party's that has only feed_line and verdicts (all this API asked before) is
completed by complete_parser().
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .verdicts import BinaryVerdicts, RunEnd


class MinimalParser(Protocol):
    """The least a format's parser has: its lines in, its verdicts out."""

    def feed_line(self, raw: str) -> None:
        """One line of the binary's output as LineSplitter gives it: no line ending, at most
        4096 bytes, what was not UTF-8 replaced; any text at all (a test prints what it likes)."""

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        """Every case in expected gets a verdict, from the lines and how the run ended."""


@runtime_checkable
class Parser(MinimalParser, Protocol):
    """Everything the runner reads or sets on a parser (complete_parser gives one)."""

    ours: bool
    """Set by the runner before the first line: the binary holds our micro_test.h (its marker
    symbol is in the ELF), so only a run that declares a nonce is believed. Read by the TFLM
    parser; a format whose hook of its own prints the nonce says so by nonce_expected."""

    nonce: str | None
    """The run's nonce once our header or hook declared it: then the output came from our
    code's main, not from the loader or from code that ran before it."""

    unavailable: str | None
    """Why the device cannot run this binary at all (no usable GPU), as our header said it
    before any case: the runner reports it as the device's, never as the code's."""

    missing_library: str | None
    """A shared library the device's loader did not find, as the loader said it before our
    code printed anything: the device's set-up, when the run also exited 127 with no nonce."""

    def framework_record(self, data: bytes | None) -> None:
        """The record the framework wrote to a file during the run (Format.record_args), read
        back after it; None: it wrote none. Called before verdicts(), only for a format
        that declares record_args."""


class ParserBase:
    """The members a parser has when its format has nothing to say on them."""

    ours: bool = False
    nonce: str | None = None
    unavailable: str | None = None
    missing_library: str | None = None

    def feed_line(self, raw: str) -> None:
        raise NotImplementedError

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        raise NotImplementedError

    def framework_record(self, data: bytes | None) -> None:
        """No record of the framework's: the printed lines decide."""


class _Completed(ParserBase):
    """A third party's parser that lacks some of Parser's members: the rest are the defaults,
    except a framework_record() of its own (its format's record_args ask for one)."""

    def __init__(self, parser: MinimalParser) -> None:
        self.parser = parser

    def feed_line(self, raw: str) -> None:
        self.parser.feed_line(raw)

    def verdicts(self, expected: list[str], end: RunEnd) -> BinaryVerdicts:
        return self.parser.verdicts(expected, end)

    def framework_record(self, data: bytes | None) -> None:
        getattr(self.parser, "framework_record", super().framework_record)(data)


def complete_parser(parser: MinimalParser) -> Parser:
    """parser itself when it has every member (ours do, and any CaseStream), else it with the
    defaults, so that the runner reads them without asking whether they are there."""
    return parser if isinstance(parser, Parser) else _Completed(parser)
