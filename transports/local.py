"""The `local` transport: the host itself runs the binary as a child process."""

from __future__ import annotations

from pathlib import Path

from pytest_ondevice.protocol import RunEnd

from . import Deployed, OnBytes, Transport
from ._proc import run_streaming


class LocalTransport(Transport):
    name = "local"

    def deploy(self, artifact: Path, sha256: str) -> Deployed:
        return Deployed(str(artifact), sha256, pushed=None)

    def run(self, deployed: Deployed, args: list[str], timeout: float, on_bytes: OnBytes) -> RunEnd:
        path = Path(deployed.path)
        return run_streaming([str(path), *args], timeout, on_bytes, cwd=path.parent)
