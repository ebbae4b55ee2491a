"""A firmware driven through its console: flash it, wait for the banner, send commands,
expect the replies. Runs on bare-metal boards whose runtime reads the UART (bluepill-qemu-uart
under QEMU; a Blue Pill through SWD with a USB-serial adapter, --console=uart:/dev/ttyUSB0,
on a board file that adds runtime/cortex-m/uart_stm32.c); skipped elsewhere, saying why."""

import pytest

pytestmark = pytest.mark.board(kind="baremetal")


@pytest.fixture
def uart_board(device):
    """A board whose runtime reads its UART (runtime/cortex-m/uart_stm32.c gives ondevice_read)."""
    if not any("uart_stm32" in str(part) for part in device.board.toolchain.runtime):
        pytest.skip(
            f"{device.board.name}'s runtime does not read a UART: use bluepill-qemu-uart, or a board of yours "
            "with runtime/cortex-m/uart_stm32.c in its toolchain.runtime"
        )
    return device


@pytest.fixture
def console(uart_board):
    con = uart_board.flash("console_fw.c")  # beside this file
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


def test_reset_starts_the_firmware_again(uart_board, console):
    command(console, "add 1 1", r"= (\d+)")
    again = uart_board.reset()
    again.expect("console firmware v1 ready", timeout=10)
    command(again, "ping", "pong")
