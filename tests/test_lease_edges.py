"""Device leases as a run sees them: which device it gets, how long it waits, what it says
while it waits, and what a labgrid place adds (its coordinator here a stand-in that answers
as a busy or free place would). Found missing by mutation testing (lease.py)."""

from __future__ import annotations

import getpass
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import private_tmpdir
from pytest_ondevice.transports import InfrastructureError

from pytest_ondevice.farm import lease
from pytest_ondevice.farm.fleet import Device
from pytest_ondevice.farm.lease import Leases, LeaseTimeout

OTHER = "pid 999999 on build-2 (user ci, since 01:02:03)"  # another run's lease, as it wrote it
PI1, PI2, PI3 = Device("pi-1", "rpi"), Device("pi-2", "rpi"), Device("pi-3", "rpi")


def _leases(root: Path, who: str = "pid 1 on a (user me)", **kw) -> Leases:
    return Leases(root, lambda d: d.jobs or 1, who, **kw)


def _take(leases: Leases, devices: list[Device], timeout: float | None = 0.0, **kw) -> lease.Lease:
    return leases.take(devices, timeout, threading.Event(), **kw)


def test_a_lease_is_released_once_by_a_with_block_and_a_second_release_is_harmless(tmp_path):
    mine = _leases(tmp_path)
    with mine.try_take(PI1) as held:
        assert held.slot == 0 and mine.try_take(PI1) is None
    assert mine.holders(PI1) == []
    held.release()  # again: nothing left to let go of
    again = mine.try_take(PI1)
    assert again is not None and again.slot == 0


def test_a_run_spreads_its_binaries_over_the_free_devices_from_its_own_first_turn(tmp_path):
    mine = _leases(tmp_path)
    got = []
    for _ in range(4):
        with _take(mine, [PI1, PI2, PI3]) as held:
            got.append(held.device.name)
    assert got == ["pi-2", "pi-3", "pi-1", "pi-2"]  # each take starts one device further on
    other_worker = _leases(tmp_path, first_turn=1)
    with _take(other_worker, [PI1, PI2, PI3]) as held:
        assert held.device.name == "pi-3"


def test_a_connected_device_is_preferred_and_a_held_one_is_passed_over(tmp_path):
    mine = _leases(tmp_path)
    with _take(mine, [PI1, PI2, PI3], prefer={"pi-1"}) as held:
        assert held.device.name == "pi-1"
        with _take(mine, [PI1, PI2, PI3], prefer={"pi-1"}) as second:
            assert second.device.name != "pi-1"


def test_an_idle_device_is_taken_before_a_second_slot_of_a_busy_one(tmp_path):
    """Two Pis of two slots each: a binary runs on the idle Pi, whatever the turn and whichever
    Pi this run is connected to; only when both are busy does one take a second binary."""
    pis = [Device("pi-1", "rpi", jobs=2), Device("pi-2", "rpi", jobs=2)]
    mine = _leases(tmp_path)
    with _leases(tmp_path, who=OTHER).try_take(pis[1]):  # pi-2 runs a binary (another worker's)
        for prefer in (set(), {"pi-2"}, {"pi-1", "pi-2"}):
            for _ in range(2):  # both turns: each starts at another Pi
                with _take(mine, pis, prefer=prefer) as held:
                    assert (held.device.name, held.slot) == ("pi-1", 0), prefer
        with _take(mine, pis, prefer={"pi-2"}) as first:
            assert first.device.name == "pi-1"
            with _take(mine, pis, prefer={"pi-2"}) as second:  # both busy: the connected one's free slot
                assert (second.device.name, second.slot) == ("pi-2", 1)
                with _take(mine, pis) as third:
                    assert (third.device.name, third.slot) == ("pi-1", 1)
                    with pytest.raises(LeaseTimeout):
                        _take(mine, pis)
    with _take(mine, pis) as a, _take(mine, pis) as b:  # all idle: one each
        assert {a.device.name, b.device.name} == {"pi-1", "pi-2"}


def test_threads_finding_the_same_device_idle_never_both_take_it(tmp_path):
    """Every slot is locked while a device is looked at: of two threads only one sees it idle."""
    pi = Device("pi-1", "rpi", jobs=2)
    mine = _leases(tmp_path)
    looking = mine.take_idle(pi)
    assert looking is not None and mine.take_idle(pi) is None
    assert mine.try_take(pi).slot == 1  # a second slot is still there for whoever asks for one


