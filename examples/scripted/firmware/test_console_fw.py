"""A firmware driven through its console: flash it, wait for the banner, send commands,
expect the replies. Runs on boards whose runtime reads the UART (bluepill-qemu-uart under
QEMU; a Blue Pill through SWD with a USB-serial adapter: --console=uart:/dev/ttyUSB0)."""

import pytest

pytestmark = pytest.mark.board("bluepill-qemu-uart", "bluepill-swd", "bluepill")


@pytest.fixture
def console(device):
    con = device.flash("console_fw.c")  # beside this file
    con.expect("console firmware v1 ready", timeout=10)
    return con


def command(console, line: str, reply: str) -> str:
    console.expect_exact("> ")
    console.sendline(line)
    console.expect(reply + r"\r?\n")
    return console.match.group(1) if console.match.groups() else console.match.group(0)


def test_ping(console):
    command(console, "ping", "pong")


@pytest.mark.parametrize(("a", "b"), [(2, 40), (-5, 3), (1000000, 1)])
def test_add(console, a, b):
    assert int(command(console, f"add {a} {b}", r"= (-?\d+)")) == a + b


def test_unknown_command_is_named(console):
    assert command(console, "reboot", r"unknown command: (\w+)") == "reboot"


def test_quit_ends_the_firmware_with_its_status(console):
    command(console, "quit", "bye")
    assert console.wait(10) == 7


def test_reset_starts_the_firmware_again(device, console):
    command(console, "add 1 1", r"= (\d+)")
    again = device.reset()
    again.expect("console firmware v1 ready", timeout=10)
    command(again, "ping", "pong")
