"""The `ssh` transport: a Linux board reached over SSH (Raspberry Pi, Jetson, ...).

One Fabric/paramiko connection per device per session, reused for every push
and exec. Host keys are verified against known_hosts (fabric alone would
accept any key). Binaries go to a hash-named cache on the device that only the
device user can write (device_cache.py has the rules), so an unchanged binary
is never pushed twice, and run from a per-session dir removed at the end.
Every command runs under `sh` (the login shell parses only a fixed stub), and
a "keeper" shell per session runs our housekeeping and, when the connection
ends for any reason, ends the session's processes: sshd does not signal a
no-pty session. A run's processes carry a token in their environment, which is
how a timeout kills the binary and everything it started, setsid() or not.
Any failure of the connection is an InfrastructureError: the device is down,
not the test wrong.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_ondevice.config.schema import COMMAND

from . import Option, device_cache
from .contract import ConnectionLost, Deployed, InfrastructureError, RunEnd
from .keeper import BOOT, Keeper
from .linuxdevice import DEFAULT_CACHE_ENTRIES, LinuxDevice, RunStream

CONNECT_TIMEOUT = 10.0
SFTP_TIMEOUT = 60.0  # a device that stops answering mid-push is an error, not a hang
READ_SIZE = 65536
STDERR_KEPT = 1 << 20  # of a program's stderr


class SshTransport(LinuxDevice):
    name = "ssh"
    device_forms = ("HOST", "USER@HOST:PORT", "an ~/.ssh/config alias")
    options = {
        "host": Option(str, help="the device: an ~/.ssh/config alias or host name (--device overrides)"),
        "scratch_root": Option(str, help="a directory for the binary cache, instead of ~/.cache/pytest-ondevice"),
        "cache_entries": Option(int, DEFAULT_CACHE_ENTRIES, "binaries kept on the device"),
        "connect_timeout": Option(float, CONNECT_TIMEOUT, "seconds to connect"),
        "sftp_timeout": Option(float, SFTP_TIMEOUT, "seconds a device may be silent mid-push"),
        "exec_wrapper": Option(COMMAND, help="a command the binary runs under (a string, or its words)"),
        "ssh_config": Option(
            str, help="an ssh_config file to use instead of ~/.ssh/config", ini="ondevice_ssh_config", ini_kind="path"
        ),
        "accept_new_host_keys": Option(
            bool,
            help="trust a device's first host key (a farm's set-up); a changed key is still refused",
            ini="ondevice_ssh_accept_new_host_keys",
            ini_kind="bool",
        ),
    }

    @classmethod
    def claims(cls, device: str) -> bool:
        return True

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        try:
            import fabric  # noqa: F401
        except ImportError:
            return "missing: pip install 'pytest-ondevice[ssh]'"
        return "ready (fabric)"

    @classmethod
    def import_libraries(cls) -> None:
        with contextlib.suppress(ImportError):
            import fabric  # noqa: F401 - and paramiko: ~0.15 s of CPU

            from . import sftp_push  # noqa: F401

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        self.target = device or options.get("host")
        self.conn: Any = None
        self._sftps: dict[str, Any] = {}  # "deploy" and "prefetch": a client is not safe to share
        self._reopen_lock = threading.Lock()
        self._local = threading.local()
        self._gen = 0  # connections opened so far
        self.where = str(self.target)

    # -- connection --------------------------------------------------------------
    def open(self) -> None:
        try:
            import paramiko
            from fabric import Config, Connection
        except ImportError:
            raise InfrastructureError("the ssh transport needs fabric: pip install 'pytest-ondevice[ssh]'") from None
        if not self.target:
            raise InfrastructureError(
                f"board {self.board.name} has no SSH host: set transport.host in its file or pass --device"
            )
        ssh_config = self.options.get("ssh_config")
        if ssh_config and not Path(ssh_config).is_file():
            raise InfrastructureError(f"ssh config file {ssh_config} not found (ondevice_ssh_config)")
        config = Config(runtime_ssh_path=str(ssh_config)) if ssh_config else Config()
        timeout = float(self.options.get("connect_timeout", CONNECT_TIMEOUT))
        conn = Connection(self.target, config=config, connect_timeout=timeout)
        known = _known_hosts_files(conn.ssh_config)
        hop = conn
        while isinstance(hop, Connection):  # the device, then each ProxyJump host on the way
            self._verify_host_keys(hop)
            hop = hop.gateway
        where = f"{conn.user}@{conn.host}:{conn.port}"
        try:
            if conn.gateway is None:  # direct: our own socket, so TCP_NODELAY holds from the first packet
                conn.connect_kwargs["sock"] = _nodelay_socket(conn.host, int(conn.port), timeout)
            conn.connect_kwargs["transport_factory"] = _aead_first_transport
            conn.open()
        except paramiko.BadHostKeyException as e:
            raise InfrastructureError(
                f"{where}: the host key has CHANGED (known {e.expected_key.get_name()} "
                f"{e.expected_key.fingerprint}, offered {e.key.fingerprint}); this may be an attack, or the "
                f"device was reinstalled. If you trust it: ssh-keygen -R '{_key_name(e.hostname, int(conn.port))}'"
                f"{_file_flag(known)}"
            ) from None
        except paramiko.AuthenticationException as e:
            raise InfrastructureError(
                f"{where}: authentication failed ({e}); check the key (IdentityFile) or ssh-agent"
            ) from None
        except paramiko.SSHException as e:
            if "No authentication methods available" in str(e):
                raise InfrastructureError(
                    f"{where}: no key to log in with: no IdentityFile for this host in the ssh config, no "
                    "~/.ssh/id_* key and no ssh-agent; add an IdentityFile for it to ~/.ssh/config"
                ) from None
            unknown = re.match(r"Server '(.+)' not found in known_hosts", str(e))
            if unknown:  # the device's key, or a ProxyJump host's on the way
                name = unknown.group(1)
                host, port = _host_port(name)
                raise InfrastructureError(
                    f"{where}: unknown host key for {name} (not in "
                    f"{', '.join(map(str, known)) or '~/.ssh/known_hosts'}). Check its fingerprint and add it "
                    f"(ssh-keyscan -p {port} {host} >> {known[0] if known else '~/.ssh/known_hosts'}), "
                    "or let a farm set-up accept new keys: ondevice_ssh_accept_new_host_keys = true"
                ) from None
            raise InfrastructureError(f"{where}: SSH failed: {e}") from None
        except (OSError, EOFError) as e:
            raise InfrastructureError(f"{where}: cannot connect: {e}") from None
        self.conn = conn
        self.where = where
        _track_exit_signals(conn.client.get_transport())
        try:
            uid, home = self._start_keeper()
            self._start_session(self._sftp("deploy"), uid, home, conn.user)
        except InfrastructureError:
            with contextlib.suppress(Exception):
                conn.close()
            self.conn = None
            raise
        except Exception as e:  # paramiko: SSHException or EOFError on a link that dropped
            raise ConnectionLost(f"{where}: connection lost: {e}") from None
        self._gen += 1

    def _start_keeper(self) -> tuple[int, str]:
        """The session's keeper (keeper.py): sshd does not signal a no-pty session whose
        connection drops, so whatever a killed pytest left running would run forever."""
        chan = self.conn.client.get_transport().open_session()
        chan.settimeout(float(self.options.get("connect_timeout", CONNECT_TIMEOUT)))
        chan.exec_command(BOOT)
        self.keeper = Keeper(chan, self.where)
        hello = self.keeper.start()
        if hello is None:
            rest = self.keeper.refusal
            status = chan.exit_status if chan.status_event.wait(2.0) else "none yet"
            raise InfrastructureError(
                f"{self.where}: the device account cannot run sh commands (exit status {status}"
                f"{': ' + rest if rest else ''}); give it a login shell (e.g. /bin/sh; fish and bash are fine, "
                "nologin is not) and make sure /bin/sh exists"
            )
        chan.settimeout(float(self.options.get("sftp_timeout", SFTP_TIMEOUT)))
        return hello

    def _sftp(self, role: str) -> Any:
        """The SFTP channel for deploys or for prefetches, with a timeout on every reply."""
        with self._lock:
            sftp = self._sftps.get(role)
            if sftp is None:
                from .sftp_push import OnePacketSftp

                sftp = self._sftps[role] = OnePacketSftp.from_transport(self.conn.client.get_transport())
                sftp.get_channel().settimeout(float(self.options.get("sftp_timeout", SFTP_TIMEOUT)))
            return sftp

    def _verify_host_keys(self, conn: Any) -> None:
        """What fabric leaves out: known_hosts loaded, and a policy other than accept-anything."""
        import paramiko

        known = _known_hosts_files(conn.ssh_config)
        client = conn.client
        with contextlib.suppress(OSError):
            client.load_system_host_keys()
        for path in known:
            if path.is_file():
                client.load_host_keys(str(path))
        if self.options.get("accept_new_host_keys"):
            client.set_missing_host_key_policy(_AcceptNew(known[0] if known else None))
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())

    # -- deploy ------------------------------------------------------------------
    def _fs(self, role: str) -> device_cache.DeviceFs:
        return self._sftp(role)

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        self._local.gen = self._gen  # the connection this thread's errors are about (see reopen)
        if self.conn is None:
            raise ConnectionLost(f"{self.where}: not connected")
        return super().deploy(artifact, sha256, data)

    def _push_failed(self, error: Exception, artifact: Path) -> InfrastructureError:
        if isinstance(error, OSError):
            if not self.conn.is_connected:
                return ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}")
            return InfrastructureError(
                f"{self.where}: pushing {artifact.name} failed: {error}{self._free_space_note()}"
            )
        return ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}: {error}")

    def _free_space_note(self) -> str:
        """SFTP reports a full disk as a bare "Failure": say how much room there is."""
        try:
            out = self._exec(f"df -Pk {shlex.quote(self.root)} | tail -n 1").split()
            return f" ({int(out[3])} KiB free in {self.root} on the device; the binary cache is {self.cache.bin})"
        except (InfrastructureError, IndexError, ValueError):
            return ""

    # -- run ---------------------------------------------------------------------
    def _start_run(self, command: str) -> RunStream:
        transport = self.conn.client.get_transport() if self.conn is not None else None
        try:
            chan = transport.open_session()
            chan.exec_command(BOOT)
            chan.sendall(command.encode() + b"\n")
        except Exception as e:  # paramiko raises SSHException (or OSError) on a dead transport
            raise ConnectionLost(f"{self.where}: connection lost starting the binary: {e}") from None
        return _SshRun(chan, transport, self.where)

    def reopen(self) -> None:
        """A fresh connection, shared: threads whose runs lost the same link reconnect once.

        Then end what the lost connection was running and remove its scratch dir (the
        keeper does that as well when the device notices the link is gone)."""
        with self._reopen_lock:
            if getattr(self._local, "gen", self._gen) != self._gen and self.conn is not None:
                return  # another thread already reconnected after this thread's run was cut
            link = self.conn.client.get_transport() if self.conn is not None else None
            if link is not None and link.is_active() and self._alive():
                return  # the link is fine (a binary vanished from the cache): deploy pushes it again
            lost = self._forget_session()
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn, self._sftps = None, {}
            self.open()
            self._local.gen = self._gen
            self._clean_lost(lost)

    def close(self) -> None:
        if self.conn is None:
            return
        self._end_session()
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn, self._sftps = None, {}


class _SshRun(RunStream):
    """One run's exec channel, for the shared run loop."""

    def __init__(self, chan: Any, transport: Any, where: str) -> None:
        self.chan, self.transport, self.where = chan, transport, where
        self._err = bytearray()

    def read(self, wait: float) -> bytes | None:
        self._take_errors()  # read as it comes: unread, it would fill the channel's window
        self.chan.settimeout(max(wait, 0.001))
        try:
            return self.chan.recv(READ_SIZE)
        except TimeoutError:
            return None

    def _take_errors(self) -> None:
        while self.chan.recv_stderr_ready():
            data = self.chan.recv_stderr(READ_SIZE)
            self._err += data[: STDERR_KEPT - len(self._err)]

    def poll(self) -> RunEnd | None:
        chan = self.chan
        if chan.status_event.is_set():
            signal_name = getattr(chan, "ondevice_exit_signal", None)
            if signal_name:
                return RunEnd(signal=signal_name)
            if chan.exit_status == -1:  # the channel closed without an exit status
                raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
            return RunEnd(exit_code=chan.exit_status)
        if not self.transport.is_active() or chan.closed:
            raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
        return None

    def wait(self, seconds: float) -> None:
        self.chan.status_event.wait(seconds)

    def kill(self) -> None:  # pragma: no cover - the transport kills by pidfile and token
        self.chan.close()

    def write(self, data: bytes) -> None:
        """All of it, however slowly the program reads. Not sendall(): it gives up once the
        channel's window stays full for the channel's timeout, which the thread reading the
        output sets to 0.1 s (the input was cut short, and the program read EOF); and it
        copies what is left after every packet (16 MiB: 0.3 s of CPU, against 0.05 s here)."""
        view = memoryview(data).cast("B")
        try:
            while view:
                try:
                    sent = self.chan.send(view)
                except TimeoutError:  # the window is full: the program has not read yet
                    if self.chan.closed or not self.transport.is_active():
                        raise OSError("the channel closed") from None
                    continue
                if sent == 0:  # the channel closed: the program ended
                    raise OSError("the channel closed")
                view = view[sent:]
        except OSError:
            raise
        except Exception as e:  # paramiko: SSHException on a dead transport
            raise OSError(str(e)) from None

    def close_input(self) -> None:
        self.chan.shutdown_write()

    def errors(self) -> bytes:
        self._take_errors()
        return bytes(self._err)

    def close(self) -> None:
        self.chan.close()


