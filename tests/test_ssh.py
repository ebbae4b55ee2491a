"""The SSH transport against a real OpenSSH sshd on loopback running real aarch64 binaries."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# imported here, not first inside an in-process pytester run: pytester drops the modules a
# run imported, and cryptography's native module cannot be imported a second time
import fabric  # noqa: F401
import paramiko
import pytest
from conftest import build_report, private_tmpdir
from support.sshd import BinfmtLease, Sshd, new_account, remove_account

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def board_for_device():
    """`rpi` itself when the device can exec aarch64 ELF files (binfmt_misc); otherwise our
    documented fallback: the same board with qemu-aarch64 as its exec_wrapper."""
    with BinfmtLease() as binfmt:  # shared with other xdist workers: the last one removes it
        if binfmt:
            yield "rpi", ""
        else:
            yield "rpi-wrapped", 'extends = "rpi"\n[transport]\nexec_wrapper = "qemu-aarch64"\n'


@pytest.fixture
def accounts():
    """Make device accounts for one test; at its end their processes are killed and they are removed."""
    made: list[str] = []

    def make(shell: str = "/bin/sh") -> str:
        if os.geteuid() != 0:
            pytest.skip("device accounts of their own need root")
        made.append(new_account(shell))
        return made[-1]

    yield make
    for name in made:
        remove_account(name)


@pytest.fixture
def sshd(accounts):
    """A device of its own per test (its own account, so its own cache): tests run under -n 8."""
    # not under pytest's 0700 tmp tree: sshd reads authorized_keys as the device user
    root = Path(tempfile.mkdtemp(prefix="ondevice-sshd-"))
    server = Sshd.create(root, user=accounts() if os.geteuid() == 0 else None).start()
    yield server
    server.kill()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pi(project, sshd, board_for_device):
    """A project whose ssh_config knows the loopback "Pi" as `testpi`."""
    board, board_file = board_for_device
    lines = [
        "[pytest]",
        f"ondevice_build_dir = {project.path / '_build'}",
        f"ondevice_ssh_config = {sshd.ssh_config}",
        "ondevice_boards = boards",
    ]
    if board_file:
        project.write(f"boards/{board}.toml", board_file)
    project.pytester.makeini("\n".join(lines) + "\n")
    project.sshd = sshd
    project.board = board
    return project


def variant(pi, name: str, transport: str) -> str:
    """A board file extending the device's board with more [transport] keys."""
    pi.write(f"boards/{name}.toml", f'extends = "{pi.board}"\n[transport]\n{transport}\n')
    return name


def home(pi) -> Path:
    return Path(os.path.expanduser(f"~{pi.sshd.user}"))


def device_cache(pi) -> Path:
    return home(pi) / ".cache/pytest-ondevice"


def wait_until(check, timeout: float = 10.0, what: str = "condition") -> None:
    """Poll with a deadline instead of sleeping a fixed time."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not true after {timeout} s")
        time.sleep(0.05)


def gone(pi, name: str, timeout: float = 10.0) -> None:
    wait_until(lambda: name not in pi.sshd.ps(), timeout, f"{name} still runs on the device:\n{pi.sshd.ps()}")


def run(pi, *args):
    return pi.run(f"--device={pi.sshd.alias}", *args, board=pi.board)


def test_examples_pass_over_ssh_and_rerun_pushes_nothing(pi):
    before = _scratch_dirs(pi)
    pi.copy_examples()
    first = run(pi, "examples", "-v")
    first.assert_outcomes(passed=8)
    first.stdout.fnmatch_lines(
        [f"*depthwise_conv_test.c::SimpleTestQuantized[[]{pi.board}[]] PASSED*", "*2 pushed, 0 already on the device*"]
    )
    again = run(pi, "examples")
    again.assert_outcomes(passed=8)
    again.stdout.fnmatch_lines(["*0 pushed, 2 already on the device*"])
    assert build_report(again)["compiled"] == 0
    # the sessions' scratch dirs are gone; the hash-named cache stays, in the device user's home
    assert _scratch_dirs(pi) == before == set()
    assert len(list((device_cache(pi) / "bin").iterdir())) >= 2


def _scratch_dirs(pi) -> set[str]:
    return {p.name for p in (device_cache(pi) / "sessions").glob("*")}


CASES = """
    #include <stdio.h>
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
    TF_LITE_MICRO_TEST(Fails) { int acc = 3; TF_LITE_MICRO_EXPECT_EQ(acc, 4); }
    TF_LITE_MICRO_TEST(CleanEnvironment) {
      TF_LITE_MICRO_EXPECT(getenv("SSH_CONNECTION") == NULL);
    }
    TF_LITE_MICRO_TESTS_END
