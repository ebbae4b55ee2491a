"""The transport core: third-party transports by entry point, a loader of one combined with
the console of another from a board file alone, and the shared run loop."""

from __future__ import annotations

import contextlib
import os
import socket
import textwrap
import threading
import time

import pytest
from pytest_ondevice.transports import InfrastructureError
from pytest_ondevice.transports.runloop import ExitLine, drive
from pytest_ondevice.transports.sendall import send_all

# A "flasher" that only loads and starts a program (its output goes to a log file, as a
# probe's target prints to a UART) and a "tailer" console that only reads that log: neither
# can run a test alone, a board file combines them.
THIRD_PARTY = """
import os, subprocess, threading, time
from pytest_ondevice.transports import Deployed, InfrastructureError, Option, RunEnd, Transport
from pytest_ondevice.transports.runloop import ExitLine

LOG = {"log": Option(str, help="where the target's output goes")}


def note(event):  # what happened on which thread, for the test to read
    with open(os.environ["THIRDPARTY_EVENTS"], "a") as f:
        f.write(f"{event} {threading.current_thread() is threading.main_thread()}\\n")


class Flasher(Transport):
    name = "flasher"
    options = LOG

    @classmethod
    def import_libraries(cls):
        note("import")

    def open(self):
        note("open")

    def deploy(self, artifact, sha256, data=()):
        return Deployed(str(artifact), sha256, pushed=True)

    def start(self, deployed):
        out = open(self.options["log"], "ab")
        proc = subprocess.Popen([deployed.path], stdout=out, stderr=subprocess.STDOUT)

        def finish():  # a bare-metal runtime prints its exit line: a UART has no exit status
            code = proc.wait()
            out.write(f"#ondevice exit {code}\\n".encode())
            out.close()

        threading.Thread(target=finish, daemon=True).start()

    def run(self, deployed, args, timeout, on_bytes, start=None):
        raise InfrastructureError("the flasher has no console")


class Tailer(Transport):
    name = "tailer"
    options = LOG

    def deploy(self, artifact, sha256, data=()):
        raise InfrastructureError("the tailer cannot load a program")

    def run(self, deployed, args, timeout, on_bytes, start=None):
        open(self.options["log"], "wb").close()
        start()
        exit_line, deadline = ExitLine(), time.monotonic() + timeout
        with open(self.options["log"], "rb") as log:
            while time.monotonic() < deadline:
                chunk = log.read()
                if chunk:
                    on_bytes(chunk)
                    status = exit_line.feed(chunk)
                    if status is not None:
                        return RunEnd(exit_code=status)
                time.sleep(0.01)
        return RunEnd(timed_out=timeout)
"""

CASES = """
#include "micro_test.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
TF_LITE_MICRO_TEST(Fails) { TF_LITE_MICRO_EXPECT_EQ(3, 4); }
TF_LITE_MICRO_TESTS_END
"""


