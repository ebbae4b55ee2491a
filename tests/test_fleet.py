"""Fleets: several devices per board, leased across runs, infrastructure kept apart from failures.

The quick tests use `host` devices (the local machine, named twice in a fleet file);
the slow ones real sshds on loopback as the Raspberry Pis of a farm.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import QUIET, private_tmpdir

from pytest_ondevice.config.schema import ConfigError
from pytest_ondevice.farm import fleet
from pytest_ondevice.farm.labgrid_places import PlaceError, address_of

SLEEPER = """
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Sleeps) {{ usleep({ms} * 1000); TF_LITE_MICRO_EXPECT_EQ(1, 1); }}
    TF_LITE_MICRO_TEST(Adds) {{ TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }}
    TF_LITE_MICRO_TESTS_END
"""

HOST_FLEET = """
    [fleet]
    lease_dir = "leases"

    [device.h1]
    board = "host"
    tags = ["rack-a"]

    [device.h2]
    board = "host"
    tags = ["rack-b"]
"""


def sleepers(project, names, ms: int = 200) -> None:
    for name in names:
        project.write(f"{name}_test.c", SLEEPER.format(ms=ms))


def junit_cases(path: Path) -> dict[str, dict[str, str]]:
    """Per test case: its properties, and "outcome"."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = tag
        props["outcome"] = outcome
        cases[f"{case.get('classname')}.{case.get('name')}"] = props
    return cases


# -- the fleet file ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[device.p1]\nbaord = "rpi"\n', "fleet.toml: unknown key 'device.p1.baord' (did you mean 'device.p1.board'?)"),
        ('[device.p1]\naddress = "x"\n', "fleet.toml: device 'p1': 'board' is missing"),
        ('[device.p1]\nboard = "rpo"\n', "fleet.toml: device 'p1': unknown board 'rpo'"),
        ('[device.p1]\nboard = "rpi"\njobs = 0\n', "fleet.toml: device 'p1': 'jobs' must be a whole number >= 1"),
        ('[device.p1]\nboard = "rpi"\njobs = "2"\n', "fleet.toml: 'device.p1.jobs' must be an integer, not a string"),
        ('[device."p 1"]\nboard = "rpi"\n', "fleet.toml: device 'p 1': a device name may hold letters"),
        ('[fleet]\nquarantine_after = 0\n[device.p1]\nboard = "rpi"\n', "'fleet.quarantine_after' must be a whole"),
        ("[fleet]\n", "fleet.toml: no devices"),
        ("[device.p1\n", "fleet.toml: not valid TOML"),
        ('[device.p1]\nboard = "rpi"\nlabgrid_place = 3\n', "'device.p1.labgrid_place' must be a string"),
        ('[device.p1]\nboard = "rpi"\nlabgrid_plac = "x"\n', "did you mean 'device.p1.labgrid_place'?"),
        ('[device.p1]\nboard = "rpi"\nlabgrid_resource = "X"\n', "'labgrid_resource' without 'labgrid_place'"),
        ('[device.p1]\nboard = "rpi"\nlabgrid_place = "x"\njobs = 2\n', "'jobs' must be 1 for a labgrid place"),
        ('[fleet]\nlabgrid_coordinator = 1\n[device.p1]\nboard = "rpi"\n', "'fleet.labgrid_coordinator' must"),
    ],
)
def test_a_fleet_file_error_names_the_file_the_device_and_the_key(tmp_path, text, message):
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        fleet.load(path, ["rpi", "host"])
    assert message in str(e.value)


def test_device_for_every_board_or_for_one():
    assert fleet.split_device_options(["qemu"], ["rpi", "host"]) == ("qemu", {})
    assert fleet.split_device_options(["rpi=pi4.lab", "qemu"], ["rpi", "host"]) == ("qemu", {"rpi": "pi4.lab"})
    # an address holding '=' is not mistaken for a board's name
    assert fleet.split_device_options(["tcp=x"], ["rpi"]) == ("tcp=x", {})
    with pytest.raises(ConfigError, match="--device is given twice"):
        fleet.split_device_options(["a", "b"], ["rpi"])
    devices = fleet.implicit(["rpi", "host"], ["rpi=pi4.lab"]).devices
    assert [(d.board, d.address) for d in devices] == [("rpi", "pi4.lab"), ("host", None)]


def test_a_bad_fleet_is_a_usage_error_before_anything_is_built(project):
    project.write("farm.toml", '[device.p1]\nboard = "nosuch"\n')
    sleepers(project, ["a"])
    result = project.pytester.runpytest("--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*farm.toml: device 'p1': unknown board 'nosuch'*"])
    assert not (project.path / "_build").exists()


