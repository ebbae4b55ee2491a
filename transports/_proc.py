"""Run a local process with streamed output, a hard timeout and no orphans.

Used by every transport whose device is a local process (the host itself,
QEMU). The child gets its own session, so a timeout or a stray grandchild is
ended by killing the whole process group.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .contract import Deployed, InfrastructureError, RunEnd, signal_name
from .runloop import drive

READ_SIZE = 65536
STDERR_KEPT = 1 << 20  # of an interactive program's separate stderr
# exec failures that say nothing about the file: a file just written (ETXTBSY), a machine
# short of memory or processes, an environment rewritten while a child that inherited it
# exec'd (EFAULT: our children never inherit, see own_environment); tried again before the
# device is blamed
TRANSIENT_EXEC = {errno.EFAULT, errno.EAGAIN, errno.ENOMEM, errno.ETXTBSY, errno.EINTR}
EXEC_ATTEMPTS = 3


class ProcessStream:
    """A local child in its own session, for the shared run loop: its group is killed at the end.

    noise: lines of the child's stderr that are not the device's output (an emulator's own
    start-up warnings), left out of the stream; the rest of stderr is passed on line by line."""

    def __init__(
        self,
        argv: list[str],
        cwd: Path | None,
        env: dict[str, str] | None,
        noise: re.Pattern[bytes] | None = None,
        interactive: bool = False,
    ) -> None:
        """interactive: the child's stdin is a pipe (write()), its stderr kept apart (errors())."""
        self._noise = noise
        self._err_tail = b""
        self._stderr = bytearray()
        self._apart = interactive and noise is None
        for attempt in range(EXEC_ATTEMPTS):
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE if noise or self._apart else subprocess.STDOUT,
                    cwd=cwd,
                    env=own_environment(env),
                    start_new_session=True,
                )
                break
            except OSError as e:  # the file cannot be run here: not the test's verdict
                if e.errno in TRANSIENT_EXEC and attempt + 1 < EXEC_ATTEMPTS:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise InfrastructureError(f"cannot execute {argv[0]}: {e.strerror or e}") from None
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self._open = [self.fd] + ([self.proc.stderr.fileno()] if self.proc.stderr else [])
        self._exited = _exit_notice(self.proc.pid)

    def read(self, wait: float) -> bytes | None:
        if not self._open:
            return b""
        ready, _, _ = select.select(self._open, [], [], wait)
        out = b""
        for fd in ready:
            data = os.read(fd, READ_SIZE)
            if not data:
                self._open.remove(fd)
            if fd == self.fd:
                out += data
            elif self._apart:
                self._stderr += data[: STDERR_KEPT - len(self._stderr)]
            else:
                out += self._err(data, final=not data)
        if out or not ready:
            return out or None
        return b"" if not self._open else None

    def _err(self, data: bytes, final: bool) -> bytes:
        """Complete stderr lines that are not noise (a partial line waits for its end)."""
        assert self._noise is not None
        lines = (self._err_tail + data).split(b"\n")
        self._err_tail = b"" if final else lines.pop()
        if len(self._err_tail) > READ_SIZE:  # no newline in sight: pass it on as it is
            lines.append(self._err_tail)
            self._err_tail = b""
        return b"".join(line + b"\n" for line in lines if line and not self._noise.fullmatch(line.rstrip(b"\r")))

    def write(self, data: bytes) -> None:
        if self.proc.stdin is None:
            raise InfrastructureError("this program's input is not connected")
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it has stopped reading (or ended): what it printed says why

    def close_input(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def errors(self) -> bytes:
        return bytes(self._stderr)

    def poll(self) -> RunEnd | None:
        code = self.proc.poll()
        if code is None:
            return None
        return RunEnd(signal=signal_name(-code)) if code < 0 else RunEnd(exit_code=code)

    def wait(self, seconds: float) -> None:
        if self._exited is not None:  # wakes the moment it exits
            select.select([self._exited], [], [], seconds)
            return
        with contextlib.suppress(subprocess.TimeoutExpired):  # polls, sleeping 0.5 ms and more between
            self.proc.wait(timeout=seconds)

    def kill(self) -> None:
        """SIGKILL the whole group: the binary and anything it started."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: pgid == pid

    def close(self) -> None:
        self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a stdin it stopped reading: nothing to flush to
                    pipe.close()
        self.proc.wait()
        if self._exited is not None:
            os.close(self._exited)
            self._exited = None


def own_environment(env: dict[str, str] | None) -> dict[str, str]:
    """The child's environment as a copy made here, never "inherit": subprocess starts a
    child with vfork, and a child inheriting reads the C library's environ array while it
    execs, which another thread may be reallocating that moment (pytest sets and removes
    PYTEST_CURRENT_TEST around every test): execve then fails with EFAULT ("Bad address").
    2,000 runs of /bin/true against a thread setting and removing a variable: 383 failed."""
    return dict(os.environ) if env is None else env


def _exit_notice(pid: int) -> int | None:
    """A descriptor that turns readable when the child exits (Linux 5.3+), or None. Its output
    closes a moment before it can be reaped: subprocess's wait() would then sleep."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def run_streaming(
    argv: list[str],
    timeout: float,
    on_bytes: Callable[[bytes], None],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stop: threading.Event | None = None,
    noise: re.Pattern[bytes] | None = None,
) -> RunEnd:
    stream = ProcessStream(argv, cwd, env, noise)
    try:
        return drive(stream, timeout, on_bytes, stop)
    finally:
        stream.close()


