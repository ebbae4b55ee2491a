"""SIGINT, SIGTERM and SIGHUP end a run the way Ctrl-C does, once, and cleanly.

By default SIGTERM and SIGHUP kill pytest on the spot: the test binaries and emulators
we started run in their own sessions (so that a timeout can kill a whole group) and
would outlive it, re-parented to init. Raised as KeyboardInterrupt in the main thread
(as pytest-timeout raises from its SIGALRM handler), they go through pytest's normal
interrupted summary and the session close, which ends what is running.

A stop is acted on once: the same request said again within GRACE seconds (a terminal's
Ctrl-C reaches xdist workers directly and through their controller; CI sends SIGINT and
then SIGTERM), or arriving while the session is already closing, is noted and not raised
again, since a KeyboardInterrupt inside pytest's own summary or our clean-up would print a
raw traceback and leave the clean-up half done. A repeat after GRACE is raised: a user
who insists is obeyed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

import pytest

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE = 2.0  # seconds in which a repeated stop request is the same request


class Interrupts:
    """Our handlers for the stop signals, installed while a board is selected."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.first_at: float | None = None
        self.finishing = False  # the session is already ending: nothing to interrupt
        self.workers: dict[str, int] = {}  # xdist worker id -> pid (on a controller)
        self.signalled: set[int] = set()

    def install(self) -> None:
        """Take over the stop signals that still have their default meaning; one that is
        ignored (nohup) or has another handler (another plugin's, the user's) is left alone."""
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works in the main thread only (pytest run from a thread)
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            if current is default:
                self.previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Give the signals back as they were (pytester runs many sessions in one process).

        After a stop the process is on its way out; a repeat of it (SIGTERM then SIGHUP from
        a closing terminal, CI's SIGINT then SIGTERM) must not kill it by signal on the way:
        not our default handlers, which Python itself resets to the default action while it
        shuts down, but an ignore, which survives that."""
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, signal.SIG_IGN if self.first_at is not None else handler)
        self.previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.first_at is not None and now - self.first_at < GRACE:
            return  # the stop already under way
        repeat = self.first_at is not None
        self.first_at = now
        if self.finishing and not repeat:
            return  # the session close ends what is running anyway
        __tracebackhide__ = True  # pytest shows where the main thread was, as for Ctrl-C
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # -- hooks (registered as a plugin while a board is selected) ------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.finishing = True
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self.stop_workers()

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.finishing = True  # before the session close (an interrupt during configure)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        pid = gateway_pid(gateway)
        if pid is not None:
            self.workers[gateway.id] = pid

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.workers.pop(str(getattr(node.gateway, "id", "")), None)
        if (getattr(node, "workeroutput", None) or {}).get("exitstatus") == pytest.ExitCode.INTERRUPTED:
            # a worker was stopped (a signal to it alone): xdist stops the run, but only once
            # every other worker has finished its current test, which may hang for minutes
            no_replacements(node.config)
            self.stop_workers()

    def stop_workers(self) -> None:
        """On an xdist controller whose run is interrupted: the workers stop now, each
        ending what it started, instead of finishing their current test (a hang lasts
        until its timeout) or being killed with SIGKILL after xdist's 10 s, which would
        leave their binaries and emulators running."""
        for pid in self.workers.values():
            if pid not in self.signalled:  # once: a second would find it cleaning up
                self.signalled.add(pid)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)


def no_replacements(config: pytest.Config) -> None:
    """xdist replaces a worker that ended interrupted, as if it had crashed, and a stopping
    run then waits for each replacement to start up (a new Python with pytest and its
    plugins, 1-2 s on a busy 2-core box) only to shut it down again. The run is ending:
    no replacement. (xdist has no public switch for this: --max-worker-restart is read once
    and, when reached, reports a crash. Without the private method, the slower stop.)"""
    dsession = config.pluginmanager.getplugin("dsession")
    if dsession is None or not callable(getattr(dsession, "_clone_node", None)):
        return
    dsession._clone_node = lambda node: None


def gateway_pid(gateway: Any) -> int | None:
    """The local process of an execnet popen gateway (xdist's workers), if it has one."""
    pid = getattr(getattr(getattr(gateway, "_io", None), "popen", None), "pid", None)
    return pid if isinstance(pid, int) else None
