"""Transports: how a built binary reaches a device and runs there.

Each transport is a small class behind one interface (`Transport`); the plugin
picks one by the board's `transport.name`. Third-party transports register
through the `pytest_ondevice.transports` entry-point group.
"""

from __future__ import annotations

import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pytest_ondevice.protocol import RunEnd

OnBytes = Callable[[bytes], None]

BUILTIN = {
    "local": "pytest_ondevice.transports.local:LocalTransport",
    "qemu-system": "pytest_ondevice.transports.qemu:QemuSystemTransport",
    "qemu-user": "pytest_ondevice.transports.qemu:QemuUserTransport",
    "ssh": "pytest_ondevice.transports.ssh:SshTransport",
    "renode": "pytest_ondevice.transports.renode:RenodeTransport",
}

# The board-file keys each built-in transport reads from its [transport] (or [emulator])
# table, beside `name`; any other key is a typo, reported with file and key. Declared here
# rather than on the classes so that checking a board file imports no transport (ssh pulls
# in paramiko). A third-party transport declares its own as the class attribute `keys`.
COMMON_KEYS = frozenset({"name", "device_jobs"})
BUILTIN_KEYS: dict[str, frozenset[str]] = {
    "local": frozenset(),
    "qemu-system": frozenset({"binary", "machine", "cpu", "output", "icount_shift", "extra_args"}),
    "qemu-user": frozenset({"binary", "sysroot", "cpu"}),
    "ssh": frozenset(
        {
            "host",
            "scratch_root",
            "cache_entries",
            "connect_timeout",
            "sftp_timeout",
            "exec_wrapper",
            "ssh_config",  # also the ini option ondevice_ssh_config
            "accept_new_host_keys",  # also ondevice_ssh_accept_new_host_keys
        }
    ),
    "renode": frozenset(
        {
            "platform",
            "script",
            "output",
            "cpu",
            "terminal_port",
            "virtual_timeout",
            "monitor_timeout",
            "start_timeout",
            "renode",  # also the ini option ondevice_renode
        }
    ),
}


class InfrastructureError(Exception):
    """The device or the way to it failed (down, refused, dropped): not the test's fault."""

    retryable = False  # True: a fresh connection may well succeed (a dropped link)


@dataclass(frozen=True)
class Deployed:
    """A binary as the device holds it."""

    path: str
    sha256: str
    pushed: bool | None  # False: the device already held this content; None: nothing to push
    cwd: str | None = None  # where the binary runs (its data files are there)


class Transport(ABC):
    """Open once per session, deploy and run many binaries, close at the end."""

    name: str = ""
    keys: frozenset[str] | None = None  # board-file keys it reads (None: not declared, not checked)

    def __init__(self, board: Any, device: str | None, options: dict[str, Any]) -> None:
        self.board = board
        self.device = device
        self.options = options
        self.stop = threading.Event()  # set when the session ends: a running binary is ended

    @classmethod
    def status(cls, options: dict[str, Any]) -> str:
        """One line for `pytest-ondevice boards`: can this transport be used here?"""
        return "ready"

    def open(self) -> None:  # noqa: B027 - optional hook
        """Connect; raise InfrastructureError when the device cannot be reached."""

    @abstractmethod
    def deploy(self, artifact: Path, sha256: str, data: Sequence[Path] = ()) -> Deployed:
        """Put the binary (and the data files its test reads) where it can run."""

    def prefetch(self, artifact: Path, sha256: str) -> None:  # noqa: B027 - optional hook
        """Start moving a binary that will run soon, while the device runs the one before.

        Best effort: errors are the later deploy()'s to report. May be called from another
        thread than deploy() and run()."""

    @abstractmethod
    def run(self, deployed: Deployed, args: list[str], timeout: float, on_bytes: OnBytes) -> RunEnd:
        """Run to completion or timeout, streaming output to on_bytes as it arrives."""

    def reopen(self) -> None:
        """Connect again after a dropped connection, cleaning up what the lost one left."""
        self.close()
        self.open()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the device; remove scratch files; never raise."""


def status(table: dict[str, Any]) -> str:
    try:
        cls = load(table["name"])
    except InfrastructureError:
        return "not available in this version"
    return cls.status({k: v for k, v in table.items() if k != "name"})


def accepted_keys(name: str) -> frozenset[str] | None:
    """The keys a board's table for this transport may hold; None when they are not known
    (a transport that declares none, or one this version does not have)."""
    if name in BUILTIN_KEYS:
        return COMMON_KEYS | BUILTIN_KEYS[name]
    try:
        declared = load(name).keys
    except Exception:  # unknown or broken: reported when the transport is used
        return None
    return None if declared is None else COMMON_KEYS | frozenset(declared)


def load(name: str) -> type[Transport]:
    target = BUILTIN.get(name)
    if target is None:
        for ep in entry_points(group="pytest_ondevice.transports"):
            if ep.name == name:
                return ep.load()
        known = sorted({*BUILTIN, *(ep.name for ep in entry_points(group="pytest_ondevice.transports"))})
        raise InfrastructureError(f"unknown transport '{name}'; known transports: {', '.join(known)}")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)
