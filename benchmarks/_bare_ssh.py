"""A pytest plugin for `ssh_deploy.py`'s (f): a bare plugin that does only the ideal
script's device work, the ideal script's way. Each *_test.c is two items (the cases of
`_kernels.py`'s files); the first pushes the binary already built for it with paramiko's
SFTP over one connection (AES-GCM first, as ours offers it) and runs it; each item reads
its verdict from that output. No board file, no build check, no device cache, no
per-case parsing, no reports of ours: what is left is pytest's own cost, paramiko's, and the
work of the ideal script. The CPU this costs against the ideal script's is what is left
for a plugin inside pytest that pushes and runs the same way (one that pushed with fewer
round trips could do with less).

BARE_SSH_CONFIG: the ssh_config; BARE_SSH_HOST: its alias; BARE_SSH_BIN: the directory
of the built binaries (`<file>.elf`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import paramiko
import pytest

DEST = "/tmp/ondevice-bench-floor"
_outputs: dict[str, bytes] = {}
_open: list[tuple[paramiko.SSHClient, paramiko.SFTPClient]] = []  # one connection, made by the first item


class _GcmFirst(paramiko.Transport):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        options = self.get_security_options()
        ciphers = options.ciphers
        options.ciphers = tuple(c for c in ciphers if "gcm" in c) + tuple(c for c in ciphers if "gcm" not in c)


def _connected() -> tuple[paramiko.SSHClient, paramiko.SFTPClient]:
    if not _open:
        cfg = paramiko.SSHConfig.from_path(os.environ["BARE_SSH_CONFIG"]).lookup(os.environ["BARE_SSH_HOST"])
        sock = socket.create_connection((cfg["hostname"], int(cfg["port"])))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        paramiko.client.Transport = _GcmFirst
        client = paramiko.SSHClient()
        client.load_host_keys(cfg["userknownhostsfile"])
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            cfg["hostname"],
            int(cfg["port"]),
            cfg["user"],
            key_filename=cfg["identityfile"][0],
            sock=sock,
            allow_agent=False,
            look_for_keys=False,
        )
        client.exec_command(f"rm -rf {DEST}; mkdir -p {DEST}")[1].channel.recv_exit_status()
        _open.append((client, client.open_sftp()))
    return _open[0]


def _output(name: str) -> bytes:
    if name not in _outputs:
        client, sftp = _connected()
        sftp.put(str(Path(os.environ["BARE_SSH_BIN"]) / f"{name}.elf"), f"{DEST}/{name}")
        sftp.chmod(f"{DEST}/{name}", 0o755)
        _, out, _ = client.exec_command(f"cd {DEST} && ./{name}")
        _outputs[name] = out.read()
        out.channel.recv_exit_status()
    return _outputs[name]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
    return BareFile.from_parent(parent, path=file_path) if file_path.name.endswith("_test.c") else None


class BareFile(pytest.File):
    def collect(self):
        for case in ("first", "second"):
            yield BareItem.from_parent(self, name=case)


class BareItem(pytest.Item):
    def runtest(self) -> None:
        assert b"~~~ALL TESTS PASSED~~~" in _output(self.parent.path.name)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _open:
        _open.pop()[0].close()
