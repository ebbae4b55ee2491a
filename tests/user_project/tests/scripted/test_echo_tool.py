"""A scripted test with the `device` fixture: a program built for the board, run and driven."""

import pytest

pytestmark = pytest.mark.board(kind=["linux", "host"])


def test_arguments(device):
    tool = device.build("echo_tool.c")
    result = device.run([tool, "a", "b"], check=True)
    assert result.stdout == "args 2\n"


def test_interactive(device):
    tool = device.build("echo_tool.c")
    session = device.start([tool])
    session.expect_exact("ready")
    session.sendline("12")
    session.expect(r"= (\d+)\r?\n")
    assert session.match.group(1) == "144"
