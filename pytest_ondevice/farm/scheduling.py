"""xdist scheduling by binary: every case of one (source, board) goes to one worker.

xdist's default `load` hands cases out one by one, so two workers would each build,
deploy and run the same binary for its half of the cases. Here a binary is the unit
of work (as a module is under `loadscope`), and binaries are spread over the workers,
each of which leases a device of the board for it. Any other test (a scripted test
that leases a device itself, a plain Python test) is a unit of its own, as under `load`.
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
        return nodeid  # anything else (a scripted test holding a device, a Python test): one by one

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

    def remove_node(self, node) -> str | None:
        """A worker that crashed: its running case is reported as the crash (by xdist) and
        never handed out again; the rest of its binaries go back in the queue. (loadscope
        requeues the crashed case too, so a binary that kills its worker would kill every
        replacement until xdist gives up.)"""
        workload = self.assigned_work.pop(node)
        pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        scope, crashitem = pending[0]
        workload[scope][crashitem] = True
        for scope, unit in workload.items():
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem
