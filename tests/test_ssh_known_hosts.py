"""Host keys checked as OpenSSH checks them, against a real sshd on loopback: the files
`UserKnownHostsFile` and `GlobalKnownHostsFile` name (else OpenSSH's defaults) and no
others; any listed key of the host lets it in; a changed key names the file that holds
it. Where the files are named by path, `ssh -F` with the same config is asked too, and
both must agree. `~` is $HOME here (a throwaway one): OpenSSH reads the account's home
whatever $HOME says, so it is not asked about the defaults under `~`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_ssh import CASES, accounts, board_for_device, pi, run, sshd  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A $HOME of the test's own: its ~/.ssh is what a user's would be, and nobody's real one."""
    where = tmp_path / "home"
    (where / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(where))
    return where


def device_key(server) -> str:
    """The device's known_hosts line, as `ssh-keyscan` writes it."""
    kind, key = (server.root / "host_key.pub").read_text().split()[:2]
    return f"[127.0.0.1]:{server.port} {kind} {key}\n"


def stale_key(server, tmp_path: Path) -> str:
    """A known_hosts line for the device with a key it does not have (before a reinstall)."""
    path = tmp_path / "old_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    kind, key = path.with_suffix(".pub").read_text().split()[:2]
    return f"[127.0.0.1]:{server.port} {kind} {key}\n"


def configure(server, known: str) -> Path:
    """The device's `Host` block with the given known_hosts lines (none: OpenSSH's defaults)."""
    server.ssh_config.write_text(
        f"Host {server.alias}\n    HostName 127.0.0.1\n    Port {server.port}\n    User {server.user}\n"
        f"    IdentityFile {server.client_key}\n{known}"
    )
    return server.ssh_config


