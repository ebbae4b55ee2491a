"""CUDA sources (`*.cu`): nvcc for the board, the CUDA runtime for the board's architecture.

nvcc compiles the device code for the board's GPU architectures and hands the host code to
the board's own C++ compiler (`-ccbin`), so a Jetson's binary is cross-built like any other.
The toolkit is `$CUDA_HOME` when set, else NVIDIA's CUDA 13 wheels in this Python's
environment (`scripts/setup.sh --cuda`, or the `cuda` extra); nothing assumes
`/usr/local/cuda`. A runtime for another architecture (aarch64 for a Jetson) is NVIDIA's
cross layout `$CUDA_HOME/targets/<arch>-linux`, or the aarch64 runtime wheel that the
set-up script unpacks under `<venv>/share/pytest-ondevice/cuda/<arch>-linux`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config.board import Board
from . import elf
from .toolchain import ToolchainError

SETUP = "scripts/setup.sh --cuda (in a pytest-ondevice checkout), or pip install 'pytest-ondevice[cuda]'"
TARGETS_DIR = Path(sys.prefix) / "share" / "pytest-ondevice" / "cuda"
FATBIN_MAGIC = 0xBA55ED50
FATBIN_ELF, FATBIN_PTX = 2, 1
HOST_FLAGS_WITH_A_VALUE = {"-isystem", "-include", "-imacros", "-iquote", "-idirafter", "-x", "-Xlinker"}


class CudaError(ToolchainError):
    """No CUDA toolkit, or none for this board's architecture: names the set-up command."""


@dataclass(frozen=True)
class CudaToolkit:
    nvcc: Path
    identity: str  # nvcc's path and version banner, and the runtime's files: in every key
    target_lib: Path  # libcudart_static.a / libcudart.so.N for the board's architecture
    target_include: Path

    def include_dirs(self) -> tuple[str, ...]:
        """The toolkit's own headers (nvcc's, the runtime's): covered by its identity."""
        return (str(self.nvcc.parent.parent), str(self.target_include))


def toolkit(board: Board) -> CudaToolkit:
    """The toolkit that builds this board's CUDA sources, or CudaError naming the fix."""
    return _toolkit(board.name, _arch(board), os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "")


@functools.cache
def _toolkit(board_name: str, arch: str, cuda_home: str) -> CudaToolkit:
    root: Path | None
    if cuda_home:
        root = Path(cuda_home)
        nvcc = root / "bin" / "nvcc"
        if not nvcc.is_file():
            raise CudaError(
                f"board '{board_name}' builds CUDA sources, but CUDA_HOME={cuda_home} has no bin/nvcc: "
                f"set CUDA_HOME to a CUDA toolkit, or unset it to use NVIDIA's wheels ({SETUP})"
            )
        where = f"CUDA_HOME={cuda_home}"
    else:
        root = _wheel_root()
        if root is None or not (root / "bin" / "nvcc").is_file():
            raise CudaError(
                f"board '{board_name}' builds CUDA sources, but no CUDA toolkit was found (no CUDA_HOME, "
                f"no nvidia-cuda-nvcc wheel in {sys.prefix}): install one: {SETUP}; or set CUDA_HOME"
            )
        nvcc = root / "bin" / "nvcc"
        where = f"the CUDA wheels in {root}"
    lib, include = _runtime(root, arch, bool(cuda_home))
    if lib is None:
        looked = [str(p) for p in _runtime_candidates(root, arch, bool(cuda_home))]
        raise CudaError(
            f"board '{board_name}' is {arch}, but {where} has no CUDA runtime for {arch} "
            f"(looked in {', '.join(looked)}): install it: {SETUP}"
        )
    return CudaToolkit(nvcc, _identity(nvcc, lib), lib, include)


