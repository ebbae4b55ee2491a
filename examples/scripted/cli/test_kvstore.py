"""A Linux CLI tool tested on the device: built for the board, pushed through the device
cache, run with arguments (subprocess.run's result) and driven interactively (pexpect's
API). Runs on the host, on rpi (QEMU user mode or a Pi over SSH) and on Android (ADB)."""

import pytest

pytestmark = pytest.mark.board(kind=["linux", "android", "host"])

SOURCE = "kvstore.c"  # beside this file (or a path from the project's root)


@pytest.fixture
def kvstore(device):
    return device.build(SOURCE)


def test_version(device, kvstore):
    result = device.run([kvstore, "--version"], check=True)
    assert result.stdout == "kvstore 1.2.0\n"


def test_get_from_a_pushed_file(device, kvstore, tmp_path):
    table = tmp_path / "settings.txt"
    table.write_text("arena_kib 96\nthreads 2\n")
    device.push(table)
    assert device.run([kvstore, "get", "settings.txt", "threads"]).stdout == "2\n"
    missing = device.run([kvstore, "get", "settings.txt", "batch"])
    assert (missing.returncode, missing.stderr) == (1, "kvstore: no key batch\n")


def test_interactive_session(device, kvstore):
    kv = device.start([kvstore])
    kv.expect_exact("kv> ")
    kv.sendline("set model mlp_int8")
    kv.expect_exact("ok")
    kv.sendline("get model")
    kv.expect(r"(\w+)\r?\n")
    assert kv.match.group(1) == "mlp_int8"
    kv.sendline("count")
    kv.expect(r"(\d+) keys")
    assert kv.match.group(1) == "1"
    kv.sendline("quit")
    assert kv.wait(10) == 0
