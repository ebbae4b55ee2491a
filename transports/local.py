"""The `local` transport: the host itself runs the binary as a child process."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_ondevice.protocol import RunEnd

from . import Deployed, OnBytes, Transport
from ._proc import run_streaming, stage_data


class LocalTransport(Transport):
    name = "local"

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        return Deployed(str(artifact), sha256, pushed=None, cwd=str(stage_data(artifact, data)))

    def run(self, deployed: Deployed, args: list[str], timeout: float, on_bytes: OnBytes) -> RunEnd:
        return run_streaming([deployed.path, *args], timeout, on_bytes, cwd=Path(deployed.cwd or "."), stop=self.stop)
