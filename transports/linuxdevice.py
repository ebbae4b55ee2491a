"""What every transport to a Linux device with a POSIX shell shares (SSH, ADB, ...).

A subclass brings the link: how to open a shell with a stdin (for the keeper), a file
access for pushes (SFTP, adb sync) and a stream for one run. The rest is written once
here: the session dir and the content-addressed binary cache on the device
(device_cache.py), the run command with its pre-flight checks, the pidfile-and-token
kill of everything a run started, and the clean-up at the end.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from . import Transport, device_cache, exec_check
from .contract import CacheEntryLost, ConnectionLost, Deployed, InfrastructureError, OnBytes, RunEnd
from .keeper import Keeper
from .runloop import Stream, drive

PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_CACHE_ENTRIES = 64


class RunStream(Stream, Protocol):
    """A run on the device as its link carries it (an SSH exec channel, adb's shell)."""

    def errors(self) -> bytes:
        """What the shell wrote on stderr (the binary's own stderr goes to stdout)."""

    def write(self, data: bytes) -> None:
        """To the program's stdin (a scripted test's spawn())."""

    def close_input(self) -> None: ...

    def close(self) -> None: ...


class RemoteProcess:
    """A program a scripted test talks to (LinuxDevice.spawn): its stream, ended like a
    binary's run (its process group and every process carrying its token) when closed."""

    def __init__(self, device: LinuxDevice, stream: RunStream, pidfile: str, token: str, deployed: Deployed | None):
        self._device, self._stream, self._pidfile, self._token = device, stream, pidfile, token
        self._deployed = deployed
        self._ended = False

    def read(self, wait: float) -> bytes | None:
        return self._stream.read(wait)

    def poll(self) -> RunEnd | None:
        end = self._stream.poll()
        if end is not None and not self._ended:
            self._ended = True
            if self._deployed is not None:  # the checks before the exec name what is wrong with the device
                self._device._check_preflight(self._stream.errors(), self._deployed)
        return end

    def wait(self, seconds: float) -> None:
        self._stream.wait(seconds)

    def write(self, data: bytes) -> None:
        try:
            self._stream.write(data)
        except OSError as e:
            raise ConnectionLost(f"{self._device.where}: connection lost writing to the program: {e}") from None

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.close_input()

    def errors(self) -> bytes:
        err = self._stream.errors()
        return re.sub(rb"#ondevice-preflight \w+\n?", b"", err)

    def kill(self) -> None:
        with contextlib.suppress(InfrastructureError):
            self._device._kill_run(self._pidfile, self._token)

    def close(self) -> None:
        try:
            if not self._ended:
                self.kill()
        finally:
            self._device._running.pop(self._token, None)
            self._stream.close()


class LinuxDevice(Transport):
    path_env = PATH  # the PATH a binary runs with
    trusted_uids: tuple[int, ...] = ()  # besides root and the device user: may own dirs above the cache

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        super().__init__(board, device, options)
        self.keeper: Keeper | None = None
        self.cache: device_cache.DeviceCache | None = None
        self.root = ""
        self.scratch = ""
        self.sid = ""
        self.where = device or ""
        self._lock = threading.Lock()
        self._deploy_lock = threading.Lock()
        self._runs = 0
        self._running: dict[str, str] = {}  # run token -> pid file, for close()
        self.exec_info = exec_check.DeviceExec()  # what the kernel runs: asked once per session
        self._wrapper_header: bytes | None = None

    # -- what a subclass brings ----------------------------------------------------------
    @abstractmethod
    def _fs(self, role: str) -> device_cache.DeviceFs:
        """File access for "deploy" or "prefetch" (each may need its own channel)."""

    @abstractmethod
    def _start_run(self, command: str) -> RunStream:
        """Run one `sh` command line; ConnectionLost if the link is gone."""

    def _push_failed(self, error: Exception, artifact: Path) -> InfrastructureError:
        return ConnectionLost(f"{self.where}: connection lost while pushing {artifact.name}: {error}")

    # -- session -----------------------------------------------------------------------
    def _start_session(self, fs: device_cache.DeviceFs, uid: int, home: str, user: str) -> None:
        """With the keeper up: our root made safe, a session dir, the cache listed."""
        base, root = device_cache.root_for(home, user, self.options.get("scratch_root"))
        try:
            self.root = device_cache.prepare(fs, base, root, uid, self.trusted_uids)
        except OSError as e:
            raise InfrastructureError(
                f"{self.where}: cannot set up the binary cache {self.root or 'under ' + base} on the device: {e}; "
                "set scratch_root in the board's [transport] to a directory this account can write"
            ) from None
        self.sid = secrets.token_hex(8)
        self.scratch = f"{self.root}/{device_cache.SESSIONS}/{self.sid}"
        self._exec(device_cache.start_session(self.scratch, self.sid))  # the keeper owns it from here
        self._exec(device_cache.sweep(self.root))  # what sessions killed earlier left: processes, dirs
        with contextlib.suppress(InfrastructureError):
            self.exec_info = exec_check.DeviceExec.parse(self._exec(exec_check.PROBE))
        if self.cache is None:
            self.cache = device_cache.DeviceCache(self.root, self.scratch, self._exec)
            self.cache.list_held(fs)
        else:  # a reconnect: what this session pushed is still there, its new dir holds nothing
            self.cache.new_session(self.scratch)

    def _exec(self, command: str) -> str:
        """A short housekeeping command, run by the keeper; its failure is the device's, not the test's."""
        if self.keeper is None:
            raise ConnectionLost(f"{self.where}: not connected")
        return self.keeper.exec(command)

    def healthy(self) -> bool:
        return self._alive()

    def _alive(self) -> bool:
        try:
            self._exec("true")
        except InfrastructureError:
            return False
        return True

    # -- loader --------------------------------------------------------------------------
    def prefetch(self, artifact: Path, sha256: str) -> None:
        """Push (or verify) into the device cache and link into the session dir, on a second
        channel while the device runs others."""
        with contextlib.suppress(Exception):
            if self.cache is not None:
                self.cache.stage(self._fs("prefetch"), artifact, sha256)

    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        if self.cache is None:
            raise ConnectionLost(f"{self.where}: not connected")
        self._check_exec_format(artifact)
        sid = self.sid
        try:
            with self._deploy_lock:
                return self.cache.place(self._fs("deploy"), artifact, sha256, data)
        except Exception as e:
            if self.sid != sid:  # another run's thread reconnected meanwhile: our session dir is gone
                raise ConnectionLost(
                    f"{self.where}: the connection was renewed while {artifact.name} was pushed: {e}"
                ) from None
            if isinstance(e, InfrastructureError):
                raise
            raise self._push_failed(e, artifact) from None

    # -- console -------------------------------------------------------------------------
    def run(
        self,
        deployed: Deployed,
        args: list[str],
        timeout: float,
        on_bytes: OnBytes,
        start: Callable[[], None] | None = None,
    ) -> RunEnd:
        with self._lock:
            self._runs += 1
            pidfile = f"{self.scratch}/.pid-{self._runs}"
        token = secrets.token_hex(8)  # in the environment of everything the binary starts (setsid too)
        stream = self._start_run(self._run_command(deployed, args, pidfile, token))
        with self._lock:
            self._running[token] = pidfile
        end: RunEnd | None = None
        try:
            try:
                end = drive(stream, timeout, on_bytes, self.stop, kill=lambda: self._kill_run(pidfile, token))
            except InfrastructureError as e:
                e.binary_started = True  # lost while the binary ran: it may have been the cause
                raise
            if end.timed_out is None:
                self._check_preflight(stream.errors(), deployed)  # a child it left running ends with the session
        except BaseException:
            if end is None or end.timed_out is None:  # Ctrl-C, a lost link or our own error: leave nothing behind
                with contextlib.suppress(Exception):
                    self._kill_run(pidfile, token)
            raise
        finally:
            with self._lock:
                self._running.pop(token, None)
            stream.close()
        return end

    def spawn(self, deployed: Deployed | None, args: list[str]) -> RemoteProcess:
        """The binary with args (its pre-flight checks as for a run), or a command found on the
        device's PATH; stdin from the test, stderr apart."""
        with self._lock:
            self._runs += 1
            pidfile = f"{self.scratch}/.pid-{self._runs}"
        token = secrets.token_hex(8)
        if deployed is not None:  # run where the test's push() puts files: its session dir
            command = self._run_command(replace(deployed, cwd=None), args, pidfile, token, io="")
        else:
            q = shlex.quote
            words = " ".join(q(w) for w in args)
            command = (
                f"cd {q(self.scratch)} && echo $$ > {q(pidfile)} || exit 125; "
                f"exec env ONDEVICE_SESSION={self.sid} ONDEVICE_RUN={token} {words}"
            )
        stream = self._start_run(command)
        with self._lock:
            self._running[token] = pidfile
        return RemoteProcess(self, stream, pidfile, token, deployed)

    def _remote(self, remote: str) -> str:
        return remote if remote.startswith("/") else f"{self.scratch}/{remote}"

    def push(self, local: Path, remote: str) -> str:
        target = self._remote(remote)
        try:
            self._fs("deploy").put(str(local), target)
        except OSError as e:
            raise InfrastructureError(f"{self.where}: cannot copy {local} to {target}: {e}") from None
        return target

    def pull(self, remote: str, local: Path) -> None:
        source = self._remote(remote)
        try:
            self._fs("deploy").get(source, str(local))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.where}:{source}: no such file on the device") from None
        except OSError as e:
            raise InfrastructureError(f"{self.where}: cannot copy {source} from the device: {e}") from None

    def run_file(self, deployed: Deployed) -> str | None:
        with self._lock:
            self._runs += 1
            return f"{self.scratch}/.run-file-{self._runs}"

    def read_run_file(self, path: str, limit: int) -> bytes | None:
        """Read by the keeper, as hex: whatever bytes the file holds never look like the
        keeper's own lines."""
        q = shlex.quote(path)
        out = self._exec(f"if [ -f {q} ]; then echo present; head -c {int(limit)} {q} | od -An -v -tx1; rm -f {q}; fi")
        lines = out.split("\n", 1)
        if lines[0].strip() != "present":
            return None
        try:
            return bytes.fromhex("".join(lines[1].split()) if len(lines) > 1 else "")
        except ValueError:
            raise InfrastructureError(f"{self.where}: unreadable dump of {path}: {out[:200]!r}") from None

    def _run_command(
        self, deployed: Deployed, args: list[str], pidfile: str, token: str, io: str = "</dev/null 2>&1"
    ) -> str:
        """One line for `sh`: checks that name what is wrong with the device, then the binary."""
        q = shlex.quote
        binary = q(deployed.path)
        wrapper = wrapper_words(self.options.get("exec_wrapper"))
        env = (
            f"env -i PATH={self.path_env} HOME={q(self.scratch)} TMPDIR={q(self.scratch)} "
            f"ONDEVICE_SESSION={self.sid} ONDEVICE_RUN={token}"
        )
        if self.coverage is not None:  # an instrumented binary's counts: brought back at the end
            env += f" GCOV_PREFIX={q(self._counts_dir())} GCOV_PREFIX_STRIP={self.coverage[0]}"
        for name, value in deployed.env:  # the test's own (a CTest test's ENVIRONMENT)
            env += f" {q(f'{name}={value}')}"
        checks = [
            f"cd {q(deployed.cwd or self.scratch)} && echo $$ > {q(pidfile)} || {_pre('scratch', 125)}",
            f"[ -f {binary} ] || {_pre('missing', 127)}",
            f"[ -x {binary} ] || {_pre('noexec', 126)}",
        ]
        if wrapper:
            checks.append(f"PATH={self.path_env} command -v {q(wrapper[0])} >/dev/null 2>&1 || {_pre('wrapper', 127)}")
        words = " ".join(q(w) for w in [*wrapper, deployed.path, *args])
        return "; ".join(checks) + "; " + self._invoke(f"{env} {words} {io}".rstrip())

    def _invoke(self, command: str) -> str:
        """How the binary is started once the checks passed: exec'd, so that the exit status
        the console reports is the binary's own (a console without one overrides this)."""
        return f"exec {command}"

    def _check_preflight(self, err: bytes, deployed: Deployed) -> None:
        """The checks before the exec report on stderr; each names what to fix."""
        found = re.search(rb"#ondevice-preflight (\w+)", err)
        if not found:
            return
        what = found.group(1).decode()
        name = deployed.path.rsplit("/", 1)[-1]
        if what == "missing" and self.cache is not None:  # pruned or deleted under us: push it again and retry
            self.cache.forget(deployed.sha256)
            raise CacheEntryLost(
                f"{self.where}: {name} vanished from the device cache ({self.cache.bin}) before it ran"
            )
        wrapper = self.options.get("exec_wrapper")
        raise InfrastructureError(
            {
                "noexec": f"{self.where}: the device cannot execute {name}: {self.root} is not executable there "
                "(a file system mounted noexec?); set scratch_root in the board's [transport] to a directory on "
                "a file system that allows exec",
                "wrapper": f"{self.where}: the exec_wrapper {wrapper!r} is not on the device (PATH={self.path_env}); "
                "install it there or fix exec_wrapper in the board's [transport]",
                "scratch": f"{self.where}: the session dir {self.scratch} is gone on the device",
            }.get(what, f"{self.where}: cannot run {name}: {what}")
        )

    def _check_exec_format(self, artifact: Path) -> None:
        """A file the kernel cannot execute (another architecture, or qemu-user without
        binfmt_misc for it) is an error of the device, found before anything runs: from the
        ELF header of what is exec'd (the binary, or the exec_wrapper) and what the device
        said of itself, never from the run's output, which the test writes."""
        wrapper = wrapper_words(self.options.get("exec_wrapper"))
        if wrapper:
            program, header = wrapper[0], self._header_of_wrapper(wrapper[0])
        else:
            program = artifact.name
            with open(artifact, "rb") as f:
                header = f.read(exec_check.HEADER_BYTES)
        if self.exec_info.can_exec(header) is not False:
            return
        name = program.rsplit("/", 1)[-1]
        arch = getattr(self.board, "arch", "") or "its"
        raise InfrastructureError(
            f"{self.where}: the device cannot execute {name}: it is {exec_check.describe(header)}, and the "
            f"device's kernel ({self.exec_info.machine}) has no binfmt_misc handler for it. Is the device's "
            f"architecture the board's ({arch})? A device that runs {arch} binaries through qemu-user needs "
            "binfmt_misc registered for them, or the emulator as the board's exec_wrapper"
        )

    def _header_of_wrapper(self, wrapper: str) -> bytes:
        """The first bytes of the exec_wrapper on the device, read once per session
        (b"": cannot tell, e.g. no `od` there; a missing wrapper is the pre-flight's to say)."""
        if self._wrapper_header is None:
            q = shlex.quote(wrapper)
            try:
                out = self._exec(
                    f"p=$(PATH={self.path_env} command -v {q}) && od -An -tx1 -N{exec_check.HEADER_BYTES} "
                    '"$p" 2>/dev/null; true'
                )
                self._wrapper_header = bytes.fromhex("".join(out.split()))
            except (InfrastructureError, ValueError):
                self._wrapper_header = b""
        return self._wrapper_header

    def _kill_run(self, pidfile: str, token: str) -> None:
        """The binary's process group, and every process carrying its token (a setsid() child too)."""
        q = shlex.quote(pidfile)
        self._exec(f'{{ pid=$(cat {q}) && kill -KILL "-$pid"; }} 2>/dev/null; ondevice_kill ONDEVICE_RUN={token}')

    def _forget_session(self) -> tuple[str, str]:
        """Before a reconnect: (the lost session's dir, its id), to clean up once connected again."""
        old = (self.scratch, self.sid)
        self.keeper, self.scratch = None, ""
        return old

    def _clean_lost(self, old: tuple[str, str]) -> None:
        scratch, sid = old
        if scratch:
            with contextlib.suppress(InfrastructureError):
                self._exec(f"ondevice_kill ONDEVICE_SESSION={sid}; rm -rf {shlex.quote(scratch)}")

    def _counts_dir(self) -> str:
        """Where instrumented binaries write their counts: the session's, merged run by run."""
        return f"{self.scratch}/gcda"

    def collect_counts(self) -> None:
        """The session's .gcda files, into a directory of this device and session (another
        device's counts for the same objects are merged by the report, not overwritten)."""
        if self.coverage is None or not self.scratch:
            return
        fs = self._fs("deploy")
        try:
            names = [n for n in fs.listdir(self._counts_dir()) if n.endswith(".gcda")]
        except OSError:
            return  # nothing instrumented ran here
        into = self.coverage[1] / f"remote-{_safe(self.where)}-{self.sid}"
        into.mkdir(parents=True, exist_ok=True)
        for name in names:
            with contextlib.suppress(OSError):
                fs.get(f"{self._counts_dir()}/{name}", str(into / name))

    def _end_session(self) -> None:
        """Kill what still runs, bring coverage counts back, bound the device cache, let
        the keeper clean up."""
        with contextlib.suppress(Exception):
            for token, pidfile in list(self._running.items()):  # runs not yet ended by the stop flag
                self._kill_run(pidfile, token)
        with contextlib.suppress(Exception):
            self.collect_counts()
        if self.cache is not None and self.cache.used():  # once per session, not per push
            with contextlib.suppress(Exception):
                keep = int(self.options.get("cache_entries", DEFAULT_CACHE_ENTRIES))
                device_cache.prune(self._fs("deploy"), self.root, keep)
        with contextlib.suppress(Exception):  # EOF: the keeper ends this session's processes, removes its dir
            if self.keeper is not None:
                self.keeper.finish()
        self.keeper = None


def _safe(text: str) -> str:
    return re.sub(r"[^\w.-]+", "_", text)[:60] or "device"


def _pre(what: str, code: int) -> str:
    return f"{{ echo '#ondevice-preflight {what}' >&2; exit {code}; }}"


def wrapper_words(value: Any) -> list[str]:
    """`exec_wrapper`: a string is one command (a path may hold spaces); a list is its words."""
    if not value:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]
