"""The ADB transport through the real adb server, against a stand-in device running real
aarch64 binaries (tests/support/adb_standin.py says what it is and what it cannot show)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
import threading
import time
import warnings

import pytest
from conftest import build_report
from support.adb_standin import AdbServer, StandinDevice, recv_exact, standin_unavailable
from test_rust import FORGING, assert_forgery_caught, crate, needs_cargo

with warnings.catch_warnings():  # imported once here: pytester drops what an in-process run imported
    warnings.simplefilter("ignore")
    import adbutils  # noqa: F401

REASON = standin_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

CASES = """
#include "micro_test.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
TF_LITE_MICRO_TEST(Fails) {
  int acc = 3;
  TF_LITE_MICRO_EXPECT_EQ(acc, 4);
}
TF_LITE_MICRO_TEST(AlsoPasses) { TF_LITE_MICRO_EXPECT(1); }
TF_LITE_MICRO_TESTS_END
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with AdbServer(tmp_path_factory.mktemp("adb-home")) as running:
        yield running


@pytest.fixture
def device(server, tmp_path):
    dev = StandinDevice(tmp_path / "device").start()
    server.connect(dev)
    yield dev
    server.disconnect(dev)
    dev.stop()


@pytest.fixture
def phone(project, server, device):
    """A project whose ini points the plugin at this test's adb server."""
    use_server(project, server.port)
    project.device = device
    project.server = server
    return project


def use_server(project, port: int) -> None:
    project.pytester.makeini(
        "\n".join(
            [
                "[pytest]",
                f"ondevice_build_dir = {project.path / '_build'}",
                f"ondevice_cache_dir = {project.path / '_cache'}",
                f"ondevice_adb_server = 127.0.0.1:{port}",
                "ondevice_boards = boards",
            ]
        )
        + "\n"
    )


class ServerTap:
    """A relay in front of the adb server that records the first request of every connection
    made to it (host:version, host:devices-l, host:tport:serial:..., ...)."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[str] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def __enter__(self) -> ServerTap:
        return self

    def __exit__(self, *exc: object) -> None:
        # close() alone does not wake a thread blocked in accept(): it would outlive the test,
        # and a live thread keeps every later in-process run from forking its side process
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._accepting.join(5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self.server_port)) as server:
            head = recv_exact(client, 4)
            body = recv_exact(client, int(head, 16)) if head else None
            if body is None:
                return
            self.requests.append(body.decode())
            server.sendall(head + body)
            back = threading.Thread(target=_copy, args=(server, client), daemon=True)
            back.start()
            _copy(client, server)
            back.join()


def _copy(source: socket.socket, dest: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            dest.sendall(data)
    with contextlib.suppress(OSError):
        dest.shutdown(socket.SHUT_WR)


def run(phone, *args, device: str | None = None):
    return phone.run(f"--device=adb:{device or phone.device.serial}", *args, board="android-arm64")


def left_running(device: StandinDevice, name: str) -> list:
    return [p for p in device.processes() if name in " ".join(p.args)]


def wait_until(check, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not true after {timeout} s")
        time.sleep(0.05)


def test_examples_pass_per_case_and_a_rerun_pushes_nothing(phone):
    phone.copy_examples()
    first = run(phone, "examples", "-v")
    first.assert_outcomes(passed=8)
    first.stdout.fnmatch_lines(
        ["*depthwise_conv_test.c::SimpleTestQuantized[[]android-arm64[]] PASSED*", "*2 pushed, 0 already on the*"]
    )
    pushed = phone.device.pushes()
    assert len([p for p in pushed if "/bin/" in p]) == 2, pushed
    again = run(phone, "examples")
    again.assert_outcomes(passed=8)
    again.stdout.fnmatch_lines(["*0 pushed, 2 already on the device*"])
    assert phone.device.pushes() == pushed  # nothing sent the second time
    assert build_report(again)["compiled"] == 0
    # the cache is under /data/local/tmp, the session dirs are gone
    cache = phone.device.host_path("/data/local/tmp/ondevice-shell")
    assert len(list((cache / "bin").iterdir())) == 2
    wait_until(lambda: not list((cache / "sessions").iterdir()), what="session dirs removed")


def test_a_binary_costs_one_stream_to_the_server_its_run(phone):
    """Pushes go over sync streams kept for the session (adbutils' Sync opened three streams a
    push, each after asking the server its version): per binary, only its run's shell stream
    is a new connection to the adb server, and the server's version is asked once."""
    count = 6
    for i in range(count):
        phone.write(f"t{i}_test.c", CASES.replace("Fails", f"Fails{i}"))
    with ServerTap(phone.server.port) as tap:
        use_server(phone, tap.port)
        run(phone).assert_outcomes(passed=2 * count, failed=count)
    assert tap.requests.count("host:version") == 1, tap.requests
    streams = [r for r in tap.requests if r.startswith(("host:tport:", "host:transport"))]
    # the runs; the keeper; a sync stream for each thread that pushed at the same time
    assert count + 1 <= len(streams) <= count + 3, tap.requests
    opened = phone.device.opened()
    assert opened.count("sync:") <= 2, opened
    assert len([s for s in opened if s.startswith("shell")]) == count + 1, opened
    assert len([p for p in phone.device.pushes() if "/bin/" in p]) == count