def test_device_and_fleet_together_is_a_usage_error(project):
    project.write("farm.toml", HOST_FLEET)
    result = project.pytester.runpytest("--fleet=farm.toml", "--device=x", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--device and --fleet together*"])


def test_a_boards_device_placed_by_board_equals_where(project):
    """--device=BOARD=WHERE moves one board of a matrix; a form its transport does not take says so."""
    sleepers(project, ["a"], ms=1)
    result = project.run("--device=host=somewhere", "a_test.c")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--device=somewhere names no device of board host*"])


# -- spreading and leasing --------------------------------------------------------------


def test_binaries_are_spread_over_the_boards_devices_and_each_runs_once(project):
    project.write("farm.toml", HOST_FLEET)
    sleepers(project, ["a", "b", "c", "d"])
    result = project.pytester.runpytest("--fleet=farm.toml", "--junitxml=j.xml", "-p", "no:cacheprovider", *QUIET)
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["ondevice build:*; 4 binaries run*"])
    cases = junit_cases(project.path / "j.xml")
    by_binary = {}
    for name, props in cases.items():
        by_binary.setdefault(name.split(".")[0], set()).add(props["device"])
    assert all(len(devices) == 1 for devices in by_binary.values()), by_binary  # one deploy per binary
    assert set().union(*by_binary.values()) == {"h1", "h2"}  # both devices worked


def test_a_fleet_tag_selects_devices(project):
    project.write("farm.toml", HOST_FLEET)
    sleepers(project, ["a", "b"], ms=1)
    result = project.pytester.runpytest(
        "--fleet=farm.toml", "--fleet-tag=rack-b", "--junitxml=j.xml", "-p", "no:cacheprovider", *QUIET
    )
    result.assert_outcomes(passed=4)
    assert {p["device"] for p in junit_cases(project.path / "j.xml").values()} == {"h2"}


def test_with_xdist_each_binary_runs_once_on_one_worker(project):
    project.write("farm.toml", HOST_FLEET)
    sleepers(project, ["a", "b", "c", "d"], ms=50)
    result = project.pytester.runpytest_subprocess(
        "--fleet=farm.toml", "-n", "2", "--junitxml=j.xml", "-p", "no:cacheprovider", *QUIET
    )
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["ondevice build:*; 4 binaries run*(by 2 workers)*"])
    cases = junit_cases(project.path / "j.xml")
    assert {p["device"] for p in cases.values()} == {"h1", "h2"}


STAMPED = """
    #include <stdio.h>
    #include <unistd.h>
    #include "micro_test.h"
    static void stamp(const char *what) {{
      FILE *f = fopen("{log}", "a"); fprintf(f, "{name} %s\\n", what); fclose(f);
    }}
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Works) {{ stamp("start"); usleep({ms} * 1000); stamp("end"); }}
    TF_LITE_MICRO_TEST(Adds) {{ TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }}
    TF_LITE_MICRO_TESTS_END
"""


def test_a_worker_out_of_work_takes_the_binary_queued_behind_a_long_one(project):
    """a and c are long, the rest short. The first worker gets a with c queued behind it;
    the second runs b, d and e, then takes c back (xdist's steal) and runs it while a still
    runs, instead of leaving c to start when a ends."""
    project.write("farm.toml", HOST_FLEET)
    log = project.path / "stamps.log"
    for name, ms in [("a", 4000), ("b", 50), ("c", 1500), ("d", 50), ("e", 50)]:
        project.write(f"{name}_test.c", STAMPED.format(log=log, name=name, ms=ms))
    result = project.pytester.runpytest_subprocess("--fleet=farm.toml", "-n", "2", "-p", "no:cacheprovider", *QUIET)
    result.assert_outcomes(passed=10)
    stamps = log.read_text().splitlines()
    assert stamps.index("c start") < stamps.index("a end"), stamps


ONE_DEVICE = """
    [fleet]
    lease_dir = "leases"

    [device.shared-pi]
    board = "host"
"""


def _background_run(project, test: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--fleet=farm.toml", test, "-p", "no:cacheprovider", *QUIET, *args],
        cwd=project.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=private_tmpdir(project.path),
    )


def _wait_for_lease(project, name: str = "shared-pi") -> str:
    lock = project.path / "leases" / f"{name}.0.lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if lock.exists() and lock.read_text().strip():
            return lock.read_text()
        time.sleep(0.05)
    raise AssertionError("the first run never leased the device")


