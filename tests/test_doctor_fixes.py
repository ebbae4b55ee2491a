"""What doctor (and a run) says to do: a board's default SSH host that no `Host` block
gives an address, and a --device that only some boards of a matrix take."""

from __future__ import annotations

import socket

import pytest
from conftest import QUIET


def _doctor(project, *args: str) -> pytest.RunResult:
    return project.pytester.runpytest("--ondevice-doctor", "-p", "no:cacheprovider", *QUIET, *args)


@pytest.fixture
def no_ssh_config(tmp_path, monkeypatch):
    """A user whose ~/.ssh/config has no `Host rpi` (and a name `rpi` that does not resolve)."""
    pytest.importorskip("fabric", reason="fabric is not installed: pip install -e '.[ssh]' (scripts/setup.sh does)")
    try:
        found = socket.getaddrinfo("rpi", 22)
    except OSError:
        pass
    else:  # a machine beside a real Pi, or an /etc/hosts naming one: the unknown host these tests need is known
        pytest.skip(
            f"the name `rpi` resolves on this machine (to {found[0][4][0]}), and these tests need a board "
            "default host that does not: run them where `rpi` is in neither /etc/hosts nor DNS"
        )
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/config").write_text("Host other\n    HostName 192.0.2.1\n")
    monkeypatch.setenv("HOME", str(home))


FIX = (
    "rpi is board rpi's default host, an ssh alias, and ~/.ssh/config has no `Host rpi` with its HostName: "
    "add one (Host rpi, HostName ADDRESS, User USER, IdentityFile ~/.ssh/KEY), "
    "or give the address: --device=rpi=USER@ADDRESS"
)


def test_doctor_says_what_to_add_when_no_host_block_names_the_boards_default_host(project, no_ssh_config):
    result = _doctor(project, "--board=rpi")
    assert result.ret == 1  # doctor.BOARD_DOWN: its only device
    result.stdout.fnmatch_lines([f"rpi * rpi * (board default) * unreachable *cannot connect*; {FIX}"])


def test_a_run_says_it_too_in_full_once(project, no_ssh_config):
    project.write(
        "a_test.c",
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
        "TF_LITE_MICRO_TEST(A) { TF_LITE_MICRO_EXPECT(1); }\n"
        "TF_LITE_MICRO_TEST(B) { TF_LITE_MICRO_EXPECT(1); }\nTF_LITE_MICRO_TESTS_END\n",
    )
    result = project.run(board="rpi")
    result.assert_outcomes(errors=2)
    # the items' reports: the short summary repeats them, whole where CI is set (pytest cuts them only on a terminal)
    assert result.stdout.str().split("short test summary info")[0].count(FIX) == 1


@pytest.mark.parametrize("doctor", [False, True], ids=["run", "doctor"])
def test_a_device_only_some_boards_of_a_matrix_take_suggests_board_equals_device(project, doctor):
    args = ("--board=host,rpi", "--device=qemu")
    result = _doctor(project, *args) if doctor else project.pytester.runpytest(*args, "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stdout.str() + result.stderr.str()  # doctor prints it, a run's usage error goes to stderr
    assert (
        "--device=qemu names a device of board rpi only, and board host takes no such --device: "
        "to place it alone, write --device=rpi=qemu"
    ) in said


def test_a_device_every_board_of_a_matrix_takes_is_no_error(project):
    project.write(
        "a_test.c",
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
        "TF_LITE_MICRO_TEST(A) { TF_LITE_MICRO_EXPECT(1); }\nTF_LITE_MICRO_TESTS_END\n",
    )
    placed = project.pytester.runpytest("--board=host,rpi", "--device=rpi=qemu", "-p", "no:cacheprovider", *QUIET)
    placed.assert_outcomes(passed=2)
