"""The stand-in Android device (support/adb_standin.py) through the real adb server and adbutils.

What the ADB transport's tests will rely on, proven here first: exit statuses and separate
streams of shell v2, pushes that land as adbd lands them, aarch64 binaries that run, each
device state as `adb devices` lists it, process lifetimes when a stream closes, and a
connection that drops mid-run and comes back.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.adb_standin import AdbServer, StandinDevice, standin_unavailable

adbutils = pytest.importorskip("adbutils")

HELLO_C = r"""
#include <stdio.h>
int main(int argc, char **argv) {
    printf("hello from aarch64, %d args\n", argc - 1);
    fprintf(stderr, "a word on stderr\n");
    return 5;
}
"""


@pytest.fixture(scope="module")
def adb_server(tmp_path_factory) -> Iterator[AdbServer]:
    """One real adb server for the module (its own port and HOME); each test attaches its own devices."""
    reason = standin_unavailable()
    if reason:
        pytest.skip(f"no stand-in ADB device here: {reason}")
    with AdbServer(tmp_path_factory.mktemp("adb-home")) as server:
        yield server


@pytest.fixture
def attach(adb_server, tmp_path) -> Iterator[Callable[..., StandinDevice]]:
    """Start a stand-in device and `adb connect` it; at the end it is disconnected and stopped."""
    devices: list[StandinDevice] = []

    def _attach(mode: str = "device", **kwargs) -> StandinDevice:
        device = StandinDevice(tmp_path / f"device{len(devices)}", mode, **kwargs).start()
        devices.append(device)
        adb_server.connect(device)
        return device

    yield _attach
    for device in devices:
        adb_server.disconnect(device)
        device.stop()


@pytest.fixture
def device(attach) -> StandinDevice:
    return attach()


@pytest.fixture
def client(adb_server, device):
    """adbutils' view of the device, through our adb server."""
    return adbutils.AdbClient(port=adb_server.port).device(device.serial)


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> Path:
    """A static aarch64 binary printing a line on each stream and exiting 5."""
    gcc = shutil.which("aarch64-linux-gnu-gcc")
    if gcc is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed")
    src = tmp_path_factory.mktemp("hello") / "hello.c"
    src.write_text(HELLO_C)
    subprocess.run([gcc, "-static", "-O1", "-o", str(src.with_suffix("")), str(src)], check=True)
    return src.with_suffix("")