def _arch(board: Board) -> str:
    if board.arch != "native":
        return board.arch
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _wheel_root() -> Path | None:
    """nvidia/cu13 of the nvidia-cuda-nvcc wheel (a namespace package: no __init__)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    # a plain module named nvidia (not a package) has no search locations
    for base in (spec.submodule_search_locations or ()) if spec else ():
        for major in ("cu13",):
            if (Path(base) / major / "bin" / "nvcc").is_file():
                return Path(base) / major
    return None


def _runtime_candidates(root: Path, arch: str, system: bool) -> list[Path]:
    host = _arch_of_host()
    found = []
    if arch == host:
        found += [root / "lib64", root / "lib"] if system else [root / "lib"]
    if system:
        found.append(root / "targets" / f"{arch}-linux" / "lib")
    found += [p / "lib" for p in sorted((TARGETS_DIR / f"{arch}-linux").glob("nvidia/cu*"))]
    return found


def _runtime(root: Path, arch: str, system: bool) -> tuple[Path | None, Path]:
    for lib in _runtime_candidates(root, arch, system):
        if (lib / "libcudart_static.a").is_file():
            include = lib.parent / "include"
            return lib, include if include.is_dir() else root / "include"
    return None, root / "include"


def _arch_of_host() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


@functools.cache
def _identity(nvcc: Path, lib: Path) -> str:
    """nvcc's version banner and path, and the runtime it links: a new toolkit rebuilds."""
    try:
        banner = subprocess.run([str(nvcc), "--version"], capture_output=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        banner = b""
    h = hashlib.sha256(os.path.realpath(nvcc).encode() + b"\0" + banner)
    for name in ("libcudart_static.a",):
        try:
            st = (lib / name).stat()
            h.update(f"{lib / name}:{st.st_size}:{st.st_mtime_ns}".encode())
        except OSError:
            pass
    return h.hexdigest()[:16]


def gencode(archs: tuple[str, ...]) -> list[str]:
    """Machine code for each architecture, and the lowest one's PTX too, for a newer GPU's
    driver to compile (the binary still runs on a GPU the list does not name)."""
    flags = []
    for arch in archs:
        number = arch.removeprefix("sm_")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    if archs:
        lowest = min(archs, key=lambda a: int(a.removeprefix("sm_")))
        number = lowest.removeprefix("sm_")
        flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")
    return flags


def compile_argv(tk: CudaToolkit, board: Board, host_cxx: tuple[str, ...], host_flags: list[str]) -> list[str]:
    """nvcc, the device architectures and the host compiler; host_flags are what the board's
    C++ compiler would get (passed through -Xcompiler, one by one: a flag may hold a comma)."""
    argv = [str(tk.nvcc), "-ccbin", host_cxx[0], *gencode(board.cuda.archs), f"-I{tk.target_include}"]
    if board.cuda.archs:  # our header refuses an older GPU as the device's trouble, not the test's
        argv.append(f"-DONDEVICE_CUDA_MIN_ARCH={min(int(a.removeprefix('sm_')) for a in board.cuda.archs)}")
    value_of_host_flag = False
    for flag in [*host_cxx[1:], *host_flags]:
        if value_of_host_flag:  # `-isystem DIR`: the value goes where its flag went
            argv.append(f"-Xcompiler={_escaped(flag)}")
            value_of_host_flag = False
        elif flag.startswith("-std=gnu++"):  # nvcc knows c++NN only: the host pass keeps GNU's dialect
            argv += [f"-std=c++{flag[len('-std=gnu++') :]}", f"-Xcompiler={flag}"]
        elif flag.startswith(("-I", "-D", "-U", "-std=")) or flag == "-c" or not flag.startswith("-"):
            argv.append(flag.replace(",", "\\,") if flag.startswith("-D") else flag)  # nvcc's own, and the source
        elif flag.startswith("-O"):
            argv += [flag, f"-Xcompiler={flag}"]
        else:
            argv.append(f"-Xcompiler={_escaped(flag)}")
            value_of_host_flag = flag in HOST_FLAGS_WITH_A_VALUE
    return argv


def _escaped(value: str) -> str:
    """nvcc splits option values at commas and spaces: `\\,` keeps a comma (-Wl,..., -DX=1,2),
    double quotes keep a path with a space in one piece."""
    value = value.replace(",", "\\,")
    return f'"{value}"' if " " in value else value


def preprocess_argv(argv: list[str]) -> list[str]:
    """nvcc -E runs for one architecture only: the first of the board's."""
    gencodes = [a for a in argv if a.startswith("-gencode=")]
    return [a for a in argv if not a.startswith("-gencode=")] + gencodes[:1]


def link_flags(tk: CudaToolkit, board: Board) -> list[str]:
    """The CUDA runtime: static by default (the binary carries it), or the device's own
    libcudart.so.N by soname (`[cuda] cudart = "shared"`)."""
    if board.cuda.cudart == "shared":
        shared = sorted(tk.target_lib.glob("libcudart.so.*"))
        if not shared:
            raise CudaError(
                f"board '{board.name}' links the CUDA runtime shared, but {tk.target_lib} has no libcudart.so.N"
            )
        return [f"-L{tk.target_lib}", f"-l:{shared[0].name}", "-ldl", "-lpthread", "-lrt"]
    return [f"-L{tk.target_lib}", "-lcudart_static", "-ldl", "-lpthread", "-lrt"]


def gpu_images(path: Path) -> set[str]:
    """The GPU code a binary embeds, as `sm_87` (machine code) and `compute_87` (PTX):
    read from its .nv_fatbin section (NVIDIA's fat binary: a header, then entries that
    each name their kind and architecture)."""
    data = elf.section_bytes(path, ".nv_fatbin") or b""
    found: set[str] = set()
    off = 0
    while off + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, off)
        if magic != FATBIN_MAGIC:
            off += 8  # padding between fat binaries
            continue
        entry, end = off + header, min(off + header + size, len(data))  # a truncated one: as far as it goes
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            if kind == FATBIN_ELF:
                found.add(f"sm_{arch}")
            elif kind == FATBIN_PTX:
                found.add(f"compute_{arch}")
            if entry_header == 0:
                break
            entry += entry_header + payload
        off = max(end, off + 16)  # a damaged header's size of 0 moves on all the same
    return found


def missing_images(path: Path, board: Board) -> list[str]:
    """The board's architectures the binary carries no machine code for."""
    have = gpu_images(path)
    return [a for a in board.cuda.archs if a not in have]