def test_two_runs_one_device_the_second_waits_saying_who_holds_it(project):
    project.write("farm.toml", ONE_DEVICE)
    sleepers(project, ["a"], ms=3000)
    sleepers(project, ["b"], ms=1)
    first = _background_run(project, "a_test.c")
    try:
        holder = _wait_for_lease(project)
        assert f"pid {first.pid} on " in holder
        started = time.monotonic()
        second = project.pytester.runpytest("--fleet=farm.toml", "b_test.c", "-p", "no:cacheprovider", *QUIET)
        waited = time.monotonic() - started
    finally:
        out = first.communicate(timeout=60)[0]
    assert first.returncode == 0, out
    second.assert_outcomes(passed=2)
    second.stdout.fnmatch_lines(
        [f"ondevice: waiting for a device of board host: shared-pi is leased by pid {first.pid} on *"]
    )
    assert waited > 1.0  # it really waited for the first run's binary


TWO_SLOT_FLEET = """
    [fleet]
    lease_dir = "leases"

    [device.h1]
    board = "host"
    jobs = 2

    [device.h2]
    board = "host"
    jobs = 2
    tags = ["busy"]
"""


def test_a_binary_goes_to_an_idle_device_before_a_second_slot_of_a_busy_one(project):
    """Two devices of two slots (as two Pis at device_jobs = 2): while another run's binary
    holds h2, this run's binary runs on the idle h1, though h2 comes first in its turn and
    has a free slot."""
    project.write("farm.toml", TWO_SLOT_FLEET)
    sleepers(project, ["a"], ms=4000)
    sleepers(project, ["b"], ms=1)
    first = _background_run(project, "a_test.c", "--fleet-tag=busy")
    try:
        _wait_for_lease(project, "h2")
        second = project.pytester.runpytest(
            "--fleet=farm.toml", "b_test.c", "--junitxml=j.xml", "-p", "no:cacheprovider", *QUIET
        )
    finally:
        out = first.communicate(timeout=60)[0]
    assert first.returncode == 0, out
    second.assert_outcomes(passed=2)
    assert {p["device"] for p in junit_cases(project.path / "j.xml").values()} == {"h1"}


def test_lease_timeout_gives_up_with_an_error_not_a_failure(project):
    project.write("farm.toml", ONE_DEVICE)
    sleepers(project, ["a"], ms=4000)
    sleepers(project, ["b"], ms=1)
    first = _background_run(project, "a_test.c")
    try:
        _wait_for_lease(project)
        second = project.pytester.runpytest(
            "--fleet=farm.toml", "b_test.c", "--lease-timeout=0.5", "-p", "no:cacheprovider", *QUIET
        )
    finally:
        first.communicate(timeout=60)
    second.assert_outcomes(errors=2)
    second.stdout.fnmatch_lines(
        [f"*no device of board host came free within --lease-timeout=0.5 s; shared-pi is leased by pid {first.pid}*"]
    )


def test_a_killed_holder_leaves_no_stale_lease(project):
    """SIGKILL leaves no chance to clean up; the kernel drops the lock with the process."""
    project.write("farm.toml", ONE_DEVICE)
    sleepers(project, ["a"], ms=30000)
    sleepers(project, ["b"], ms=1)
    first = _background_run(project, "a_test.c")
    _wait_for_lease(project)
    os.killpg(first.pid, signal.SIGKILL)  # pytest and the binary it runs
    first.communicate(timeout=30)
    started = time.monotonic()
    second = project.pytester.runpytest(
        "--fleet=farm.toml", "b_test.c", "--lease-timeout=5", "-p", "no:cacheprovider", *QUIET
    )
    second.assert_outcomes(passed=2)
    assert time.monotonic() - started < 5


def test_doctor_names_a_missing_toolchain_with_its_package_and_fails(project):
    project.write(
        "boards/ghost.toml",
        'extends = "host"\n[toolchain]\ngnu = "nosuch-linux-gnu"\ndebian_package = "gcc-nosuch-linux-gnu"\n',
    )
    project.write("farm.toml", '[device.g1]\nboard = "ghost"\n[device.h1]\nboard = "host"\n')
    result = project.pytester.runpytest("--ondevice-doctor", "--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "ghost * missing: *gcc-nosuch-linux-gnu*",
            "host * found: cc *",
            "h1 * host * (board default) * reachable*",
            "doctor: 1 board(s) cannot run: ghost",
        ]
    )