def wait_until(condition: Callable[[], object], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


def recv_until(sock: socket.socket, needle: bytes) -> bytes:
    """What the stream brings up to and including needle (a WRTE may come in pieces)."""
    data = b""
    while needle not in data:
        chunk = sock.recv(4096)
        assert chunk, f"stream closed before {needle!r}: {data!r}"
        data += chunk
    return data


def read_shell_packets(sock: socket.socket) -> list[tuple[int, bytes]]:
    """Shell-protocol packets until the stream closes."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    packets = []
    while data:
        packet_id, length = struct.unpack("<BI", data[:5])
        packets.append((packet_id, data[5 : 5 + length]))
        data = data[5 + length :]
    return packets


# -- shell ------------------------------------------------------------------------------------
def test_adb_shell_uses_v2_with_exit_status_and_separate_streams(adb_server, device):
    result = adb_server.run("-s", device.serial, "shell", "echo hi; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, "hi\n", "err\n")
    assert device.opened()[-1] == "shell,v2,TERM=xterm,raw:echo hi; echo err >&2; exit 3"


def test_without_shell_v2_adb_falls_back_to_v1_and_loses_the_exit_status(adb_server, attach):
    device = attach(features="cmd")
    result = adb_server.run("-s", device.serial, "shell", "echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (0, "out\nerr\n", "")  # one pty, no status
    assert device.opened()[-1] == "shell:echo out; echo err >&2; exit 3"


def test_a_shell_sees_the_device_file_system_and_adbd_environment(adb_server, device):
    (device.data_dir / "from-host").write_text("seen\n")
    result = adb_server.run("-s", device.serial, "shell", "pwd; echo $TMPDIR; cat /data/local/tmp/from-host; ls /")
    lines = result.stdout.splitlines()
    assert lines[:3] == ["/", "/data/local/tmp", "seen"]
    assert {"data", "sdcard", "system", "usr"} <= set(lines[3:])
    assert not Path("/data/local/tmp/from-host").exists()  # the host's / is untouched


def test_killed_by_a_signal_is_128_plus_the_signal(client):
    assert client.shell2("kill -9 $$", v2=True).returncode == 137


def test_raw_v2_stream_takes_stdin_packets_and_close_stdin(client):
    """What a transport feeding stdin does: adbutils' open_transport, then the service by hand."""
    conn = client.open_transport()
    conn.send_command("shell,v2:cat; echo cat ended")
    conn.check_okay()
    conn.conn.sendall(struct.pack("<BI", 0, 6) + b"input\n" + struct.pack("<BI", 4, 0))
    packets = read_shell_packets(conn.conn)
    conn.close()
    stdout = b"".join(data for packet_id, data in packets if packet_id == 1)
    assert stdout == b"input\ncat ended\n"
    assert packets[-1] == (3, b"\x00")


def test_v1_and_exec_run_on_a_raw_pty_without_exit_status(client):
    conn = client.open_transport()
    conn.send_command("exec:tty; echo out; echo err >&2; exit 7")
    conn.check_okay()
    output = conn.read_until_close()
    assert output.startswith("/dev/pts/") and output.endswith("out\nerr\n")  # raw: no \r added


def test_an_unknown_service_is_closed(adb_server, device):
    result = adb_server.run("-s", device.serial, "reboot")
    assert result.returncode == 1 and "closed" in result.stderr


# -- sync ---------------------------------------------------------------------------------------
def test_push_then_run_an_aarch64_binary(client, device, hello):
    client.sync.push(hello, "/data/local/tmp/hello")
    client.sync.push(b"some data", "/data/local/tmp/sub/dir/data.bin", mode=0o644)
    result = client.shell2("/data/local/tmp/hello one two", v2=True)
    assert (result.returncode, result.stdout, result.stderr) == (
        5,
        "hello from aarch64, 2 args\n",
        "a word on stderr\n",
    )
    assert device.pushes() == ["/data/local/tmp/hello", "/data/local/tmp/sub/dir/data.bin"]
    assert (device.data_dir / "sub/dir/data.bin").read_bytes() == b"some data"
    assert (device.data_dir / "sub/dir/data.bin").stat().st_mode & 0o777 == 0o666  # owner bits copied, as adbd does


def test_adb_push_and_pull_keep_the_bytes_and_mtime(adb_server, device, hello, tmp_path):
    assert adb_server.run("-s", device.serial, "push", str(hello), "/data/local/tmp/h").returncode == 0
    assert int((device.data_dir / "h").stat().st_mtime) == int(hello.stat().st_mtime)
    assert adb_server.run("-s", device.serial, "pull", "/data/local/tmp/h", str(tmp_path / "back")).returncode == 0
    assert (tmp_path / "back").read_bytes() == hello.read_bytes()


def test_stat_and_list(client, device):
    (device.data_dir / "f").write_bytes(b"12345")
    assert client.sync.stat("/data/local/tmp/f").size == 5
    assert client.sync.stat("/data/local/tmp/missing").mode == 0  # all zeros, as adbd's STAT v1
    assert {e.path for e in client.sync.list("/data/local/tmp")} == {".", "..", "f"}


def test_a_failed_push_is_an_error(client):
    with pytest.raises(adbutils.AdbError):  # adbd's FAIL: "couldn't create file: Read-only file system"
        client.sync.push(b"x", "/usr/not-here")


# -- device states --------------------------------------------------------------------------------
def test_devices_lists_each_state_and_none_is_chosen_among_several(adb_server, attach):
    good, locked, silent = attach(), attach("unauthorized"), attach("offline")
    listing = {
        line.split()[0]: line.split()[1:] for line in adb_server.run("devices", "-l").stdout.splitlines()[1:] if line
    }
    assert listing[good.serial][:4] == ["device", "product:standin", "model:StandIn", "device:standin"]
    assert listing[locked.serial][0] == "unauthorized"
    assert listing[silent.serial][0] == "offline"
    result = adb_server.run("shell", "true")
    assert result.returncode == 1 and "more than one device" in result.stderr
    assert "unauthorized" in adb_server.run("-s", locked.serial, "shell", "true").stderr
    assert "offline" in adb_server.run("-s", silent.serial, "shell", "true").stderr


def test_an_offline_device_comes_online_when_its_mode_changes(adb_server, device):
    def connections() -> int:
        return sum("connect" in e for e in device.events())

    device.set_mode("offline")
    before = connections()
    device.drop()
    wait_until(lambda: connections() > before)  # the server is back, and gets no answer
    time.sleep(0.2)
    assert adb_server.devices()[device.serial] == "offline"
    device.set_mode("device")  # the waiting CNXN is answered now
    adb_server.wait_for(device.serial, "device")
    assert connections() == before + 1


def test_a_restart_is_a_reboot_keeping_serial_and_files(adb_server, device):
    serial = device.serial
    (device.data_dir / "kept").write_text("yes")
    device.stop()
    adb_server.wait_for(serial, "offline")
    device.start()
    assert device.serial == serial
    adb_server.wait_for(serial, "device", timeout=5)
    assert adb_server.run("-s", serial, "shell", "cat /data/local/tmp/kept").stdout == "yes"


# -- process lifetimes ----------------------------------------------------------------------------
def test_closing_a_v2_stream_hangs_up_the_shell_only(client, device):
    conn = client.open_transport()
    conn.send_command("shell,v2:sleep 30 & echo started; wait")
    conn.check_okay()
    recv_until(conn.conn, b"started\n")
    conn.close()
    wait_until(lambda: [p.args for p in device.processes()] == ["sleep 30"])  # the orphan lives on


def test_closing_a_v1_stream_hangs_up_the_foreground_group(client, device):
    conn = client.open_shell("sleep 30 & echo started; wait")
    recv_until(conn.conn, b"started\n")
    assert len(device.processes()) == 2
    conn.close()
    wait_until(lambda: not device.processes())


# -- connection drops -----------------------------------------------------------------------------
def test_drop_closes_a_running_stream_and_the_device_comes_back(adb_server, client, device):
    conn = client.open_transport()
    conn.send_command("shell,v2:echo running; sleep 30")
    conn.check_okay()
    recv_until(conn.conn, b"running\n")
    device.drop()
    conn.conn.settimeout(2)
    assert conn.conn.recv(100) == b""  # closed at the client, no exit packet
    conn.close()
    adb_server.wait_for(device.serial, "device", timeout=5)
    assert client.shell2("echo again", v2=True).stdout == "again\n"


def test_drop_after_output_cuts_right_after_the_marker(adb_server, device):
    device.drop_after_output(b"HALFWAY")
    started = time.monotonic()
    result = adb_server.run("-s", device.serial, "shell", "echo before; echo HALFWAY; sleep 30; echo never")
    assert result.stdout == "before\nHALFWAY\n"
    assert time.monotonic() - started < 5
    assert device.events()[-1] == {"drop": 1}


def test_drop_after_output_matches_across_chunks(adb_server, device):
    device.drop_after_output(b"MARK")
    result = adb_server.run("-s", device.serial, "shell", "printf MA; sleep 0.1; echo RK; sleep 30; echo never")
    assert result.stdout == "MARK\n"
    assert result.returncode == 0  # adb 29 without an exit packet: 0, so a transport must not trust it
    adb_server.wait_for(device.serial, "device", timeout=5)
