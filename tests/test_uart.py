"""The UART console through pyserial: against QEMU's USART on a TCP socket, against a real
tty node (a pty), and against a socket peer that sends noise, splits lines and closes."""

from __future__ import annotations

import os
import pty
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from pytest_ondevice.transports import Deployed, InfrastructureError
from pytest_ondevice.transports.uart import UartTransport
from support.sshd import free_port

pytest.importorskip("serial")

FAILING = """
#include "micro_test.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
TF_LITE_MICRO_TEST(Fails) {
  int acc = 3;
  TF_LITE_MICRO_EXPECT_EQ(acc, 4);
}
TF_LITE_MICRO_TESTS_END
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")
@pytest.mark.parametrize("board", ["bluepill-qemu-uart", "bluepill-qemu"])
def test_qemu_output_read_over_a_socket_passes_per_case(project, board):
    """QEMU serves its USART (bluepill-qemu-uart's runtime prints there) muxed with
    semihosting (bluepill-qemu's) on the console's socket."""
    project.copy_examples()
    project.write("fail_test.c", FAILING)
    url = f"uart:socket://127.0.0.1:{free_port()}"
    result = project.run(f"--console={url}", "examples", "fail_test.c", "-v", board=board)
    result.assert_outcomes(passed=9, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            f"*fully_connected_test.cc::FullyConnected.Float[[]{board}[]] PASSED*",
            "*acc == 4 failed at fail_test.c:7 (3 vs 4)*",
        ]
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="needs qemu-system-arm")
def test_a_hang_read_over_a_socket_leaves_no_emulator_running(project):
    """The loader stops what it started once the console's run ends, a timeout included."""
    from test_boards_qemu import HANG, _my_children

    project.write("hang_test.c", HANG)
    result = project.run(
        f"--console=uart:socket://127.0.0.1:{free_port()}", "--device-timeout=1", board="bluepill-qemu"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 1s while this case was running*"])
    assert "qemu" not in _my_children()


def test_a_console_that_qemu_cannot_serve_is_an_error(project):
    project.write("fail_test.c", FAILING)
    result = project.run("--console=uart:/dev/ttyUSB9@115200", board="bluepill-qemu-uart")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*QEMU can serve its UART to a console only on a TCP socket*"])


class Board:
    name = "uart-test"
    path = Path(__file__)


def console(url: str, **options) -> UartTransport:
    transport = UartTransport(Board(), url, {k: o.default for k, o in UartTransport.options.items()} | options)
    transport.open()
    return transport


def serve_once(chunks: list[tuple[float, bytes]], hold: threading.Event | None = None) -> tuple[int, threading.Event]:
    """A TCP peer (what QEMU's UART socket is): on connect, sends each chunk after its delay,
    then closes at once, right after the last bytes (or, given hold, once it is set)."""
    listener = socket.create_server(("127.0.0.1", 0))
    started = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        started.wait(10)
        for delay, data in chunks:
            time.sleep(delay)
            conn.sendall(data)
        if hold is not None:
            hold.wait(30)
        conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], started


OUTPUT = (
    b"#ondevice 0123456789abcdef nonce\n"
    b"#ondevice 0123456789abcdef case A\nTesting A\n#ondevice 0123456789abcdef end A passed\n"
    b"~~~ALL TESTS PASSED~~~\n\n#ondevice exit 0\n"
)


def test_what_a_socket_peer_sent_while_pyserial_connected_is_kept(monkeypatch):
    """pyserial's socket open() flushes what has arrived by then; a peer that starts sending
    on connect (QEMU with wait=on) would lose its first bytes. A slow connect makes it sure."""
    from serial.urlhandler import protocol_socket

    connect = protocol_socket.socket.create_connection

    def slow_connect(*args, **kwargs):
        sock = connect(*args, **kwargs)
        time.sleep(0.2)  # the peer's first bytes are here before open() goes on
        return sock

    monkeypatch.setattr(protocol_socket.socket, "create_connection", slow_connect)
    port, started = serve_once([(0, OUTPUT)])
    started.set()
    got: list[bytes] = []
    end = console(f"uart:socket://127.0.0.1:{port}").run(
        Deployed("x", "0" * 64, None), [], 10, got.append, start=lambda: None
    )
    assert end.exit_code == 0 and b"".join(got) == OUTPUT


def test_noise_before_our_output_is_put_on_a_line_of_its_own():
    port, started = serve_once([(0, b"\x00\xff\xfeboot v1.2 garbage"), (0.05, OUTPUT)])
    got: list[bytes] = []
    end = console(f"uart:socket://127.0.0.1:{port}").run(
        Deployed("x", "0" * 64, None), [], 10, got.append, start=started.set
    )
    text = b"".join(got)
    assert end.exit_code == 0
    assert text.startswith(b"\x00\xff\xfeboot v1.2 garbage\n#ondevice 0123456789abcdef nonce\n")


def test_output_split_mid_line_and_the_last_bytes_before_the_peer_closes_arrive():
    cut = [OUTPUT[i : i + 7] for i in range(0, len(OUTPUT), 7)]  # lines split everywhere
    port, started = serve_once([(0.01, c) for c in cut])
    got: list[bytes] = []
    end = console(f"uart:socket://127.0.0.1:{port}").run(
        Deployed("x", "0" * 64, None), [], 10, got.append, start=started.set
    )
    assert b"".join(got) == OUTPUT and end.exit_code == 0


def test_a_peer_that_closes_before_the_exit_line_is_an_infrastructure_error():
    from pytest_ondevice.transports import InfrastructureError

    port, started = serve_once([(0, OUTPUT[:60])])
    got: list[bytes] = []
    with pytest.raises(InfrastructureError, match="closed before the program's exit line"):
        console(f"uart:socket://127.0.0.1:{port}").run(
            Deployed("x", "0" * 64, None), [], 10, got.append, start=started.set
        )
    assert b"".join(got) == OUTPUT[:60]  # what came is kept for the log


def test_a_silent_port_times_out():
    silent = threading.Event()  # the peer stays connected and silent until the test is over
    port, started = serve_once([], hold=silent)
    try:
        end = console(f"uart:socket://127.0.0.1:{port}").run(
            Deployed("x", "0" * 64, None), [], 0.5, lambda b: None, start=started.set
        )
    finally:
        silent.set()
    assert end.timed_out == 0.5


def test_a_real_tty_node_is_read_with_its_baud_rate(tmp_path):
    """A pty's slave is a tty like /dev/ttyUSB0: pyserial sets its line discipline; the
    "target" writes to the master after the port was opened (opened before reset)."""
    master, slave = pty.openpty()
    path = os.ttyname(slave)
    os.close(slave)
    written = threading.Event()

    def target() -> None:
        os.write(master, b"\r\nU-Boot noise\r\n")
        for piece in (OUTPUT[:40], OUTPUT[40:]):
            os.write(master, piece)
            time.sleep(0.05)
        written.set()

    got: list[bytes] = []
    writer = threading.Thread(target=target)
    end = console(f"uart:{path}@921600").run(Deployed("x", "0" * 64, None), [], 10, got.append, start=writer.start)
    writer.join()
    os.close(master)
    assert end.exit_code == 0 and written.is_set()
    assert b"".join(got).replace(b"\r\n", b"\n").endswith(OUTPUT)


def test_no_url_names_the_fix():
    from pytest_ondevice.transports import InfrastructureError

    with pytest.raises(InfrastructureError, match="--console=uart:URL@BAUD"):
        UartTransport(Board(), None, {}).open()


def test_closing_the_port_ends_a_write_that_waits_with_an_infrastructure_error():
    """device.run() writes a program's input from a thread of its own. The run's close() must
    end a write still waiting on a line nobody reads, as the device's error: not wait for
    good, nor let pyserial's TypeError (its port gone under it) escape that thread."""
    import serial
    from pytest_ondevice.transports.uart import _SerialProcess

    master, slave = pty.openpty()
    path = os.ttyname(slave)
    process = _SerialProcess(serial.Serial(path, 115200), f"uart:{path}", stop=lambda: None)
    raised: list[BaseException] = []

    def write() -> None:
        try:
            process.write(b"x" * 1_000_000)  # far beyond what the pty holds: nobody reads the master
        except BaseException as e:
            raised.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.3)
    process.close()
    writer.join(5)
    os.close(master)
    os.close(slave)
    assert not writer.is_alive()
    assert [type(e) for e in raised] == [InfrastructureError], raised
    assert "was closed while the input was written" in str(raised[0])
