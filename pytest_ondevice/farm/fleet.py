"""The devices a run may use: a fleet file, or one device per board.

A fleet file (TOML) lists devices by name, each of one board, with where it is (any
form its transport takes as --device), tags, and how many binaries it runs at once:

    [fleet]
    quarantine_after = 2          # infrastructure errors before a device is set aside
    lease_dir = "/srv/farm/leases"  # shared by every run that uses these devices

    [device.pi-1]
    board = "rpi"
    address = "pi1.lab"
    tags = ["rack-a"]
    jobs = 1

    [device.pi-7]                 # on another host: leased through a labgrid coordinator
    board = "rpi"
    labgrid_place = "rpi-7"       # the address is read from the place's NetworkService

A fleet whose devices name labgrid places says where the coordinator is with
`labgrid_coordinator = "HOST:PORT"` under [fleet] (else LG_COORDINATOR, else labgrid's
default, 127.0.0.1:20408).

Without a fleet file each selected board has one device: where --device puts it
(`--device=WHERE` for every board, `--device=BOARD=WHERE` for one), else the board
file's default.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..config.schema import ConfigError, check, load_toml

FLEET_SPEC = {"quarantine_after": int, "lease_dir": str, "retries": int, "labgrid_coordinator": str}
DEVICE_SPEC = {
    "board": str,
    "address": str,
    "tags": list,
    "jobs": int,
    "description": str,
    "labgrid_place": str,
    "labgrid_resource": str,
}
DEFAULT_RESOURCE = "NetworkService"  # what a labgrid place's address is read from
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # used in lock-file names and node reports
DEFAULT_QUARANTINE_AFTER = 2
DEFAULT_DEVICE_RETRIES = 2  # other devices a binary is tried on after an infrastructure error


@dataclass(frozen=True)
class Device:
    name: str
    board: str
    address: str | None = None  # None: the board file's default
    tags: tuple[str, ...] = ()
    jobs: int | None = None  # None: the board's device_jobs
    place: str | None = None  # a labgrid place: leased through the coordinator, address read from it
    resource: str = DEFAULT_RESOURCE  # the place's resource class that holds the address
    # with a place, `address` is a template over the resource's parameters, e.g.
    # "{username}@{address}:{port}" (None: the transport's usual form of that resource)


@dataclass
class Fleet:
    devices: list[Device]
    path: Path | None = None  # None: made from --board/--device, not read from a file
    quarantine_after: int = DEFAULT_QUARANTINE_AFTER
    retries: int = DEFAULT_DEVICE_RETRIES
    lease_dir: Path | None = None  # None: the default (under the build cache)
    coordinator: str | None = None  # labgrid's, for devices that name a place

    @property
    def places(self) -> list[Device]:
        return [d for d in self.devices if d.place is not None]

    def for_board(self, board: str) -> list[Device]:
        return [d for d in self.devices if d.board == board]

    def boards(self) -> list[str]:
        return list(dict.fromkeys(d.board for d in self.devices))

    @property
    def shared(self) -> bool:
        """A fleet file's devices are leased across runs; implicit devices only within one."""
        return self.path is not None


def load(path: Path, known_boards: Iterable[str] | None = None) -> Fleet:
    """Read and check a fleet file; errors name the file, the device and the key."""
    data = load_toml(path)
    check(data, {"fleet": FLEET_SPEC, "device": "table"}, path)
    head = data.get("fleet", {})
    for key in ("quarantine_after", "retries"):
        if key in head and head[key] < (1 if key == "quarantine_after" else 0):
            least = 1 if key == "quarantine_after" else 0
            raise ConfigError(f"{path}: 'fleet.{key}' must be a whole number >= {least}, not {head[key]!r}")
    table = data.get("device", {})
    if not table:
        raise ConfigError(f'{path}: no devices: add a [device.NAME] table with board = "..." for each one')
    known = set(known_boards) if known_boards is not None else None
    devices = []
    for name, entry in table.items():
        where = f"{path}: device '{name}'"
        if not NAME.match(name):
            raise ConfigError(f"{where}: a device name may hold letters, digits, '.', '_' and '-' only")
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table ([device.{name}]), not a value")
        check(entry, DEVICE_SPEC, path, prefix=f"device.{name}.")
        if "board" not in entry:
            raise ConfigError(f"{where}: 'board' is missing (which board file describes it?)")
        if known is not None and entry["board"] not in known:
            raise ConfigError(f"{where}: unknown board '{entry['board']}' (known: {', '.join(sorted(known))})")
        jobs = entry.get("jobs")
        if jobs is not None and jobs < 1:
            raise ConfigError(f"{where}: 'jobs' must be a whole number >= 1, not {jobs!r}")
        place = entry.get("labgrid_place")
        if place is None and "labgrid_resource" in entry:
            raise ConfigError(f"{where}: 'labgrid_resource' without 'labgrid_place' (which place is it read from?)")
        if place is not None and jobs not in (None, 1):
            raise ConfigError(
                f"{where}: 'jobs' must be 1 for a labgrid place (the coordinator gives a place to one holder)"
            )
        devices.append(
            Device(
                name,
                entry["board"],
                entry.get("address"),
                tuple(entry.get("tags", ())),
                1 if place is not None else jobs,
                place,
                entry.get("labgrid_resource", DEFAULT_RESOURCE),
            )
        )
    lease_dir = head.get("lease_dir")
    return Fleet(
        devices,
        path=path.resolve(),
        quarantine_after=head.get("quarantine_after", DEFAULT_QUARANTINE_AFTER),
        retries=head.get("retries", DEFAULT_DEVICE_RETRIES),
        lease_dir=(path.parent / Path(lease_dir).expanduser()).resolve() if lease_dir else None,
        coordinator=head.get("labgrid_coordinator"),
    )


def implicit(boards: list[str], device_options: list[str]) -> Fleet:
    """One device per board, placed by --device (for all, or BOARD=WHERE for one)."""
    common, per_board = split_device_options(device_options, boards)
    devices = [Device(board, board, per_board.get(board, common)) for board in boards]
    return Fleet(devices)


def split_device_options(values: list[str], boards: list[str]) -> tuple[str | None, dict[str, str]]:
    """--device values: WHERE for every board, BOARD=WHERE for one (only a selected board's
    name counts as a prefix: an address may itself hold '=')."""
    common: str | None = None
    per_board: dict[str, str] = {}
    for value in values:
        board, sep, where = value.partition("=")
        if sep and board in boards:
            per_board[board] = where
        elif common is not None and common != value:
            raise ConfigError(
                f"--device is given twice ({common!r}, {value!r}): to place one board, write --device=BOARD=WHERE"
            )
        else:
            common = value
    return common, per_board


def select(fleet: Fleet, boards: list[str], tags: list[str] | None = None) -> Fleet:
    """The fleet's devices of the selected boards (all of its boards when none is selected),
    with every tag asked for; a selected board with no device is an error."""
    wanted = boards or fleet.boards()
    devices = [d for d in fleet.devices if d.board in wanted and all(t in d.tags for t in tags or ())]
    missing = [b for b in wanted if not any(d.board == b for d in devices)]
    if missing:
        having = ", ".join(fleet.boards())
        tagged = f" tagged {', '.join(tags)}" if tags else ""
        raise ConfigError(f"{fleet.path}: no device{tagged} of board {', '.join(missing)} (its boards: {having})")
    return replace(fleet, devices=devices)  # the file's settings, fewer devices
