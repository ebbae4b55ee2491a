"""The fleet's rule for one binary: which of its board's devices are left to try, and what
an infrastructure error on one of them means (life.py runs the loop).

After an error the binary runs again on another device of the board (the fleet's `retries`
times at most). The device is struck for an error that was its own (see quarantine.py): K
strikes and it is out for the rest of the run. A lost link, or an error while the binary
ran, is asked of the device's health first. A binary whose runs broke off on two devices,
each healthy right after, is the suspect: it errors, naming both, and moves no further."""

from __future__ import annotations

from dataclasses import replace

from ..compiling.builder import Artifact
from ..farm.devices import Devices
from ..farm.fleet import Device
from ..farm.labgrid_places import PlaceError
from ..transports import InfrastructureError
from .results import BinaryResult, InfraError, Rerun
from .spec import BinarySpec


class Failover:
    def __init__(self, spec: BinarySpec, devices: Devices) -> None:
        self.spec = spec
        self.devices = devices
        self.board_devices = devices.for_board(spec.board.name)
        self.tries = 1 + (devices.fleet.retries if len(self.board_devices) > 1 else 0)
        self._failed: list[str] = []  # "device: error" of each device it could not run on
        self._earlier: list[Rerun] = []  # every attempt cut short, oldest first
        self._healthy_after: dict[str, str] = {}  # device -> error it met while healthy
        self._tried: set[str] = set()

    def candidates(self) -> list[Device]:
        """The board's devices not tried yet for this binary, nor out of the run."""
        out = self.devices.quarantine.is_out
        return [d for d in self.board_devices if d.name not in self._tried and not out(d.name)]

    def nowhere(self, artifact: Artifact) -> InfraError:
        """No device of the board to try at all."""
        return InfraError(message=self.devices.board_down(self.spec.board.name), artifact=artifact)

    def place_unusable(self, e: PlaceError, artifact: Artifact) -> InfraError:
        """The device's place cannot be used: struck, and the next one tried."""
        self._tried.add(e.device.name)
        self._failed.append(f"{e.device.name}: {e}")
        self._earlier.append(Rerun(e.device.name, str(e), None, False))
        self.devices.quarantine.strike(e.device.name, str(e))
        return InfraError(message=str(e), artifact=artifact, device=e.device)

    def no_lease(self, e: InfrastructureError) -> None:
        """No other device could be leased after one failed: the search ends."""
        self._failed.append(f"then no other device: {e}")

    def ran(self, result: BinaryResult) -> BinaryResult:
        """It ran (or was decided) on a device: with every attempt before it."""
        self._earlier.extend(result.reruns)
        return replace(result, retried=tuple(self._failed), reruns=tuple(self._earlier))

    def judge(self, device: Device, result: InfraError) -> InfraError | None:
        """An error on a device: the device struck when it was its own; the binary named
        the suspect (returned, ending the search) when two healthy devices broke off under it."""
        self._earlier.extend(result.reruns)
        name = device.name
        self._tried.add(name)
        self._failed.append(f"{name}: {result.message}")
        self._earlier.append(Rerun(name, result.message, result.log_path, result.binary_started))
        health = self.devices.health(device) if result.binary_started or result.transient else False
        if health is False:  # the device's own: unreachable now, or refused before anything ran
            if self.devices.quarantine.strike(name, result.message):
                self.devices.forget(device)
            return None
        binary = f"{self.spec.board.name}:{self.spec.rel}"
        if health is None:  # cannot tell: counts once more than one binary met such errors there
            self.devices.quarantine.strike(name, result.message, binary=binary)
        if result.binary_started:
            self._healthy_after[name] = result.message
            if len(self._healthy_after) > 1:
                self.devices.quarantine.accuse(binary)
                return replace(result, message=_suspect(self.spec, self._healthy_after))
        return None

    def gave_up(self, last: InfraError) -> InfraError:
        """No device gave a verdict: the last error, with the attempts before it (on a fleet,
        every device's error unless the binary is the suspect)."""
        message = last.message
        if len(self.board_devices) > 1 and len(self._healthy_after) < 2:
            message = f"tried on {len(self._tried)} device(s): " + "; ".join(self._failed)
        return replace(last, message=message, reruns=tuple(self._earlier[:-1]))  # the last is the error itself


def _suspect(spec: BinarySpec, errors: dict[str, str]) -> str:
    names = " and ".join(errors)
    each = "; ".join(f"{device}: {error}" for device, error in errors.items())
    return (
        f"{spec.rel} is the suspect, not the devices: it broke off on {names}, each of which answered a health "
        f"check right after ({each}). It was not moved to another device, and no device was struck for it"
    )
