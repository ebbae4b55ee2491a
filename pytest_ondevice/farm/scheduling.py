"""xdist scheduling by binary: every case of one (source, board) goes to one worker.

xdist's default `load` hands cases out one by one, so two workers would each build,
deploy and run the same binary for its half of the cases. Here a binary is the unit
of work (as a module is under `loadscope`), and binaries are spread over the workers,
each of which leases a device of the board for it. Any other test (a scripted test
that leases a device itself, a plain Python test) is a unit of its own, as under `load`.

Each worker has one binary queued behind the one it runs, so it starts the next the
moment one ends, without waiting for the controller. When the queue is empty, a worker
left with nothing takes back a binary another worker has queued but not started (xdist's
`steal`), so the run does not end with one device idle while another works through two.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from xdist.scheduler import LoadScopeScheduling


class BinaryScheduling(LoadScopeScheduling):
    def __init__(self, config, log=None, scope_of: Callable[[str], str | None] | None = None) -> None:
        """scope_of: the unit of an item the file patterns do not tell (a CMake project's)."""
        super().__init__(config, log)
        self.scope_of = scope_of
        self.patterns = config.getini("ondevice_files").split()
        self._starved: list = []  # workers with nothing left to run, waiting for a steal
        self._asked: tuple | None = None  # (worker, binary) of the one steal in flight
        self._scheduling = False
        # units a worker would not give back: it took the first case as the next to run (a
        # worker knows its next case before it starts one), so asking again gets the same no
        self._started: set[str] = set()

    def schedule(self) -> None:
        """The first distribution shuts every worker down when it hands out the whole queue
        (nothing to steal then, and a worker told to end runs nothing sent after): steals
        start once it is done."""
        self._scheduling = True
        try:
            super().schedule()
        finally:
            self._scheduling = False
        self._steal()

    def _split_scope(self, nodeid: str) -> str:
        scope = self.scope_of(nodeid) if self.scope_of is not None else None
        if scope is not None:
            return scope
        path, sep, name = nodeid.partition("::")
        if sep and name.endswith("]") and any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], p) for p in self.patterns):
            return f"{path}::[{name.rsplit('[', 1)[-1]}"  # the file and the board: one binary
        return nodeid  # anything else (a scripted test holding a device, a Python test): one by one

    def _unfinished(self, node) -> list[str]:
        """The node's units with a case not reported yet, in the order it runs them."""
        return [scope for scope, unit in self.assigned_work[node].items() if not all(unit.values())]

    def _reschedule(self, node) -> None:
        """One unit queued behind the running one. (loadscope counts cases, not units: with
        a binary of several cases nothing was queued, and each binary waited for the
        controller before it started.)"""
        if node.shutting_down:
            return
        if self.workqueue:
            if len(self._unfinished(node)) > 1:
                return
            if node in self._starved:
                self._starved.remove(node)
            self._assign_work_unit(node)
            return
        # an xdist worker runs a case only once it knows the next (or that none comes): with
        # one case left it waits, so it has nothing to do until it gets a unit or is shut down
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        if node not in self._starved:
            self._starved.append(node)
        self._steal()

    def _steal(self) -> None:
        """Ask a worker for a unit it has queued but not started, for a starved worker; with
        none left anywhere, the starved workers are done."""
        self._starved = [node for node in self._starved if not node.shutting_down]
        if self._scheduling or self._asked is not None or not self._starved:
            return  # one request at a time; its answer asks again
        victim = self._victim()
        if victim is None:
            for node in self._starved:
                node.shutdown()
            self._starved.clear()
            return
        node, scope = victim
        collection = self.registered_collections[node]
        self._asked = victim
        node.send_steal([collection.index(nodeid) for nodeid in self.assigned_work[node][scope]])

    def _victim(self) -> tuple | None:
        """The last unit queued behind a running one, from the worker with most queued. Only
        while the running unit has two cases or more left can its worker give one back: with
        one left, it has taken the queued unit's first case as the next."""
        best, most = None, 0
        for node in self.assigned_work:
            unfinished = self._unfinished(node)
            work = self.assigned_work[node]
            if node in self._starved or not unfinished or list(work[unfinished[0]].values()).count(False) < 2:
                continue
            queued = [s for s in unfinished[1:] if not any(work[s].values()) and s not in self._started]
            if len(queued) > most:
                best, most = (node, queued[-1]), len(queued)
        return best

    def remove_pending_tests_from_node(self, node, indices) -> None:
        """The answer to a steal: the unit's indices (now the starved worker's), or none
        when the worker had started it meanwhile."""
        asked, self._asked = self._asked, None
        if not indices and asked is not None:
            self._started.add(asked[1])
        if indices and asked is not None and asked[0] is node and node in self.assigned_work:
            scope = asked[1]
            unit = self.assigned_work[node].pop(scope)
            thieves = [n for n in self._starved if not n.shutting_down]
            if not thieves:  # the run is ending (xdist shut them down): back in the queue
                self.workqueue[scope] = unit
                for other in self.assigned_work:
                    self._reschedule(other)
                return
            thief = thieves[0]
            self._starved.remove(thief)
            self.assigned_work[thief][scope] = unit
            collection = self.registered_collections[thief]
            thief.send_runtest_some([collection.index(nodeid) for nodeid in unit])
            self._reschedule(node)  # left with its running unit only, it may starve in turn
        self._steal()

    def remove_node(self, node) -> str | None:
        """A worker that crashed: its running case is reported as the crash (by xdist) and
        never handed out again; the rest of its binaries go back in the queue. (loadscope
        requeues the crashed case too, so a binary that kills its worker would kill every
        replacement until xdist gives up.)"""
        if node in self._starved:
            self._starved.remove(node)
        if self._asked is not None and self._asked[0] is node:
            self._asked = None  # no answer will come: its queued units go back in the queue below
        workload = self.assigned_work.pop(node)
        pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
        if not pending:
            self._steal()
            return None
        scope, crashitem = pending[0]
        workload[scope][crashitem] = True
        for scope, unit in workload.items():
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        self._steal()
        return crashitem