def test_no_device_to_lease_and_a_run_that_is_ending_are_errors_saying_so(tmp_path):
    mine = _leases(tmp_path)
    with pytest.raises(InfrastructureError, match=r"^no device to lease$"):
        mine.take([], None, threading.Event())
    stop = threading.Event()
    stop.set()
    with _take(_leases(tmp_path, OTHER), [PI1]), pytest.raises(InfrastructureError, match=r"^the run is ending: "):
        mine.take([PI1], None, stop)
    with mine.take([PI1], None, stop) as free:  # a free device is still leased: its binary may be the last
        assert free.device == PI1


def test_the_timeout_names_the_board_the_limit_and_every_holder(tmp_path):
    theirs = _leases(tmp_path, OTHER)
    two = Device("pi-2", "rpi", jobs=2)
    held = [theirs.try_take(PI1), theirs.try_take(two), _leases(tmp_path, "pid 5 on b (user x)").try_take(two)]
    started = time.monotonic()
    with pytest.raises(LeaseTimeout) as e:
        _leases(tmp_path).take([PI1, two], 0.25, threading.Event())  # no `say`: nothing to say it with
    assert 0.25 <= time.monotonic() - started < 2
    assert str(e.value) == (
        f"no device of board rpi came free within --lease-timeout=0.25 s; pi-1 is leased by {OTHER}, "
        f"pi-2 is leased by {OTHER}; pid 5 on b (user x)"
    )
    for h in held:
        h.release()


def test_a_device_freed_while_a_run_waits_is_taken_within_a_poll(tmp_path):
    held = _leases(tmp_path, OTHER).try_take(PI1)
    threading.Timer(0.1, held.release).start()
    started = time.monotonic()
    with _take(_leases(tmp_path), [PI1], timeout=10) as got:
        assert got.device == PI1
    assert time.monotonic() - started < 1.0  # polled every 0.2 s


def _waits(tmp_path: Path, holder: str, timeout: float) -> list[str]:
    """What a run says while it waits `timeout` s for pi-1, which `holder` holds."""
    said: list[str] = []
    with _leases(tmp_path, holder).try_take(PI1), pytest.raises(LeaseTimeout):
        _leases(tmp_path).take([PI1], timeout, threading.Event(), say=said.append)
    return said


def test_a_run_waiting_for_another_run_says_who_once_after_a_second(tmp_path):
    assert _waits(tmp_path, OTHER, 0.5) == []  # a short wait goes unsaid
    assert _waits(tmp_path, OTHER, 1.6) == [f"ondevice: waiting for a device of board rpi: pi-1 is leased by {OTHER}"]


def test_threads_of_one_run_wait_for_each_other_quietly(tmp_path):
    assert _waits(tmp_path, lease.identity("gw0"), 1.6) == []


def test_the_holder_is_named_even_when_the_lock_file_of_a_lower_slot_is_gone_or_not_utf8(tmp_path):
    two = Device("pi-1", "rpi", jobs=2)
    mine = _leases(tmp_path, "pid 7 on h\xe9te (user me)")
    first, second = mine.try_take(two), mine.try_take(two)
    first.path.unlink()  # someone cleaned the lease dir by hand
    second.path.write_bytes(b"pid 7 on h\xe9te (user me)\n")  # a latin-1 host name
    assert mine.holders(two) == ["pid 7 on h\ufffdte (user me)"]
    second.release()


def test_who_holds_a_lease_is_said_in_words_a_person_can_act_on(monkeypatch):
    host, pid = socket.gethostname(), os.getpid()
    assert f"(user {getpass.getuser()}, since " in lease.identity()
    assert re.fullmatch(rf"pid {pid} on {re.escape(host)} \(user \S+, since \d\d:\d\d:\d\d\)", lease.identity())
    worker = lease.identity("gw3")
    assert re.fullmatch(rf"pid {pid} on {re.escape(host)} \(user \S+, xdist worker gw3, since [\d:]{{8}}\)", worker)

    def no_name():
        raise KeyError("getpwuid(): uid not found: 4242")

    monkeypatch.setattr(lease.getpass, "getuser", no_name)
    assert f"(user {os.getuid()}, since " in lease.identity()


def test_a_lease_is_not_kept_by_a_child_process_that_outlives_it(tmp_path):
    """A transport's child (ssh, a probe) inherits what is not close-on-exec."""
    mine = _leases(tmp_path)
    held = mine.try_take(PI1)
    code = "import time; print('started', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], close_fds=False, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "started\n"  # exec'd: what it was to lose on exec is gone by now
        held.release()
        again = _leases(tmp_path, OTHER).try_take(PI1)
        assert again is not None
        again.release()
    finally:
        child.kill()
        child.wait()


