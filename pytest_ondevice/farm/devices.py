"""The session's devices: which ones each board has (the fleet), who may use one now
(leases, labgrid places), which are set aside (quarantine), and one open transport per
device, connected once in the background and again after a loss."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .. import transports
from ..config.board import Board, BoardRegistry
from ..config.settings import Settings
from ..transports import Clock, InfrastructureError, Transport
from .fleet import Device, Fleet
from .labgrid_places import Coordinator
from .lease import Lease, Leases
from .quarantine import Quarantine


class Devices:
    def __init__(
        self,
        settings: Settings,
        registry: BoardRegistry,
        run_dir: Path,
        opener: ThreadPoolExecutor,
        stopping: threading.Event,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.fleet = settings.fleet or Fleet([Device(b, b) for b in registry.names()])
        # a fleet file's devices are leased across runs; a board's own device only among
        # this process's threads (xdist workers and other runs use it at once, as before)
        own_leases = run_dir / f"leases-{os.getpid()}"
        lease_root = settings.lease_dir if self.fleet.shared and settings.lease_dir else own_leases
        self.places = Coordinator(self.fleet.coordinator) if self.fleet.places else None
        self.leases = Leases(lease_root, self.jobs_of, settings.who, settings.worker_index, self.places)
        # without a fleet file a board has one device and nowhere else to run: setting it
        # aside would only turn the rest of its cases into errors, untried
        self.quarantine = Quarantine(run_dir, self.fleet.quarantine_after if self.fleet.shared else sys.maxsize)
        self.run_dir = run_dir
        self._addresses: dict[str, str | None] = {}  # a labgrid place's device: where it was last
        self._transports: dict[str, Transport] = {}  # by device name
        self._open: dict[str, Future] = {}
        self._opener = opener
        self._stopping = stopping
        self._lock = threading.Lock()
        self._clocks: dict[tuple[str, str | None], Clock] = {}
        self.coverage: tuple[int, Path] | None = None  # set by the session when it instruments

    # -- which devices -----------------------------------------------------------------
    def for_board(self, board: str) -> list[Device]:
        return self.fleet.for_board(board)

    def jobs_of(self, device: Device) -> int:
        """How many binaries the device runs at a time (`device_jobs`, 1 by default)."""
        return device.jobs or self.registry.get(device.board).device_jobs

    def known_device(self, board: str) -> Device | None:
        """A board's only device, when it is known before a lease (a labgrid place's
        address comes with the place)."""
        devices = self.fleet.for_board(board)
        return devices[0] if len(devices) == 1 and devices[0].place is None else None

    def lease(self, candidates: list[Device]) -> Lease:
        """One of candidates, once free (an open connection is preferred); see lease.py."""
        settings = self.settings
        return self.leases.take(candidates, settings.lease_timeout, self._stopping, settings.say, set(self._transports))

    def follow(self, device: Device) -> None:
        """A labgrid place may be matched to another resource between leases: reconnect there."""
        if device.place is None:
            return
        with self._lock:
            before = self._addresses.get(device.name, device.address)
            self._addresses[device.name] = device.address
        if before != device.address:
            self.forget(device)

    def board_down(self, board: str) -> str:
        """The one error of a board whose every device is quarantined."""
        parts = []
        for device in self.fleet.for_board(board):
            reasons = self.quarantine.reasons(device.name)
            last = reasons[-1] if reasons else "?"
            parts.append(f"{device.name} ({len(reasons)} infrastructure errors; last: {last})")
        return f"every device of board {board} is quarantined for the rest of this run: {', '.join(parts)}"

    def health(self, device: Device) -> bool | None:
        """After a lost link, or an error that struck while a binary ran: does the device
        still answer (a fresh connection, a command run)? Then it is not the device's fault.
        None: its transport cannot tell."""
        try:
            return self.transport(device).healthy()
        except Exception:
            return False

    # -- transports --------------------------------------------------------------------
    def connect(self, boards: list[Board]) -> None:
        """Start connecting to a board's device now, while collection and build checks go on.

        A board of several devices connects to each when it first leases it: an xdist
        worker may never use most of them, and a handshake costs CPU the others need."""
        known = [(board, device) for board in boards if (device := self.known_device(board.name)) is not None]
        for board, device in known:  # here, not in the background: see Transport.import_libraries
            with contextlib.suppress(Exception):  # what is wrong with the table, open() reports
                transports.import_libraries(self.table_for(board, device)[0])
        for _, device in known:
            self._opening(device)

    def _opening(self, device: Device) -> Future:
        with self._lock:
            fut = self._open.get(device.name)
            if fut is None:
                fut = self._open[device.name] = self._opener.submit(self._open_transport, device)
            return fut

    def use_pool(self, opener: ThreadPoolExecutor) -> None:
        """Open transports on this pool from now on (the session's after a fork)."""
        self._opener = opener
        self._lock = threading.Lock()

    def transport(self, device: Device) -> Transport:
        """One open transport per device per session; a device that could not be reached stays so."""
        return self._opening(device).result()

    def _open_transport(self, device: Device) -> Transport:
        board = self.registry.get(device.board)
        table, where = self.table_for(board, device)
        transport = transports.create(board, table, where, self.settings.transport_options, self.settings.console)
        if self._stopping.is_set():
            transport.stop.set()
        transport.coverage = self.coverage
        transport.local_dir = self.run_dir
        transport.open()
        self._transports[device.name] = transport
        return transport

    def table_for(self, board: Board, device: Device | None = None) -> tuple[dict, str | None]:
        return device_table(board, device, self.fleet.shared)

    def check_addresses(self) -> None:
        """Every device's address is a form its board's transport takes: a usage error now,
        not an error on every item later."""
        for device in self.fleet.devices:
            if device.place is None:  # a place's address is known once it is acquired
                self.table_for(self.registry.get(device.board), device)

    def runs_ahead(self, board: Board) -> bool:
        """Whether the board's runs are queued ahead of the tests that read them: always
        when its devices run several binaries at a time (they run in parallel)."""
        devices = self.for_board(board.name)
        if sum(self.jobs_of(d) for d in devices) > 1:
            return True
        named: list[Device | None] = [*devices] or [None]  # none in the fleet: the board's own table
        return any(transports.runs_ahead(self.table_for(board, d)[0]) for d in named)

    def clock_for(self, board: Board, device: Device | None = None) -> Clock:
        """Board-file data, the same all session: asked once per case that timed something."""
        device = device or next(iter(self.fleet.for_board(board.name)), None)
        key = (board.name, device.name if device else None)
        clock = self._clocks.get(key)
        if clock is None:
            clock = self._clocks[key] = board.clock_for(self.table_for(board, device)[0])
        return clock

    def forget(self, device: Device) -> None:
        """Close the device's transport: the next use connects afresh."""
        with self._lock:
            self._open.pop(device.name, None)
        transport = self._transports.pop(device.name, None)
        if transport is not None:
            transport.close()

    def collect_counts(self) -> None:
        """--ondevice-coverage: every open device brings its binaries' counts back."""
        for transport in list(self._transports.values()):
            with contextlib.suppress(Exception):
                transport.collect_counts()

    def stop(self) -> None:
        """The session is ending: a run still going (run-ahead, Ctrl-C) ends now."""
        for transport in list(self._transports.values()):
            transport.stop.set()

    def close(self) -> None:
        """After the session's pools are down: every transport closed, every place returned."""
        self._transports.update(  # opened in the background, never used
            {d: f.result() for d, f in self._open.items() if f.done() and not f.exception()}
        )
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()
        if self.places is not None:  # what an interrupted run still holds goes back
            self.places.close()


def device_table(board: Board, device: Device | None, from_fleet: bool = False) -> tuple[dict, str | None]:
    """The board's [transport], or its [emulator] when the emulator's transport claims the
    device's address, with the address meant for it."""
    where = device.address if device is not None else None
    if where is None:
        return board.transport, None
    main = transports.load(board.transport["name"])
    emulator = transports.load(board.emulator["name"]) if board.emulator else None
    if emulator is not None and emulator.claims(where):
        return board.emulator or {}, None
    if main.claims(where):
        return board.transport, where
    forms = [*main.device_forms, *(emulator.device_forms if emulator else ())]
    accepted = f"accepted: {', '.join(forms)}" if forms else "it takes no --device"
    named = f"device {device.name}'s address " if from_fleet and device is not None else "--device="
    raise InfrastructureError(f"{named}{where} names no device of board {board.name} ({main.name}); {accepted}")
