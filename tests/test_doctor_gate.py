"""`pytest-ondevice doctor` as the nightly job's gate: its exit status is 0 only when
everything a run needs is there (every device, the build cache, the build dir, the lease
directory and each lease file); a dead device is its own status, a board that cannot run
another. Unreachable devices are SSH addresses on loopback ports nothing listens on."""

from __future__ import annotations

import shutil

import pytest
from conftest import QUIET

DEAD = "ci@127.0.0.1:1"  # nothing listens on port 1: refused at once


def _doctor(project, *args: str) -> pytest.RunResult:
    return project.pytester.runpytest("--ondevice-doctor", "-p", "no:cacheprovider", *QUIET, *args)


def _farm(project, lease_dir: str | None = None, **devices: str | None) -> None:
    """A fleet of rpi devices: name=address (None: run locally under qemu-user)."""
    head = f'[fleet]\nlease_dir = "{lease_dir}"\n' if lease_dir else ""
    body = "".join(
        f'[device.{name}]\nboard = "rpi"\naddress = "{where or "qemu"}"\n' for name, where in devices.items()
    )
    project.write("farm.toml", head + body)


@pytest.fixture
def rpi_tools():
    if not shutil.which("aarch64-linux-gnu-gcc") or not shutil.which("qemu-aarch64"):
        pytest.skip("the rpi board's toolchain or qemu-user is missing (scripts/setup.sh installs them)")


def test_three_of_four_devices_unreachable_is_a_failing_exit_status_naming_them(project, rpi_tools):
    _farm(project, **{"pi-1": None, "pi-2": DEAD, "pi-3": DEAD, "pi-4": DEAD})
    result = _doctor(project, "--fleet=farm.toml")
    assert result.ret == 10  # doctor.DEVICE_DOWN
    result.stdout.fnmatch_lines(
        [
            "pi-1 * rpi * qemu * reachable *",
            f"pi-2 * rpi * {DEAD} * unreachable * Connection refused*",
            "doctor: every board can run, but 3 of 4 device(s) cannot be used: pi-2, pi-3, pi-4 (exit status 10)",
        ]
    )


def test_every_device_down_is_still_a_board_that_cannot_run(project, rpi_tools):
    _farm(project, **{"pi-2": DEAD, "pi-3": DEAD})
    result = _doctor(project, "--fleet=farm.toml")
    assert result.ret == 1  # doctor.BOARD_DOWN
    result.stdout.fnmatch_lines(["doctor: 1 board(s) cannot run: rpi"])


def test_a_lease_dir_that_cannot_be_made_means_no_board_can_run(project):
    project.write("not-a-dir", "a file where the lease directory's parent should be\n")
    project.write("farm.toml", '[fleet]\nlease_dir = "not-a-dir/leases"\n[device.h1]\nboard = "host"\n')
    result = _doctor(project, "--fleet=farm.toml")
    assert result.ret == 1
    lease_dir = project.path / "not-a-dir" / "leases"
    result.stdout.fnmatch_lines(
        [
            "h1 * host * reachable *",
            f"lease dir * {lease_dir} * unusable * cannot create the lease directory {lease_dir}: Not a directory*",
            "doctor: no run can start here: the lease dir cannot be used (see above)",
            "doctor: 1 board(s) cannot run: host",
        ]
    )
    assert "every board can run" not in result.stdout.str()


def test_a_lease_file_that_cannot_be_opened_names_it(project):
    project.write("farm.toml", '[fleet]\nlease_dir = "leases"\n[device.h1]\nboard = "host"\njobs = 2\n')
    (project.path / "leases" / "h1.1.lock").mkdir(parents=True)  # in the way of the second slot's lock file
    result = _doctor(project, "--fleet=farm.toml")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [f"lease dir * unusable * cannot open the lease file {project.path}/leases/h1.1.lock: Is a directory*"]
    )


def test_an_unusable_build_cache_means_no_board_can_run(project, monkeypatch):
    project.write("cache-file", "a file, not a directory\n")
    monkeypatch.setenv("ONDEVICE_CACHE_DIR", str(project.path / "cache-file"))
    result = _doctor(project, "--board=host")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            f"build cache * {project.path}/cache-file * unusable * the cache dir {project.path}/cache-file *",
            "doctor: 1 board(s) cannot run: host",
        ]
    )


def test_an_unusable_build_dir_means_no_board_can_run(project):
    project.write("build-file", "a file, not a directory\n")
    project.pytester.makeini(
        f"[pytest]\nondevice_build_dir = {project.path / 'build-file' / 'b'}\n"
        f"ondevice_cache_dir = {project.path / '_cache'}\n"
    )
    result = _doctor(project, "--board=host")
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"build dir * unusable * {project.path}/build-file is not a directory*"])


def test_everything_usable_is_exit_status_0_with_every_check_listed(project):
    project.write("farm.toml", '[fleet]\nlease_dir = "leases"\n[device.h1]\nboard = "host"\n')
    result = _doctor(project, "--fleet=farm.toml")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "directory * path * status * why / how to fix",
            f"build cache * {project.path}/_cache * usable *",
            f"build dir * {project.path}/_build * usable *",
            f"lease dir * {project.path}/leases * usable *",
            "doctor: every board can run (1 device(s) checked)",
        ]
    )
    assert not list((project.path / "leases").glob("*.lock")) or all(
        p.read_text() == "" for p in (project.path / "leases").glob("*.lock")
    )  # doctor holds no lease and writes no holder: nobody waiting would name it


def test_a_device_of_a_broken_board_file_is_unusable_not_a_traceback(project):
    project.write("boards/mine.toml", 'extends = "host"\ntimeout = 0\n')
    project.write("farm.toml", '[device.m1]\nboard = "mine"\n[device.h1]\nboard = "host"\n')
    result = _doctor(project, "--fleet=farm.toml")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "mine * invalid board file * 'timeout' must be a number of seconds > 0, not 0",
            "m1 * mine * unusable * its board file cannot be used: *mine.toml: 'timeout' must be *",
            "h1 * host * reachable *",
            "doctor: 1 board(s) cannot run: mine",
        ]
    )
    text = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in text and "INTERNALERROR" not in text