def test_check_names_each_lease_file_that_cannot_be_opened_and_takes_none(tmp_path):
    two = Device("pi-1", "rpi", jobs=2)
    (tmp_path / "pi-1.1.lock").mkdir()
    mine = _leases(tmp_path)
    old = os.umask(0)
    try:
        assert mine.check([PI2, two]) == [f"cannot open the lease file {tmp_path}/pi-1.1.lock: Is a directory"]
    finally:
        os.umask(old)
    assert (tmp_path / "pi-2.0.lock").stat().st_mode & 0o777 == 0o666  # as a run makes it: any fleet user opens it
    assert (tmp_path / "pi-2.0.lock").read_text() == "" and (tmp_path / "pi-1.0.lock").exists()
    with mine.try_take(two) as held:
        assert held.slot == 0  # checked, not held


# -- labgrid places: the coordinator's answers, played by a stand-in -----------------------


class Places:
    """A coordinator that has the place busy for `busy` claims, then gives its address (or
    raises `fail`); `down`: it cannot be reached to give the place back. What was asked of it
    is in `calls`."""

    def __init__(self, busy: int = 0, fail: BaseException | None = None, leases: Leases | None = None) -> None:
        self.busy, self.fail, self.leases = busy, fail, leases
        self.down = False
        self.calls: list[tuple] = []
        self.lock_free_at_release: bool | None = None

    def claim(self, device: Device, path: Path, fresh: bool) -> str | None:
        self.calls.append(("claim", device.name, path.name, fresh))
        if self.fail is not None:
            raise self.fail
        if self.busy:
            self.busy -= 1
            return None
        return "pi@10.0.0.7:22"

    def release(self, device: Device, path: Path) -> None:
        self.calls.append(("release", device.name, path.name))
        if self.leases is not None:  # may another process of this host take the lock already?
            taken = self.leases.try_take(device)
            self.lock_free_at_release = taken is not None
            if taken:
                taken.release()
        if self.down:
            raise InfrastructureError("the labgrid coordinator at lab:20408 did not answer within 30 s")

    def give_up(self, device: Device, path: Path) -> None:
        self.calls.append(("give_up", device.name, path.name))
        if self.down:
            raise InfrastructureError("the labgrid coordinator at lab:20408 did not answer within 30 s")

    def holder(self, device: Device) -> str:
        return f"lab/alice (labgrid place {device.place})"


PLACE = Device("pi-a", "rpi", place="pi-a")


def test_a_free_place_gives_its_address_and_is_handed_back_before_the_lock(tmp_path):
    places = Places(leases=_leases(tmp_path, OTHER))
    mine = _leases(tmp_path, places=places)
    held = _take(mine, [PLACE])
    assert held.device.address == "pi@10.0.0.7:22" and held.device.name == "pi-a"
    held.release()
    held.release()
    assert places.calls == [("claim", "pi-a", "pi-a.0.lock", True), ("release", "pi-a", "pi-a.0.lock")]
    assert places.lock_free_at_release is False  # nobody here could take it before the place was back


def test_a_busy_place_is_waited_for_holding_its_lock_and_named_while_waiting(tmp_path):
    places = Places(busy=8)  # 1.6 s: said after the first second
    mine = _leases(tmp_path, places=places)
    said: list[str] = []
    held = mine.take([PLACE], 30, threading.Event(), say=said.append)
    assert said == ["ondevice: waiting for a device of board rpi: pi-a is leased by lab/alice (labgrid place pi-a)"]
    claims = [c for c in places.calls if c[0] == "claim"]
    assert claims[0][3] is True and {c[3] for c in claims[1:]} == {False}  # one slot, kept while waiting
    assert held.device.address == "pi@10.0.0.7:22" and "give_up" not in {c[0] for c in places.calls}
    held.release()


def test_a_place_still_busy_at_the_timeout_is_given_up_and_its_lock_freed(tmp_path):
    places = Places(busy=1000)
    mine = _leases(tmp_path, places=places)
    with pytest.raises(LeaseTimeout, match=r"within --lease-timeout=0.3 s; pi-a is leased by lab/alice \(labgrid"):
        mine.take([PLACE], 0.3, threading.Event())
    assert places.calls[-1] == ("give_up", "pi-a", "pi-a.0.lock")
    assert _leases(tmp_path, OTHER).try_take(PLACE) is not None
    assert mine.describe([PLACE]) == f"pi-a is leased by {OTHER}"  # not waiting for it: the lock file says


def test_waiting_for_a_place_and_a_device_names_each_ones_holder(tmp_path):
    """The coordinator is asked about the place only; the other device's lock file names its holder."""
    mine = _leases(tmp_path, places=Places(busy=1000))
    with _take(_leases(tmp_path, OTHER), [PI1]), pytest.raises(LeaseTimeout) as e:
        mine.take([PLACE, PI1], 0.3, threading.Event())
    assert str(e.value).endswith(f"pi-a is leased by lab/alice (labgrid place pi-a), pi-1 is leased by {OTHER}")


