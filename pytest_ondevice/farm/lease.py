"""Device leases that cannot go stale: an OS file lock per device slot.

A lease is `flock()` on `<lease dir>/<device>.<slot>.lock`. The kernel drops it when
the holder's process ends, however it ends (SIGKILL included), so no lease outlives
its run and nobody has to clean up after a crash (labgrid #1739 is the pain of locks
that do not). The holder writes who it is into the file, so a run that has to wait
can say who it is waiting for.

A device that names a labgrid place is also acquired at the coordinator once its lock
is held (labgrid_places.py): the lock orders this host, the coordinator the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..transports import InfrastructureError
from .fleet import Device

if TYPE_CHECKING:
    from .labgrid_places import Coordinator

POLL = 0.02  # seconds between tries while every slot is taken: a device that comes free is idle this long at most
POLL_PLACES = 0.2  # when a labgrid place is among them: each try asks the coordinator
SAY_AFTER = 1.0  # wait this long before saying who holds the devices


class LeaseTimeout(InfrastructureError):
    """No device of a board came free within --lease-timeout."""


# pytest types UsageError as final; subclassed on purpose: pytest reports a subclass as a usage
# error all the same, and this one is an InfrastructureError too
class LeaseDirError(pytest.UsageError, InfrastructureError):  # type: ignore[misc]
    """The lease directory cannot be made or written: the fleet file's (or the cache's) fault,
    found when the session starts, so a usage error naming it rather than an INTERNALERROR."""


class Lease:
    def __init__(self, device: Device, slot: int, fd: int, path: Path) -> None:
        self.device = device  # a labgrid place's: with the address read from the place
        self.slot = slot
        self.path = path
        self._fd: int | None = fd
        self.on_release: Callable[[], None] | None = None  # give the place back to the coordinator

    def release(self) -> None:
        if self._fd is None:
            return
        give_back, self.on_release = self.on_release, None
        if give_back is not None:  # before the lock: the next holder here must not find it ours
            with contextlib.suppress(InfrastructureError):  # unreleased: the next holder of this slot recovers it
                give_back()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)  # nobody holds it now: a waiter must not name us
        os.close(self._fd)  # closing the file drops the lock
        self._fd = None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def identity(worker: str | None = None) -> str:
    """Who holds a lease, in words a person at another terminal can act on."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    by = f", xdist worker {worker}" if worker else ""
    return f"pid {os.getpid()} on {socket.gethostname()} (user {user}{by}, since {time.strftime('%H:%M:%S')})"


