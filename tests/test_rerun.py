"""Tests written to misbehave, on real sshds on loopback: a rerun is never a silent pass,
the infrastructure is judged only from what a test cannot write, and one bad binary
never takes a fleet down."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

import fabric  # noqa: F401 - imported once, outside pytester's in-process runs
import paramiko  # noqa: F401
import pytest
import test_ssh
from conftest import QUIET
from support.sshd import Sshd, new_account, remove_account
from test_fleet import SLEEPER, junit_cases

pytestmark = pytest.mark.slow
accounts, board_for_device, pi, sshd = test_ssh.accounts, test_ssh.board_for_device, test_ssh.pi, test_ssh.sshd

# kills the SSH session it runs in (its parent: sshd's session process) the first time,
# standing for an OOM-killed sshd or a board that panics; passes when run again
KILLS_ITS_SESSION_ONCE = """
    #include <signal.h>
    #include <stdio.h>
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(SurvivesOnTheRerun) {{
      if (access("{mark}", F_OK) != 0) {{
        FILE *f = fopen("{mark}", "w");
        fclose(f);
        printf("first attempt: taking the session down\\n");
        fflush(stdout);
        usleep(300000);  /* the line reaches the log before the session goes */
        kill(getppid(), SIGKILL);
        sleep(10);
      }}
      TF_LITE_MICRO_EXPECT_EQ(1, 1);
    }}
    TF_LITE_MICRO_TESTS_END
"""

KILLS_ITS_SESSION = """
    #include <signal.h>
    #include <unistd.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(TakesTheSessionDown) {
      kill(getppid(), SIGKILL);
      sleep(10);
      TF_LITE_MICRO_EXPECT_EQ(1, 1);
    }
    TF_LITE_MICRO_TESTS_END
"""

# fails the way a CLI program fails on a bad config file: the text sh prints for a file the
# kernel refused, and exit status 2, before main
SAYS_SYNTAX_ERROR = """
    #include <stdio.h>
    #include <stdlib.h>
    #include "micro_test.h"
    __attribute__((constructor)) static void read_config(int argc, char **argv) {
      fprintf(stderr, "%s: syntax error in /etc/app.conf, line 3\\n", argv[0]);
      exit(2);
    }
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(Works) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
    TF_LITE_MICRO_TESTS_END
"""


@pytest.fixture
def mark():
    path = Path(tempfile.gettempdir()) / f"ondevice-rerun-{secrets.token_hex(6)}"
    yield path
    path.unlink(missing_ok=True)


def run_on_pi(pi, *args):
    return pi.run(f"--device={pi.sshd.alias}", "--junitxml=j.xml", *args, board=pi.board)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_a_pass_after_the_binary_took_its_session_down_is_a_flagged_rerun(pi, mark, xdist):
    pi.write("session_test.c", KILLS_ITS_SESSION_ONCE.format(mark=mark))
    result = run_on_pi(pi, *xdist)
    result.assert_outcomes(passed=1)
    last = result.outlines[-1]
    assert re.search(r"1 passed, 1 rerun", last), last
    result.stdout.fnmatch_lines(
        [
            "*ondevice reruns*",
            f"session_test.c on {pi.board}: tried 2 times*",
            f"  cut short on {pi.board}: *connection lost while the binary ran (log: *session_test.c.attempt1.log)",
            "  flaky, not clean: *while the binary ran*",
        ]
    )
    case = junit_cases(pi.path / "j.xml")[f"session_test.c.SurvivesOnTheRerun[{pi.board}]"]
    assert "connection lost while the binary ran" in case["rerun"]
    assert "flaky" in case
    logs = pi.path / "_build" / pi.board / "logs"
    assert "taking the session down" in (logs / "session_test.c.attempt1.log").read_text()  # every attempt kept
    assert "taking the session down" not in (logs / "session_test.c.log").read_text()


def test_strict_reruns_makes_a_pass_after_a_rerun_an_error(pi, mark):
    pi.write("session_test.c", KILLS_ITS_SESSION_ONCE.format(mark=mark))
    result = run_on_pi(pi, "--strict-reruns")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*SurvivesOnTheRerun passed only after its binary was tried 2 times (--strict-reruns*"]
    )


def test_a_binary_that_prints_what_sh_prints_for_a_foreign_file_fails_it_is_not_the_device(pi):
    pi.write("config_test.c", SAYS_SYNTAX_ERROR)
    result = run_on_pi(pi)
    # its own failure (the case, and the binary as a whole): not an infrastructure error, not retried
    result.assert_outcomes(failed=2)
    assert "rerun" not in result.outlines[-1]
    result.stdout.fnmatch_lines(["*Works*", "*its output never declared the run's nonce*exited with code 2*"])


@pytest.fixture
def farm3(project, board_for_device):
    """Three live Pis (pi-1..pi-3), each its own sshd and account, in one ssh_config."""
    roots, servers, users = [], [], []
    for n in (1, 2, 3):
        root = Path(tempfile.mkdtemp(prefix="ondevice-farm-"))
        user = new_account() if os.geteuid() == 0 else None
        users += [user] if user else []
        roots.append(root)
        servers.append(Sshd.create(root, alias=f"pi-{n}", user=user).start())
    config = project.path / "ssh_config"
    config.write_text("\n".join(s.ssh_config.read_text().split("\nHost 127.0.0.1")[0] for s in servers))
    board, board_file = board_for_device
    if board_file:
        project.write(f"boards/{board}.toml", board_file)
    project.pytester.makeini(
        f"[pytest]\nondevice_build_dir = {project.path / '_build'}\nondevice_cache_dir = {project.path / '_cache'}\n"
        f"ondevice_ssh_config = {config}\nondevice_boards = boards\n"
    )
    lines = ['[fleet]\nlease_dir = "leases"\nquarantine_after = 2\n']
    # one binary at a time per device: a binary that breaks the link takes its co-runners' runs
    # with it (they are rerun, and may be named suspects too: see the README)
    lines += [f'[device.pi-{n}]\nboard = "{board}"\naddress = "pi-{n}"\njobs = 1\n' for n in (1, 2, 3)]
    project.write("farm.toml", "\n".join(lines))
    yield project
    for server in servers:
        server.kill()
    for user in users:
        remove_account(user)
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def test_two_binaries_that_break_their_sessions_are_the_suspects_and_no_device_is_quarantined(farm3):
    farm3.write("bad1_test.c", KILLS_ITS_SESSION)
    farm3.write("bad2_test.c", KILLS_ITS_SESSION)
    for name in "abcd":
        farm3.write(f"{name}_test.c", SLEEPER.format(ms=1))
    result = farm3.pytester.runpytest("--fleet=farm.toml", "--junitxml=j.xml", "-p", "no:cacheprovider", *QUIET)
    result.assert_outcomes(passed=8, errors=2)  # every honest case ran: no device was set aside
    text = result.stdout.str()
    assert "ondevice quarantine" not in text
    for bad in ("bad1_test.c", "bad2_test.c"):  # each named once as the suspect, with two devices
        assert re.search(bad + r" is the suspect, not the devices: it broke off on pi-\d and pi-\d", text), text
    cases = junit_cases(farm3.path / "j.xml")
    assert {p["device"] for name, p in cases.items() if not name.startswith("bad")} <= {"pi-1", "pi-2", "pi-3"}