def test_an_xdist_worker_killed_while_holding_the_lease_does_not_block_the_device(project, monkeypatch):
    """The binary kills the worker that runs it (its parent) while that worker holds the
    fleet's one device: xdist replaces the worker, and the device is free at once."""
    project.write("farm.toml", ONE_DEVICE)
    project.write(
        "a_killer_test.c",
        """
        #include <signal.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(KillsItsWorker) { kill(getppid(), SIGKILL); sleep(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    sleepers(project, ["b", "c", "d"], ms=300)
    tmp = Path(private_tmpdir(project.path)["TMPDIR"])
    monkeypatch.setenv("TMPDIR", str(tmp))
    started = time.monotonic()
    result = project.pytester.runpytest_subprocess(
        "--fleet=farm.toml", "-n", "2", "--lease-timeout=20", "-p", "no:cacheprovider", *QUIET
    )
    assert time.monotonic() - started < 20
    result.stdout.fnmatch_lines(["*worker*crashed*KillsItsWorker*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 6 and outcomes.get("failed") == 1, outcomes
    assert "error" not in outcomes and "errors" not in outcomes
    # the killed worker's local run dirs were in the run's dir, which the controller removed
    assert not list(tmp.iterdir())


def test_a_labgrid_place_gives_the_address_through_its_resource(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(
        '[fleet]\nlabgrid_coordinator = "lab:20408"\n'
        '[device.p1]\nboard = "rpi"\nlabgrid_place = "rpi-1"\n'
        '[device.p2]\nboard = "rpi"\nlabgrid_place = "rpi-2"\naddress = "{address}"\n'
        '[device.p3]\nboard = "rpi"\nlabgrid_place = "rpi-3"\nlabgrid_resource = "USBSerialPort"\n'
    )
    loaded = fleet.load(path, ["rpi"])
    assert loaded.coordinator == "lab:20408"
    p1, p2, p3 = loaded.devices
    assert (p1.place, p1.resource, p1.jobs) == ("rpi-1", "NetworkService", 1)
    service = {"address": "10.0.0.7", "port": 2222, "username": "pi"}
    assert address_of(p1, service) == "pi@10.0.0.7:2222"
    assert address_of(p1, {"address": "10.0.0.7"}) == "10.0.0.7:22"
    assert address_of(p2, service) == "10.0.0.7"  # the fleet's template: an ssh_config alias
    with pytest.raises(PlaceError, match=r"say how a USBSerialPort resource is addressed"):
        address_of(p3, {"port": "/dev/ttyUSB0"})
    with pytest.raises(PlaceError, match=r"needs 'serial' \(the NetworkService has address, port, username\)"):
        address_of(replace(p1, address="{serial}"), service)


def test_leases_fill_every_slot_name_their_holder_and_leave_no_name_behind(tmp_path):
    """Found missing by mutation testing: slots after a taken one, the holder's exact line, a
    nested lease dir, files any fleet user can open, and the name cleared at release."""
    from pytest_ondevice.farm.lease import Leases

    root = tmp_path / "farm" / "leases"  # its parent does not exist yet either
    pi = fleet.Device("pi-1", "rpi", jobs=2)
    mine = Leases(root, lambda d: d.jobs, "pid 1 on a (user ci)")
    (root / "pi-1.0.lock").write_text("pid 999 on gone (a much longer line left by a holder that died)\n")
    old = os.umask(0)
    try:
        first = mine.try_take(pi)
        second = mine.try_take(pi)
    finally:
        os.umask(old)
    assert (first.slot, second.slot) == (0, 1) and second.path == root / "pi-1.1.lock"
    assert mine.try_take(pi) is None  # both slots held
    assert (second.path.stat().st_mode & 0o777) == 0o666  # another user of the fleet can open it
    assert mine.holders(pi) == ["pid 1 on a (user ci)"] * 2
    first.release()
    assert mine.holders(pi) == ["pid 1 on a (user ci)"]  # slot 0 says nobody; slot 1 is still named
    assert mine.describe([pi]) == "pi-1 is leased by pid 1 on a (user ci)"
    second.release()
    assert mine.holders(pi) == [] and mine.describe([pi]) == "pi-1 is leased by another process"


def test_a_lease_file_that_cannot_be_opened_is_an_error_naming_it_and_the_fix(tmp_path):
    from pytest_ondevice.transports import InfrastructureError

    from pytest_ondevice.farm.lease import Leases

    (tmp_path / "pi-1.0.lock").mkdir()
    with pytest.raises(InfrastructureError) as e:
        Leases(tmp_path, lambda d: 1, "me").try_take(fleet.Device("pi-1", "rpi"))
    assert str(e.value) == (
        f"cannot open the lease file {tmp_path}/pi-1.0.lock: Is a directory (is the lease directory writable by "
        "every user of the fleet?)"
    )
