"""`pytest-ondevice doctor`: before the nightly job, what can run and what to fix.

Per board: its toolchain and its transport (emulator included) found or missing,
with the install command. Per device: reachable or not, and why, by opening the
device exactly as a run would (its transport's handshake, host key, phone state, probe, the
emulator). Per directory every run needs (the build cache, the build dir, a fleet's
lease directory and each device's lease file): usable or why not. Runs inside pytest's
configuration so ini options and board directories are read as a test run reads them.

The exit status gates a nightly job: 0 only when everything a run needs is there.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from .. import transports
from ..farm.fleet import Device, Fleet
from ..farm.labgrid_places import Coordinator
from ..transports import InfrastructureError
from .cli import print_table, toolchain_status

OPEN_TIMEOUT = 30.0  # seconds for one device to answer

# exit statuses; pytest's own may also come: 4, a usage error (a fleet file that cannot be read), 3, a crash
OK = 0  # every board can run, every device answers, every directory is usable
BOARD_DOWN = 1  # a board cannot run: its toolchain, its transport, all its devices, or a directory every run needs
NO_BOARDS = 2  # nothing named to check
DEVICE_DOWN = 10  # every board can run, but a device cannot be used: the run goes on without it (above pytest's own)


@dataclass
class Row:
    cells: tuple[str, ...]
    ok: bool


def run(config: pytest.Config, out=None) -> int:
    from ..config.assemble import transport_options
    from ..config.keys import selected_boards
    from ..config.options import registry
    from ..config.schema import ConfigError
    from ..session.activate import fleet_for

    out = out or sys.stdout
    reg = registry(config)
    boards = selected_boards(config)
    if not boards:
        print("doctor: name the boards (--board=NAME) or the fleet (--fleet=FILE) to check", file=out)
        return NO_BOARDS
    fleet = fleet_for(config, boards, reg)
    board_rows: dict[str, Row] = {}
    for name in boards:
        try:
            board = reg.get(name)
        except ConfigError as e:
            board_rows[name] = Row((name, "invalid board file", str(e)), False)
            continue
        tc_ok, tc = toolchain_status(board)
        board_rows[name] = Row((name, tc, f"{board.transport_name} ({transports.status(board.transport)})"), tc_ok)
    ini = transport_options(config)
    known = reg.names()
    coordinator = Coordinator(fleet.coordinator) if fleet.places else None  # one link for every place
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:  # a farm's devices answer at once, not one by one
            devices = [d for d in fleet.devices if d.board in known]
            checks = {d: pool.submit(_check_device, reg, fleet, d, ini, coordinator) for d in devices}
            results = {d: check.result() for d, check in checks.items()}
    finally:
        if coordinator is not None:
            coordinator.close()
    device_rows = []
    for device, (ok, status, why) in results.items():
        where = f"(labgrid place {device.place})" if device.place else device.address or "(board default)"
        device_rows.append(Row((device.name, device.board, where, status, why), ok))
    print_table(("board", "toolchain", "transport"), [r.cells for r in board_rows.values()], out)
    print(file=out)
    print_table(("device", "board", "address", "status", "why / how to fix"), [r.cells for r in device_rows], out)
    dir_rows = _check_dirs(config, reg, fleet)
    print(file=out)
    print_table(("directory", "path", "status", "why / how to fix"), [r.cells for r in dir_rows], out)
    return _verdict(board_rows, device_rows, dir_rows, out)


def _verdict(board_rows: dict[str, Row], device_rows: list[Row], dir_rows: list[Row], out) -> int:
    """The summary line and the exit status: the worst thing found."""
    every_run = all(r.ok for r in dir_rows)
    down = [
        name
        for name, row in board_rows.items()
        if not every_run or not row.ok or not any(r.ok for r in device_rows if r.cells[1] == name)
    ]
    print(file=out)
    if not every_run:
        bad = ", ".join(r.cells[0] for r in dir_rows if not r.ok)
        print(f"doctor: no run can start here: the {bad} cannot be used (see above)", file=out)
    if down:
        print(f"doctor: {len(down)} board(s) cannot run: {', '.join(down)}", file=out)
        return BOARD_DOWN
    dead = [r.cells[0] for r in device_rows if not r.ok]
    if dead:
        print(
            f"doctor: every board can run, but {len(dead)} of {len(device_rows)} device(s) cannot be used: "
            f"{', '.join(dead)} (exit status {DEVICE_DOWN})",
            file=out,
        )
        return DEVICE_DOWN
    print(f"doctor: every board can run ({len(device_rows)} device(s) checked)", file=out)
    return OK


def _check_dirs(config: pytest.Config, reg, fleet: Fleet) -> list[Row]:
    """The directories a run writes, found as a run finds them: (what, path, status, why)."""
    from ..compiling import store
    from ..config.options import ini_path
    from ..config.schema import ConfigError
    from ..farm.lease import LeaseDirError, Leases

    cache_dir = ini_path(config, "ondevice_cache_dir", "ONDEVICE_CACHE_DIR") or store.default_dir()
    build_dir = ini_path(config, "ondevice_build_dir") or config.rootpath / ".ondevice" / "build"
    rows = []
    try:
        # as a run opens it: made if missing, a file written and removed
        store.Store(cache_dir, config.getini("ondevice_cache_shared"))
        rows.append(Row(("build cache", str(cache_dir), "usable", "writable"), True))
    except store.CacheError as e:
        rows.append(Row(("build cache", str(cache_dir), "unusable", _one_line(e)), False))
    problem = _unwritable(build_dir)
    status = "unusable" if problem else "usable"
    rows.append(Row(("build dir", str(build_dir), status, problem or "writable"), not problem))
    if not fleet.shared:
        return rows  # a run's own devices are leased in its private run dir
    lease_dir = fleet.lease_dir or cache_dir / "leases"

    def jobs_of(device: Device) -> int:
        try:
            return device.jobs or reg.get(device.board).device_jobs
        except ConfigError:
            return device.jobs or 1

    try:
        problems = Leases(lease_dir, jobs_of, "pytest-ondevice doctor").check(fleet.devices)
    except LeaseDirError as e:
        problems = [str(e)]
    if problems:
        why = f"{problems[0]} (and {len(problems) - 1} more)" if len(problems) > 1 else problems[0]
        fix = "" if "lease_dir" in why else " (is the lease directory writable by every user of the fleet?)"
        rows.append(Row(("lease dir", str(lease_dir), "unusable", _one_line(why + fix)), False))
    else:
        rows.append(Row(("lease dir", str(lease_dir), "usable", "every device's lease file opens"), True))
    return rows


def _unwritable(path: Path) -> str | None:
    """Why a run could not make and write path (None: it could), without making it."""
    here = path
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        return f"{here} is not a directory: set ondevice_build_dir to a directory"
    if not os.access(here, os.W_OK | os.X_OK):
        return f"{here} is not writable by this user: make it writable, or set ondevice_build_dir to one that is"
    return None


def _check_device(reg, fleet, device: Device, ini, coordinator: Coordinator | None) -> tuple[bool, str, str]:
    """(reachable, status, why): the device opened and closed as a run would."""
    from ..config.schema import ConfigError
    from ..farm.devices import device_table

    try:
        board = reg.get(device.board)
    except ConfigError as e:  # said in the board table too; the device cannot be opened without it
        return False, "unusable", f"its board file cannot be used: {_one_line(e)}"
    place = ""
    if device.place is not None and coordinator is not None:  # asked, not acquired: doctor takes no one's place
        try:
            address, place = coordinator.look(device)
        except InfrastructureError as e:
            return False, "unusable", _one_line(e)
        device = replace(device, address=address)
        place += "; "
    try:
        table, where = device_table(board, device, fleet.shared)
        said = transports.status(table)
        if "missing:" in said:
            return False, "unusable", said
        transport = transports.create(board, table, where, ini)
    except Exception as e:  # any reason is the answer to "why"
        return False, "unusable", _one_line(e)
    started = time.monotonic()
    done: list[BaseException | None] = []

    def attempt() -> None:
        try:
            transport.open()
            done.append(None)
        except BaseException as e:
            done.append(e)
        finally:
            transport.close()

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(OPEN_TIMEOUT)
    if not done:
        transport.stop.set()
        return False, "unreachable", f"no answer within {OPEN_TIMEOUT:g} s"
    if done[0] is not None:
        return False, "unreachable", place + _one_line(done[0])
    return True, "reachable", f"{place}opened in {time.monotonic() - started:.2f} s"


WHY_MAX = 500  # characters of a reason: room for its fix (an unknown host key's ssh-keyscan line)


def _one_line(error: BaseException | str) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= WHY_MAX else text[: WHY_MAX - 3] + "..."
