"""Boards: declarative TOML files, ours and the user's, validated on load.

Adding a board is adding a data file. A board may `extend` another and change
only what differs (e.g. where it runs); users keep their own boards in their
repo and point the `ondevice_boards` ini option at them.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..transports.contract import Clock
from .schema import SECONDS, ConfigError, check, load_toml


def _builtin_dir() -> Path:
    """Our board files: the package pytest_ondevice.boards (the repo's boards/)."""
    spec = importlib.util.find_spec("pytest_ondevice.boards")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover
        return Path(__file__).resolve().parents[2] / "boards"
    return Path(next(iter(spec.submodule_search_locations)))


BUILTIN_DIR = _builtin_dir()

TOOLCHAIN_SPEC = {
    "gnu": str,  # GNU triple prefix, "" for the host's own cc/c++
    "clang_target": str,
    "zig_target": str,
    "debian_package": str,
    "cflags": list,
    "cxxflags": list,
    "ldflags": list,
    "libs": list,
    "runtime": list,  # sources compiled into every binary (print function, startup)
    "linker_script": str,  # @FLASH_ORIGIN@-style placeholders are filled from [memory]
    # pkg-config for this board: where its .pc files are (PKG_CONFIG_LIBDIR, ":"-separated)
    # and the sysroot their paths are relative to (PKG_CONFIG_SYSROOT_DIR)
    "pkg_config_libdir": str,
    "sysroot": str,
    # Android NDK: its clang for this target (API level included) when ndk_home or
    # $ANDROID_NDK_HOME is set; PIE, dynamically linked against the phone's bionic
    "ndk_target": str,
    "ndk_home": str,
    # Rust: cargo's --target for this board (Linux gnu targets are linked statically); none on the host
    "rust_target": str,
    # the device has no libc for the GNU or zig fallback's dynamic executables (a phone's is
    # bionic): a CMake project's executables are linked static and its libraries built static
    "static_only": bool,
}
MEMORY_SPEC = {
    "flash": int,
    "flash_origin": int,
    "ram": int,
    "ram_origin": int,
    "stack": int,
    "stack_limit": int,  # a case's stack budget in bytes: over it, the case fails (micro_test.h)
    "note": str,  # said with a size-check failure, e.g. why an emulator has less RAM
}
CUDA_SPEC = {
    "archs": list,  # the GPU architectures nvcc builds machine code for, e.g. ["sm_87"] (Orin)
    "cudart": ("static", "shared"),  # the CUDA runtime in the binary, or the device's libcudart.so.N
}
AOT_SPEC = {
    "triple": str,  # XLA's target triple for a model compiled ahead of time ("native": this machine's)
    "cpu": str,  # and its CPU (e.g. "cortex-m4"), where the triple alone does not say
}
SPEC = {
    "description": str,
    "extends": str,
    "abstract": bool,  # a shared target that only other boards extend
    "kind": ("host", "linux", "baremetal"),
    "arch": str,
    "timeout": SECONDS,
    "clock_hz": int,
    "clock": ("virtual", "cycles", "wall"),  # what timing figures count (default: from the transport, the kind)
    "toolchain": TOOLCHAIN_SPEC,
    "memory": MEMORY_SPEC,
    "cuda": CUDA_SPEC,  # *.cu tests: built by nvcc for these GPUs
    "aot": AOT_SPEC,  # models in ondevice.toml: compiled by tfcompile for this target
    "transport": "table",
    "emulator": "table",  # the transport used with --device=qemu
}


@dataclass(frozen=True)
class Toolchain:
    gnu: str | None = None
    clang_target: str | None = None
    zig_target: str | None = None
    debian_package: str | None = None
    cflags: tuple[str, ...] = ()
    cxxflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()
    runtime: tuple[Path, ...] = ()
    linker_script: Path | None = None
    pkg_config_libdir: str | None = None
    sysroot: str | None = None
    ndk_target: str | None = None
    ndk_home: str | None = None
    rust_target: str | None = None
    static_only: bool = False


@dataclass(frozen=True)
class Memory:
    flash: int | None = None
    flash_origin: int = 0
    ram: int | None = None
    ram_origin: int = 0x20000000
    stack: int = 2048
    stack_limit: int | None = None
    note: str = ""


@dataclass(frozen=True)
class Cuda:
    archs: tuple[str, ...] = ()
    cudart: str = "static"


@dataclass(frozen=True)
class Aot:
    triple: str = ""  # "": the board cannot take a model compiled ahead of time
    cpu: str = ""


@dataclass(frozen=True)
class Board:
    name: str
    path: Path
    kind: str
    arch: str
    toolchain: Toolchain
    transport: dict[str, Any] = field(hash=False, compare=False)
    description: str = ""
    timeout: float = 60.0
    clock_hz: int | None = None
    memory: Memory = Memory()
    emulator: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    clock: str | None = None  # the board file's own `clock`, if it sets one
    cuda: Cuda = Cuda()
    aot: Aot = Aot()

    @property
    def transport_name(self) -> str:
        return self.transport["name"]

    def clock_for(self, table: dict[str, Any]) -> Clock:
        """What timing figures count when this table's transport runs the binaries."""
        from ..transports import clock_of

        declared = clock_of(table)
        if self.clock:
            return Clock(self.clock, declared.instruction_ns if declared and declared.kind == self.clock else None)
        if declared is not None:
            return declared
        return Clock("cycles" if self.kind == "baremetal" else "wall")

    @property
    def device_jobs(self) -> int:
        """How many binaries the device runs at once."""
        return self.transport.get("device_jobs", 1)


class BoardRegistry:
    """Finds board files by name in the user's directories, then ours."""

    def __init__(self, user_dirs: list[Path] | None = None) -> None:
        self.dirs = [*(user_dirs or []), BUILTIN_DIR]
        self._cache: dict[str, Board] = {}

    def files(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for d in self.dirs:
            for p in sorted(d.glob("*.toml")):
                found.setdefault(p.stem, p)
        return found

    def names(self, include_abstract: bool = False) -> list[str]:
        """Boards that can be asked for; a file that cannot be read is listed (its error
        is get()'s to report) so that one broken file never hides the others."""
        return sorted(n for n in self.files() if include_abstract or not self._abstract(n))

    def _abstract(self, name: str) -> bool:
        try:
            return bool(self._raw(name)[0].get("abstract"))
        except ConfigError:
            return False

    def get(self, name: str) -> Board:
        if name not in self._cache:
            data, path = self._merged(name, chain=())
            if data.get("abstract"):
                raise ConfigError(f"{path}: board '{name}' is abstract: pick a board that extends it")
            self._cache[name] = _build(name, path, data)
        return self._cache[name]

    def lineage(self, name: str) -> list[str]:
        """The board and the boards it extends, nearest first (a test marked for `bluepill`
        applies to a project's board that extends it)."""
        found = [name]
        parent = self._raw(name)[0].get("extends")
        while parent and parent not in found:
            found.append(parent)
            parent = self._raw(parent)[0].get("extends")
        return found

    def _raw(self, name: str) -> tuple[dict[str, Any], Path]:
        files = self.files()
        if name not in files:
            hint = difflib.get_close_matches(name, list(files), n=1)
            also = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(f"unknown board '{name}'{also}; known boards: {', '.join(self.names())}")
        path = files[name]
        data = load_toml(path)
        check(data, SPEC, path)
        tc = data.get("toolchain", {})
        if "runtime" in tc:  # relative to the file that names them
            tc["runtime"] = [str((path.parent / r).resolve()) for r in tc["runtime"]]
        if "linker_script" in tc:
            tc["linker_script"] = str((path.parent / tc["linker_script"]).resolve())
        return data, path

    def _merged(self, name: str, chain: tuple[str, ...]) -> tuple[dict[str, Any], Path]:
        if name in chain:
            raise ConfigError(f"board '{name}' extends itself: {' -> '.join([*chain, name])}")
        data, path = self._raw(name)
        own = data
        parent = data.get("extends")
        if parent:
            try:
                base, _ = self._merged(parent, (*chain, name))
            except ConfigError as e:
                raise ConfigError(f"{path}: 'extends': {e}") from None
            base.pop("abstract", None)
            data = _deep_merge(base, data)
        _check_transport_keys(own, data, path)
        return data, path


def _check_transport_keys(own: dict[str, Any], merged: dict[str, Any], path: Path) -> None:
    """Each key against what its transport declares (a typo like `machin = ...`, a string
    where a number goes), and the transport itself: an unknown one lists the known ones.

    Only the keys this file writes are checked, against the transport in effect here (a
    board that extends another may name its transport only there)."""
    from .. import transports

    for table in ("transport", "emulator"):
        keys, effective = own.get(table), merged.get(table, {})
        if not isinstance(keys, dict) or not isinstance(effective.get("name"), str):
            continue  # a missing name is _build()'s to report
        try:
            accepted = transports.accepted(effective)
        except transports.InfrastructureError as e:
            raise ConfigError(f"{path}: '{table}': {e}") from None
        check(keys, {k: o.kind for k, o in accepted.items()}, path, prefix=f"{table}.")


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _build(name: str, path: Path, data: dict[str, Any]) -> Board:
    for key in ("kind", "arch", "transport"):
        if key not in data:
            raise ConfigError(f"{path}: missing key '{key}'")
    if "name" not in data["transport"] or not isinstance(data["transport"]["name"], str):
        raise ConfigError(f"{path}: missing key 'transport.name'")
    jobs = data["transport"].get("device_jobs", 1)
    if jobs < 1:
        raise ConfigError(f"{path}: key 'transport.device_jobs' must be a whole number >= 1, got {jobs!r}")
    tc = data.get("toolchain", {})
    toolchain = Toolchain(
        gnu=tc.get("gnu"),
        clang_target=tc.get("clang_target"),
        zig_target=tc.get("zig_target"),
        debian_package=tc.get("debian_package"),
        **{k: tuple(tc.get(k, [])) for k in ("cflags", "cxxflags", "ldflags", "libs")},
        runtime=tuple(Path(r) for r in tc.get("runtime", [])),
        linker_script=Path(tc["linker_script"]) if tc.get("linker_script") else None,
        pkg_config_libdir=tc.get("pkg_config_libdir"),
        sysroot=tc.get("sysroot"),
        ndk_target=tc.get("ndk_target"),
        ndk_home=tc.get("ndk_home"),
        rust_target=tc.get("rust_target"),
        static_only=tc.get("static_only", False),
    )
    return Board(
        name=name,
        path=path,
        kind=data["kind"],
        arch=data["arch"],
        toolchain=toolchain,
        transport=dict(data["transport"]),
        description=data.get("description", ""),
        timeout=float(data.get("timeout", 60.0)),
        clock_hz=data.get("clock_hz"),
        memory=Memory(**data.get("memory", {})),
        emulator=data.get("emulator"),
        clock=data.get("clock"),
        cuda=_cuda(data.get("cuda", {}), path),
        aot=Aot(**data.get("aot", {})),
    )


def _cuda(table: dict[str, Any], path: Path) -> Cuda:
    archs = tuple(table.get("archs", ()))
    for arch in archs:
        if not (arch.startswith("sm_") and arch[3:].isdigit()):
            raise ConfigError(f"{path}: key 'cuda.archs' entry {arch!r} is not a GPU architecture such as 'sm_87'")
    return Cuda(archs, table.get("cudart", "static"))


_DEBIAN_ARCHES = {"aarch64": "arm64", "arm": "armhf", "x86_64": "amd64", "riscv64": "riscv64"}


def debian_arch(arch: str) -> str | None:
    """Debian's name for a board's architecture, for a cross package (`libgtest-dev:arm64`);
    None for the host's own ("native") or one Debian has no packages for."""
    return _DEBIAN_ARCHES.get(arch)
