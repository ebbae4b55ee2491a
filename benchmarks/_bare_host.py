"""A pytest plugin for `suite_scale.py --floor`: a bare plugin that only runs the suite's
binaries, one after another in pytest's own process. Each *_test.c's cases are read from
its source (a regex); its binary, already built by the plugin, runs once (subprocess) at
the first case; each case reads its verdict from that output. No board, build check,
side process, log file or report of ours: against pytest's trivial test, what a C case
costs with nothing but its run (a plugin that runs the binaries beside pytest, as ours
does, can cost less).

BARE_HOST_BIN: the directory of the built binaries (`<path of the source>.elf` under
it)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

CASE = re.compile(r"TF_LITE_MICRO_TEST\((\w+)\)")
VERDICT = re.compile(rb" end (\w+) (\w+)")
_verdicts: dict[Path, dict[bytes, bytes]] = {}


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
    return BareFile.from_parent(parent, path=file_path) if file_path.name.endswith("_test.c") else None


class BareFile(pytest.File):
    def collect(self):
        for name in CASE.findall(self.path.read_text()):
            yield BareItem.from_parent(self, name=name)


class BareItem(pytest.Item):
    def runtest(self) -> None:
        source = self.parent.path
        if source not in _verdicts:
            binary = Path(os.environ["BARE_HOST_BIN"]) / f"{source.relative_to(self.config.rootpath)}.elf"
            out = subprocess.run([str(binary)], capture_output=True, check=False).stdout
            _verdicts[source] = dict(VERDICT.findall(out))
        assert _verdicts[source].get(self.name.encode()) == b"passed"
