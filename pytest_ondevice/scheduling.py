"""xdist scheduling by binary: every case of one (source, board) goes to one worker.

xdist's default `load` hands cases out one by one, so two workers would each build,
deploy and run the same binary for its half of the cases. Here a binary is the unit
of work (as a module is under `loadscope`), and binaries are spread over the workers,
each of which leases a device of the board for it.
"""

from __future__ import annotations

import fnmatch

from xdist.scheduler import LoadScopeScheduling


class BinaryScheduling(LoadScopeScheduling):
    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        self.patterns = config.getini("ondevice_files").split()

    def _split_scope(self, nodeid: str) -> str:
        path, sep, name = nodeid.partition("::")
        if sep and name.endswith("]") and any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], p) for p in self.patterns):
            return f"{path}::[{name.rsplit('[', 1)[-1]}"  # the file and the board: one binary
        return nodeid.rsplit("::", 1)[0]  # anything else: by module or class, as loadscope does
