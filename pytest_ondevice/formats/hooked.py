"""A format whose hook of ours is linked into every binary we build of it (formats/harness/:
GoogleTest's, Catch2's and doctest's listener, CppUTest's plugin, Boost.Test's observer),
and its parser: set up in one place, so that the formats cannot differ in what they trust.

Such a hook declares a per-run nonce and stamps the framework's events with it: its lines
carry the verdicts, and a run of a binary we built that declares no nonce was not run by the
framework (the Format says so: nonce_expected). Without the hook's lines (a recorded
stream) the parser reads the framework's own text, where some frameworks print nothing of a
case before it fails or ends (`silent_start`): the running case is then told by the order.
"""

from __future__ import annotations

from typing import ClassVar

from . import Format
from .stream import CaseStream


class HookedStream(CaseStream):
    """A CaseStream that believes the hook's nonce; mixed in before another base of the
    format's (WordNamedStream), whose __init__ it passes the order on to."""

    hook = True  # our hook: its stamped lines carry the verdicts
    # the framework's text prints no start line of a case that fails nothing: why the running
    # case is the first in run order without a verdict (its verdict says so); "" when it does
    silent_start = ""

    def __init__(self, order: tuple[str, ...] = (), nonce_expected: bool = False) -> None:
        super().__init__(order)
        self.nonce_expected = nonce_expected  # built by us: the hook is in the binary

    def running(self, expected: list[str]) -> str | None:
        """The running case; without the hook's lines, in a framework's text that does not
        announce a case, the first case in run order without a verdict."""
        if not self.silent_start or self.current is not None or self.nonce is not None or self.summary is not None:
            return super().running(expected)
        return self.first_without_verdict(expected)

    def running_note(self) -> tuple[str, str]:
        return (f" ({self.silent_start})", "") if self.silent_start else super().running_note()


class HookedFormat(Format):
    """A format whose binaries are ours to build: each run's parser expects the hook's nonce."""

    parser_class: ClassVar[type[HookedStream]]  # the format's parser

    def parser(self, order: tuple[str, ...]) -> HookedStream:
        return self.parser_class(order, nonce_expected=True)