def openssh_connects(server) -> tuple[bool, str]:
    """What `ssh -F` makes of the same config (BatchMode: an unknown key is refused, as ours is)."""
    done = subprocess.run(
        ["ssh", "-F", str(server.ssh_config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", server.alias, "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode == 0, done.stderr


def test_a_named_user_known_hosts_file_is_the_only_one_read(pi, home, tmp_path):  # noqa: F811 - the fixture
    """The key in ~/.ssh/known_hosts does not count when the Host names another file."""
    alt = tmp_path / "alt_known_hosts"
    alt.write_text("")
    (home / ".ssh/known_hosts").write_text(device_key(pi.sshd))
    configure(pi.sshd, f"    UserKnownHostsFile {alt}\n    GlobalKnownHostsFile {tmp_path / 'no_global'}\n")
    pi.write("cases_test.c", CASES)
    refused = run(pi)
    refused.assert_outcomes(errors=3)
    port = pi.sshd.port
    refused.stdout.fnmatch_lines(
        [f"*unknown host key for [[]127.0.0.1[]]:{port} (not in {alt})*ssh-keyscan -p {port} 127.0.0.1 >> {alt}*"]
    )
    assert openssh_connects(pi.sshd)[0] is False


def test_a_stale_key_in_a_file_the_host_does_not_name_changes_nothing(pi, home, tmp_path):  # noqa: F811 - the fixture
    alt = tmp_path / "alt_known_hosts"
    alt.write_text(device_key(pi.sshd))
    (home / ".ssh/known_hosts").write_text(stale_key(pi.sshd, tmp_path))
    configure(pi.sshd, f"    UserKnownHostsFile {alt}\n    GlobalKnownHostsFile {tmp_path / 'no_global'}\n")
    pi.write("cases_test.c", CASES)
    run(pi).assert_outcomes(passed=2, failed=1)
    assert openssh_connects(pi.sshd)[0] is True


def test_a_changed_key_names_the_file_that_holds_it_and_any_listed_key_lets_the_device_in(pi, home, tmp_path):  # noqa: F811 - the fixture
    first, second = tmp_path / "known_first", tmp_path / "known_second"
    first.write_text("")
    second.write_text("# the lab's keys\n" + stale_key(pi.sshd, tmp_path))
    configure(pi.sshd, f"    UserKnownHostsFile {first} {second}\n    GlobalKnownHostsFile {tmp_path / 'no_global'}\n")
    pi.write("cases_test.c", CASES)
    refused = run(pi)
    refused.assert_outcomes(errors=3)
    name = f"[[]127.0.0.1[]]:{pi.sshd.port}"
    refused.stdout.fnmatch_lines(
        [f"*host key has CHANGED for {name}*in {second} line 2;*ssh-keygen -R '{name}' -f {second}"]
    )
    assert f"-f {first}" not in refused.stdout.str()
    connects, said = openssh_connects(pi.sshd)
    assert not connects and f"Offending ED25519 key in {second}:2" in said
    # the right key in the first file, the stale one still in the second: OpenSSH lets it in
    first.write_text(device_key(pi.sshd))
    run(pi).assert_outcomes(passed=2, failed=1)
    assert openssh_connects(pi.sshd)[0] is True


def test_without_user_known_hosts_file_openssh_defaults_are_read(pi, home, tmp_path):  # noqa: F811 - the fixture
    """~/.ssh/known_hosts2 is one of OpenSSH's defaults; a GlobalKnownHostsFile counts too."""
    configure(pi.sshd, "")
    (home / ".ssh/known_hosts2").write_text(device_key(pi.sshd))
    pi.write("cases_test.c", CASES)
    run(pi).assert_outcomes(passed=2, failed=1)
    (home / ".ssh/known_hosts2").unlink()
    global_file = tmp_path / "ssh_known_hosts"
    global_file.write_text(device_key(pi.sshd))
    configure(pi.sshd, f"    UserKnownHostsFile {tmp_path / 'empty'}\n    GlobalKnownHostsFile {global_file}\n")
    run(pi).assert_outcomes(passed=2, failed=1)
    assert openssh_connects(pi.sshd)[0] is True


def test_an_unknown_host_key_is_said_once_in_full_on_a_run_of_eleven_items(pi):  # noqa: F811 - the fixture
    """Each item is an error, one shows the fix, the others point at it; one device is no
    fleet: nothing is quarantined, and no item says so."""
    pi.sshd.known_hosts.write_text("")
    for i, cases in enumerate((3, 3, 3, 2)):
        body = "".join(f"TF_LITE_MICRO_TEST(K{i}Case{n}) {{ TF_LITE_MICRO_EXPECT(1); }}\n" for n in range(cases))
        pi.write(f"k{i}_test.c", f'#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n{body}TF_LITE_MICRO_TESTS_END\n')
    result = run(pi)
    result.assert_outcomes(errors=11)
    # the items' reports: the short summary repeats them, whole where CI is set (pytest cuts them only on a terminal)
    text = result.stdout.str().split("short test summary info")[0]
    assert text.count("ondevice_ssh_accept_new_host_keys = true") == 1, text
    assert text.count(f"unknown host key for [127.0.0.1]:{pi.sshd.port} ... (the same error as k") == 10, text
    assert "quarantine" not in text and "set aside" not in text


def test_hashed_names_patterns_and_negations_match_as_in_openssh(tmp_path):
    from paramiko.hostkeys import HostKeys
    from pytest_ondevice.transports.ssh import KnownHosts

    path = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    kind, key = path.with_suffix(".pub").read_text().split()[:2]
    known_file = tmp_path / "known_hosts"
    known_file.write_text(
        f"{HostKeys.hash_host('[pi.lab]:2222')} {kind} {key}\n"
        f"*.lab,!bad.lab {kind} {key}\n"
        f"@revoked * {kind} {key}\n"
        "not a key line\n"
    )
    known = KnownHosts([known_file], [tmp_path / "missing"])
    assert [e.line for e in known.entries("[pi.lab]:2222")] == [1]  # `*.lab` is no name with a port
    assert [e.line for e in known.entries("Other.LAB")] == [2]  # names are matched without case
    assert known.entries("bad.lab") == [] and known.entries("pi.lab.example") == []
    assert known.key_types("x.lab") == [kind]
