"""Just enough ELF reading for size checks and architecture checks, no dependency."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

EM_NAMES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv"}
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHT_NOBITS = 8


class ElfError(Exception):
    pass


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    size: int
    offset: int = 0  # in the file
    link: int = 0  # a symbol table's: the index of its string table


@dataclass(frozen=True)
class ElfInfo:
    bits: int
    machine: int
    entry: int
    sections: tuple[Section, ...]

    @property
    def arch(self) -> str:
        return EM_NAMES.get(self.machine, f"machine {self.machine}")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def flash_bytes(self) -> int:
        """What must be stored: every allocated section with contents (code, constants, .data image)."""
        return sum(s.size for s in self.sections if s.flags & SHF_ALLOC and s.type != SHT_NOBITS)

    def ram_bytes(self) -> int:
        """What must fit in RAM: writable allocated sections (.data, .bss, the reserved stack)."""
        return sum(s.size for s in self.sections if s.flags & SHF_ALLOC and s.flags & SHF_WRITE)


def section_bytes(path: Path, name: str) -> bytes | None:
    """A section's contents as the file holds them (None when there is no such section)."""
    found = read(path).section(name)
    if found is None or found.type == SHT_NOBITS:
        return None
    with open(path, "rb") as f:
        f.seek(found.offset)
        return f.read(found.size)


def defines_symbol(path: Path, name: str) -> bool:
    """Whether the binary's symbol table names this symbol (a stripped binary's names none)."""
    try:
        info = read(path)
        found = info.section(".symtab")
        strtab = info.sections[found.link] if found is not None and found.link < len(info.sections) else None
        if strtab is None:
            return False
        with open(path, "rb") as f:
            f.seek(strtab.offset)
            return b"\0" + name.encode() + b"\0" in f.read(strtab.size)
    except (OSError, ElfError, struct.error, IndexError):
        return False


def defines_global(path: Path, name: str) -> bool:
    """Whether an object (or binary) defines this global symbol itself: an entry of its
    symbol table with that name, a section and global or weak binding (a call to it names
    it too, undefined, and does not count)."""
    try:
        info = read(path)
        table = info.section(".symtab")
        if table is None or table.link >= len(info.sections):
            return False
        strtab = info.sections[table.link]
        with open(path, "rb") as f:
            f.seek(strtab.offset)
            names = f.read(strtab.size)
            at = names.find(b"\0" + name.encode() + b"\0")
            if at < 0:
                return False
            f.seek(table.offset)
            symbols = f.read(table.size)
    except (OSError, ElfError, struct.error, IndexError):
        return False
    offset = at + 1
    size, fmt = (16, "<IIIBBH") if info.bits == 32 else (24, "<IBBHQQ")
    for i in range(0, len(symbols) - size + 1, size):
        entry = struct.unpack_from(fmt, symbols, i)
        if info.bits == 32:
            st_name, st_info, st_shndx = entry[0], entry[3], entry[5]
        else:
            st_name, st_info, st_shndx = entry[0], entry[1], entry[3]
        if st_name == offset and st_shndx != 0 and (st_info >> 4) in (1, 2):  # defined; GLOBAL or WEAK
            return True
    return False


def read(path: Path) -> ElfInfo:
    """The headers and section table, read where they lie: a run asks this of every binary,
    and a static binary is megabytes of code around a few KiB of tables."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            raise ElfError(f"{path}: not an ELF file")
        bits = 32 if head[4] == 1 else 64
        end = "<" if head[5] == 1 else ">"
        if bits == 32:
            _, machine, _, entry, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = struct.unpack_from(
                end + "HHIIIIIHHHHHH", head, 16
            )
            fmt = end + "IIIIIIIIII"
        else:
            _, machine, _, entry, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = struct.unpack_from(
                end + "HHIQQQIHHHHHH", head, 16
            )
            fmt = end + "IIQQQQIIQQ"
        f.seek(shoff)
        table = f.read(shnum * shentsize)
        raw = [struct.unpack_from(fmt, table, i * shentsize) for i in range(shnum)]
        strtab_off, strtab_size = (raw[shstrndx][4], raw[shstrndx][5]) if raw else (0, 0)
        f.seek(strtab_off)
        names = f.read(strtab_size)

    def name(off: int) -> str:
        return names[off : names.index(b"\0", off)].decode(errors="replace")

    sections = tuple(Section(name(r[0]), r[1], r[2], r[3], r[5], r[4], r[6]) for r in raw)
    return ElfInfo(bits, machine, entry, sections)


PT_LOAD, PF_X = 1, 0x1


@dataclass(frozen=True)
class Segment:
    """A loaded segment as linked: where it goes and whether it holds code."""

    vaddr: int
    memsz: int
    offset: int
    executable: bool

    def holds(self, address: int) -> bool:
        return self.vaddr <= address < self.vaddr + self.memsz


def loaded_segments(path: Path) -> tuple[Segment, ...]:
    """The PT_LOAD entries of the program headers: where the code lies as linked (a crash's
    addresses are checked against them), and where the ELF header is (a PIE's load bias)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            raise ElfError(f"{path}: not an ELF file")
        end = "<" if head[5] == 1 else ">"
        if head[4] == 1:
            (phoff,) = struct.unpack_from(end + "I", head, 28)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
        else:
            (phoff,) = struct.unpack_from(end + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    found = []
    for i in range(phnum):
        if head[4] == 1:
            kind, offset, vaddr, _, _, memsz, flags, _ = struct.unpack_from(end + "IIIIIIII", table, i * phentsize)
        else:
            kind, flags, offset, vaddr, _, _, memsz, _ = struct.unpack_from(end + "IIQQQQQQ", table, i * phentsize)
        if kind == PT_LOAD:
            found.append(Segment(vaddr, memsz, offset, bool(flags & PF_X)))
    return tuple(found)


def header_address(segments: tuple[Segment, ...]) -> int | None:
    """Where the ELF header lies as linked (the segment that maps file offset 0): a running
    PIE's load bias is its runtime address less this."""
    first = next((s for s in segments if s.offset == 0), None)
    return first.vaddr if first is not None else None


def machines(path: Path) -> set[str]:
    """The architectures an object, shared library or static archive was built for.

    Read from the ELF headers (of every member, for an `ar` archive), so a library built
    for another board is named before the linker fails on it."""
    data = path.read_bytes()
    if data.startswith(b"\x7fELF"):
        return {_machine(data)}
    if not data.startswith(b"!<arch>\n"):
        raise ElfError(f"{path}: neither an ELF file nor an ar archive")
    found: set[str] = set()
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        try:
            size = int(header[48:58].decode().strip())
        except ValueError:
            raise ElfError(f"{path}: damaged archive member header at byte {pos}") from None
        body = data[pos + 60 : pos + 60 + size]
        if body.startswith(b"\x7fELF"):
            found.add(_machine(body))
        pos += 60 + size + (size & 1)
    return found


def _machine(header: bytes) -> str:
    if len(header) < 20:
        raise ElfError("truncated ELF header")
    order = "<" if header[5] == 1 else ">"
    (machine,) = struct.unpack_from(order + "H", header, 18)
    return EM_NAMES.get(machine, f"machine {machine}")