"""


def test_device_as_user_at_host_port_and_other_boards_on_the_same_transport(pi, board_for_device):
    pi.write("cases_test.c", CASES)
    result = pi.run(f"--device={pi.sshd.user}@127.0.0.1:{pi.sshd.port}", board=pi.board)
    result.assert_outcomes(passed=2, failed=1)
    if board_for_device[0] == "rpi":  # binfmt: the device runs 32-bit and other 64-bit ARM builds too
        for board in ("jetson", "rpi-armhf"):
            other = pi.run(f"--device={pi.sshd.alias}", board=board)
            other.assert_outcomes(passed=2, failed=1)


def test_pass_fail_and_a_clean_environment(pi):
    pi.write("cases_test.c", CASES)
    result = run(pi, "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*acc == 4 failed at cases_test.c:7 (3 vs 4)*"])


def test_remote_sigsegv_is_a_crash_naming_sigsegv(pi):
    pi.write(
        "crash_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Crashes) { volatile int *p = 0; *p = 1; }
        TF_LITE_MICRO_TEST(After) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = run(pi)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*crashed: killed by SIGSEGV while this case was running*"])


def test_hang_is_killed_with_its_children_and_nothing_is_left_on_the_device(pi):
    pi.write(
        "hang_test.c",
        """
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Hangs) {
          if (fork() == 0) { for (;;) sleep(1); }
          for (;;) sleep(1);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    start = time.monotonic()
    result = run(pi, "--device-timeout=2")
    assert time.monotonic() - start < 30
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 2s while this case was running*"])
    gone(pi, "hang_test")


def test_sshd_killed_mid_run_is_an_error_not_a_failure(pi):
    pi.write(
        "slow_test.c",
        """
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Slow) { MicroPrintf("started"); sleep(3); }
        TF_LITE_MICRO_TESTS_END
        """,
    )

    def kill_when_started():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "slow_test" not in pi.sshd.ps():
            time.sleep(0.05)
        pi.sshd.kill()

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    start = time.monotonic()
    result = run(pi, "--device-timeout=20")
    killer.join()
    assert time.monotonic() - start < 20
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*connection lost while the binary ran; then, reconnecting:*"])  # refused, or reset


def test_dropped_connection_is_retried_once_on_a_fresh_connection(pi):
    marker = Path(tempfile.mkdtemp(prefix="ondevice-marker-")) / "first-attempt"
    marker.parent.chmod(0o777)
    pi.write(
        "slow_test.c",
        f"""
        #include <fcntl.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Slow) {{
          if (access("{marker}", F_OK) != 0) {{  /* the first attempt hangs until dropped */
            close(open("{marker}", O_CREAT | O_WRONLY, 0644));
            MicroPrintf("started");
            sleep(60);
          }}
        }}
        TF_LITE_MICRO_TESTS_END
        """,
    )

    def drop_once():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not marker.exists():  # the first attempt is under way
            time.sleep(0.05)
        pi.sshd.drop_connections()  # the listener stays: the device is back at once

    dropper = threading.Thread(target=drop_once)
    dropper.start()
    result = run(pi, "--device-timeout=30")
    dropper.join()
    result.assert_outcomes(passed=1)
    assert marker.exists()
    gone(pi, "slow_test")
    shutil.rmtree(marker.parent)


def test_device_down_is_an_error_for_every_item(pi):
    pi.write("cases_test.c", CASES)
    pi.sshd.kill()
    result = run(pi)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*cannot connect*"])


def test_changed_host_key_is_refused_with_the_fix(pi, tmp_path):
    other = Sshd.create(tmp_path / "other")
    pi.sshd.known_hosts.write_text(
        pi.sshd.known_hosts.read_text().split()[0]
        + " "
        + " ".join((other.root / "host_key.pub").read_text().split()[:2])
        + "\n"
    )
    pi.write("cases_test.c", CASES)
    result = run(pi)
    result.assert_outcomes(errors=3)
    # the known_hosts entry of a device on another port than 22 is `[host]:port`
    result.stdout.fnmatch_lines([f"*host key has CHANGED*ssh-keygen -R '[[]127.0.0.1[]]:{pi.sshd.port}' -f *"])


def test_unknown_host_is_refused_unless_accept_new_is_set(pi):
    pi.sshd.known_hosts.write_text("")
    pi.write("cases_test.c", CASES)
    refused = run(pi)
    refused.assert_outcomes(errors=3)
    refused.stdout.fnmatch_lines(["*unknown host key for*ondevice_ssh_accept_new_host_keys = true*"])
    ini = (pi.path / "tox.ini").read_text()
    (pi.path / "tox.ini").write_text(ini.rstrip("\n") + "\nondevice_ssh_accept_new_host_keys = true\n")
    accepted = run(pi)
    accepted.assert_outcomes(passed=2, failed=1)
    assert f"[127.0.0.1]:{pi.sshd.port} ssh-ed25519" in pi.sshd.known_hosts.read_text()


def test_file_names_with_spaces_and_shell_metacharacters(pi):
    marker = pi.path / "INJECTED"
    name = f"odd name; touch {marker} $(touch {marker})_test.c"
    pi.write(name, CASES)
    result = run(pi, "-v")
    result.assert_outcomes(passed=2, failed=1)
    assert not marker.exists()


def test_data_files_are_pushed_beside_the_binary(pi):
    from test_host_outcomes import DATA_TEST

    pi.write("testdata/golden.txt", "71 -34 99 -20")
    pi.write("ondevice.toml", 'data = ["testdata/golden.txt"]\n')
    pi.write("golden_test.c", DATA_TEST)
    # a second binary, run at the same time, with its own file of the same name
    pi.write("other/testdata/golden.txt", "1 2 3")
    pi.write("other/ondevice.toml", 'data = ["testdata/golden.txt"]\n')
    pi.write("other/other_golden_test.c", DATA_TEST.replace("71 -34 99 -20", "1 2 3"))
    result = run(pi)
    result.assert_outcomes(passed=2)


@pytest.fixture
def small_disk():
    """A 64 KiB file system on the device: a test binary does not fit."""
    where = Path(tempfile.mkdtemp(prefix="ondevice-small-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", str(where)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield where
    subprocess.run(["umount", str(where)], check=True)
    where.rmdir()


def test_disk_full_on_push_is_an_error_naming_the_free_space(pi, small_disk):
    variant(pi, "rpi-small", f'scratch_root = "{small_disk}"')
    pi.write("cases_test.c", CASES)
    result = pi.run(f"--device={pi.sshd.alias}", board="rpi-small")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines([f"*pushing cases_test* failed*KiB free in {small_disk}/ondevice-* on the device*"])
    assert not list(small_disk.glob("ondevice-*/bin/*"))  # no partial binary left taking the room
    assert not list(small_disk.glob("ondevice-*/sessions/*"))  # the session's scratch dir is gone


def test_many_binaries_pushed_ahead_and_run_two_at_a_time(pi):
    """Pushes overlap the runs and two binaries run at once: every verdict still lands on its own item."""
    for i in range(8):
        pi.write(
            f"k{i}_test.c",
            f'#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
            f"TF_LITE_MICRO_TEST(Right{i}) {{ TF_LITE_MICRO_EXPECT_EQ({i}, {i}); }}\n"
            f"TF_LITE_MICRO_TEST(Wrong{i}) {{ TF_LITE_MICRO_EXPECT_EQ({i}, {i + 1}); }}\n"
            "TF_LITE_MICRO_TESTS_END\n",
        )
    # a subprocess with a deadline: a deadlock between the push and run threads must fail, not hang
    result = pi.pytester.runpytest_subprocess(
        f"--board={pi.board}", f"--device={pi.sshd.alias}", "-p", "no:cacheprovider", "-v", timeout=120
    )
    result.assert_outcomes(passed=8, failed=8)
    result.stdout.fnmatch_lines(["*8 binaries run; 8 pushed, 0 already on the device*"])
    for i in range(8):
        result.stdout.fnmatch_lines([f"*k{i}_test.c::Right{i}*PASSED*"])
        result.stdout.fnmatch_lines([f"*k{i}_test.c::Wrong{i}*FAILED*"])


def test_no_key_to_log_in_with_says_how_to_add_one(pi, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/id_* keys
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent
    pi.write("cases_test.c", CASES)
    known = f"UserKnownHostsFile {pi.sshd.known_hosts}"
    config = pi.path / "keyless_config"
    config.write_text(f"Host 127.0.0.1\n    {known}\n")
    ini = (pi.path / "tox.ini").read_text().replace(str(pi.sshd.ssh_config), str(config))
    (pi.path / "tox.ini").write_text(ini)
    result = pi.run(f"--device={pi.sshd.user}@127.0.0.1:{pi.sshd.port}", board=pi.board)
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*no key to log in with*add an IdentityFile for it to ~/.ssh/config*"])


def test_proxyjump_reaches_the_device_and_verifies_the_jump_host_key(pi):
    """ssh_config's ProxyJump: the device behind a jump host (here the same sshd, reached as `localhost`)."""
    s = pi.sshd
    with open(s.ssh_config, "a") as f:
        f.write(
            f"\nHost pi-behind-jump\n    HostName localhost\n    Port {s.port}\n    User {s.user}\n"
            f"    IdentityFile {s.client_key}\n    UserKnownHostsFile {s.known_hosts}\n    ProxyJump {s.alias}\n"
        )
    pi.write("cases_test.c", CASES)
    unknown = pi.run("--device=pi-behind-jump", board=pi.board)  # `localhost` is not in known_hosts yet
    unknown.assert_outcomes(errors=3)
    unknown.stdout.fnmatch_lines([f"*unknown host key for [[]localhost[]]:{s.port}*ssh-keyscan -p {s.port} localhost*"])
    key = s.known_hosts.read_text().split()[1:3]
    with open(s.known_hosts, "a") as f:
        f.write(f"[localhost]:{s.port} {key[0]} {key[1]}\n")
    through = pi.run("--device=pi-behind-jump", board=pi.board)
    through.assert_outcomes(passed=2, failed=1)
    s.known_hosts.write_text(f"[localhost]:{s.port} {key[0]} {key[1]}\n")  # the jump host's key is gone
    jump_unknown = pi.run("--device=pi-behind-jump", board=pi.board)
    jump_unknown.assert_outcomes(errors=3)
    jump_unknown.stdout.fnmatch_lines([f"*unknown host key for [[]127.0.0.1[]]:{s.port}*"])


# -- a shared device: another account, a tampered cache, another session (issue 17, section 1) --------

MUST_FAIL = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(MustFail) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
    TF_LITE_MICRO_TESTS_END
"""

EVIL = """#!/bin/sh
touch {marker}
echo "Testing MustFail"
echo "1/1 tests passed"
echo "~~~ALL TESTS PASSED~~~"
"""


def _attacker_files(tmp: Path, pi) -> tuple[Path, Path]:
    where = Path(tempfile.mkdtemp(prefix="ondevice-attack-"))
    where.chmod(0o777)
    marker = where / "ran-as-victim"
    evil = where / "evil"
    evil.write_text(EVIL.format(marker=marker))
    evil.chmod(0o755)
    return evil, marker


def test_another_account_cannot_swap_the_binary_between_push_and_exec(pi, accounts):
    """The attack on a predictable cache in /tmp: pre-create it 0777, rename a file over every entry."""
    other = accounts()
    evil, marker = _attacker_files(pi.path, pi)
    victims = [f"/tmp/ondevice-cache-{pi.sshd.user}", f"/tmp/ondevice-{pi.sshd.user}"]
    for d in victims:
        pi.sshd.run_as(other, f"mkdir -m 777 {d}")
    swapper = subprocess.Popen(
        ["runuser", "-u", other, "--", "sh", "-c",
         f"while :; do for f in {' '.join(d + '/*' for d in victims)}; do case $f in *'*') continue;; esac; "
         f"cp {evil} $f.x 2>/dev/null && mv -f $f.x $f 2>/dev/null; done; done"],
    )  # fmt: skip
    try:
        pi.write("must_fail_test.c", MUST_FAIL)
        for _ in range(3):
            result = run(pi)
            result.assert_outcomes(failed=1)
        assert not marker.exists(), "the other account's program ran as the device user"
        # a scratch_root where the other account got first is refused, naming path, owner and mode
        refused = pi.run(f"--device={pi.sshd.alias}", board=variant(pi, "rpi-tmp", 'scratch_root = "/tmp"'))
        refused.assert_outcomes(errors=1)
        uid = int(pi.sshd.run_as(other, "id -u").stdout)
        refused.stdout.fnmatch_lines(
            [f"*unsafe directory on the device: /tmp/ondevice-{pi.sshd.user} is owned by uid {uid}*mode 0777*"]
        )
        assert not marker.exists()
    finally:
        swapper.kill()
        swapper.wait()
        for d in victims:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(evil.parent, ignore_errors=True)


def test_a_symlinked_cache_dir_is_refused_and_nothing_of_the_user_is_deleted(pi, accounts):
    """Another account points our cache name at one of our dirs: the prune must not delete our files there."""
    other = accounts()
    own = home(pi) / "precious"
    pi.sshd.run_as(pi.sshd.user, f"mkdir {own} && for i in $(seq 70); do echo $i > {own}/f$i; done")
    for d in (f"/tmp/ondevice-cache-{pi.sshd.user}", f"/tmp/ondevice-{pi.sshd.user}"):
        pi.sshd.run_as(other, f"ln -s {own} {d}")
    try:
        board = variant(pi, "rpi-tmp", 'scratch_root = "/tmp"\ncache_entries = 1')
        for i in range(3):
            pi.write(f"k{i}_test.c", MUST_FAIL.replace("EXPECT_EQ(1, 2)", f"EXPECT_EQ({i}, {i})"))
        result = pi.run(f"--device={pi.sshd.alias}", board=board)
        result.assert_outcomes(errors=3)
        result.stdout.fnmatch_lines([f"*unsafe directory on the device: /tmp/ondevice-{pi.sshd.user} is a symlink*"])
        assert len(list(own.iterdir())) == 70
    finally:
        for d in (f"/tmp/ondevice-cache-{pi.sshd.user}", f"/tmp/ondevice-{pi.sshd.user}"):
            Path(d).unlink(missing_ok=True)


def _cache_entries(pi) -> list[Path]:
    """The device cache's binaries wherever a version of the plugin keeps them."""
    return [
        p
        for d in (device_cache(pi) / "bin", Path(f"/tmp/ondevice-cache-{pi.sshd.user}"))
        if d.is_dir()
        for p in d.iterdir()
        if len(p.name) == 64
    ]


def test_a_tampered_cache_entry_of_the_same_size_is_not_run(pi):
    """Our own account (another tool, a stray test) writes a same-size file under the hash name."""
    pi.write("must_fail_test.c", MUST_FAIL)
    run(pi).assert_outcomes(failed=1)
    (entry,) = _cache_entries(pi)
    size = entry.stat().st_size
    marker = pi.path / "tampered-ran"
    script = EVIL.format(marker=marker).encode()
    entry.write_bytes(script + b"#" * (size - len(script)))
    assert entry.stat().st_size == size
    again = run(pi)
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*1 pushed, 0 already on the device*"])  # verified, found wrong, pushed again
    assert not marker.exists()


def test_one_sessions_prune_spares_what_another_live_session_holds(pi):
    """A farm runs many sessions per device: A has pushed a binary it has not run yet when B prunes."""
    go = Path(tempfile.mkdtemp(prefix="ondevice-go-")) / "go"
    go.parent.chmod(0o777)
    pi.write(
        "a/a0_test.c",
        f"""
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Waits) {{ for (int i = 0; i < 600 && access("{go}", F_OK) != 0; i++) usleep(100000); }}
        TF_LITE_MICRO_TESTS_END
        """,
    )
    pi.write("a/a1_test.c", MUST_FAIL.replace("EXPECT_EQ(1, 2)", "EXPECT_EQ(2, 2)"))
    one = variant(pi, "rpi-one", "device_jobs = 1")
    a = subprocess.Popen(
        [sys.executable, "-m", "pytest", f"--board={one}", f"--device={pi.sshd.alias}", "-p", "no:cacheprovider", "a"],
        cwd=pi.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: "a0_test" in pi.sshd.ps() and len(_cache_entries(pi)) >= 2, 120, "A runs a0, a1 pushed")
        for i in range(3):
            pi.write(f"b/b{i}_test.c", MUST_FAIL.replace("EXPECT_EQ(1, 2)", f"EXPECT_EQ({i}, {i})"))
        b = pi.run(f"--device={pi.sshd.alias}", "b", board=variant(pi, "rpi-prune", "cache_entries = 1"))
        b.assert_outcomes(passed=3)
        go.touch()
        out, _ = a.communicate(timeout=120)
    finally:
        a.kill()
        a.wait()
        shutil.rmtree(go.parent, ignore_errors=True)
    assert a.returncode == 0, out
    assert "2 passed" in out, out


# -- infrastructure is never a pass, a failure or a traceback (issue 17, section 2) -------------------


@pytest.fixture
def noexec_dir():
    where = Path(tempfile.mkdtemp(prefix="ondevice-noexec-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,mode=1777", "tmpfs", str(where)]).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)
    where.rmdir()


def test_a_noexec_scratch_root_is_an_error_naming_the_fix(pi, noexec_dir):
    pi.write("cases_test.c", CASES)
    result = pi.run(f"--device={pi.sshd.alias}", board=variant(pi, "rpi-noexec", f'scratch_root = "{noexec_dir}"'))
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*cannot execute cases_test*noexec*set scratch_root*"])


def test_exec_wrapper_missing_is_an_error_and_a_path_with_a_space_works(pi):
    pi.write("cases_test.c", CASES)
    missing = pi.run(f"--device={pi.sshd.alias}", board=variant(pi, "rpi-nowrap", 'exec_wrapper = "qemu-nowhere"'))
    missing.assert_outcomes(errors=3)
    missing.stdout.fnmatch_lines(["*exec_wrapper 'qemu-nowhere' is not on the device*"])
    spaced = Path(tempfile.mkdtemp(prefix="ondevice-wrap-")) / "my tools"
    try:
        spaced.mkdir()
        spaced.parent.chmod(0o755)
        (spaced / "qemu aarch64").symlink_to(shutil.which("qemu-aarch64"))
        board = variant(pi, "rpi-spaced", f'exec_wrapper = "{spaced}/qemu aarch64"')
        pi.run(f"--device={pi.sshd.alias}", board=board).assert_outcomes(passed=2, failed=1)
    finally:
        shutil.rmtree(spaced.parent)


def test_a_file_the_device_cannot_execute_is_an_error_naming_the_architecture(pi):
    """An ELF for a machine the device's kernel does not run (here RISC-V, with no binfmt_misc
    entry): execvp hands it to sh as a script, which exits 2 with a syntax error. That is the
    device's problem (wrong board, or qemu-user not registered), never a failing test."""
    foreign = Path(tempfile.mkdtemp(prefix="ondevice-foreign-")) / "riscv-program"
    try:
        foreign.parent.chmod(0o755)
        elf = bytearray(Path("/bin/true").read_bytes())
        elf[18:20] = (0xF3).to_bytes(2, "little")  # e_machine: RISC-V
        foreign.write_bytes(bytes(elf))
        foreign.chmod(0o755)
        pi.write("cases_test.c", CASES)
        result = pi.run(f"--device={pi.sshd.alias}", board=variant(pi, "rpi-foreign", f'exec_wrapper = "{foreign}"'))
        result.assert_outcomes(errors=3)
        result.stdout.fnmatch_lines(
            [
                "*the device cannot execute riscv-program: it is an ELF file for RISC-V (64-bit), "
                "and the device's kernel (x86_64) has no binfmt_misc handler for it*board's (aarch64)*"
            ]
        )
    finally:
        shutil.rmtree(foreign.parent)


def test_a_binary_gone_from_the_device_cache_is_pushed_again_not_failed(pi):
    """The first binary deletes every other entry of the cache before the second one runs."""
    pi.write(
        "a0_test.c",
        """
        #include <dirent.h>
        #include <limits.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>
        #include "micro_test.h"
        static char *self;
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(DeletesTheOthers) {
          char dir[PATH_MAX], path[PATH_MAX * 2];
          realpath(self, dir);
          *strrchr(dir, '/') = 0;
          for (int i = 0; i < 100; i++) {  /* until the second binary is there */
            int n = 0; DIR *d = opendir(dir); struct dirent *e;
            while ((e = readdir(d))) n += strlen(e->d_name) == 64;
            closedir(d);
            if (n >= 2) break;
            usleep(100000);
          }
          DIR *d = opendir(dir); struct dirent *e;
          char own[PATH_MAX]; realpath(self, own);
          while ((e = readdir(d))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (strlen(e->d_name) == 64 && strcmp(path, own) != 0) unlink(path);
          }
          closedir(d);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    src = (pi.path / "a0_test.c").read_text()
    # argv[0] without touching the header: a constructor reads /proc/self/cmdline
    src = src.replace(
        "static char *self;",
        "static char *self; static char buf[4096];\n"
        '__attribute__((constructor)) static void who(void) { FILE *f = fopen("/proc/self/cmdline", "r");\n'
        "  size_t n = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[n] = 0; self = buf;\n"
        '  if (strstr(self, "qemu")) self += strlen(self) + 1; }',
    )
    (pi.path / "a0_test.c").write_text(src)
    pi.write("b1_test.c", MUST_FAIL.replace("EXPECT_EQ(1, 2)", "EXPECT_EQ(2, 2)"))
    result = pi.run(f"--device={pi.sshd.alias}", "-v", board=variant(pi, "rpi-one", "device_jobs = 1"))
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_pytest_ended_by_a_signal_mid_run_leaves_nothing_running_on_the_device(pi, sig):
    """A CI cancel, `timeout`, a closed terminal, kill -9: the device side ends with the connection
    (sshd does not signal a no-pty session), so it ends whatever the plugin could still do."""
    pi.write("hang_test.c", HANG)
    proc = _start(pi)
    wait_until(lambda: pi.sshd.ps().count("hang_test") >= 2, 60, "the binary and its child run")
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"pytest did not end on {sig.name}") from None
    gone(pi, "hang_test")
    wait_until(lambda: not _scratch_dirs(pi), 10, "the killed session's dir is removed")
    if sig != signal.SIGKILL:  # a signal it can act on: its run dir goes too (kill -9 leaves it in .tmp)
        assert not list((pi.path / ".tmp").iterdir())


def test_what_a_killed_session_left_is_ended_by_the_next_session(pi):
    """Its keeper killed too (OOM, kill -9 of everything): the next session ends its processes, removes its dir."""
    pi.write("hang_test.c", HANG)
    proc = _start(pi)
    wait_until(lambda: pi.sshd.ps().count("hang_test") >= 2, 60, "the binary and its child run")
    keepers = []
    for keeper in (d / ".keeper" for d in (device_cache(pi) / "sessions").iterdir()):
        keepers.append(int(keeper.read_text().split()[0]))
    for pid in set(keepers):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait()
    time.sleep(0.5)
    assert "hang_test" in pi.sshd.ps()  # orphaned: nothing on the device ended it
    pi.write("hang_test.c", CASES)
    run(pi).assert_outcomes(passed=2, failed=1)
    gone(pi, "hang_test")
    assert not _scratch_dirs(pi)


HANG = """
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Hangs) {
      if (fork() == 0) { setsid(); for (;;) sleep(1); }
      for (;;) sleep(1);
    }
    TF_LITE_MICRO_TESTS_END
"""


def _start(pi) -> subprocess.Popen:
    """pytest as a terminal starts it: a hang-up ignored by whoever runs these tests (nohup)
    is not inherited (the plugin rightly leaves an ignored SIGHUP alone)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", f"--board={pi.board}", f"--device={pi.sshd.alias}", "-p", "no:cacheprovider"],
        cwd=pi.path,
        env=private_tmpdir(pi.path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )


def test_a_child_that_calls_setsid_does_not_survive_the_timeout(pi):
    pi.write("hang_test.c", HANG)
    result = run(pi, "--device-timeout=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 2s*"])
    gone(pi, "hang_test")


def test_a_link_lost_under_two_running_binaries_is_one_reconnect_and_both_pass(pi):
    marks = Path(tempfile.mkdtemp(prefix="ondevice-marker-"))
    marks.chmod(0o777)
    for i in range(2):
        pi.write(
            f"slow{i}_test.c",
            f"""
            #include <fcntl.h>
            #include <unistd.h>
            #include "micro_test.h"
            TF_LITE_MICRO_TESTS_BEGIN
            TF_LITE_MICRO_TEST(Slow{i}) {{
              if (access("{marks}/{i}", F_OK) != 0) {{  /* the first attempt hangs until dropped */
                close(open("{marks}/{i}", O_CREAT | O_WRONLY, 0644));
                sleep(60);
              }}
            }}
            TF_LITE_MICRO_TESTS_END
            """,
        )

    def drop_once():
        wait_until(lambda: (marks / "0").exists() and (marks / "1").exists(), 60, "both binaries run")
        pi.sshd.drop_connections()

    dropper = threading.Thread(target=drop_once)
    dropper.start()
    start = time.monotonic()
    result = run(pi, "--device-timeout=30")
    dropper.join()
    assert time.monotonic() - start < 40
    result.assert_outcomes(passed=2)
    assert not _scratch_dirs(pi)
    shutil.rmtree(marks)


def test_a_binary_that_closes_its_output_and_keeps_running_is_waited_for(pi):
    pi.write(
        "quiet_test.c",
        """
        #include <unistd.h>
        #include "micro_test.h"
        __attribute__((destructor)) static void linger(void) { close(1); close(2); sleep(6); }
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Passes) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = run(pi, "--device-timeout=30")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 binary run; 1 pushed, 0 already on the device*"])


@pytest.mark.parametrize("shell", ["/usr/bin/fish", "/usr/sbin/nologin"])
def test_the_device_accounts_login_shell_is_not_ours_to_rely_on(pi, accounts, shell):
    """fish parses commands its own way; nologin refuses them: an error saying so, never a test failure."""
    if not Path(shell).exists():
        pytest.skip(f"{shell} is not installed")
    user = accounts(shell)
    pi.write("cases_test.c", CASES)
    result = pi.run(f"--device={user}@127.0.0.1:{pi.sshd.port}", board=pi.board)
    if shell.endswith("fish"):
        result.assert_outcomes(passed=2, failed=1)
    else:
        result.assert_outcomes(errors=3)
        result.stdout.fnmatch_lines(["*cannot run sh commands*currently not available*login shell*"])


def test_a_scratch_root_that_cannot_hold_the_cache_is_an_error_naming_the_fix(pi):
    pi.write("cases_test.c", CASES)
    missing = pi.run(f"--device={pi.sshd.alias}", board=variant(pi, "rpi-nodir", 'scratch_root = "/nonexistent"'))
    missing.assert_outcomes(errors=3)
    missing.stdout.fnmatch_lines(["*cannot set up the binary cache under /nonexistent*No such file*set scratch_root*"])
    readonly = pi.run(f"--device={pi.sshd.alias}", board=variant(pi, "rpi-ro", 'scratch_root = "/proc"'))
    readonly.assert_outcomes(errors=3)
    readonly.stdout.fnmatch_lines(["*cannot set up the binary cache under /proc on the device*set scratch_root*"])


# -- pushes ----------------------------------------------------------------------------------------


def _sftp_to(sshd: Sshd):
    from pytest_ondevice.transports.sftp_push import OnePacketSftp

    client = paramiko.SSHClient()
    client.load_host_keys(str(sshd.known_hosts))
    client.connect(
        "127.0.0.1", sshd.port, sshd.user, key_filename=str(sshd.client_key), allow_agent=False, look_for_keys=False
    )
    return client, OnePacketSftp.from_transport(client.get_transport())


def test_a_push_sends_each_write_in_one_packet_and_lands_whole(sshd, tmp_path):
    """paramiko's put() splits every 32 KiB write over two SSH packets; ours fits one, and the
    bytes on the device are the bytes pushed, whatever the size."""
    client, sftp = _sftp_to(sshd)
    chan = sftp.get_channel()
    sent: list[int] = []
    real_send = chan.send
    chan.send = lambda data: sent.append(n := real_send(data)) or n
    target = Path(os.path.expanduser(f"~{sshd.user}"))
    try:
        for size in (0, 1, 32640, 32641, 1_000_003):
            local = tmp_path / f"blob-{size}"
            local.write_bytes(os.urandom(size))
            sent.clear()
            attr = sftp.put(str(local), f"blob-{size}")
            assert attr.st_size == size
            assert (target / f"blob-{size}").read_bytes() == local.read_bytes()
            # open, the writes (each at most a packet: at least 32000 bytes each), close, stat
            assert len(sent) <= -(-size // 32000) + 3, sent
    finally:
        client.close()


def test_a_push_the_device_cut_short_is_an_error(sshd, tmp_path, monkeypatch):
    """The size the device reports confirms the push, as paramiko's put() does."""
    client, sftp = _sftp_to(sshd)
    local = tmp_path / "blob"
    local.write_bytes(b"x" * 100_000)
    real_stat = sftp.stat
    monkeypatch.setattr(sftp, "stat", lambda path: setattr(a := real_stat(path), "st_size", 99_999) or a)
    try:
        with pytest.raises(OSError, match="size mismatch"):
            sftp.put(str(local), "blob")
    finally:
        client.close()


def test_a_cuda_test_on_a_jetson_without_a_gpu_is_an_error_over_ssh_too(pi):
    """The Jetson's CUDA binary (dynamically linked: the CUDA runtime loads the device's
    driver) runs on the loopback device, finds no GPU, and says so on the stamped channel."""
    from pytest_ondevice.compiling import cuda
    from pytest_ondevice.config.board import BoardRegistry

    try:
        cuda.toolkit(BoardRegistry().get("jetson-cuda"))
    except cuda.CudaError:
        pytest.skip("needs the CUDA wheels: scripts/setup.sh --cuda")
    wrapper = '\n[transport]\nexec_wrapper = "qemu-aarch64 -L /usr/aarch64-linux-gnu"\n' if pi.board != "rpi" else ""
    pi.write("boards/orin.toml", f'extends = "jetson-cuda"{wrapper}\n')
    shutil.copytree(Path(__file__).parent.parent / "examples" / "cuda", pi.path / "cuda")
    result = pi.run(f"--device={pi.sshd.alias}", "cuda", board="orin")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(["orin: no usable CUDA GPU: cudaErrorInsufficientDriver (35)*"])


def test_a_model_compiled_ahead_of_time_matches_tensorflow_over_ssh(pi):
    """examples/aot on the loopback Pi: tfcompile's aarch64 kernels, linked with the entry
    the plugin generates, run there as on qemu-user."""
    from pytest_ondevice.compiling import aot

    try:
        aot.compiler()
    except aot.AotError:
        pytest.skip("needs TensorFlow's tfcompile: scripts/setup.sh --aot")
    shutil.copytree(
        Path(__file__).parent.parent / "examples" / "aot", pi.path / "aot", ignore=shutil.ignore_patterns("rust")
    )
    result = pi.run(f"--device={pi.sshd.alias}", "aot", board=pi.board)
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("offered", [None, "aes128-ctr"])
def test_the_link_is_aes_gcm_where_the_device_offers_it_and_still_opens_where_not(sshd, offered):
    """GCM's MAC is done in OpenSSL with the cipher; CTR's HMAC is compared in Python on
    every packet. A device without GCM (an old dropbear) must still be reached."""
    from types import SimpleNamespace

    from pytest_ondevice.transports.ssh import SshTransport

    if offered:
        config = sshd.root / "sshd_config"
        config.write_text(config.read_text() + f"Ciphers {offered}\n")
        sshd.kill()
        sshd.start()
    transport = SshTransport(SimpleNamespace(name="rpi"), sshd.alias, {"ssh_config": str(sshd.ssh_config)})
    transport.open()
    try:
        assert transport.conn.client.get_transport().remote_cipher == (offered or "aes128-gcm@openssh.com")
    finally:
        transport.close()
