"""The `ssh` transport: a Linux board reached over SSH (Raspberry Pi, Jetson, ...).

One Fabric/paramiko connection per device per session, reused for every push
and exec. Host keys are verified against known_hosts (fabric alone would
accept any key). Binaries go to a small hash-named cache on the device, so an
unchanged binary is never pushed twice, and run from a per-session scratch
directory that is removed at the end. Each run records its shell's pid (the
session leader sshd made, so also the process group), which is how a timeout
kills the binary and everything it started. Any failure of the connection is
an InfrastructureError: the device is down, not the test wrong.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_ondevice.protocol import RunEnd

from . import Deployed, InfrastructureError, OnBytes, Transport

DEFAULT_SCRATCH_ROOT = "/tmp"
DEFAULT_CACHE_ENTRIES = 64
CONNECT_TIMEOUT = 10.0
SFTP_TIMEOUT = 60.0  # a device that stops answering mid-push is an error, not a hang
READ_SIZE = 65536


class ConnectionLost(InfrastructureError):
    """The connection dropped mid-run: worth one more try on a fresh connection."""

    retryable = True


class SshTransport(Transport):
    name = "ssh"

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        try:
            import fabric  # noqa: F401
        except ImportError:
            return "missing: pip install 'pytest-ondevice[ssh]'"
        return "ready (fabric)"

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        self.target = device or options.get("host")
        self.conn: Any = None
        self.scratch = ""
        self._names: dict[str, str] = {}
        self._linked: set[str] = set()
        self._held: dict[str, int] = {}  # device cache: content hash -> size
        self._pushed: set[str] = set()  # pushed by this session
        self._touched: set[str] = set()  # already in the cache, marked as used by this session
        self._push_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._sftps: dict[str, Any] = {}  # "deploy" and "prefetch": a client is not safe to share
        self._deploy_lock = threading.Lock()  # deploys share one channel (sshd allows 10 per connection)
        self._runs = 0

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
            conn.open()
        except paramiko.BadHostKeyException as e:
            raise InfrastructureError(
                f"{where}: the host key has CHANGED (known {e.expected_key.get_name()} "
                f"{e.expected_key.fingerprint}, offered {e.key.fingerprint}); this may be an attack, or the "
                f"device was reinstalled. If you trust it: ssh-keygen -R '{e.hostname}'"
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
        self.root = self.options.get("scratch_root", DEFAULT_SCRATCH_ROOT)
        self.cache = f"{self.root}/ondevice-cache-{conn.user}"
        try:  # SFTP requests, not a shell command: no process is started on the device
            sftp = self._sftp("deploy")
            with contextlib.suppress(OSError):
                sftp.mkdir(self.cache, 0o755)
            self.scratch = self._make_scratch(sftp)
            # what the device already holds, listed once rather than asked per binary
            self._held = {a.filename: a.st_size for a in sftp.listdir_attr(self.cache)}
        except OSError as e:
            raise InfrastructureError(f"{where}: cannot set up {self.root} on the device: {e}") from None
        except Exception as e:  # paramiko: SSHException or EOFError on a link that dropped
            raise ConnectionLost(f"{where}: connection lost: {e}") from None

    def _sftp(self, role: str) -> Any:
        """The SFTP channel for deploys or for prefetches, with a timeout on every reply."""
        with self._lock:
            sftp = self._sftps.get(role)
            if sftp is None:
                sftp = self._sftps[role] = self.conn.client.open_sftp()
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

    def _make_scratch(self, sftp: Any) -> str:
        """A fresh private directory, as `mktemp -d` would make it."""
        for _ in range(10):
            path = f"{self.root}/ondevice-session.{secrets.token_hex(4)}"
            try:
                sftp.mkdir(path, 0o700)
                return path
            except OSError:
                if _exists(sftp, path):
                    continue
                raise
        raise OSError(f"no unused name for a session directory under {self.root}")

    def _exec(self, command: str) -> str:
        """A short housekeeping command; its failure is the device's, not the test's.

        A bare channel, not fabric's run(): that costs ~35 ms of runner machinery per call."""
        try:
            chan = self.conn.client.get_transport().open_session()
            chan.exec_command(command)
            out = chan.makefile("rb").read()
            err = chan.makefile_stderr("rb").read()
            status = chan.recv_exit_status()
            chan.close()
        except Exception as e:  # paramiko: SSHException or OSError on a dead link
            raise ConnectionLost(f"{self.where}: connection lost: {e}") from None
        if status != 0:
            raise InfrastructureError(f"{self.where}: `{command}` failed: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    # -- deploy ------------------------------------------------------------------
    def prefetch(self, artifact: Path, sha256: str) -> None:
        """Push into the device cache on a second SFTP channel while the device runs other binaries."""
        with contextlib.suppress(Exception):
            self._ensure_cached(self._sftp("prefetch"), artifact, sha256)

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        cached = f"{self.cache}/{sha256}"
        run_dir = None
        try:
            with self._deploy_lock:
                sftp = self._sftp("deploy")
                self._ensure_cached(sftp, artifact, sha256)
                name = self._name_for(artifact.name, sha256)
                link = f"{self.scratch}/{name}"
                if name not in self._linked:  # the scratch dir is new each session
                    sftp.symlink(cached, link)
                    self._linked.add(name)
                if data:  # the binary's own cwd: two binaries' same-named files never meet
                    run_dir = f"{self.scratch}/{name}.data"
                    if not _exists(sftp, run_dir):
                        sftp.mkdir(run_dir, 0o700)
                    for path in data:  # small and test-specific: pushed every time, no cache
                        sftp.put(str(path), f"{run_dir}/{path.name}")
        except OSError as e:
            if not self.conn.is_connected:
                raise ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}") from None
            raise InfrastructureError(
                f"{self.where}: pushing {artifact.name} failed: {e}{self._free_space_note()}"
            ) from None
        except Exception as e:  # paramiko: SSHException or EOFError on a link that dropped
            raise ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}: {e}") from None
        return Deployed(link, sha256, pushed=sha256 in self._pushed, cwd=run_dir)

    def _free_space_note(self) -> str:
        """SFTP reports a full disk as a bare "Failure": say how much room there is."""
        try:
            out = self._exec(f"df -Pk {shlex.quote(self.root)} | tail -n 1").split()
            return f" ({int(out[3])} KiB free in {self.root} on the device; the binary cache is {self.cache})"
        except (InfrastructureError, IndexError, ValueError):
            return ""

    def _ensure_cached(self, sftp: Any, artifact: Path, sha256: str) -> None:
        """The device cache holds this content afterwards; pushed at most once per session."""
        with self._push_lock(sha256):
            cached = f"{self.cache}/{sha256}"
            if self._held.get(sha256) == artifact.stat().st_size:
                if sha256 not in self._pushed and sha256 not in self._touched:
                    sftp.utime(cached, None)  # most recently used: pruned last
                    self._touched.add(sha256)
                return
            part = f"{cached}.part-{os.getpid()}-{threading.get_ident()}"
            try:
                sftp.put(str(artifact), part)  # confirm: a short write (disk full) is caught here
                sftp.chmod(part, 0o755)
                sftp.posix_rename(part, cached)
            except OSError:
                with contextlib.suppress(Exception):
                    sftp.remove(part)  # the room it took is the next push's
                raise
            self._held[sha256] = artifact.stat().st_size
            self._pushed.add(sha256)

    def _push_lock(self, sha256: str) -> threading.Lock:
        with self._lock:
            return self._push_locks.setdefault(sha256, threading.Lock())

    def _name_for(self, name: str, sha256: str) -> str:
        """Keep the binary's own name (argv[0]); two different binaries never share one."""
        owner = self._names.setdefault(name, sha256)
        return name if owner == sha256 else f"{name}-{sha256[:12]}"

    def _prune(self) -> None:
        keep = int(self.options.get("cache_entries", DEFAULT_CACHE_ENTRIES))
        sftp = self._sftp("deploy")
        entries = sorted(sftp.listdir_attr(self.cache), key=lambda a: a.st_mtime or 0, reverse=True)
        stale = [a for a in entries if ".part-" in a.filename and time.time() - (a.st_mtime or 0) > 3600]
        done = [a for a in entries if ".part-" not in a.filename]
        for attr in [*done[keep:], *stale]:
            with contextlib.suppress(OSError):
                sftp.remove(f"{self.cache}/{attr.filename}")

    # -- run ---------------------------------------------------------------------
    def run(self, deployed: Deployed, args: list[str], timeout: float, on_bytes: OnBytes) -> RunEnd:
        self._runs += 1
        pidfile = f"{self.scratch}/.pid-{self._runs}"
        q = shlex.quote
        env = f"env -i PATH=/usr/local/bin:/usr/bin:/bin HOME={q(self.scratch)} TMPDIR={q(self.scratch)}"
        wrapper = self.options.get("exec_wrapper", "")
        command = (
            f"cd {q(deployed.cwd or self.scratch)} && echo $$ > {q(pidfile)} && "
            f"exec {env} {wrapper} {q(deployed.path)} {' '.join(map(q, args))}"
        )
        transport = self.conn.client.get_transport()
        start = time.monotonic()
        try:
            chan = transport.open_session()
            chan.set_combine_stderr(True)
            chan.exec_command(command)
        except Exception as e:  # paramiko raises SSHException (or OSError) on a dead transport
            raise ConnectionLost(f"{self.where}: connection lost starting the binary: {e}") from None
        chan.settimeout(0.1)
        end = RunEnd()
        try:
            while True:
                try:
                    data = chan.recv(READ_SIZE)
                except TimeoutError:
                    data = None
                if data:
                    on_bytes(data)
                    continue
                if data == b"":  # end of output
                    break
                if not transport.is_active():
                    raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
                if time.monotonic() - start > timeout:
                    self._kill_group(pidfile)
                    end.timed_out = timeout
                    break
                if self.stop.is_set():  # the session is ending: leave nothing behind
                    self._kill_group(pidfile)
                    raise InfrastructureError(f"{self.where}: run stopped: the session ended")
            if end.timed_out is None:
                if not chan.status_event.wait(5.0):
                    raise ConnectionLost(f"{self.where}: connection lost before the binary's exit status")
                signal_name = getattr(chan, "ondevice_exit_signal", None)
                if signal_name:
                    end.signal = signal_name
                elif chan.exit_status == -1:  # the channel closed without an exit status
                    raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
                else:
                    end.exit_code = chan.exit_status
        except BaseException:
            if end.timed_out is None and transport.is_active():  # Ctrl-C or our own error: leave nothing behind
                with contextlib.suppress(Exception):
                    self._kill_group(pidfile)
            raise
        finally:
            chan.close()
        end.duration = time.monotonic() - start
        return end

    def reopen(self) -> None:
        """A fresh connection; then end what the lost one was running and remove its scratch dir."""
        old_scratch, last_pidfile = self.scratch, f"{self.scratch}/.pid-{self._runs}"
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn, self.scratch, self._linked, self._sftps = None, "", set(), {}
        self.open()
        if old_scratch:
            with contextlib.suppress(InfrastructureError):
                self._kill_group(last_pidfile)
                self._exec(f"rm -rf {shlex.quote(old_scratch)}")

    def _kill_group(self, pidfile: str) -> None:
        q = shlex.quote(pidfile)
        self._exec(f'pid=$(cat {q}) && kill -KILL "-$pid" 2>/dev/null; true')  # no "--": dash rejects it

    def close(self) -> None:
        if self.conn is None:
            return
        if self._pushed:  # once per session, not per push: bound the device cache
            with contextlib.suppress(Exception):
                self._prune()
        if self.scratch:
            with contextlib.suppress(Exception):
                self._exec(f"rm -rf {shlex.quote(self.scratch)}; {self._stale_sessions()}")
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn, self._sftps = None, {}

    def _stale_sessions(self) -> str:
        """Sessions cut off more than a day ago (device rebooted, link lost) leave their dirs."""
        root = shlex.quote(self.root)
        return (
            f"find {root} -maxdepth 1 -name 'ondevice-session.*' -user \"$(id -u)\" -mmin +1440 "
            "-exec rm -rf {} + 2>/dev/null; true"
        )


def _nodelay_socket(host: str, port: int, timeout: float) -> socket.socket:
    """Without TCP_NODELAY every exec and SFTP request waits ~40 ms (Nagle + delayed ACK)."""
    sock = socket.create_connection((host, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _exists(sftp: Any, path: str) -> bool:
    try:
        sftp.lstat(path)
    except OSError:
        return False
    return True


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
