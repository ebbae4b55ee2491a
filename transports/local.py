"""The `local` transport: the host itself runs the binary as a child process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import Transport
from ._proc import LocalRunFiles, LocalScratch, RunDirs, run_streaming, with_env
from .contract import Deployed, OnBytes, RunEnd
from .runloop import Interactive


class LocalTransport(LocalRunFiles, LocalScratch, Transport):
    name = "local"
    runs_here = True
    runs_ahead = False  # a child process that ends in a millisecond: run in the test's own thread

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._run_dirs = RunDirs()

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        return Deployed(str(artifact), sha256, pushed=None, cwd=str(self._run_dirs.make(data, self.local_dir)))

    def close(self) -> None:
        self.end_spawned()
        self._run_dirs.close()

    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        return run_streaming(
            [deployed.path, *args],
            timeout,
            on_bytes,
            cwd=Path(deployed.cwd or "."),
            env=with_env(deployed),
            stop=self.stop,
        )

    def spawn(self, deployed: Deployed | None, args: list[str]) -> Interactive:
        return self.spawn_here([deployed.path, *args] if deployed else args)
