"""Fleet devices leased through a labgrid coordinator: a farm spread over several hosts.

Our file lock still orders the runs and workers of one host; the coordinator orders the
hosts. What the design rests on (measured, see docs/farm.md):

- labgrid has no blocking acquire: a device that is busy is waited for with a
  reservation (filter `name=PLACE`), polled (which keeps it alive), and cancelled once
  we are done, or the place stays blocked for about a minute;
- a place's owner is a "host/user" string, not a process: each lock slot is an identity
  of its own (`USER.ondevice-HASH`), so two workers or two runs never pass for one owner;
- a killed holder keeps its place forever: whoever next takes the same lock slot knows
  the last holder is gone (the kernel dropped its lock), so it releases and cancels what
  that identity left behind before it asks for the place.

labgrid's client is asyncio and our runs are threads: one loop runs in a thread of its
own and every call is handed to it.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import importlib.util
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

from ..transports import InfrastructureError
from .fleet import Device

DEFAULT_COORDINATOR = "127.0.0.1:20408"  # labgrid's own default
CALL_TIMEOUT = 30.0  # seconds for one exchange with the coordinator
INSTALL = "pip install 'pytest-ondevice[labgrid]'"
CHANNEL_OPTIONS = [  # labgrid's client's own: keepalive pings, so a dead coordinator is noticed
    ("grpc.keepalive_time_ms", 7500),
    ("grpc.keepalive_timeout_ms", 10000),
    ("grpc.http2.ping_timeout_ms", 10000),
    ("grpc.http2.max_pings_without_data", 0),
]


class PlaceError(InfrastructureError):
    """This device's place cannot be used (missing, without the resource, the coordinator
    away): the device is struck and the binary goes to another device."""

    def __init__(self, device: Device, message: str) -> None:
        super().__init__(message)
        self.device = device


def installed() -> bool:
    return importlib.util.find_spec("labgrid") is not None


def identity(lock_path: Path) -> tuple[str, str]:
    """The (host, user) a lock slot holds places as; the same slot always has the same one."""
    host = os.environ.get("LG_HOSTNAME") or socket.gethostname()
    try:
        user = os.environ.get("LG_USERNAME") or getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    # the machine too: two hosts may share a hostname (containers) and a cache path
    tag = hashlib.sha256(f"{_machine_id()}\0{lock_path}".encode()).hexdigest()[:8]
    return host.replace("/", "_"), f"{user.replace('/', '_')}.ondevice-{tag}"


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            return Path(path).read_text().strip()
        except OSError:
            continue
    return socket.gethostname()


def address_of(device: Device, args: dict[str, Any]) -> str:
    """The device's address from its resource's parameters: the fleet's template, else the
    form our transports take for that resource."""
    template = device.address
    if template is None:
        if device.resource != "NetworkService":
            raise PlaceError(
                device,
                f"device {device.name}: say how a {device.resource} resource is addressed with "
                'address = "...{param}..." in the fleet file',
            )
        template = "{username}@{address}:{port}" if args.get("username") else "{address}:{port}"
    try:
        return template.format(**{"port": 22, **args})
    except (KeyError, IndexError, ValueError) as e:
        have = ", ".join(sorted(args)) or "none"
        raise PlaceError(
            device, f"device {device.name}: address template {template!r} needs {e} (the {device.resource} has {have})"
        ) from None


class Coordinator:
    """One process's link to a labgrid coordinator: a client session per identity."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address or os.environ.get("LG_COORDINATOR") or DEFAULT_COORDINATOR
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._sessions: dict[str, Any] = {}  # by owner "host/user"
        self._tokens: dict[str, str] = {}  # owner -> its waiting reservation
        self._held: dict[str, str] = {}  # owner -> the place it acquired

    # -- the loop thread -----------------------------------------------------
    def _call(self, make: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        import asyncio  # here, not at the top: every run with a board imports this module
        import concurrent.futures

        with self._start:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="ondevice-labgrid", daemon=True)
                self._thread.start()
        future = asyncio.run_coroutine_threadsafe(make(*args), self._loop)
        try:
            return future.result(CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise InfrastructureError(
                f"the labgrid coordinator at {self.address} did not answer within {CALL_TIMEOUT:g} s"
            ) from None

    async def _session(self, device: Device, owner: str) -> Any:
        session = self._sessions.get(owner)
        if session is not None and not session.stopping.is_set():
            return session
        if session is not None:  # the coordinator went away: a new link, the old one closed
            await _quietly(session.close())
        import grpc
        from labgrid.remote.client import ClientSession
        from labgrid.remote.generated import labgrid_coordinator_pb2_grpc
        from labgrid.util.proxy import proxymanager

        class Session(ClientSession):
            """Holds places as the identity of one lock slot, not as the process's user."""

            channel: Any  # ClientSession's gRPC channel (labgrid has no types here)

            def __attrs_post_init__(self) -> None:
                super().__attrs_post_init__()
                # gRPC shares one connection among channels to one address, and the
                # coordinator tells clients apart by connection: each identity needs its own
                shared = self.channel
                self.channel = grpc.aio.insecure_channel(
                    self.address, options=[*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
                )
                self.stub = labgrid_coordinator_pb2_grpc.CoordinatorStub(self.channel)
                self.loop.create_task(shared.close())

            def gethostname(self) -> str:
                return owner.split("/", 1)[0]

            def getuser(self) -> str:
                return owner.split("/", 1)[1]

        address = proxymanager.get_grpc_address(self.address, default_port=20408)
        session = Session(address, self._loop)
        try:
            await session.start()
        except Exception as e:  # labgrid raises its own ServerError, grpc its errors
            await _quietly(session.close())
            raise PlaceError(
                device,
                f"cannot reach the labgrid coordinator at {self.address} ({e}); is labgrid-coordinator "
                "running there? ([fleet] labgrid_coordinator or LG_COORDINATOR names it)",
            ) from None
        self._sessions[owner] = session
        return session

    # -- what the leases ask -------------------------------------------------
    def claim(self, device: Device, lock_path: Path, fresh: bool) -> str | None:
        """Acquire the device's place as the holder of lock_path and return the device's
        address; None while it waits for the place (reserved, polled on the next call).
        `fresh`: the lock slot was just taken, so what its identity holds is a dead run's."""
        return self._call(self._claim, device, "/".join(identity(lock_path)), fresh)

    def release(self, device: Device, lock_path: Path) -> None:
        self._call(self._release, "/".join(identity(lock_path)))

    def give_up(self, device: Device, lock_path: Path) -> None:
        """Stop waiting for the place: cancel the reservation, if there is one."""
        self._call(self._cancel, "/".join(identity(lock_path)))

    def holder(self, device: Device) -> str:
        """Who has the place, as the coordinator says, for a run that waits."""
        try:
            return self._call(self._holder, device)
        except InfrastructureError as e:
            return f"unknown ({e})"

    def look(self, device: Device) -> tuple[str, str]:
        """(the device's address, who holds the place) without acquiring it: for doctor."""
        return self._call(self._look, device)

    def close(self) -> None:
        """Release and cancel whatever is still held (an interrupted run), and disconnect."""
        if self._loop is None:
            return
        with contextlib.suppress(InfrastructureError):
            self._call(self._close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    # -- in the loop ---------------------------------------------------------
    async def _claim(self, device: Device, owner: str, fresh: bool) -> str | None:
        try:
            return await self._claim_once(device, owner, fresh)
        except _rpc_error() as e:  # the coordinator restarted or went away mid-claim
            self._tokens.pop(owner, None)
            raise PlaceError(
                device, f"labgrid place {device.place}: the coordinator at {self.address}: {e.details()}"
            ) from None

    async def _reserve(self, session: Any, owner: str, device: Device) -> None:
        """Wait in line for the place: labgrid has no blocking acquire."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        wanted = {"main": pb2.Reservation.Filter(filter={"name": device.place})}
        response = await session.stub.CreateReservation(pb2.CreateReservationRequest(filters=wanted, prio=0.0))
        self._tokens[owner] = response.reservation.token

    async def _claim_once(self, device: Device, owner: str, fresh: bool) -> str | None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        session = await self._session(device, owner)
        await session.sync_with_coordinator()
        place = self._place(session, device)
        if fresh:
            await self._recover(session, device, owner, place)
        token = self._tokens.get(owner)
        if token is not None:
            reservation = (await session.stub.PollReservation(pb2.PollReservationRequest(token=token))).reservation
            if reservation.state == 0:  # waiting
                return None
            if reservation.state not in (1, 2) or device.place not in reservation.allocations.values():
                del self._tokens[owner]  # expired or invalid: ask again below
                token = None
        if token is None and (place.acquired or place.reservation):
            await self._reserve(session, owner, device)
            return None
        try:
            await session.stub.AcquirePlace(pb2.AcquirePlaceRequest(placename=device.place))
        except _rpc_error() as e:  # another host was quicker: wait in line
            if token is None:
                await self._reserve(session, owner, device)
                return None
            raise PlaceError(device, f"labgrid place {device.place}: {e.details()}") from None
        assert device.place is not None  # Leases claims a place only for a device that names one
        self._held[owner] = device.place
        await session.sync_with_coordinator()
        try:
            return self._address(session, device)
        except PlaceError:  # acquired but unusable: not ours to keep
            await self._release(owner)
            raise

    def _place(self, session: Any, device: Device) -> Any:
        place = session.places.get(device.place)
        if place is None:
            raise PlaceError(
                device,
                f"device {device.name}: there is no labgrid place {device.place} at {self.address} (create it: "
                f"labgrid-client -x {self.address} -p {device.place} create, then add-match "
                f"EXPORTER/GROUP/{device.resource})",
            )
        return place

    @staticmethod
    def _no_resource(device: Device, have: str) -> str:
        return (
            f"labgrid place {device.place} has no {device.resource} (it has {have}; "
            f"labgrid-client -p {device.place} add-match EXPORTER/GROUP/{device.resource})"
        )

    def _address(self, session: Any, device: Device) -> str:
        place = session.places[device.place]
        try:
            resources = session.get_target_resources(place)
        except Exception as e:  # an exporter that went away leaves the place's resources orphaned
            raise PlaceError(device, f"labgrid place {device.place}: {e}") from None
        found = [entry for (_, cls), entry in resources.items() if cls == device.resource]
        return self._usable(device, found, ", ".join(sorted({cls for _, cls in resources})) or "no resources")

    def _usable(self, device: Device, found: list[Any], have: str) -> str:
        """The address in the first of the place's resources of the device's class."""
        if not found:
            raise PlaceError(device, self._no_resource(device, have))
        if not found[0].avail:
            raise PlaceError(device, f"labgrid place {device.place}: its {device.resource} is not available")
        return address_of(device, dict(found[0].args))

    async def _recover(self, session: Any, device: Device, owner: str, place: Any) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        if place.acquired == owner:
            await session.stub.ReleasePlace(pb2.ReleasePlaceRequest(placename=device.place, fromuser=owner))
        self._tokens.pop(owner, None)
        reservations = (await session.stub.GetReservations(pb2.GetReservationsRequest())).reservations
        for reservation in reservations:
            if reservation.owner == owner:
                await _quietly(session.stub.CancelReservation(pb2.CancelReservationRequest(token=reservation.token)))
        await session.sync_with_coordinator()

    async def _release(self, owner: str) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        session = self._sessions.get(owner)
        if session is None:
            return
        place = self._held.pop(owner, None)
        if place is not None:
            # fromuser: if someone kicked us meanwhile, their new holder keeps the place
            await _quietly(session.stub.ReleasePlace(pb2.ReleasePlaceRequest(placename=place, fromuser=owner)))
        await self._cancel(owner)
        await _synced(session)

    async def _cancel(self, owner: str) -> None:
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        token = self._tokens.pop(owner, None)
        session = self._sessions.get(owner)
        if token is not None and session is not None:
            await _quietly(session.stub.CancelReservation(pb2.CancelReservationRequest(token=token)))

    async def _holder(self, device: Device) -> str:
        session = next((s for s in self._sessions.values() if not s.stopping.is_set()), None)
        if session is None:
            return "unknown (no connection to the coordinator)"
        await session.sync_with_coordinator()
        place = session.places.get(device.place)
        if place is None:
            return "nobody (no such place)"
        if place.acquired:
            gone = (
                f"; if that run is gone: labgrid-client -x {self.address} -p {device.place} release --kick"
                if ".ondevice-" in place.acquired
                else ""
            )
            return f"{place.acquired} (labgrid place {device.place}{gone})"
        if place.reservation:
            return f"a reservation (labgrid place {device.place})"
        return f"nobody just now (labgrid place {device.place})"

    async def _look(self, device: Device) -> tuple[str, str]:
        session = await self._session(device, "/".join(identity(Path(f"look-{os.getpid()}"))))
        await session.sync_with_coordinator()
        place = self._place(session, device)
        found = [  # not acquired, so matched here as the coordinator would match them
            entry
            for exporter, groups in session.resources.items()
            for group_name, group in groups.items()
            for name, entry in group.items()
            if entry.cls == device.resource and place.hasmatch((exporter, group_name, entry.cls, name))
        ]
        held = f"acquired by {place.acquired}" if place.acquired else "free"
        return self._usable(device, found, "no matching resources"), f"labgrid place {device.place} {held}"

    async def _close(self) -> None:
        for owner in list(self._held):
            await self._release(owner)
        for owner in list(self._tokens):
            await self._cancel(owner)
        for session in self._sessions.values():
            await _synced(session)
            await _quietly(session.stop())
            await _quietly(session.close())
        self._sessions.clear()


async def _synced(session: Any) -> None:
    """Wait for the coordinator to have done what we sent, unless the link is gone."""
    if not session.stopping.is_set():
        await _quietly(session.sync_with_coordinator())


async def _quietly(awaitable: Awaitable[Any]) -> None:
    """Clean-up that must not hide the error being reported (the coordinator may be gone)."""
    with contextlib.suppress(Exception):  # any failure here is less news than the one in hand
        await awaitable


def _rpc_error() -> Any:
    """grpc.aio.AioRpcError (Any: grpc has no types here), whose details() says what failed."""
    import grpc

    return grpc.aio.AioRpcError
