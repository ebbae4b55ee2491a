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

    def _reschedule(self, node) -> None:
        """One binary queued behind the running one, not loadscope's two: a binary holds a
        device for seconds, and a worker that took more than its share makes the others wait
        at the end of the run."""
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)
