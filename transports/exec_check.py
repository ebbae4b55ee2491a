"""Whether a Linux device's kernel can exec a file, decided before it runs.

Asked of the file's ELF header and what the device says of itself on the keeper's
channel (`uname -m`, its binfmt_misc entries), never of the output of a run: a test can
print anything, including the `syntax error` that sh prints for a file the kernel refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HEADER_BYTES = 64  # every binfmt_misc magic we meet lies in the first 20
EM_NAMES = {3: "x86", 8: "MIPS", 40: "ARM", 62: "x86-64", 183: "AArch64", 243: "RISC-V"}
# (e_machine, ELF class bits) each `uname -m` runs natively
NATIVE = {
    "x86_64": {(62, 64)},
    "amd64": {(62, 64)},
    "i386": {(3, 32)},
    "i686": {(3, 32)},
    "aarch64": {(183, 64)},
    "arm64": {(183, 64)},
    "armv6l": {(40, 32)},
    "armv7l": {(40, 32)},
    "armv8l": {(40, 32)},
    "arm": {(40, 32)},
    "riscv64": {(243, 64)},
    "riscv32": {(243, 32)},
}
# a kernel that may run these too, depending on how it was built (compat mode): never refused
MAYBE = {"x86_64": {(3, 32)}, "amd64": {(3, 32)}, "aarch64": {(40, 32)}, "arm64": {(40, 32)}}

# what the keeper runs once per session; its answer goes to DeviceExec.parse
PROBE = (
    "uname -m; d=/proc/sys/fs/binfmt_misc; "
    'if [ -r "$d/status" ]; then printf "status %s\\n" "$(cat "$d/status")"; fi; '
    'for f in "$d"/*; do case "$f" in */register|*/status) ;; *) '
    '[ -r "$f" ] && { echo "entry ${f##*/}"; cat "$f"; }; esac; done 2>/dev/null; true'
)


@dataclass(frozen=True)
class Handler:
    offset: int
    magic: bytes
    mask: bytes

    def matches(self, header: bytes) -> bool:
        window = header[self.offset : self.offset + len(self.magic)]
        if len(window) < len(self.magic):
            return False
        return all(b & m == g & m for b, g, m in zip(window, self.magic, self.mask, strict=True))


@dataclass
class DeviceExec:
    machine: str = ""
    binfmt_readable: bool = False  # False: foreign handlers may exist that we cannot see
    handlers: list[Handler] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> DeviceExec:
        lines = text.splitlines()
        found = cls(machine=lines[0].strip() if lines else "")
        enabled = False
        entry: dict[str, str] | None = None
        entries: list[dict[str, str]] = []
        for line in lines[1:]:
            word, _, rest = line.strip().partition(" ")
            if word == "status":
                found.binfmt_readable, enabled = True, rest.strip() == "enabled"
            elif word == "entry":
                entry = {}
                entries.append(entry)
            elif entry is not None:
                entry[word.rstrip(":")] = rest.strip() if rest else word
        if enabled:
            for e in entries:
                handler = _handler(e) if "enabled" in e and "magic" in e else None
                if handler is not None:
                    found.handlers.append(handler)
        return found

    def can_exec(self, header: bytes) -> bool | None:
        """True: it runs; False: the kernel refuses it; None: cannot tell (then it is run)."""
        if header[:4] != b"\x7fELF" or len(header) < 20:
            return None  # a script or something else: the kernel's business, not ours
        kind = (int.from_bytes(header[18:20], "little" if header[5] == 1 else "big"), 64 if header[4] == 2 else 32)
        if kind in NATIVE.get(self.machine, set()) or any(h.matches(header) for h in self.handlers):
            return True
        if self.machine not in NATIVE or kind in MAYBE.get(self.machine, set()) or not self.binfmt_readable:
            return None
        return False


def describe(header: bytes) -> str:
    machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
    return f"an ELF file for {EM_NAMES.get(machine, f'machine {machine}')} ({64 if header[4] == 2 else 32}-bit)"


def _handler(entry: dict[str, str]) -> Handler | None:
    try:
        magic = bytes.fromhex(entry["magic"])
        mask = bytes.fromhex(entry["mask"]) if "mask" in entry else b"\xff" * len(magic)
        handler = Handler(int(entry.get("offset", "0") or 0), magic, mask)
    except ValueError:
        return None
    return handler if len(mask) == len(magic) else None
