"""The `ssh` transport: a Linux board reached over SSH (Raspberry Pi, Jetson, ...).

One Fabric/paramiko connection per device per session, reused for every push
and exec. Host keys are verified as OpenSSH verifies them, against the
known_hosts files it would read for the host (fabric alone would accept any
key). Binaries go to a hash-named cache on the device that only the device
user can write (device_cache.py has the rules), so an unchanged binary is
never pushed twice, and run from a per-session dir removed at the end.
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
import functools
import getpass
import hmac
import os
import re
import shlex
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
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
        hop = conn
        while isinstance(hop, Connection):  # the device, then each ProxyJump host on the way
            self._verify_host_keys(hop)
            hop = hop.gateway
        where = f"{conn.user}@{conn.host}:{conn.port}"
        try:
            if conn.gateway is None:  # direct: our own socket, so TCP_NODELAY holds from the first packet
                conn.connect_kwargs["sock"] = _nodelay_socket(conn.host, int(conn.port), timeout)
            conn.open()
        except (_ChangedKey, _UnknownKey) as e:  # the device's key, or a ProxyJump host's on the way
            _close_hops(conn)
            raise InfrastructureError(f"{where}: {e.explain()}") from None
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
            raise InfrastructureError(f"{where}: SSH failed: {e}") from None
        except socket.gaierror as e:
            raise InfrastructureError(f"{where}: cannot connect: {e}{self._no_alias_fix(conn)}") from None
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

                sftp = OnePacketSftp.from_transport(self.conn.client.get_transport())
                if sftp is None:  # paramiko's open_session() raises instead, but its from_transport() allows it
                    raise ConnectionLost(f"{self.where}: the SFTP channel did not open")
                self._sftps[role] = sftp
                # sock: the channel get_channel() returns (whose stub says it may be None)
                sftp.sock.settimeout(float(self.options.get("sftp_timeout", SFTP_TIMEOUT)))
            return sftp

    def _verify_host_keys(self, conn: Any) -> None:
        """What fabric leaves out: the host key checked as OpenSSH checks it, against the
        known_hosts files its ssh config names and no others; the key types known for the
        host offered first, as OpenSSH does (else the device may show a key of another type)."""
        known = KnownHosts.of(conn)
        name = _key_name(conn.host, int(conn.port))
        conn.client.set_missing_host_key_policy(_HostKeyCheck(known, bool(self.options.get("accept_new_host_keys"))))
        conn.connect_kwargs["transport_factory"] = functools.partial(
            _aead_first_transport, known_types=known.key_types(name)
        )

    def _no_alias_fix(self, conn: Any) -> str:
        """A name that does not resolve and that no `Host` block gives an address: what to add."""
        host = str(self.target)
        if conn.host != host or "@" in host or ":" in host:
            return ""  # a HostName was found, or an address was given: its own error says enough
        config = self.options.get("ssh_config") or "~/.ssh/config"
        board = self.board.name
        whose = f"{host} is board {board}'s default host, an ssh alias, and " if self.device is None else ""
        return (
            f"; {whose}{config} has no `Host {host}` with its HostName: add one (Host {host}, HostName ADDRESS, "
            f"User USER, IdentityFile ~/.ssh/KEY), or give the address: --device={board}=USER@ADDRESS"
        )

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
            cache = f"; the binary cache is {self.cache.bin}" if self.cache is not None else ""
            return f" ({int(out[3])} KiB free in {self.root} on the device{cache})"
        except (InfrastructureError, IndexError, ValueError):
            return ""

    # -- run ---------------------------------------------------------------------
    def _start_run(self, command: str) -> RunStream:
        transport = self.conn.client.get_transport() if self.conn is not None else None
        try:
            if transport is None:
                raise OSError("not connected")
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


def _close_hops(conn: Any) -> None:
    """A refused key leaves paramiko's transport (and a jump host's) running: end them now."""
    hop = conn
    while hop is not None and hasattr(hop, "client"):
        with contextlib.suppress(Exception):
            hop.client.close()
        hop = hop.gateway


def _nodelay_socket(host: str, port: int, timeout: float) -> socket.socket:
    """Without TCP_NODELAY every exec and SFTP request waits ~40 ms (Nagle + delayed ACK)."""
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _aead_first_transport(*args: Any, known_types: Sequence[str] = (), **kwargs: Any) -> Any:
    """A paramiko Transport that offers AES-GCM first (a device without it still gets the
    rest of paramiko's list). Its MAC is part of the cipher, done in OpenSSL: paramiko's
    CTR + HMAC computes each packet's MAC and compares it byte by byte in Python, on the
    few hundred packets of every binary pushed. The host key types known for the device
    come first too (OpenSSH's order_hostkeyalgs): its key is then one we can check."""
    import paramiko

    transport = paramiko.Transport(*args, **kwargs)
    options = transport.get_security_options()
    ciphers = options.ciphers
    options.ciphers = tuple(c for c in ciphers if c.endswith("-gcm@openssh.com")) + tuple(
        c for c in ciphers if not c.endswith("-gcm@openssh.com")
    )
    wanted = {t for k in known_types for t in (RSA_TYPES if k == "ssh-rsa" else (k,))}
    types = options.key_types
    options.key_types = tuple(t for t in types if t in wanted) + tuple(t for t in types if t not in wanted)
    return transport


RSA_TYPES = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")  # the signatures an ssh-rsa key makes
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")  # OpenSSH's defaults
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


@dataclass(frozen=True)
class _Entry:
    """One key of a known_hosts file, with where it is (what `ssh-keygen -R -f` needs)."""

    path: Path
    line: int
    names: tuple[str, ...]
    key: Any  # a paramiko PKey


class KnownHosts:
    """The known_hosts files OpenSSH reads for one host, and no others: the files its
    `UserKnownHostsFile` names (default ~/.ssh/known_hosts, ~/.ssh/known_hosts2), then its
    `GlobalKnownHostsFile` (default /etc/ssh/ssh_known_hosts{,2}); `none` names no file."""

    def __init__(self, user: list[Path], system: list[Path]) -> None:
        self.user, self.system = user, system
        self._entries: list[_Entry] | None = None

    @classmethod
    def of(cls, conn: Any) -> KnownHosts:
        """The files of a fabric Connection's ssh config, as OpenSSH expands their names."""
        config = conn.ssh_config
        user = _config_paths(config.get("userknownhostsfile"), USER_KNOWN_HOSTS, conn)
        system = _config_paths(config.get("globalknownhostsfile"), GLOBAL_KNOWN_HOSTS, conn)
        return cls(user, system)

    @property
    def files(self) -> list[Path]:
        return [*self.user, *self.system]

    def entries(self, name: str) -> list[_Entry]:
        """Every key listed for the host `name` (`host`, or `[host]:port` off port 22)."""
        if self._entries is None:
            self._entries = [e for path in dict.fromkeys(self.files) for e in _read_known_hosts(path)]
        return [e for e in self._entries if _names_match(e.names, name)]

    def key_types(self, name: str) -> list[str]:
        return list(dict.fromkeys(e.key.get_name() for e in self.entries(name)))

    def check(self, name: str, key: Any) -> list[_Entry] | None:
        """OpenSSH's rule: [] when any entry holds the key; the entries of its type holding
        another key (it CHANGED); None when none of its type is known."""
        entries = self.entries(name)
        if any(e.key.asbytes() == key.asbytes() for e in entries):
            return []
        stale = [e for e in entries if e.key.get_name() == key.get_name()]
        return stale or None


def _config_paths(value: Any, default: Sequence[str], conn: Any) -> list[Path]:
    """An ssh_config list of files: quoted names, `~`, `%d`-style tokens and ${VAR} expanded."""
    if not value:
        items = list(default)
    elif isinstance(value, list):
        items = [w for v in value for w in _words(str(v))]
    else:
        items = _words(str(value))
    if [i.lower() for i in items] == ["none"]:
        return []
    return [Path(_expand(item, conn)) for item in items]


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: as written
        return text.split()


def _expand(path: str, conn: Any) -> str:
    """The tokens OpenSSH expands in a known_hosts file's name (those a path would use)."""
    home = os.path.expanduser("~")
    tokens = {
        "%": "%",
        "d": home,
        "u": getpass.getuser(),
        "h": str(conn.host),
        "p": str(conn.port),
        "r": str(conn.user),
        "n": str(conn.original_host),
    }
    path = re.sub(r"%(.)", lambda m: tokens.get(m.group(1), m.group(0)), os.path.expanduser(path))
    return re.sub(r"\$\{(\w+)\}", lambda m: os.environ.get(m.group(1), ""), path)


def _read_known_hosts(path: Path) -> list[_Entry]:
    """A known_hosts file's keys (a missing or unreadable file has none, as for OpenSSH);
    marker lines (@cert-authority, @revoked) and lines paramiko cannot read are left out."""
    from paramiko.hostkeys import HostKeyEntry

    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "@")):
            continue
        try:
            entry = HostKeyEntry.from_line(line, number)
        except Exception:  # a key of a type paramiko lacks, bad base64: OpenSSH skips such lines too
            continue
        if entry is not None and entry.key is not None:
            found.append(_Entry(path, number, tuple(entry.hostnames), entry.key))
    return found