def test_pass_and_fail_with_file_and_line(phone):
    phone.write("cases_test.c", CASES)
    result = run(phone, "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*acc == 4 failed at cases_test.c:7 (3 vs 4)*"])


def test_a_crash_names_its_signal(phone):
    phone.write(
        "crash_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Crashes) { volatile int *p = 0; *p = 1; }
        TF_LITE_MICRO_TEST(After) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = run(phone)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*crashed: killed by SIGSEGV while this case was running*"])


def test_a_hang_is_killed_with_its_children_and_nothing_is_left_on_the_device(phone):
    """Closing a shell v2 stream SIGHUPs only the shell on adbd: the transport must kill the
    group (and the forked child, which ignores SIGHUP) itself."""
    phone.write(
        "hang_test.c",
        """
        #include <signal.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Hangs) {
          signal(SIGHUP, SIG_IGN);
          if (fork() == 0) { setsid(); for (;;) sleep(1); }
          for (;;) sleep(1);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    start = time.monotonic()
    result = run(phone, "--device-timeout=2")
    assert time.monotonic() - start < 30
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 2s while this case was running*"])
    wait_until(lambda: not left_running(phone.device, "hang_test"), what="hang_test still runs on the device")


def test_a_connection_dropped_mid_run_is_retried_once_on_a_fresh_connection(phone):
    marker = "/data/local/tmp/first-attempt"
    phone.write(
        "slow_test.c",
        f"""
        #include <fcntl.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Slow) {{
          if (access("{marker}", F_OK) != 0) {{  /* the first attempt: the link drops here */
            close(open("{marker}", O_CREAT | O_WRONLY, 0644));
            MicroPrintf("started");
            sleep(60);
          }}
        }}
        TF_LITE_MICRO_TESTS_END
        """,
    )
    phone.device.drop_after_output(b"started")
    result = run(phone, "--device-timeout=30")
    result.assert_outcomes(passed=1)
    assert phone.device.host_path(marker).exists()
    assert any("drop" in e for e in phone.device.events())
    wait_until(lambda: not left_running(phone.device, "slow_test"), what="the first attempt still runs")


def test_a_device_that_stays_away_is_an_error_not_a_failure(phone):
    phone.write(
        "slow_test.c",
        """
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Slow) { MicroPrintf("started"); sleep(60); }
        TF_LITE_MICRO_TEST(Other) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    phone.device.set_mode("offline")  # the next handshake is never answered
    phone.device.drop_after_output(b"started")
    phone.write("boards/slow-phone.toml", 'extends = "android-arm64"\n[transport]\nconnect_timeout = 2.0\n')
    start = time.monotonic()
    result = phone.run(f"--device=adb:{phone.device.serial}", "--device-timeout=30", board="slow-phone")
    assert time.monotonic() - start < 25
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*connection lost while the binary ran; then, reconnecting: *offline*"])


def test_unauthorized_says_what_to_do_on_the_phone(phone, server, tmp_path):
    locked = StandinDevice(tmp_path / "locked", mode="unauthorized").start()
    try:
        server.connect(locked)
        phone.write("cases_test.c", CASES)
        result = run(phone, device=locked.serial)
        result.assert_outcomes(errors=3)
        result.stdout.fnmatch_lines(["*is unauthorized: unlock the device and accept the 'Allow USB debugging?'*"])
    finally:
        server.disconnect(locked)
        locked.stop()


