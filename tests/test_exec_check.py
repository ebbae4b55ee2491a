"""Whether a device can exec a file: from its ELF header and what the device says of itself."""

from __future__ import annotations

from pathlib import Path

from pytest_ondevice.transports.exec_check import DeviceExec, describe

BINFMT = """x86_64
status enabled
entry qemu-aarch64
enabled
interpreter /usr/bin/qemu-aarch64
flags: F
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
entry broken
enabled
magic zz
"""


def elf(machine: int, bits: int = 64) -> bytes:
    header = bytearray(Path("/bin/true").read_bytes()[:64])
    header[4] = 2 if bits == 64 else 1
    header[18:20] = machine.to_bytes(2, "little")
    return bytes(header)


def test_native_and_registered_machines_run_others_are_refused():
    device = DeviceExec.parse(BINFMT)
    assert device.can_exec(elf(62)) is True  # native
    assert device.can_exec(elf(183)) is True  # qemu-aarch64 registered
    assert device.can_exec(elf(243)) is False  # RISC-V: nothing runs it
    assert device.can_exec(elf(3, 32)) is None  # i386 on x86_64: up to the kernel's build
    assert device.can_exec(b"#!/bin/sh\n") is None  # not ours to judge


def test_a_disabled_binfmt_misc_runs_nothing_foreign():
    device = DeviceExec.parse(BINFMT.replace("status enabled", "status disabled"))
    assert device.can_exec(elf(183)) is False


def test_when_the_device_does_not_say_nothing_is_refused():
    assert DeviceExec.parse("x86_64\n").can_exec(elf(243)) is None  # binfmt_misc unreadable
    assert DeviceExec.parse("").can_exec(elf(243)) is None
    assert DeviceExec.parse("mips64\nstatus enabled\n").can_exec(elf(243)) is None  # a machine we do not know


def test_describe_names_machine_and_class():
    assert describe(elf(243)) == "an ELF file for RISC-V (64-bit)"
    assert describe(elf(40, 32)) == "an ELF file for ARM (32-bit)"