class Leases:
    def __init__(
        self,
        root: Path,
        jobs_of: Callable[[Device], int],
        who: str,
        first_turn: int = 0,
        places: Coordinator | None = None,
    ) -> None:
        self.root = root
        self.places = places  # for devices that name a labgrid place
        self.jobs_of = jobs_of
        self.who = who
        self._turn = first_turn  # xdist workers start at different devices: free ones are spread
        self._lock = threading.Lock()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LeaseDirError(
                f"cannot create the lease directory {root}: {e.strerror} (set lease_dir in the fleet file's [fleet])"
            ) from None

    def _path(self, device: Device, slot: int) -> Path:
        return self.root / f"{device.name}.{slot}.lock"

    def check(self, devices: list[Device]) -> list[str]:
        """What would stop a run from leasing these devices: each slot's lease file opened
        (made if need be) as try_take opens it, but not locked: doctor takes no device."""
        problems = []
        for device in devices:
            for slot in range(self.jobs_of(device)):
                path = self._path(device, slot)
                try:
                    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666))
                except OSError as e:
                    problems.append(f"cannot open the lease file {path}: {e.strerror}")
        return problems

    def try_take(self, device: Device) -> Lease | None:
        """The device's first free slot, or None when every slot is held."""
        for slot in range(self.jobs_of(device)):
            fd = self._open(device, slot)
            if _locked(fd):
                return self._claim(device, slot, fd)
            os.close(fd)
        return None

    def take_idle(self, device: Device) -> Lease | None:
        """A slot of the device only while none of its slots is held (by this run or another):
        a binary goes to an idle device before it doubles up on a busy one. Every slot is
        locked while it is looked at, so two threads cannot both find the same device idle."""
        held: list[int] = []
        try:
            for slot in range(self.jobs_of(device)):
                fd = self._open(device, slot)
                held.append(fd)
                if not _locked(fd):
                    return None
            return self._claim(device, 0, held.pop(0))
        finally:
            for fd in held:
                os.close(fd)

    def _open(self, device: Device, slot: int) -> int:
        try:
            return os.open(self._path(device, slot), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            raise InfrastructureError(
                f"cannot open the lease file {self._path(device, slot)}: {e.strerror} (is the lease "
                "directory writable by every user of the fleet?)"
            ) from None

    def _claim(self, device: Device, slot: int, fd: int) -> Lease:
        """A slot whose lock is held: named as ours for whoever waits for it."""
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.who}\n".encode(), 0)
        return Lease(device, slot, fd, self._path(device, slot))

    def _try(self, device: Device, waiting: dict[str, Lease], idle: bool = False) -> Lease | None:
        """The device's lock (idle: only if no slot of it is held) and, for a labgrid place,
        the place; a place that is busy keeps its lock and reservation in `waiting`, polled
        on the next turn."""
        lease = waiting.pop(device.name, None)
        fresh = lease is None
        if lease is None:
            lease = self.take_idle(device) if idle else self.try_take(device)
            if lease is None or device.place is None:
                return lease
        assert self.places is not None
        try:
            address = self.places.claim(device, lease.path, fresh)
        except BaseException:  # the lock too: this process must be able to take the device again
            self._give_up(lease)
            raise
        if address is None:
            waiting[device.name] = lease
            return None
        places, path = self.places, lease.path
        lease.device = replace(device, address=address)
        lease.on_release = lambda: places.release(device, path)
        return lease

    def _give_up(self, lease: Lease) -> None:
        assert self.places is not None
        with contextlib.suppress(InfrastructureError):
            self.places.give_up(lease.device, lease.path)
        lease.release()

    def holders(self, device: Device) -> list[str]:
        """Who holds the device's slots, as they wrote it."""
        found = []
        for slot in range(self.jobs_of(device)):
            try:
                text = self._path(device, slot).read_text(errors="replace").strip()
            except OSError:
                continue
            if text:
                found.append(text)
        return found

    def take(
        self,
        devices: list[Device],
        timeout: float | None,
        stop: threading.Event,
        say: Callable[[str], None] | None = None,
        prefer: set[str] | frozenset[str] = frozenset(),
    ) -> Lease:
        """A lease on one of the devices, waiting while all are held (another run, a worker).
        An idle device (no slot held) is taken before a second slot of a busy one, so the
        work spreads over the devices; within each, the preferred ones (already connected)
        are tried first, then the others from this run's turn on."""
        if not devices:
            raise InfrastructureError("no device to lease")
        started = time.monotonic()
        said = False
        waiting: dict[str, Lease] = {}  # labgrid places we hold the lock of and wait for
        poll = POLL_PLACES if any(d.place is not None for d in devices) else POLL
        try:
            while True:
                with self._lock:  # threads of one run take turns over the devices: load is spread
                    self._turn += 1
                    turn = self._turn
                order = devices[turn % len(devices) :] + devices[: turn % len(devices)]
                order.sort(key=lambda d: d.name not in prefer)  # stable: the turn order within each group
                lease = self._first(order, waiting)
                if lease is not None:
                    return lease
                waited = time.monotonic() - started
                if stop.is_set():
                    raise InfrastructureError("the run is ending: no device was leased")
                if timeout is not None and waited >= timeout:
                    raise LeaseTimeout(
                        f"no device of board {devices[0].board} came free within --lease-timeout={timeout:g} s; "
                        + self.describe(devices, waiting)
                    )
                if say is not None and not said and waited >= SAY_AFTER and (waiting or self._held_elsewhere(devices)):
                    board = devices[0].board
                    say(f"ondevice: waiting for a device of board {board}: {self.describe(devices, waiting)}")
                    said = True
                stop.wait(poll)
        finally:
            for lease in waiting.values():  # the places not taken: cancel their reservations
                self._give_up(lease)

    def _first(self, order: list[Device], waiting: dict[str, Lease]) -> Lease | None:
        """The first idle device in order, else the first with a free slot. (A device of one
        slot is idle whenever it is free: asked once, never twice, as a place is claimed.)"""
        for device in order:
            lease = self._try(device, waiting, idle=True)
            if lease is not None:
                return lease
        for device in order:
            if self.jobs_of(device) > 1:
                lease = self._try(device, waiting)
                if lease is not None:
                    return lease
        return None

    def describe(self, devices: list[Device], waiting: dict[str, Lease] | None = None) -> str:
        parts = []
        for device in devices:
            if waiting and device.name in waiting and self.places is not None:  # ours here, busy there
                who = [self.places.holder(device)]
            else:
                who = self.holders(device)
            parts.append(f"{device.name} is leased by {'; '.join(who) if who else 'another process'}")
        return ", ".join(parts)

    def _held_elsewhere(self, devices: list[Device]) -> bool:
        """Only another process is worth a message: our own threads wait for each other quietly."""
        mine = f"pid {os.getpid()} "
        return any(not h.startswith(mine) for d in devices for h in self.holders(d))


def _locked(fd: int) -> bool:
    """The file's lock taken now, or False when someone holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