@pytest.fixture
def third_party(project, monkeypatch):
    """Installs a package `thirdparty` with two transports registered by entry point."""
    project.write("site/thirdparty.py", THIRD_PARTY)
    info = project.path / "site" / "thirdparty-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [pytest_ondevice.transports]
            flasher = thirdparty:Flasher
            tailer = thirdparty:Tailer
            """
        )
    )
    monkeypatch.syspath_prepend(str(project.path / "site"))
    from pytest_ondevice import transports

    monkeypatch.setattr(transports, "_loaded", {})
    monkeypatch.setattr(transports, "_registered", None)  # scanned again: the new package is seen
    return project


def test_a_board_file_combines_one_transports_loader_with_anothers_console(third_party, monkeypatch):
    events = third_party.path / "events"
    monkeypatch.setenv("THIRDPARTY_EVENTS", str(events))
    log = third_party.path / "uart.log"
    third_party.write(
        "boards/combo.toml",
        f'extends = "host"\n[transport]\nname = "flasher"\nconsole = "tailer"\nlog = "{log}"\n',
    )
    third_party.write("cases_test.c", CASES)
    result = third_party.run("-v", board="combo")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*3 == 4 failed at cases_test.c:5*"])
    # the transport's libraries are imported on the main thread before it opens in the
    # background: an import there would share the interpreter with collection
    assert events.read_text().splitlines() == ["import True", "open False"]


def test_a_third_party_transport_is_listed_and_its_options_checked(third_party):
    from pytest_ondevice.config.board import BoardRegistry
    from pytest_ondevice.config.schema import ConfigError

    third_party.write("boards/typo.toml", 'extends = "host"\n[transport]\nname = "flasher"\nlgo = "x"\n')
    with pytest.raises(ConfigError, match=r"typo.toml: unknown key 'transport.lgo' \(did you mean 'transport.log'"):
        BoardRegistry([third_party.path / "boards"]).get("typo")
    from pytest_ondevice import transports

    assert {"flasher", "tailer", "ssh", "adb"} <= set(transports.known())


class FakeStream:
    """A program that prints, exits with `code` after `exit_after` s, closing its output
    `eof_after` s after that (a grandchild holding the pipe: never)."""

    def __init__(self, chunks, exit_after, code=0, eof_after=0.0):
        self.chunks, self.start, self.code = list(chunks), time.monotonic(), code
        self.exit_after, self.eof_after, self.killed = exit_after, eof_after, False

    def _exited(self):
        return self.killed or time.monotonic() - self.start >= self.exit_after

    def read(self, wait):
        if self.chunks:
            return self.chunks.pop(0)
        if self.killed or (self._exited() and time.monotonic() - self.start >= self.exit_after + self.eof_after):
            return b""
        time.sleep(min(wait, 0.01))
        return None

    def poll(self):
        from pytest_ondevice.transports import RunEnd

        if self.killed:
            return RunEnd(signal="SIGKILL")
        return RunEnd(exit_code=self.code) if self._exited() else None

    def wait(self, seconds):
        time.sleep(min(seconds, 0.01))

    def kill(self):
        self.killed = True


def test_drive_streams_output_and_returns_the_exit():
    out = []
    end = drive(FakeStream([b"a", b"b"], exit_after=0.05, code=3), 5, out.append)
    assert out == [b"a", b"b"] and end.exit_code == 3 and end.timed_out is None


def test_drive_kills_at_the_deadline():
    stream = FakeStream([], exit_after=60)
    end = drive(stream, 0.2, lambda b: None)
    assert end.timed_out == 0.2 and stream.killed


def test_drive_does_not_wait_for_a_grandchild_holding_the_output():
    stream = FakeStream([], exit_after=0.0, code=0, eof_after=3600)
    start = time.monotonic()
    end = drive(stream, 30, lambda b: None)
    assert end.exit_code == 0 and time.monotonic() - start < 3 and stream.killed


class FloodingStream(FakeStream):
    """Output without end (a grandchild printing after the program exited); counts polls."""

    polls = 0

    def read(self, wait):
        if self.killed:
            return b""
        time.sleep(0.001)
        return b"line\n"

    def poll(self):
        self.polls += 1
        return super().poll()


def test_drive_asks_a_printing_program_how_it_is_seldom_and_still_ends_a_flood_after_it_exits():
    stream = FloodingStream([], exit_after=0.3, code=0)
    start = time.monotonic()
    end = drive(stream, 30, lambda b: None)
    assert end.exit_code == 0 and stream.killed and time.monotonic() - start < 5
    assert stream.polls < 50  # not once per chunk of output (hundreds here)


def test_drive_ends_the_program_when_the_session_stops():
    stop = threading.Event()
    stream = FakeStream([], exit_after=60)
    threading.Timer(0.1, stop.set).start()
    with pytest.raises(InfrastructureError, match="the session ended"):
        drive(stream, 30, lambda b: None, stop)
    assert stream.killed


def test_exit_line_across_chunk_borders():
    line = ExitLine()
    assert line.feed(b"Testing A\n#ondevice ex") is None
    assert line.feed(b"it 7") is None  # not until its line ends
    assert line.feed(b"\r\n") == 7


def test_the_core_names_no_transport():
    """A new transport touches only its own module: the core may not know any by name."""
    import re
    from pathlib import Path

    import pytest_ondevice
    from pytest_ondevice import transports

    core = Path(pytest_ondevice.__file__).resolve().parent
    names = {n for n in transports.known() if n != "local"} | {"qemu", "sftp", "paramiko", "adbutils"}
    stages = ("run", "session", "farm", "formats")
    for module in [core / "plugin.py", *(p for stage in stages for p in (core / stage).glob("*.py"))]:
        text = module.read_text()
        found = [n for n in names if re.search(rf"\b{re.escape(n)}\b", text, re.IGNORECASE)]
        assert not found, f"{module.name} names {found}"


def test_an_exec_failure_that_says_nothing_about_the_file_is_tried_again(monkeypatch, tmp_path):
    """EFAULT from execve was seen on a busy host running TFLM's 83 kernel binaries; the same
    binary then ran. Two such errors struck the host device and errored every later case."""
    import errno
    import subprocess

    from pytest_ondevice.transports import InfrastructureError
    from pytest_ondevice.transports._proc import ProcessStream

    real = subprocess.Popen
    failures = [OSError(errno.EFAULT, "Bad address")]

    def flaky(*args, **kwargs):
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", flaky)
    stream = ProcessStream(["true"], tmp_path, None)
    assert stream.proc.wait() == 0
    stream.close()
    failures.append(OSError(errno.ENOENT, "No such file or directory"))  # about the file: at once
    with pytest.raises(InfrastructureError, match="cannot execute nothing: No such file"):
        ProcessStream(["nothing"], tmp_path, None)


def test_an_emulators_own_warnings_are_left_out_and_the_rest_of_its_stderr_kept():
    import re

    from pytest_ondevice.transports._proc import run_streaming

    script = (
        "printf 'emu: warning: nic x has no peer\\nemu: real' >&2; echo out1; sleep 0.2; "
        "printf ' problem\\n' >&2; echo out2; printf 'emu: warning: nic y has no peer' >&2; exit 3"
    )
    got = bytearray()
    end = run_streaming(["sh", "-c", script], 10, got.extend, noise=re.compile(rb"emu: warning: nic \S+ has no peer"))
    assert end.exit_code == 3
    assert sorted(bytes(got).splitlines()) == [b"emu: real problem", b"out1", b"out2"]


def test_a_local_program_that_closes_its_output_and_works_on_ends_with_its_own_status():
    from pytest_ondevice.transports._proc import run_streaming

    out = []
    script = "echo before; exec >&-; sleep 0.3; exit 7"
    end = run_streaming(["sh", "-c", script], 30, out.append)
    assert b"".join(out) == b"before\n" and end.exit_code == 7 and end.duration >= 0.3


def test_local_runs_leave_no_descriptor_open():
    """Each run's pipes and its exit notice (a pidfd) are closed with it."""
    from pytest_ondevice.transports._proc import run_streaming

    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        assert run_streaming(["true"], 30, lambda b: None).exit_code == 0
    assert len(os.listdir("/proc/self/fd")) == before