@pytest.mark.parametrize("error", [InfrastructureError("coordinator gone"), KeyboardInterrupt()])
@pytest.mark.parametrize("down", [False, True])
def test_a_claim_that_fails_gives_the_place_and_the_lock_up(tmp_path, error, down):
    places = Places(fail=error)
    places.down = down  # giving up fails too: the lock goes all the same
    mine = _leases(tmp_path, places=places)
    with pytest.raises(type(error)):
        mine.take([PLACE], 5, threading.Event())
    assert [c[0] for c in places.calls] == ["claim", "give_up"]  # given up once, not released as if held
    assert _leases(tmp_path, OTHER).try_take(PLACE) is not None


def test_a_coordinator_that_fails_on_release_still_frees_the_lock(tmp_path):
    places = Places()
    mine = _leases(tmp_path, places=places)
    held = _take(mine, [PLACE])
    places.down = True
    held.release()
    assert mine.holders(PLACE) == [] and _leases(tmp_path, OTHER).try_take(PLACE) is not None


def test_a_killed_sessions_run_dir_is_removed_by_the_next_session_and_a_live_ones_is_not(project, tmp_path):
    """SIGKILL leaves a session no chance to remove its run dir; the next one does, and
    never the run dir of a session still running."""
    project.write("slow_test.py", "import time\n\ndef test_slow():\n    time.sleep(60)\n")
    project.write(
        "quick_test.c",
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\nTF_LITE_MICRO_TEST(Quick) {}\nTF_LITE_MICRO_TESTS_END\n',
    )
    env = private_tmpdir(tmp_path)
    temp = Path(env["TMPDIR"])
    argv = [sys.executable, "-m", "pytest", "--board=host", "-p", "no:cacheprovider", "-q"]

    def start_slow() -> tuple[subprocess.Popen, Path]:
        before = set(temp.glob("ondevice-run-*"))
        proc = subprocess.Popen([*argv, "slow_test.py"], cwd=project.path, env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            made = set(temp.glob("ondevice-run-*")) - before
            if made and all((d / ".live").exists() for d in made):
                return proc, made.pop()
            time.sleep(0.05)
        proc.kill()
        raise AssertionError("the session made no run dir")

    killed, killed_dir = start_slow()
    killed.kill()
    killed.wait()
    assert killed_dir.exists()  # SIGKILL: nothing removed it
    live, live_dir = start_slow()
    try:
        quick = subprocess.run([*argv, "quick_test.c"], cwd=project.path, env=env, capture_output=True, text=True)
        assert quick.returncode == 0, quick.stdout + quick.stderr
        assert not killed_dir.exists(), "the killed session's run dir is still there"
        assert live_dir.exists(), "a running session's run dir was removed"
    finally:
        live.kill()
        live.wait()
    assert sorted(p.name for p in temp.glob("ondevice-run-*")) == [live_dir.name]  # the quick one removed its own


def test_a_dead_run_dir_is_swept_only_if_it_is_this_machines(tmp_path):
    from pytest_ondevice.farm import rundir

    def dead(name: str, machine: bytes) -> Path:
        path = tmp_path / f"{rundir.PREFIX}{name}"
        path.mkdir()
        (path / rundir.LIVE).write_bytes(machine)  # nobody holds its lock
        return path

    ours = dead("ours", rundir.this_machine())
    theirs = dead("theirs", b"another-host 0000")  # a temp dir shared over NFS: its lock may look free
    assert rundir.sweep(tmp_path) == 1
    assert not ours.exists() and theirs.exists()


def test_without_flock_a_run_goes_on_and_its_dir_is_never_swept(tmp_path, monkeypatch):
    from pytest_ondevice.farm import rundir

    monkeypatch.setattr(rundir.tempfile, "tempdir", str(tmp_path))

    def no_locks(fd, op):
        raise OSError(37, "No locks available")  # ENOLCK: NFS without a lock daemon

    monkeypatch.setattr(rundir.fcntl, "flock", no_locks)
    run = rundir.RunDir()
    assert run.path.is_dir() and not any(run.path.iterdir())
    assert rundir.sweep(tmp_path) == 0
    run.remove()
    assert not run.path.exists()


def test_a_forked_child_ending_leaves_its_parents_run_dir(tmp_path, monkeypatch):
    from pytest_ondevice.farm import rundir

    monkeypatch.setattr(rundir.tempfile, "tempdir", str(tmp_path))
    run = rundir.RunDir()
    pid = os.fork()
    if pid == 0:  # what a forked test's child runs at exit: pytest's config clean-up
        run.remove()
        os._exit(0)
    os.waitpid(pid, 0)
    assert (run.path / rundir.LIVE).exists()
    run.remove()
    assert not run.path.exists()
