"""A farm of Raspberry Pis (real sshds on loopback): a device that dies is set aside, its
binaries run on the others, and nothing that is not a test failure is reported as one."""

from __future__ import annotations

import threading
import time

import fabric  # noqa: F401 - imported once, outside pytester's in-process runs
import paramiko  # noqa: F401
import pytest
from conftest import QUIET
from support.sshd import BinfmtLease, free_port, host_blocks, loopback_pis
from test_fleet import SLEEPER, junit_cases

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def device_board():
    with BinfmtLease() as binfmt:
        wrapped = 'extends = "rpi"\n[transport]\nexec_wrapper = "qemu-aarch64"\n'
        yield ("rpi", "") if binfmt else ("rpi-wrapped", wrapped)


@pytest.fixture
def farm(project, device_board):
    """Two live Pis (pi-1, pi-2), each its own sshd and account, in one ssh_config."""
    with loopback_pis(2) as servers:
        yield from _farm(project, device_board, servers)


def _farm(project, device_board, servers):
    config = project.path / "ssh_config"
    config.write_text(host_blocks(servers) + f"\nHost dead-pi\n    HostName 127.0.0.1\n    Port {free_port()}\n")
    board, board_file = device_board
    if board_file:
        project.write(f"boards/{board}.toml", board_file)
    project.pytester.makeini(
        "\n".join(
            [
                "[pytest]",
                f"ondevice_build_dir = {project.path / '_build'}",
                f"ondevice_cache_dir = {project.path / '_cache'}",
                f"ondevice_ssh_config = {config}",
                "ondevice_boards = boards",
            ]
        )
        + "\n"
    )
    project.servers = servers
    project.board = board
    yield project


def fleet_file(farm, *devices: str, quarantine_after: int = 2) -> None:
    lines = [f'[fleet]\nlease_dir = "leases"\nquarantine_after = {quarantine_after}\n']
    for name in devices:
        lines.append(f'[device.{name}]\nboard = "{farm.board}"\naddress = "{name}"\n')
    farm.write("farm.toml", "\n".join(lines))


def run(farm, *args):
    return farm.pytester.runpytest("--fleet=farm.toml", "--junitxml=j.xml", "-p", "no:cacheprovider", *QUIET, *args)


def test_an_unreachable_device_is_quarantined_and_its_share_runs_on_the_others(farm):
    # one strike is enough here: once the live Pis are connected they are preferred, so how
    # often the dead one is tried again depends on timing
    fleet_file(farm, "pi-1", "dead-pi", "pi-2", quarantine_after=1)
    for name in "abcdef":
        farm.write(f"{name}_test.c", SLEEPER.format(ms=100))
    result = run(farm)
    result.assert_outcomes(passed=12)  # not one failure, not one error
    result.stdout.fnmatch_lines(["*ondevice quarantine*", "dead-pi: set aside after * infrastructure errors*"])
    devices = {p["device"] for p in junit_cases(farm.path / "j.xml").values()}
    assert devices == {"pi-1", "pi-2"}


def test_a_device_killed_mid_run_the_run_finishes_and_its_binary_reruns_elsewhere(farm):
    fleet_file(farm, "pi-1", "pi-2", quarantine_after=1)
    farm.write("slow_test.c", SLEEPER.format(ms=3000))
    for name in "abc":
        farm.write(f"{name}_test.c", SLEEPER.format(ms=100))
    killed = []

    def kill_the_one_running_slow():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for server in farm.servers:
                if "slow_test" in server.ps():
                    server.kill()
                    killed.append(server.alias)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_one_running_slow)
    killer.start()
    started = time.monotonic()
    result = run(farm, "--device-timeout=30")
    killer.join()
    assert killed, "the slow binary never ran"
    assert time.monotonic() - started < 60
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*ondevice quarantine*", f"{killed[0]}: set aside after * infrastructure errors*"])
    cases = junit_cases(farm.path / "j.xml")
    slow = [p for name, p in cases.items() if name.startswith("slow_test")]
    survivor = ({"pi-1", "pi-2"} - set(killed)).pop()
    assert {p["device"] for p in slow} == {survivor}
    assert all(killed[0] in p["retried_after"] for p in slow)  # the report says what happened first


def test_a_board_whose_every_device_is_down_ends_at_once_with_one_clear_error(farm):
    for server in farm.servers:
        server.kill()
    fleet_file(farm, "pi-1", "pi-2")
    for name in "abcd":
        farm.write(f"{name}_test.c", SLEEPER.format(ms=1))
    started = time.monotonic()
    result = run(farm)
    assert time.monotonic() - started < 60  # no hang waiting for a device that will not come
    result.assert_outcomes(errors=8)
    text = result.stdout.str()
    assert "failed" not in text.splitlines()[-1]
    assert f"every device of board {farm.board} is quarantined for the rest of this run" in text
    result.stdout.fnmatch_lines(["*pi-1: set aside after * infrastructure errors*", "*pi-2: set aside after *"])


def test_doctor_says_which_device_answers_and_why_not(farm):
    fleet_file(farm, "pi-1", "dead-pi")
    result = farm.pytester.runpytest("--ondevice-doctor", "--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == 10  # the board can run (one of its devices answers), but a device cannot be used
    result.stdout.fnmatch_lines(
        [
            f"{farm.board} * found: aarch64-linux-gnu-gcc*ssh*",
            "device * board * address * status * why / how to fix",
            "pi-1 * pi-1 * reachable * opened in *",
            "dead-pi * dead-pi * unreachable * cannot connect*",
            "doctor: every board can run, but 1 of 2 device(s) cannot be used: dead-pi (exit status 10)",
        ]
    )
    fleet_file(farm, "dead-pi")
    result = farm.pytester.runpytest("--ondevice-doctor", "--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"doctor: 1 board(s) cannot run: {farm.board}"])