def test_local_runs_start_while_another_thread_rewrites_the_environment(monkeypatch):
    """pytest sets and removes PYTEST_CURRENT_TEST around every test while our threads
    start binaries: a child started with vfork that inherited the C library's environ read
    it mid-rewrite, and execve failed with EFAULT (about 1 start in 5 here)."""
    from pytest_ondevice.transports import _proc

    monkeypatch.setattr(_proc, "EXEC_ATTEMPTS", 1)  # the rule itself, not the retry behind it
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            os.environ["ONDEVICE_TEST_CHURN"] = f"value {n} " * 4
            del os.environ["ONDEVICE_TEST_CHURN"]
            n += 1

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        ends = [_proc.run_streaming(["true"], 30, lambda b: None).exit_code for _ in range(300)]
    finally:
        stop.set()
        thread.join()
    assert ends == [0] * 300


class _RecordingFs:
    """A device file system that only records what is asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append(name)


def test_a_binary_the_push_queue_staged_is_deployed_without_asking_the_device(tmp_path):
    """The push queue pushes each binary and links it into the session dir ahead of its run:
    the run's deploy then costs no round trip, and still reports the push as its own."""
    from pytest_ondevice.transports.device_cache import DeviceCache

    binary = tmp_path / "k_test.c.elf"
    binary.write_bytes(b"\x7fELF")
    cache = DeviceCache("/root", "/root/sessions/s", run=lambda command: "")
    queue, run = _RecordingFs(), _RecordingFs()
    cache.stage(queue, binary, "a" * 64)
    assert queue.calls == ["symlink", "put", "chmod", "posix_rename", "symlink"]  # held, pushed, linked
    deployed = cache.place(run, binary, "a" * 64, ())
    assert run.calls == []
    assert (deployed.path, deployed.pushed) == ("/root/sessions/s/k_test.c.elf", True)
    assert cache.place(run, binary, "a" * 64, ()).pushed is False  # reported once
    assert run.calls == []


