"""A throwaway OpenSSH server on loopback: the "Raspberry Pi" of the SSH tests.

A real `sshd` (Debian's openssh-server) with its own host key, config and
authorized key, started in the foreground and stopped by the test; no system
service is touched. When run as root the device account is a dedicated plain
user (`/bin/sh`, no shell rc files); otherwise it is the current user.

The device runs aarch64 binaries through binfmt_misc: an entry of our own that
hands aarch64 ELF files to `qemu-aarch64` (registered while the tests run,
removed afterwards). Where binfmt_misc cannot be used, `exec_wrapper` names the
fallback: the SSH transport's option to put `qemu-aarch64` before each binary.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
DEVICE_USER = "ondevice-pi"
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# name, interpreter, ELF magic and mask (as qemu's qemu-binfmt-conf.sh registers them)
BINFMT_ENTRIES = [
    (
        "ondevice-test-aarch64",
        "qemu-aarch64",
        r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
        r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
    ),
    (
        "ondevice-test-arm",
        "qemu-arm",
        r"\x7fELF\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x28\x00",
        r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def device_user(name: str = DEVICE_USER, shell: str = "/bin/sh") -> str:
    """A plain account on the "device" (root only; otherwise the current user is the device)."""
    if os.geteuid() != 0:
        return getpass.getuser()
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", shell, name], check=True, capture_output=True)
    subprocess.run(["usermod", "--shell", shell, name], check=True, capture_output=True)
    # '*': no password, but not locked ('!' is refused for key logins with UsePAM no)
    subprocess.run(["usermod", "-p", "*", name], check=True, capture_output=True)
    return name


def new_account(shell: str = "/bin/sh") -> str:
    """A fresh account of its own, for one test: its home, cache and processes are no other test's."""
    return device_user(f"odt-{os.getpid() % 100000}-{secrets.token_hex(3)}", shell)


def end_processes(user: str) -> None:
    """Kill what an account still runs (by pid, polled until gone): the next test starts clean."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = subprocess.run(["ps", "-u", user, "-o", "pid=,stat="], capture_output=True, text=True).stdout
        pids = [int(p) for p, st in (line.split()[:2] for line in out.splitlines()) if not st.startswith("Z")]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    raise RuntimeError(f"processes of {user} survived SIGKILL for 10 s")


def remove_account(user: str) -> None:
    end_processes(user)
    subprocess.run(["userdel", "--remove", user], capture_output=True)


class BinfmtLease:
    """binfmt_misc entries shared by concurrent test processes (xdist): the last one out removes them."""

    DIR = Path("/run/ondevice-binfmt-users")

    def __enter__(self) -> bool:
        self.DIR.mkdir(exist_ok=True)
        (self.DIR / str(os.getpid())).touch()
        return enable_binfmt()

    def __exit__(self, *exc: object) -> None:
        (self.DIR / str(os.getpid())).unlink(missing_ok=True)
        others = [p for p in self.DIR.iterdir() if p.name.isdigit() and Path(f"/proc/{p.name}").exists()]
        if not others:
            disable_binfmt()


def enable_binfmt() -> bool:
    """Let the device exec ARM ELF files directly; False where the kernel won't."""
    if os.geteuid() != 0 or shutil.which("qemu-aarch64") is None:
        return False
    if not (BINFMT_DIR / "register").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)], capture_output=True)
    for name, interpreter, magic, mask in BINFMT_ENTRIES:
        if (BINFMT_DIR / name).exists():
            continue
        qemu = shutil.which(interpreter)
        try:
            (BINFMT_DIR / "register").write_text(f":{name}:M::{magic}:{mask}:{qemu}:\n")
        except OSError:
            return False
    return all((BINFMT_DIR / name).exists() for name, *_ in BINFMT_ENTRIES)


def disable_binfmt() -> None:
    for name, *_ in BINFMT_ENTRIES:
        with contextlib.suppress(OSError):
            if (BINFMT_DIR / name).exists():
                (BINFMT_DIR / name).write_text("-1\n")


