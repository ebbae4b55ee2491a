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
import secrets
import shlex
import socket
import stat
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_ondevice.protocol import RunEnd

from . import Deployed, InfrastructureError, OnBytes, Transport, device_cache

DEFAULT_CACHE_ENTRIES = 64
CONNECT_TIMEOUT = 10.0
SFTP_TIMEOUT = 60.0  # a device that stops answering mid-push is an error, not a hang
READ_SIZE = 65536


class ConnectionLost(InfrastructureError):
    """The connection dropped mid-run: worth one more try on a fresh connection."""

    retryable = True


class CacheEntryLost(InfrastructureError):
    """A binary vanished from the device cache before it ran: pushed again on the retry."""

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
        self._reported: set[str] = set()  # deploys already reported (pushed or held) to the runner
        self._push_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._sftps: dict[str, Any] = {}  # "deploy" and "prefetch": a client is not safe to share
        self._deploy_lock = threading.Lock()  # deploys share one channel (sshd allows 10 per connection)
        self._runs = 0
        self._verified: set[str] = set()  # cache entries whose sha256 the device confirmed this session
        self._holds: set[str] = set()  # entries this session holds against another session's prune
        self._running: dict[str, str] = {}  # run token -> pid file, for close()
        self._keeper: Any = None
        self._keeper_lock = threading.Lock()
        self._reopen_lock = threading.Lock()
        self._local = threading.local()
        self._gen = 0  # connections opened so far
        self.damaged = 0  # cached entries whose content no longer matched their name
        self.root = ""
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
        base = "~"
        try:
            uid, home = self._start_keeper()
            sftp = self._sftp("deploy")
            base, root = device_cache.root_for(home, conn.user, self.options.get("scratch_root"))
            self.root = device_cache.prepare(sftp, base, root, uid)
            self.cache = f"{self.root}/{device_cache.BIN}"
            self.sid = secrets.token_hex(8)
            self.scratch = f"{self.root}/{device_cache.SESSIONS}/{self.sid}"
            self._exec(device_cache.start_session(self.scratch, self.sid))  # the keeper owns it from here
            self._exec(device_cache.sweep(self.root))  # what sessions killed earlier left: processes, dirs
            # what the device already holds, listed once rather than asked per binary
            self._held = {
                a.filename: a.st_size
                for a in sftp.listdir_attr(self.cache)
                if device_cache.ENTRY.fullmatch(a.filename) and stat.S_ISREG(a.st_mode or 0)
            }
        except InfrastructureError:
            with contextlib.suppress(Exception):
                conn.close()
            self.conn = None
            raise
        except OSError as e:
            raise InfrastructureError(
                f"{where}: cannot set up the binary cache {self.root or 'under ' + base} on the device: {e}; "
                "set scratch_root in the board's [transport] to a directory this account can write"
            ) from None
        except Exception as e:  # paramiko: SSHException or EOFError on a link that dropped
            raise ConnectionLost(f"{where}: connection lost: {e}") from None
        self._gen += 1

    def _start_keeper(self) -> tuple[int, str]:
        """One long shell per session: runs our housekeeping, and cleans up when the link goes.

        sshd does not signal a no-pty session when the connection drops, so whatever a killed
        pytest left running would run forever; the keeper reads its stdin until EOF (which
        sshd gives it when the connection ends), then ends every process of this session
        and removes its dir. Our commands go through it too: one channel, and no login shell
        (fish, nologin) ever parses them."""
        chan = self.conn.client.get_transport().open_session()
        chan.settimeout(float(self.options.get("connect_timeout", CONNECT_TIMEOUT)))
        chan.exec_command(BOOT)
        self._nonce = secrets.token_hex(6)
        with contextlib.suppress(OSError):  # a nologin shell may be gone already: what it said is read below
            chan.sendall((device_cache.KEEPER.replace("NONCE", self._nonce) + "\n").encode())
        self._keeper = chan
        self._keeper_buf = b""
        try:
            line = self._keeper_line()
        except InfrastructureError:
            line = ""
        match = re.fullmatch(r"#ondevice-hello (\d+) (.*)", line)
        if not match:
            rest = (line + self._keeper_buf.decode(errors="replace")).strip()
            status = chan.exit_status if chan.status_event.wait(2.0) else "none yet"
            raise InfrastructureError(
                f"{self.where}: the device account cannot run sh commands (exit status {status}"
                f"{': ' + rest if rest else ''}); give it a login shell (e.g. /bin/sh; fish and bash are fine, "
                "nologin is not) and make sure /bin/sh exists"
            )
        chan.settimeout(float(self.options.get("sftp_timeout", SFTP_TIMEOUT)))
        return int(match.group(1)), match.group(2)

    def _keeper_line(self) -> str:
        while b"\n" not in self._keeper_buf:
            try:
                data = self._keeper.recv(READ_SIZE)
            except TimeoutError:
                raise ConnectionLost(f"{self.where}: the device stopped answering") from None
            if not data:
                raise ConnectionLost(f"{self.where}: connection lost")
            self._keeper_buf += data
        line, _, self._keeper_buf = self._keeper_buf.partition(b"\n")
        return line.decode(errors="replace")

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

    def _exec(self, command: str) -> str:
        """A short housekeeping command, run by the keeper; its failure is the device's, not the test's."""
        if "\n" in command:
            raise InfrastructureError(f"{self.where}: a name with a newline cannot be used on the device: {command!r}")
        with self._keeper_lock:
            try:
                self._keeper.sendall(f"{{ {command}; }} </dev/null 2>&1\n".encode())
                lines = []
                while True:
                    line = self._keeper_line()
                    if line.startswith(f"#ondevice-done {self._nonce} "):
                        status = int(line.rsplit(" ", 1)[1])
                        break
                    lines.append(line)
            except InfrastructureError:
                raise
            except Exception as e:  # paramiko: SSHException or OSError on a dead link
                raise ConnectionLost(f"{self.where}: connection lost: {e}") from None
        out = "\n".join(lines[:-1] if lines and lines[-1] == "" else lines)
        if status != 0:
            raise InfrastructureError(f"{self.where}: `{command}` failed (exit {status}): {out.strip()}")
        return out

    # -- deploy ------------------------------------------------------------------
    def prefetch(self, artifact: Path, sha256: str) -> None:
        """Push (or verify) into the device cache on a second SFTP channel while the device runs others."""
        with contextlib.suppress(Exception):
            self._ensure_cached(self._sftp("prefetch"), artifact, sha256)

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        self._local.gen = self._gen  # the connection this thread's errors are about (see reopen)
        if self.conn is None:
            raise ConnectionLost(f"{self.where}: not connected")
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
        except InfrastructureError:
            raise
        except OSError as e:
            if not self.conn.is_connected:
                raise ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}") from None
            raise InfrastructureError(
                f"{self.where}: pushing {artifact.name} failed: {e}{self._free_space_note()}"
            ) from None
        except Exception as e:  # paramiko: SSHException or EOFError on a link that dropped
            raise ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}: {e}") from None
        with self._lock:  # a retry's deploy of what this session pushed is no second push
            pushed = sha256 in self._pushed and sha256 not in self._reported
            self._reported.add(sha256)
        return Deployed(link, sha256, pushed=pushed, cwd=run_dir)

    def _free_space_note(self) -> str:
        """SFTP reports a full disk as a bare "Failure": say how much room there is."""
        try:
            out = self._exec(f"df -Pk {shlex.quote(self.root)} | tail -n 1").split()
            return f" ({int(out[3])} KiB free in {self.root} on the device; the binary cache is {self.cache})"
        except (InfrastructureError, IndexError, ValueError):
            return ""

    def _ensure_cached(self, sftp: Any, artifact: Path, sha256: str) -> None:
        """The device cache holds exactly this content afterwards: pushed, or verified, once per session."""
        with self._push_lock(sha256):
            cached = f"{self.cache}/{sha256}"
            if sha256 not in self._holds:  # a live session's entries are never pruned by another
                sftp.symlink(cached, f"{self.scratch}/{device_cache.HOLDS}/{sha256}")
                self._holds.add(sha256)
            if sha256 in self._pushed or sha256 in self._verified:
                return
            if self._held.get(sha256) == artifact.stat().st_size and self._verify(sha256):
                sftp.utime(cached, None)  # most recently used: pruned last
                self._verified.add(sha256)
                return
            part = f"{cached}.part-{secrets.token_hex(6)}"
            try:
                sftp.put(str(artifact), part)  # confirm: a short write (disk full) is caught here
                sftp.chmod(part, 0o700)
                sftp.posix_rename(part, cached)
            except OSError:
                with contextlib.suppress(Exception):
                    sftp.remove(part)  # the room it took is the next push's
                raise
            self._held[sha256] = artifact.stat().st_size
            self._pushed.add(sha256)

    def _verify(self, sha256: str) -> bool:
        """What an earlier session left is run only if its content is still what its name says."""
        try:
            out = self._exec(f"sha256sum {shlex.quote(self.cache + '/' + sha256)}")
        except ConnectionLost:
            raise
        except InfrastructureError:  # no sha256sum on the device, or the file went: push it again
            return False
        ok = out.split()[:1] == [sha256]
        if not ok:
            self.damaged += 1
        return ok

    def _push_lock(self, sha256: str) -> threading.Lock:
        with self._lock:
            return self._push_locks.setdefault(sha256, threading.Lock())

    def _name_for(self, name: str, sha256: str) -> str:
        """Keep the binary's own name (argv[0]); two different binaries never share one."""
        owner = self._names.setdefault(name, sha256)
        return name if owner == sha256 else f"{name}-{sha256[:12]}"

    # -- run ---------------------------------------------------------------------
    def run(self, deployed: Deployed, args: list[str], timeout: float, on_bytes: OnBytes) -> RunEnd:
        with self._lock:
            self._runs += 1
            pidfile = f"{self.scratch}/.pid-{self._runs}"
        token = secrets.token_hex(8)  # in the environment of everything the binary starts (setsid too)
        command = self._run_command(deployed, args, pidfile, token)
        transport = self.conn.client.get_transport()
        start = time.monotonic()
        try:
            chan = transport.open_session()
            chan.exec_command(BOOT)
            chan.sendall(command.encode() + b"\n")
        except Exception as e:  # paramiko raises SSHException (or OSError) on a dead transport
            raise ConnectionLost(f"{self.where}: connection lost starting the binary: {e}") from None
        chan.settimeout(0.1)
        end = RunEnd()
        with self._lock:
            self._running[token] = pidfile
        try:
            eof = False
            while True:
                if not eof:
                    try:
                        data = chan.recv(READ_SIZE)
                    except TimeoutError:
                        data = None
                    if data:
                        on_bytes(data)
                        continue
                    eof = data == b""  # output closed: the binary may still run, until its timeout
                if eof and chan.status_event.wait(0.1 if not chan.status_event.is_set() else 0):
                    break
                if not transport.is_active() or (eof and chan.closed and not chan.status_event.is_set()):
                    raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
                if time.monotonic() - start > timeout:
                    self._kill_run(pidfile, token)
                    end.timed_out = timeout
                    break
                if self.stop.is_set():  # the session is ending: leave nothing behind
                    self._kill_run(pidfile, token)
                    raise InfrastructureError(f"{self.where}: run stopped: the session ended")
            if end.timed_out is None:
                signal_name = getattr(chan, "ondevice_exit_signal", None)
                if signal_name:
                    end.signal = signal_name
                elif chan.exit_status == -1:  # the channel closed without an exit status
                    raise ConnectionLost(f"{self.where}: connection lost while the binary ran")
                else:
                    end.exit_code = chan.exit_status
                    self._check_preflight(chan, deployed)  # a child it left running ends with the session
        except BaseException:
            if end.timed_out is None and transport.is_active():  # Ctrl-C or our own error: leave nothing behind
                with contextlib.suppress(Exception):
                    self._kill_run(pidfile, token)
            raise
        finally:
            with self._lock:
                self._running.pop(token, None)
            chan.close()
        end.duration = time.monotonic() - start
        return end

    def _run_command(self, deployed: Deployed, args: list[str], pidfile: str, token: str) -> str:
        """One line for `sh`: checks that name what is wrong with the device, then the binary."""
        q = shlex.quote
        binary = q(deployed.path)
        wrapper = _wrapper_words(self.options.get("exec_wrapper"))
        env = (
            f"env -i PATH={PATH} HOME={q(self.scratch)} TMPDIR={q(self.scratch)} "
            f"ONDEVICE_SESSION={self.sid} ONDEVICE_RUN={token}"
        )
        checks = [
            f"cd {q(deployed.cwd or self.scratch)} && echo $$ > {q(pidfile)} || {_pre('scratch', 125)}",
            f"[ -f {binary} ] || {_pre('missing', 127)}",
            f"[ -x {binary} ] || {_pre('noexec', 126)}",
        ]
        if wrapper:
            checks.append(f"PATH={PATH} command -v {q(wrapper[0])} >/dev/null 2>&1 || {_pre('wrapper', 127)}")
        words = " ".join(q(w) for w in [*wrapper, deployed.path, *args])
        return "; ".join(checks) + f"; exec {env} {words} </dev/null 2>&1"

    def _check_preflight(self, chan: Any, deployed: Deployed) -> None:
        """The checks before the exec report on stderr (the binary's own stderr goes to stdout)."""
        err = b""
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(READ_SIZE)
        found = re.search(rb"#ondevice-preflight (\w+)", err)
        if not found:
            return
        what = found.group(1).decode()
        name = deployed.path.rsplit("/", 1)[-1]
        if what == "missing":  # pruned or deleted under us: push it again and retry
            self._held.pop(deployed.sha256, None)
            self._pushed.discard(deployed.sha256)
            self._verified.discard(deployed.sha256)
            raise CacheEntryLost(f"{self.where}: {name} vanished from the device cache ({self.cache}) before it ran")
        wrapper = self.options.get("exec_wrapper")
        raise InfrastructureError(
            {
                "noexec": f"{self.where}: the device cannot execute {name}: {self.root} is not executable there "
                "(a file system mounted noexec?); set scratch_root in the board's [transport] to a directory on "
                "a file system that allows exec",
                "wrapper": f"{self.where}: the exec_wrapper {wrapper!r} is not on the device (PATH={PATH}); "
                "install it there or fix exec_wrapper in the board's [transport]",
                "scratch": f"{self.where}: the session dir {self.scratch} is gone on the device",
            }.get(what, f"{self.where}: cannot run {name}: {what}")
        )

    def _kill_run(self, pidfile: str, token: str) -> None:
        """The binary's process group, and every process carrying its token (a setsid() child too)."""
        q = shlex.quote(pidfile)
        self._exec(f'{{ pid=$(cat {q}) && kill -KILL "-$pid"; }} 2>/dev/null; ondevice_kill ONDEVICE_RUN={token}')

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
            old_scratch, old_sid = self.scratch, getattr(self, "sid", "")
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn, self.scratch, self._linked, self._sftps = None, "", set(), {}
            self._holds, self._verified = set(), set()
            self.open()
            self._local.gen = self._gen
            if old_scratch:
                with contextlib.suppress(InfrastructureError):
                    self._exec(f"ondevice_kill ONDEVICE_SESSION={old_sid}; rm -rf {shlex.quote(old_scratch)}")

    def _alive(self) -> bool:
        try:
            self._exec("true")
        except InfrastructureError:
            return False
        return True

    def close(self) -> None:
        if self.conn is None:
            return
        with contextlib.suppress(Exception):
            for token, pidfile in list(self._running.items()):  # runs not yet ended by the stop flag
                self._kill_run(pidfile, token)
        if self._pushed or self._verified:  # once per session, not per push: bound the device cache
            with contextlib.suppress(Exception):
                device_cache.prune(
                    self._sftp("deploy"), self.root, int(self.options.get("cache_entries", DEFAULT_CACHE_ENTRIES))
                )
        with contextlib.suppress(Exception):  # EOF: the keeper ends this session's processes, removes its dir
            self._keeper.shutdown_write()
            self._keeper.settimeout(10.0)
            while self._keeper.recv(READ_SIZE):
                pass
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn, self._sftps = None, {}


BOOT = "exec sh -c 'IFS= read -r ondevice_cmd && eval \"$ondevice_cmd\"'"
"""What the login shell parses (fish, bash, dash, zsh alike); the real command comes on stdin."""

PATH = "/usr/local/bin:/usr/bin:/bin"


def _pre(what: str, code: int) -> str:
    return f"{{ echo '#ondevice-preflight {what}' >&2; exit {code}; }}"


def _wrapper_words(value: Any) -> list[str]:
    """`exec_wrapper`: a string is one command (a path may hold spaces); a list is its words."""
    if not value:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


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
