"""TFLM's own test output, v1 (`Testing NAME`) and v2 (`[ RUN      ]`), with our header's
nonce-stamped markers: the format every source is in unless it says otherwise."""

from __future__ import annotations

from . import BUILTIN, Format
from .discover import Case, find_cases
from .tflm_parser import TestOutputParser


class Tflm(Format):
    name = "tflm"
    headers = BUILTIN["tflm"].headers

    def find_cases(self, text: str) -> list[Case]:
        return find_cases(text)

    def parser(self, order: tuple[str, ...]) -> TestOutputParser:
        return TestOutputParser()