def test_the_push_queue_stages_each_binary_it_pushes(tmp_path):
    """What the queue ahead of the runs does on an SSH or ADB device: push and link."""
    from pytest_ondevice.transports.device_cache import DeviceCache
    from pytest_ondevice.transports.ssh import SshTransport

    binary = tmp_path / "k_test.c.elf"
    binary.write_bytes(b"\x7fELF")
    device = object.__new__(SshTransport)  # no connection: its file access is ours
    fs = _RecordingFs()
    device.cache = DeviceCache("/root", "/root/sessions/s", run=lambda command: "")
    device._fs = lambda role: fs
    device.prefetch(binary, "b" * 64)
    assert fs.calls[-1] == "symlink" and "k_test.c.elf" in device.cache.linked


def small_socket_pair() -> tuple[socket.socket, socket.socket]:
    """(ours, the device's), with buffers small enough that a megabyte waits on the reader."""
    ours, device = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    device.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    return ours, device


def test_send_all_gives_a_late_reader_every_byte_while_another_thread_sets_short_timeouts():
    """A run's input is written beside the thread that reads its output, and that thread sets
    the socket's timeout before every read: socket.sendall() took such a 0.01 s as its
    deadline and cut the input off mid-packet (adb's stdin, Renode's terminal)."""
    ours, device = small_socket_pair()
    data = os.urandom(1 << 20)
    got = bytearray()
    stop = threading.Event()

    def reader() -> None:  # drive()'s side of our socket
        while not stop.is_set():
            ours.settimeout(0.01)
            with contextlib.suppress(TimeoutError):
                ours.recv(1)

    def late_device() -> None:
        time.sleep(0.5)
        while len(got) < len(data):
            got.extend(device.recv(65536))

    threads = [threading.Thread(target=reader), threading.Thread(target=late_device)]
    for thread in threads:
        thread.start()
    try:
        send_all(ours, data, closed=lambda: False)
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
        ours.close()
        device.close()
    assert bytes(got) == data


def test_send_all_gives_up_once_the_stream_is_closed():
    """A program that never reads its input: the run's close ends the write, no thread left."""
    ours, device = small_socket_pair()
    closed = threading.Event()
    timer = threading.Timer(0.3, closed.set)
    raised: list[OSError] = []

    def write() -> None:
        try:
            send_all(ours, b"x" * (1 << 20), closed=closed.is_set)
        except OSError as e:
            raised.append(e)

    writer = threading.Thread(target=write)
    timer.start()
    writer.start()
    writer.join(5)
    gave_up = not writer.is_alive()
    device.close()  # a write still waiting fails now, so that no thread outlives the test
    writer.join(5)
    timer.join()
    ours.close()
    assert gave_up, "the write still waited 5 s after its stream was closed"
    assert len(raised) == 1 and "closed before the input was all written" in str(raised[0]), raised