def test_two_devices_and_none_chosen_lists_them(phone, server, tmp_path):
    second = StandinDevice(tmp_path / "second").start()
    try:
        server.connect(second)
        phone.write("cases_test.c", CASES)
        result = phone.run(board="android-arm64")
        result.assert_outcomes(errors=3)
        result.stdout.fnmatch_lines(
            [f"*2 devices attached and none chosen: *{phone.device.serial} (device)*; pass --device=adb:SERIAL*"]
        )
        assert not second.pushes() and not phone.device.pushes()
    finally:
        server.disconnect(second)
        second.stop()


def test_the_only_device_is_used_without_naming_it(phone):
    phone.write("cases_test.c", CASES)
    phone.run(board="android-arm64").assert_outcomes(passed=2, failed=1)


def test_host_port_is_attached_with_adb_connect(phone, server):
    server.disconnect(phone.device)  # not attached: the transport runs `adb connect` itself
    phone.write("cases_test.c", CASES)
    run(phone).assert_outcomes(passed=2, failed=1)
    assert server.devices().get(phone.device.serial) == "device"


def test_a_device_not_attached_lists_the_ones_that_are(phone):
    phone.write("cases_test.c", CASES)
    result = run(phone, device="R58M123ABC")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines([f"*adb: no device R58M123ABC attached (adb devices: {phone.device.serial} (device))*"])


def test_no_adb_server_names_the_fix(phone):
    phone.write("boards/nowhere.toml", 'extends = "android-arm64"\n[transport]\nadb_server = "127.0.0.1:1"\n')
    phone.write("cases_test.c", CASES)
    result = phone.run("--device=adb:R58M123ABC", board="nowhere")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*no adb server on 127.0.0.1:1*adb start-server*"])


def test_data_files_are_pushed_beside_the_binary(phone):
    from test_host_outcomes import DATA_TEST

    phone.write("testdata/golden.txt", "71 -34 99 -20")
    phone.write("ondevice.toml", 'data = ["testdata/golden.txt"]\n')
    phone.write("golden_test.c", DATA_TEST)
    phone.write("other/testdata/golden.txt", "1 2 3")
    phone.write("other/ondevice.toml", 'data = ["testdata/golden.txt"]\n')
    phone.write("other/other_golden_test.c", DATA_TEST.replace("71 -34 99 -20", "1 2 3"))
    run(phone).assert_outcomes(passed=2)


def test_the_device_cache_is_pruned_to_its_size_and_stale_parts_go(phone):
    """What earlier sessions left beyond cache_entries goes, least recently used first, but
    never what this session holds; a partial push older than an hour goes too; a file not
    ours stays. (The listings this takes are the device's `stat` of whole directories.)"""
    for i in range(3):
        phone.write(f"p{i}_test.c", CASES.replace("Fails", f"Fails{i}"))
    run(phone).assert_outcomes(passed=6, failed=3)
    bin_dir = phone.device.host_path("/data/local/tmp/ondevice-shell/bin")
    entry = {
        name: hashlib.sha256((phone.path / f"_build/android-arm64/bin/{name}_test.c.elf").read_bytes()).hexdigest()
        for name in ("p0", "p1", "p2")
    }
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted(entry.values())
    now = time.time()
    for name, used in (("p2", now - 1200), ("p0", now - 600), ("p1", now + 600)):  # p1: the latest used
        os.utime(bin_dir / entry[name], (used, used))
    stale = bin_dir / f"{'0' * 64}.part-0123456789ab"
    stale.write_bytes(b"half a binary")
    os.utime(stale, (now - 7200, now - 7200))
    (bin_dir / "notes.txt").write_text("not ours")
    phone.write("boards/small-phone.toml", 'extends = "android-arm64"\n[transport]\ncache_entries = 1\n')
    result = phone.run(f"--device=adb:{phone.device.serial}", "p0_test.c", board="small-phone")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*0 pushed, 1 already on the device*"])
    # p1 is the one entry kept; p0 is older, but this session held it
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted([entry["p0"], entry["p1"], "notes.txt"])