def _names_match(patterns: Sequence[str], name: str) -> bool:
    """known_hosts host patterns as OpenSSH matches them: hashed names, `*` and `?`, and a
    `!` pattern that excludes the host whatever else matches."""
    from paramiko.hostkeys import HostKeys

    name = name.lower()
    matched = False
    for pattern in patterns:
        if pattern.startswith("|1|"):
            with contextlib.suppress(Exception):  # a hashed name that is not well formed matches nothing
                matched = matched or hmac.compare_digest(HostKeys.hash_host(name, pattern), pattern)
            continue
        negated = pattern.startswith("!")
        glob = re.escape(pattern[negated:].lower()).replace(r"\*", ".*").replace(r"\?", ".")
        if re.fullmatch(glob, name):
            if negated:
                return False
            matched = True
    return matched


def _key_name(host: str, port: int) -> str:
    """How known_hosts names a host: `[host]:port` unless the port is 22 (what ssh-keygen -R needs)."""
    return host if port == 22 or host.startswith("[") else f"[{host}]:{port}"


class _HostKeyCheck:
    """paramiko's host key policy, with nothing loaded into the client, so every key comes
    here: OpenSSH's check (any listed key of the host matches), StrictHostKeyChecking=yes,
    or accept-new (a first key trusted and written to the first UserKnownHostsFile)."""

    def __init__(self, known: KnownHosts, accept_new: bool) -> None:
        self.known, self.accept_new = known, accept_new

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        stale = self.known.check(hostname, key)
        if stale:
            raise _ChangedKey(hostname, key, stale)
        if stale is not None:
            return
        if not self.accept_new:
            raise _UnknownKey(hostname, self.known)
        if self.known.user:
            path = self.known.user[0]
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _ChangedKey(Exception):
    """The host offered a key other than the one (or ones) known for it."""

    def __init__(self, name: str, key: Any, stale: list[_Entry]) -> None:
        super().__init__(f"host key for {name} changed")
        self.name, self.key, self.stale = name, key, stale

    def explain(self) -> str:
        """What the user sees: the known key and where it is, and the fix for that file."""
        known = self.stale[0].key
        where = ", ".join(f"{e.path} line {e.line}" for e in self.stale)
        fixes = " and ".join(f"ssh-keygen -R '{self.name}' -f {p}" for p in dict.fromkeys(e.path for e in self.stale))
        return (
            f"the host key has CHANGED for {self.name} (known {known.get_name()} {known.fingerprint} in {where}; "
            f"offered {self.key.fingerprint}); this may be an attack, or the device was reinstalled. "
            f"If you trust it: {fixes}"
        )


class _UnknownKey(Exception):
    """No key of the offered type is known for the host (OpenSSH's StrictHostKeyChecking=yes)."""

    def __init__(self, name: str, known: KnownHosts) -> None:
        super().__init__(f"Server {name!r} not found in known_hosts")
        self.name, self.known = name, known

    def explain(self) -> str:
        bracketed = re.fullmatch(r"\[(.+)\]:(\d+)", self.name)
        host, port = (bracketed.group(1), bracketed.group(2)) if bracketed else (self.name, "22")
        files = self.known.user or self.known.system
        into = str(files[0]) if files else "~/.ssh/known_hosts"
        where = ", ".join(map(str, files)) or "no known_hosts file: UserKnownHostsFile none"
        return (
            f"unknown host key for {self.name} (not in {where}). Check its fingerprint and add it "
            f"(ssh-keyscan -p {port} {host} >> {into}), "
            "or let a farm set-up accept new keys: ondevice_ssh_accept_new_host_keys = true"
        )


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