def _nodelay_socket(host: str, port: int, timeout: float) -> socket.socket:
    """Without TCP_NODELAY every exec and SFTP request waits ~40 ms (Nagle + delayed ACK)."""
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _aead_first_transport(*args: Any, **kwargs: Any) -> Any:
    """A paramiko Transport that offers AES-GCM first (a device without it still gets the
    rest of paramiko's list). Its MAC is part of the cipher, done in OpenSSL: paramiko's
    CTR + HMAC computes each packet's MAC and compares it byte by byte in Python, on the
    few hundred packets of every binary pushed."""
    import paramiko

    transport = paramiko.Transport(*args, **kwargs)
    options = transport.get_security_options()
    ciphers = options.ciphers
    options.ciphers = tuple(c for c in ciphers if c.endswith("-gcm@openssh.com")) + tuple(
        c for c in ciphers if not c.endswith("-gcm@openssh.com")
    )
    return transport


def _known_hosts_files(ssh_config: Any) -> list[Path]:
    value = ssh_config.get("userknownhostsfile")
    if not value:
        return [Path("~/.ssh/known_hosts").expanduser()]
    items = value if isinstance(value, list) else str(value).split()
    return [Path(os.path.expanduser(v)) for v in items]


def _host_port(key_name: str) -> tuple[str, int]:
    """known_hosts names a host `name` (port 22) or `[name]:port`."""
    bracketed = re.fullmatch(r"\[(.+)\]:(\d+)", key_name)
    return (bracketed.group(1), int(bracketed.group(2))) if bracketed else (key_name, 22)


def _key_name(host: str, port: int) -> str:
    """How known_hosts names a host: `[host]:port` unless the port is 22 (what ssh-keygen -R needs)."""
    return host if port == 22 or host.startswith("[") else f"[{host}]:{port}"


def _file_flag(known: list[Path]) -> str:
    return f" -f {known[0]}" if known else ""


class _AcceptNew:
    """OpenSSH's StrictHostKeyChecking=accept-new: trust a first key, refuse a changed one."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _track_exit_signals(transport: Any) -> None:
    """Record SSH "exit-signal" on the channel: paramiko drops it, and a crash must name its signal."""
    from paramiko.common import MSG_CHANNEL_REQUEST

    table = dict(transport._channel_handler_table)
    original = table[MSG_CHANNEL_REQUEST]

    def handle(chan: Any, m: Any) -> None:
        pos = m.packet.tell()
        if m.get_text() == "exit-signal":
            m.get_boolean()  # want_reply
            chan.ondevice_exit_signal = "SIG" + m.get_text()
            chan.status_event.set()
            return
        m.packet.seek(pos)
        original(chan, m)

    table[MSG_CHANNEL_REQUEST] = handle
    transport._channel_handler_table = table
