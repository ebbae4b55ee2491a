"""Builds vendor/<board>/libvendor.a (with its header and a pkg-config .pc file) from
vendor_dot.c, with each board's own toolchain.

    python examples/prebuilt/make_vendor_lib.py host bluepill-qemu rpi

Stands in for a library a vendor ships prebuilt (or an AOT-compiled model object): the
tests then link it per board without ever compiling its source.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_ondevice.compiling.toolchain import resolve
from pytest_ondevice.config.board import BoardRegistry

HERE = Path(__file__).resolve().parent


def build(board_name: str, dest_root: Path = HERE / "vendor", registry: BoardRegistry | None = None) -> Path:
    board = (registry or BoardRegistry()).get(board_name)
    tc = resolve(board)
    out = dest_root / board_name / "libvendor.a"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "vendor_dot.o"
        subprocess.run([*tc.cc, *board.toolchain.cflags, "-c", str(HERE / "vendor_dot.c"), "-o", str(obj)], check=True)
        out.unlink(missing_ok=True)
        subprocess.run([*tc.ar, "rcs", str(out), str(obj)], check=True)
    # as a vendor ships it for pkg-config: its header and a .pc file beside the library
    include = out.parent / "include"
    include.mkdir(exist_ok=True)
    (include / "vendor_dot.h").write_text((HERE / "vendor_dot.h").read_text())
    pc = out.parent / "pkgconfig" / "vendor.pc"
    pc.parent.mkdir(exist_ok=True)
    pc.write_text(
        "prefix=${pcfiledir}/..\nName: vendor\nDescription: the example's vendor kernels\nVersion: 1.0\n"
        "Cflags: -I${prefix}/include\nLibs: -L${prefix} -lvendor\n"
    )
    return out


if __name__ == "__main__":
    for name in sys.argv[1:] or ["host"]:
        print(build(name))