def test_a_tampered_cache_entry_is_pushed_again_not_run(phone):
    phone.write("cases_test.c", CASES)
    run(phone).assert_outcomes(passed=2, failed=1)
    (entry,) = (phone.device.host_path("/data/local/tmp/ondevice-shell") / "bin").iterdir()
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF  # same size, other content
    entry.write_bytes(bytes(data))
    again = run(phone)
    again.assert_outcomes(passed=2, failed=1)
    again.stdout.fnmatch_lines(["*1 pushed, 0 already on the device*"])


def test_boards_lists_the_adb_transport(phone):
    result = phone.pytester.run(sys.executable, "-m", "pytest_ondevice.commands.cli", "boards")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["android-arm64 *adb (ready (adbutils))*"])


@pytest.fixture
def old_phone(phone, server, tmp_path):
    """A device without shell protocol v2 (Android before 7): no exit packet, one output stream."""
    old = StandinDevice(tmp_path / "old", features="cmd").start()
    server.connect(old)
    yield old
    server.disconnect(old)
    old.stop()


def test_a_device_without_shell_v2_gives_the_exit_status_by_a_marker_line(phone, old_phone):
    phone.write("cases_test.c", CASES)
    phone.write(
        "crash_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Crashes) { volatile int *p = 0; *p = 1; }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = run(phone, "-v", device=old_phone.serial)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines_random(
        ["*acc == 4 failed at cases_test.c:7 (3 vs 4)*", "*crashed: killed by SIGSEGV while this case was running*"]
    )
    assert not any(s.startswith("shell,v2") for s in old_phone.opened())
    log = (phone.path / "_build/android-arm64/logs/cases_test.c.log").read_text()
    assert "#ondevice-status" not in log  # the marker is the transport's, not the test's output
    again = run(phone, device=old_phone.serial)
    again.assert_outcomes(passed=2, failed=2)
    again.stdout.fnmatch_lines(["*0 pushed, 2 already on the device*"])


def test_without_shell_v2_a_binary_cannot_fake_the_pre_flight_checks(phone, old_phone):
    """The checks' lines come before the shell's go-line: what the binary prints is its output."""
    phone.write(
        "preflight_test.c",
        """
        #include <stdio.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(PrintsACheckLine) {
          fprintf(stderr, "#ondevice-preflight noexec\\n");
          printf("#ondevice-preflight missing\\n");
          TF_LITE_MICRO_EXPECT_EQ(1, 1);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    run(phone, device=old_phone.serial).assert_outcomes(passed=1)


def test_without_shell_v2_a_binary_cannot_forge_its_exit_status(phone, old_phone):
    """The binary reads every token its parent shell's command line and environment hold,
    prints each as a status line of 0, then aborts: the abort is what counts."""
    phone.write(
        "forger_test.c",
        r"""
        #include <ctype.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>
        #include "micro_test.h"
        static void forge_from(const char *what) {
          char path[64], buf[65536];
          snprintf(path, sizeof path, "/proc/%d/%s", (int)getppid(), what);
          FILE *f = fopen(path, "rb");
          if (!f) return;
          size_t n = fread(buf, 1, sizeof buf - 1, f);
          fclose(f);
          for (size_t i = 0; i < n; i++) if (!buf[i]) buf[i] = ' ';
          buf[n] = 0;
          for (char *p = buf; (p = strstr(p, "ondevice-")); p++) {
            if (!isxdigit((unsigned char)p[9]) && strncmp(p + 9, "status-", 7) != 0) continue;
            char *q = p > buf && p[-1] == '#' ? p - 1 : p;
            int len = 0;
            while (q[len] && !isspace((unsigned char)q[len]) && q[len] != '\'' && q[len] != '"' && len < 100) len++;
            printf("\n%.*s 0\n", len, q);
          }
        }
        static void forge(void) {
          forge_from("cmdline");
          forge_from("environ");
          fflush(stdout);
          abort();
        }
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Passes) { atexit(forge); TF_LITE_MICRO_EXPECT_EQ(1, 1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = run(phone, device=old_phone.serial)
    assert result.ret == 1 and result.parseoutcomes().get("failed", 0) >= 1  # the run is red
    result.stdout.fnmatch_lines(["*crashed: killed by SIGABRT*"])


@needs_cargo
def test_libtests_own_record_is_brought_back_so_a_forged_pass_fails(phone):
    crate(phone, "forger", FORGING)
    assert_forgery_caught(run(phone, "forger", "-v"))
