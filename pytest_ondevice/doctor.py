"""`pytest-ondevice doctor`: before the nightly job, what can run and what to fix.

Per board: its toolchain and its transport (emulator included) found or missing,
with the install command. Per device: reachable or not, and why, by opening the
device exactly as a run would (SSH handshake and host key, adb state, probe, the
emulator). Runs inside pytest's configuration so ini options and board directories
are read as a test run reads them.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pytest

from . import transports
from .cli import print_table, toolchain_status
from .fleet import Device
from .labgrid_places import Coordinator
from .transports import InfrastructureError

OPEN_TIMEOUT = 30.0  # seconds for one device to answer


@dataclass
class Row:
    cells: tuple[str, ...]
    ok: bool


def run(config: pytest.Config, out=None) -> int:
    from .active import fleet_for, transport_options
    from .keys import selected_boards
    from .plugin import registry
    from .schema import ConfigError

    out = out or sys.stdout
    reg = registry(config)
    boards = selected_boards(config)
    if not boards:
        print("doctor: name the boards (--board=NAME) or the fleet (--fleet=FILE) to check", file=out)
        return 2
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
    down = [
        name
        for name, row in board_rows.items()
        if not row.ok or not any(r.ok for r in device_rows if r.cells[1] == name)
    ]
    print(file=out)
    if down:
        print(f"doctor: {len(down)} board(s) cannot run: {', '.join(down)}", file=out)
        return 1
    print(f"doctor: every board can run ({len(device_rows)} device(s) checked)", file=out)
    return 0


def _check_device(reg, fleet, device: Device, ini, coordinator: Coordinator | None) -> tuple[bool, str, str]:
    """(reachable, status, why): the device opened and closed as a run would."""
    from .runner import device_table

    board = reg.get(device.board)
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


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