@dataclass
class Sshd:
    """A running sshd plus the client files a user would have (~/.ssh/config, known_hosts)."""

    root: Path
    port: int
    user: str
    alias: str
    proc: subprocess.Popen | None = None
    others: tuple[str, ...] = ()  # more accounts on the same device (another user of a shared board)

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.root / "client_key"

    @classmethod
    def create(cls, root: Path, alias: str = "testpi", user: str | None = None, others: tuple[str, ...] = ()) -> Sshd:
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        server = cls(root, free_port(), user or device_user(), alias, others=others)
        _keygen(root / "host_key")
        _keygen(server.client_key)
        auth = root / "authorized_keys"
        auth.write_text((root / "client_key.pub").read_text())
        auth.chmod(0o644)
        (root / "sshd_config").write_text(
            f"""Port {server.port}
ListenAddress 127.0.0.1
HostKey {root / "host_key"}
PidFile {root / "sshd.pid"}
AuthorizedKeysFile {auth}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
AllowUsers {" ".join((server.user, *others))} odt-*
Subsystem sftp internal-sftp
LogLevel ERROR
"""
        )
        server.write_client_files()
        return server

    def write_client_files(self) -> None:
        """What `~/.ssh/config` and `known_hosts` hold on a user's machine."""
        self.ssh_config.write_text(
            f"""Host {self.alias}
    HostName 127.0.0.1
    Port {self.port}
    User {self.user}
    IdentityFile {self.client_key}
    UserKnownHostsFile {self.known_hosts}

Host 127.0.0.1
    IdentityFile {self.client_key}
    UserKnownHostsFile {self.known_hosts}
"""
        )
        host_pub = (self.root / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")

    def start(self) -> Sshd:
        Path("/run/sshd").mkdir(exist_ok=True)
        log = open(self.root / "sshd.log", "ab")  # noqa: SIM115 - lives as long as sshd
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def kill(self) -> None:
        """Kill sshd and every session it serves: the device drops off the network."""
        if self.proc is None:
            return
        os.kill(self.proc.pid, signal.SIGSTOP)  # no new session (a reconnect) between the two kills
        self.drop_connections()
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def drop_connections(self) -> None:
        """Kill the sessions but not the listener: a network blip."""
        if self.proc is not None:
            for pid in _descendants(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def run_as(self, user: str, command: str) -> subprocess.CompletedProcess:
        """A shell command run by an account on the device (another user of a shared board)."""
        return subprocess.run(
            ["runuser", "-u", user, "--", "sh", "-c", command], capture_output=True, text=True, timeout=60
        )

    def ps(self) -> str:
        """The device account's processes, as `ps` on the device shows them."""
        out = subprocess.run(["ps", "-ww", "-u", self.user, "-o", "pid=,stat=,args="], capture_output=True, text=True)
        # zombies are already dead, waiting for their parent to reap them
        return "".join(line + "\n" for line in out.stdout.splitlines() if not line.split()[1].startswith("Z"))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


@contextlib.contextmanager
def loopback_pis(count: int, prefix: str = "ondevice-farm-") -> Iterator[list[Sshd]]:
    """Pis pi-1..pi-COUNT, each its own sshd and (as root) its own account; all gone after."""
    roots: list[Path] = []
    servers: list[Sshd] = []
    accounts: list[str] = []
    try:
        for n in range(1, count + 1):
            root = Path(tempfile.mkdtemp(prefix=prefix))
            roots.append(root)
            user = None
            if os.geteuid() == 0:
                user = new_account()
                accounts.append(user)
            servers.append(Sshd.create(root, alias=f"pi-{n}", user=user).start())
        yield servers
    finally:
        for server in servers:
            server.kill()
        for user in accounts:
            remove_account(user)
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def host_blocks(servers: list[Sshd]) -> str:
    """The servers' `Host` blocks of one ssh config (their aliases, not 127.0.0.1)."""
    return "\n".join(s.ssh_config.read_text().split("\nHost 127.0.0.1")[0] for s in servers)