def with_env(deployed: Deployed) -> dict[str, str] | None:
    """The environment of a local run: this process's, with what the test sets (None: just this process's)."""
    return {**os.environ, **dict(deployed.env)} if deployed.env else None


class RunDirs:
    """Private working directories for local runs (a binary's cwd, holding links to its data
    files), removed at close: never inside the build cache, whose entries are shared by
    sessions and never written."""

    def __init__(self) -> None:
        self._root: Path | None = None

    def make(self, data: Sequence[Path], under: Path | None = None) -> Path:
        """under: the run's own dir (Transport.local_dir), else the machine's temp dir."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="ondevice-run-", dir=under))
        run_dir = Path(tempfile.mkdtemp(dir=self._root))
        for path in data:  # a directory too: its files keep their paths below it
            (run_dir / path.name).symlink_to(path.resolve())
        return run_dir

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


class LocalRunFiles:
    """run_file()/read_run_file() for a transport whose binary runs on this machine's own
    file system (the host, QEMU user mode): a file in the run's private directory."""

    def run_file(self, deployed: Deployed) -> str | None:
        if not deployed.cwd:
            return None
        fd, path = tempfile.mkstemp(prefix=".ondevice-run-file-", dir=deployed.cwd)
        os.close(fd)
        os.unlink(path)  # only the run creates it: its absence is news
        return path

    def read_run_file(self, path: str, limit: int) -> bytes | None:
        try:
            with open(path, "rb") as f:
                data = f.read(limit)
        except FileNotFoundError:
            return None
        with contextlib.suppress(OSError):
            os.unlink(path)
        return data


SPAWN_TAG = "ONDEVICE_LOCAL_SESSION"


class LocalSpawns:
    """Programs a scripted test starts on this machine, each tagged in its environment with
    the transport's session token: end_spawned() ends every process carrying it, one whose
    Popen() a Ctrl-C interrupted before we knew its pid, and what it started, included."""

    _tag: str | None = None

    def spawn_local(
        self, argv: list[str], cwd: Path | None, noise: re.Pattern[bytes] | None = None, interactive: bool = True
    ) -> ProcessStream:
        if self._tag is None:
            self._tag = f"{os.getpid()}-{id(self):x}-{time.monotonic_ns()}"
        env = {**os.environ, SPAWN_TAG: self._tag}
        return ProcessStream(argv, cwd, env, noise, interactive)

    def end_spawned(self) -> None:
        if self._tag is not None:
            kill_tagged(f"{SPAWN_TAG}={self._tag}".encode())


def kill_tagged(entry: bytes) -> None:
    """SIGKILL every process whose environment holds entry (NAME=VALUE)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if entry not in f.read().split(b"\0"):
                    continue
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read


class LocalScratch(LocalSpawns):
    """spawn()/push()/pull() for a transport whose programs run on this machine: a private
    working directory per session, removed at close (with the transport's RunDirs)."""

    _run_dirs: RunDirs
    _scratch: Path | None = None
    local_dir: Path | None

    def scratch(self) -> Path:
        if self._scratch is None:
            self._scratch = self._run_dirs.make((), self.local_dir)
        return self._scratch

    def _local_path(self, remote: str) -> Path:
        return self.scratch() / remote  # an absolute remote path stays itself

    def push(self, local: Path, remote: str) -> str:
        target = self._local_path(remote)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local, target)
            shutil.copymode(local, target)
        except OSError as e:
            raise InfrastructureError(f"cannot copy {local} to {target}: {e.strerror or e}") from None
        return str(target)

    def pull(self, remote: str, local: Path) -> None:
        source = self._local_path(remote)
        if not source.is_file():
            raise FileNotFoundError(f"{source}: no such file on the device")
        shutil.copyfile(source, local)

    def spawn_here(self, argv: list[str]) -> ProcessStream:
        return self.spawn_local(argv, self.scratch())
