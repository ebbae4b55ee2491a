"""The fleet's retry rule (run/failover.py, the loop in run/life.py) on its own: which device a binary runs on after an
error, which errors strike a device, when the binary itself is the suspect. The devices
are stand-ins that answer as scripted; the quarantine is the real one. End to end, over
real sshd devices: tests/test_rerun.py and tests/test_fleet_ssh.py."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from pytest_ondevice.transports import InfrastructureError

from pytest_ondevice.farm.fleet import Device
from pytest_ondevice.farm.labgrid_places import PlaceError
from pytest_ondevice.farm.quarantine import Quarantine
from pytest_ondevice.run import life
from pytest_ondevice.run.results import BinaryResult, InfraError, Ran, Rerun
from pytest_ondevice.run.spec import BinarySpec

SPEC = BinarySpec(board=SimpleNamespace(name="pi"), source=Path("a_test.c"), rel="a_test.c", cases=("A",))
ARTIFACT = SimpleNamespace(path=Path("/bin/a_test.c.elf"), sha256="0" * 64)


class Lease:
    def __init__(self, device: Device) -> None:
        self.device = device

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        pass


class Devices:
    """The part of farm.devices.Devices the rule uses, answering as a test scripts it."""

    def __init__(self, tmp_path: Path, names: list[str], retries: int = 2, after: int = 2) -> None:
        self.devices = [Device(n, "pi") for n in names]
        self.fleet = SimpleNamespace(retries=retries)
        self.quarantine = Quarantine(tmp_path, after)
        self.healthy: dict[str, bool | None] = {}
        self.refuse: dict[str, Exception] = {}  # lease errors by device name
        self.leased: list[str] = []
        self.forgotten: list[str] = []

    def for_board(self, board: str) -> list[Device]:
        return self.devices

    def board_down(self, board: str) -> str:
        return f"every device of board {board} is quarantined"

    def lease(self, candidates: list[Device]):
        device = candidates[0]
        if device.name in self.refuse:
            raise self.refuse[device.name]
        self.leased.append(device.name)
        return Lease(device)

    def follow(self, device: Device) -> None:
        pass

    def health(self, device: Device) -> bool | None:
        return self.healthy.get(device.name)

    def forget(self, device: Device) -> None:
        self.forgotten.append(device.name)


def error(message: str, started: bool = False, transient: bool = False) -> InfraError:
    return InfraError(message=message, log_path=Path("a.log"), binary_started=started, transient=transient)


def ran(verdicts: str = "ok") -> Ran:
    return Ran(verdicts=verdicts)  # type: ignore[arg-type]  # what the rule never reads


def place(
    devices: Devices, *results: BinaryResult, stopping: threading.Event | None = None, spec: BinarySpec = SPEC
) -> BinaryResult:
    """The binary placed by life.py's loop, each lease's run answering as scripted."""
    queue = list(results)
    engine = SimpleNamespace(devices=devices, stopping=stopping or threading.Event())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(life, "_on_leased", lambda *args: queue.pop(0))
        return life._on_a_device(engine, spec, ARTIFACT, 1.0, None)  # type: ignore[arg-type]


def test_a_pass_on_the_first_device_is_just_that(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"])
    result = place(devices, ran("ok"))
    assert result.verdicts == "ok" and result.retried == () and result.reruns == ()
    assert devices.leased == ["pi1"]


def test_an_error_of_the_devices_own_strikes_it_and_the_next_device_runs_the_binary(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"], after=1)
    result = place(devices, error("pi1: push failed: disk full"), ran("ok"))
    assert result.verdicts == "ok"
    assert result.retried == ("pi1: pi1: push failed: disk full",)
    assert result.reruns == (Rerun("pi1", "pi1: push failed: disk full", Path("a.log"), False),)
    assert devices.quarantine.reasons("pi1") == ["pi1: push failed: disk full"]
    assert devices.forgotten == ["pi1"]  # out now: its connection is closed


def test_a_lost_link_after_which_the_device_answers_is_no_strike(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"], after=1)
    devices.healthy = {"pi1": True}
    result = place(devices, error("link lost", transient=True), ran("ok"))
    assert result.verdicts == "ok"
    assert devices.quarantine.reasons("pi1") == [] and devices.forgotten == []


def test_a_lost_link_after_which_the_device_is_gone_is_its_strike(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"], after=1)
    devices.healthy = {"pi1": False}
    place(devices, error("link lost", transient=True), ran("ok"))
    assert devices.quarantine.is_out("pi1")


def test_where_health_cannot_be_told_an_error_counts_once_two_binaries_met_it(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"], after=1)
    devices.healthy = {"pi1": None}
    place(devices, error("cut short", started=True), ran("ok"))
    assert not devices.quarantine.is_out("pi1")  # one binary: it may be the binary's doing
    other = BinarySpec(board=SimpleNamespace(name="pi"), source=Path("b_test.c"), rel="b_test.c", cases=("B",))
    place(devices, error("cut short", started=True), ran(), spec=other)
    assert devices.quarantine.is_out("pi1")


def test_a_binary_that_breaks_two_healthy_devices_is_the_suspect_and_goes_no_further(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2", "pi3"], after=1)
    devices.healthy = {"pi1": True, "pi2": True}
    result = place(devices, error("pi1 dropped", started=True), error("pi2 dropped", started=True))
    assert devices.leased == ["pi1", "pi2"]  # not moved to pi3
    assert result.message.startswith("a_test.c is the suspect, not the devices: it broke off on pi1 and pi2")
    assert result.message.endswith(
        "each of which answered a health check right after (pi1: pi1 dropped; pi2: pi2 dropped). It was not moved "
        "to another device, and no device was struck for it"
    )
    assert devices.quarantine.suspects() == {"pi:a_test.c"}
    assert [r.device for r in result.reruns] == ["pi1"]  # the last attempt is the error itself


def test_every_device_failing_names_each_in_the_error(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2", "pi3"], retries=5)
    result = place(devices, error("e1"), error("e2"), error("e3"))
    assert result.message == "tried on 3 device(s): pi1: e1; pi2: e2; pi3: e3"
    assert [r.device for r in result.reruns] == ["pi1", "pi2"]  # the last attempt is the error itself


def test_a_suspects_errors_never_count_against_a_device_once_it_is_accused(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"], after=1)
    devices.healthy = {"pi1": None, "pi2": None}  # transports that cannot tell
    place(devices, error("cut", started=True), error("cut", started=True))
    assert devices.quarantine.suspects() == {"pi:a_test.c"}
    other = BinarySpec(board=SimpleNamespace(name="pi"), source=Path("b_test.c"), rel="b_test.c", cases=("B",))
    place(devices, error("cut", started=True), ran(), spec=other)
    assert not devices.quarantine.is_out("pi1")  # b's alone: a's strike there was withdrawn


def test_retries_bound_the_devices_tried(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2", "pi3"], retries=1)
    result = place(devices, error("e1"), error("e2"), ran("never asked"))
    assert devices.leased == ["pi1", "pi2"] and result.message.startswith("tried on 2 device(s)")


def test_one_device_is_not_retried_and_its_error_is_its_own_words(tmp_path):
    devices = Devices(tmp_path, ["pi1"], retries=3)
    result = place(devices, error("e1"))
    assert result.message == "e1" and devices.leased == ["pi1"]


def test_a_board_whose_devices_are_all_out_is_one_error_saying_so(tmp_path):
    devices = Devices(tmp_path, ["pi1"], after=1)
    devices.quarantine.strike("pi1", "dead")
    assert place(devices).message == "every device of board pi is quarantined"


def test_an_unusable_labgrid_place_is_struck_and_the_next_device_used(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"], after=1)
    devices.refuse = {"pi1": PlaceError(devices.devices[0], "place pi1 has no resource")}
    result = place(devices, ran("ok"))
    assert result.verdicts == "ok" and devices.leased == ["pi2"]
    assert devices.quarantine.reasons("pi1") == ["place pi1 has no resource"]
    assert result.retried == ("pi1: place pi1 has no resource",)
    assert result.reruns == (Rerun("pi1", "place pi1 has no resource", None, False),)  # nothing ran there


def test_every_place_unusable_is_an_error_naming_each(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"])
    devices.refuse = {
        n: PlaceError(d, f"place {n} is gone") for n, d in (("pi1", devices.devices[0]), ("pi2", devices.devices[1]))
    }
    result = place(devices)
    assert result.message == "tried on 2 device(s): pi1: place pi1 is gone; pi2: place pi2 is gone"


def test_no_device_to_lease_first_is_the_error_and_after_a_failure_is_added_to_it(tmp_path):
    devices = Devices(tmp_path, ["pi1", "pi2"])
    devices.refuse = {"pi1": InfrastructureError("lease timed out")}
    assert place(devices).message == "lease timed out"
    devices = Devices(tmp_path / "2", ["pi1", "pi2"])
    devices.refuse = {"pi2": InfrastructureError("lease timed out")}
    result = place(devices, error("e1"))
    assert result.message == "tried on 1 device(s): pi1: e1; then no other device: lease timed out"


@pytest.mark.parametrize("started", [False, True])
def test_a_run_that_is_ending_moves_the_binary_nowhere(tmp_path, started):
    devices = Devices(tmp_path, ["pi1", "pi2"])
    stopping = threading.Event()
    stopping.set()
    devices.healthy = {"pi1": True}
    result = place(devices, error("stopped", started=started), ran("never"), stopping=stopping)
    assert devices.leased == ["pi1"] and result.message.startswith("tried on 1 device(s)")
