"""Where a binary runs, and what an error there means: the fleet's retry rule.

A binary leases a device of its board and runs there; after an infrastructure error it
runs again on another device of the board (the fleet's `retries` times at most). The
device is struck for an error that was its own (see quarantine.py): K strikes and it is
out for the rest of the run. A lost link, or an error while the binary ran, is asked of
the device's health first. A binary whose runs broke off on two devices, each healthy
right after, is the suspect: it errors, naming both, and moves no further."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..compiling.builder import Artifact
from ..farm.devices import Devices
from ..farm.labgrid_places import PlaceError
from ..farm.lease import Lease
from ..transports import InfrastructureError
from .binary import BinaryResult, BinarySpec, Rerun


def run_on_a_device(
    spec: BinarySpec,
    artifact: Artifact,
    devices: Devices,
    run_leased: Callable[[Lease], BinaryResult],
    stopping: threading.Event,
) -> BinaryResult:
    """The result of the binary on the first device of its board that could run it."""
    board_devices = devices.for_board(spec.board.name)
    failed: list[str] = []  # "device: error" of each device it could not run on
    earlier: list[Rerun] = []  # every attempt cut short, oldest first
    healthy_after: dict[str, str] = {}  # device -> error it met while healthy
    tried: set[str] = set()
    result = BinaryResult()
    for _ in range(1 + (devices.fleet.retries if len(board_devices) > 1 else 0)):
        candidates = [d for d in board_devices if d.name not in tried and not devices.quarantine.is_out(d.name)]
        if not candidates:
            if not failed:
                return BinaryResult(infra_error=devices.board_down(spec.board.name), artifact=artifact)
            break
        try:
            lease = devices.lease(candidates)
        except PlaceError as e:  # that device's place is unusable: strike it, try another
            tried.add(e.device.name)
            failed.append(f"{e.device.name}: {e}")
            earlier.append(Rerun(e.device.name, str(e), None, False))
            result = BinaryResult(infra_error=str(e), artifact=artifact, device=e.device)
            devices.quarantine.strike(e.device.name, str(e))
            continue
        except InfrastructureError as e:
            if not failed:
                return BinaryResult(infra_error=str(e), artifact=artifact, reruns=earlier[:-1])
            failed.append(f"then no other device: {e}")
            break
        with lease:
            devices.follow(lease.device)
            result = run_leased(lease)
        earlier.extend(result.reruns)
        if result.infra_error is None:
            result.retried = failed or None  # the report says it ran here after these
            result.reruns = earlier
            return result
        name = lease.device.name
        tried.add(name)
        failed.append(f"{name}: {result.infra_error}")
        earlier.append(Rerun(name, result.infra_error, result.log_path, result.binary_started))
        health = devices.health(lease.device) if result.binary_started or result.transient else False
        if health is False:  # the device's own: unreachable now, or refused before anything ran
            if devices.quarantine.strike(name, result.infra_error):
                devices.forget(lease.device)
        else:
            if health is None:  # cannot tell: counts once more than one binary met such errors there
                devices.quarantine.strike(name, result.infra_error, binary=f"{spec.board.name}:{spec.rel}")
            if result.binary_started:
                healthy_after[name] = result.infra_error
                if len(healthy_after) > 1:
                    devices.quarantine.accuse(f"{spec.board.name}:{spec.rel}")
                    result.infra_error = _suspect(spec, healthy_after)
                    break
        if stopping.is_set():
            break
    result.reruns = earlier[:-1]  # the last attempt is the error itself
    if len(board_devices) > 1 and len(healthy_after) < 2:
        result.infra_error = f"tried on {len(tried)} device(s): " + "; ".join(failed)
    return result


def _suspect(spec: BinarySpec, errors: dict[str, str]) -> str:
    names = " and ".join(errors)
    each = "; ".join(f"{device}: {error}" for device, error in errors.items())
    return (
        f"{spec.rel} is the suspect, not the devices: it broke off on {names}, each of which answered a health "
        f"check right after ({each}). It was not moved to another device, and no device was struck for it"
    )
