"""The xdist scheduler by binary (farm/scheduling.py), driven by workers that keep xdist's
rules: a queue of case indices, the next case taken before one runs, a steal given back
all or nothing, and nothing run after a shutdown."""

from __future__ import annotations

from types import SimpleNamespace

from pytest_ondevice.farm.scheduling import BinaryScheduling

SHUTDOWN = "shutdown"


class Worker:
    def __init__(self, name: str, sched: BinaryScheduling, collection: list[str]) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sched, self.collection = sched, collection
        self.queue: list = []
        self.running: int | None = None  # the case running now
        self.next: int | str | None = None  # taken from the queue before the running case
        self.shutting_down = False
        self.ran: list[str] = []
        self.answers: list[list[int]] = []

    # -- what the controller calls (xdist's WorkerController) ------------------------
    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shutting_down, f"{self.gateway.id}: work sent after its shutdown is never run"
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True
        self.queue.append(SHUTDOWN)

    def send_steal(self, indices: list[int]) -> None:
        stolen = [i for i in indices if i in self.queue]
        if len(stolen) != len(indices):
            stolen = []
        self.queue = [i for i in self.queue if i not in stolen]
        self.answers.append(stolen)

    # -- the worker's loop: a case runs once the next one (or the shutdown) is known -------
    def step(self) -> bool:
        """Finish the running case, or start one: False while it waits (or has ended)."""
        if self.running is not None:
            self.ran.append(self.collection[self.running])
            done, self.running = self.running, None
            self.sched.mark_test_complete(self, done)
            return True
        if self.next is None:
            if not self.queue:
                return False
            self.next = self.queue.pop(0)
        if self.next == SHUTDOWN or not self.queue:
            return False  # ended, or waiting to learn what follows its next case
        self.running, self.next = self.next, self.queue.pop(0)
        return True


def scheduler(workers: int) -> BinaryScheduling:
    config = SimpleNamespace(
        getini=lambda name: "*_test.c",
        getvalue=lambda name: [f"{workers}*popen"],
        option=SimpleNamespace(loadscopereorder=False),
    )
    return BinaryScheduling(config)


def binaries(count: int, cases: int = 2) -> list[str]:
    return [f"b{i:02d}_test.c::Case{c}[rpi]" for i in range(count) for c in range(cases)]


def deliver(sched: BinaryScheduling, workers: list[Worker]) -> None:
    """Hand each steal's answer to the scheduler, as the worker's 'unscheduled' event does."""
    for w in workers:
        while w.answers:
            sched.remove_pending_tests_from_node(w, w.answers.pop(0))


def start(count: int, nworkers: int, cases: int = 2) -> tuple[BinaryScheduling, list[Worker]]:
    sched = scheduler(nworkers)
    collection = binaries(count, cases)
    workers = [Worker(f"gw{i}", sched, collection) for i in range(nworkers)]
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, collection)
    sched.schedule()
    deliver(sched, workers)
    return sched, workers


def binaries_of(worker: Worker) -> list[str]:
    return list(dict.fromkeys(nodeid.split("::")[0] for nodeid in worker.ran))


def test_a_binary_is_queued_behind_the_running_one_not_only_a_case():
    """Two cases a binary: while its first case runs, the worker already holds its next binary."""
    sched, (w0, w1) = start(8, 2)
    for w in (w0, w1):
        w.step()  # the first case starts: its binary runs
    queued = {sched._split_scope(w0.collection[i]) for i in w0.queue if i != SHUTDOWN}
    assert len(queued) == 1 and "b00_test.c" not in str(queued), queued


def test_a_worker_left_with_nothing_takes_a_binary_another_has_not_started():
    """Five binaries, two workers: while the first worker's first binary runs long, the second
    works through its own and the rest of the queue, then takes the binary queued behind the
    long one instead of leaving it to wait."""
    sched, (w0, w1) = start(5, 2)
    assert w0.step()  # b00's first case: a binary that holds its device a long time
    while w1.step():
        deliver(sched, [w0, w1])
    assert binaries_of(w1) == ["b01_test.c", "b03_test.c", "b04_test.c", "b02_test.c"]
    while any([w0.step(), w1.step()]):
        deliver(sched, [w0, w1])
    assert binaries_of(w0) == ["b00_test.c"]
    assert sched.tests_finished and w0.shutting_down and w1.shutting_down


def test_every_case_runs_once_and_the_work_is_spread():
    for count, nworkers, cases in [(64, 4, 2), (64, 8, 2), (5, 4, 1), (7, 3, 10), (2, 4, 2), (9, 2, 3)]:
        sched, workers = start(count, nworkers, cases)
        for _ in range(count * cases * 4 + 20):
            progressed = any([w.step() for w in workers])
            deliver(sched, workers)
            if not progressed:
                break
        ran = sorted(nodeid for w in workers for nodeid in w.ran)
        assert ran == sorted(binaries(count, cases)), (count, nworkers, cases)
        assert sched.tests_finished and all(w.shutting_down for w in workers)
        for w in workers:  # a binary's cases all on one worker
            for b in binaries_of(w):
                assert sum(n.startswith(b) for n in w.ran) == cases
        if count >= nworkers:
            shares = [len(binaries_of(w)) for w in workers]
            assert max(shares) - min(shares) <= 1, (count, nworkers, shares)


def test_a_steal_refused_is_not_asked_again():
    """The worker had started the unit meanwhile: the answer is none, the scheduler does not
    ask for it again (that would loop for ever), and the starved worker is let go."""
    sched, (w0, w1) = start(5, 2)
    asked = []
    w0.send_steal = lambda indices: asked.append(list(indices)) or w0.answers.append([])
    assert w0.step()
    for _ in range(50):
        progressed = w1.step()
        for _ in range(10):  # a bounded number of answers: a scheduler that asks again would loop
            if w0.answers:
                sched.remove_pending_tests_from_node(w0, w0.answers.pop(0))
        if not progressed:
            break
    assert len(asked) == 1
    assert w1.shutting_down
    while w0.step():
        pass
    assert binaries_of(w0) == ["b00_test.c", "b02_test.c"]
    assert sched.tests_finished


def test_a_crashed_worker_s_queued_binary_goes_to_its_replacement():
    """The crashed case is not handed out again; the binary queued behind it is."""
    sched, (w0, w1) = start(6, 2)
    w0.step()
    crashed = sched.remove_node(w0)
    assert crashed == w0.collection[0]
    w2 = Worker("gw2", sched, w0.collection)  # xdist starts a replacement
    sched.add_node(w2)
    sched.add_node_collection(w2, w0.collection)
    sched.schedule()
    for _ in range(100):
        progressed = any([w1.step(), w2.step()])
        deliver(sched, [w1, w2])
        if not progressed:
            break
    ran = sorted(w1.ran + w2.ran)
    assert ran == sorted(n for n in binaries(6) if n != crashed)
    assert sched.tests_finished and w1.shutting_down and w2.shutting_down
