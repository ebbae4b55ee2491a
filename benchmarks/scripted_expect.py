"""The device fixture beside pytest-embedded, on the same firmware under the same QEMU.

    python benchmarks/scripted_expect.py [--round-trips 200] [--repeats 3]

examples/scripted/firmware/console_fw.c runs on QEMU's STM32 (bluepill-qemu-uart, its USART
served on a TCP socket, icount as the board file sets it). Two test files with the same
expectations drive it: banner, then N times `ping` -> `pong` -> prompt.
(a) pytest-embedded-serial: `dut.write()` / `dut.expect_exact()` on `--port socket://...`
    (QEMU started by this script, as a user of pytest-embedded starts it);
(b) pytest-ondevice: `device.console.sendline()` / `expect_exact()`, --console=uart:socket://...
    (QEMU started by the plugin's loader).
First both must pass on the firmware and both fail on a variant that answers `pang`; then
the time per round trip (measured inside each test, from the send to the prompt after the
reply) is compared, median over the repeats, side by side in one run. pytest-embedded is
installed into a venv of its own (.venv-embedded; its plugin would load into every pytest
run of ours otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIRMWARE = REPO / "examples" / "scripted" / "firmware" / "console_fw.c"
EMBEDDED = ["pytest-embedded==2.9.3", "pytest-embedded-serial==2.9.3"]
BOARD = "bluepill-qemu-uart"

OURS = """
import json, os, time

def test_round_trips(device):
    console = device.flash(os.environ["FW"])
    with open(os.environ["ELF_OUT"], "w") as f:
        f.write(str(device.build(os.environ["FW"]).path))
    console.expect_exact("ready", timeout=30)
    console.expect_exact("> ")
    took = []
    for _ in range(int(os.environ["N"])):
        start = time.perf_counter()
        console.sendline("ping")
        console.expect_exact("pong", timeout=10)
        console.expect_exact("> ", timeout=10)
        took.append(time.perf_counter() - start)
    with open(os.environ["OUT"], "w") as f:
        json.dump(took, f)
"""

THEIRS = """
import json, os, time

def test_round_trips(dut):
    dut.expect_exact("ready", timeout=30)
    dut.expect_exact("> ")
    took = []
    for _ in range(int(os.environ["N"])):
        start = time.perf_counter()
        dut.write("ping")
        dut.expect_exact("pong", timeout=10)
        dut.expect_exact("> ", timeout=10)
        took.append(time.perf_counter() - start)
    with open(os.environ["OUT"], "w") as f:
        json.dump(took, f)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether something listens on the port (read from /proc: a probe connection would be
    QEMU's one client, wait=on, and start the CPU before pytest-embedded reads)."""
    wanted = f":{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(wanted) and fields[3] == "0A":
            return True
    return False


def embedded_venv(path: Path) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *EMBEDDED], check=True)
    return python


def ours(project: Path, n: int, firmware: Path, elf_out: Path) -> tuple[int, list[float]]:
    out = project / "ours.json"
    env = {**os.environ, "N": str(n), "OUT": str(out), "FW": str(firmware), "ELF_OUT": str(elf_out)}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--board={BOARD}",
        f"--console=uart:socket://127.0.0.1:{free_port()}",
        "test_ours.py",
    ]
    proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
    return proc.returncode, json.loads(out.read_text()) if proc.returncode == 0 else []


def theirs(project: Path, python: Path, n: int, elf: Path) -> tuple[int, list[float]]:
    out = project / "theirs.json"
    port = free_port()
    qemu = subprocess.Popen(
        [
            "qemu-system-arm",
            "-M",
            "stm32vldiscovery",
            "-display",
            "none",
            "-monitor",
            "none",
            "-nodefaults",
            "-chardev",
            f"socket,host=127.0.0.1,port={port},server=on,wait=on,nodelay=on,mux=on,id=out0",
            "-serial",
            "chardev:out0",
            "-semihosting-config",
            "enable=on,target=native,chardev=out0",
            "-icount",
            "shift=5",
            "-kernel",
            str(elf),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not listening(port) and time.monotonic() < deadline:  # not a connection: that starts the CPU
            time.sleep(0.02)
        env = {**os.environ, "N": str(n), "OUT": str(out)}
        argv = [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--embedded-services",
            "serial",
            "--port",
            f"socket://127.0.0.1:{port}",
            "test_theirs.py",
        ]
        proc = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True)
        return proc.returncode, json.loads(out.read_text()) if proc.returncode == 0 else []
    finally:
        qemu.kill()
        qemu.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--venv", type=Path, default=REPO / ".venv-embedded", help="pytest-embedded's venv")
    args = parser.parse_args()
    python = embedded_venv(args.venv)
    project = Path(tempfile.mkdtemp(prefix="ondevice-bench-expect-"))
    try:
        (project / "pytest.ini").write_text(
            textwrap.dedent(f"""
            [pytest]
            ondevice_build_dir = {project / "_build"}
            """)
        )
        (project / "test_ours.py").write_text(OURS)
        (project / "test_theirs.py").write_text(THEIRS)
        good = project / "console_fw.c"
        shutil.copy(FIRMWARE, good)
        wrong = project / "wrong_fw.c"
        wrong.write_text(FIRMWARE.read_text().replace('printf("pong\\n")', 'printf("pang\\n")'))
        elf_good, elf_wrong = project / "good.elf.txt", project / "wrong.elf.txt"

        code, _ = ours(project, 3, good, elf_good)
        assert code == 0, "pytest-ondevice failed on the right firmware"
        code_w, _ = ours(project, 3, wrong, elf_wrong)
        assert code_w == 1, f"pytest-ondevice did not fail on a wrong reply (exit {code_w})"
        code, _ = theirs(project, python, 3, Path(elf_good.read_text()))
        assert code == 0, "pytest-embedded failed on the right firmware"
        code_w, _ = theirs(project, python, 3, Path(elf_wrong.read_text()))
        assert code_w == 1, f"pytest-embedded did not fail on a wrong reply (exit {code_w})"
        print("same expectations: both pass on the firmware, both fail on the wrong reply")

        mine: list[float] = []
        other: list[float] = []
        for _ in range(args.repeats):  # alternating: the machine's load falls on both alike
            mine.append(statistics.median(ours(project, args.round_trips, good, elf_good)[1]))
            other.append(statistics.median(theirs(project, python, args.round_trips, Path(elf_good.read_text()))[1]))
        a, b = statistics.median(mine), statistics.median(other)
        print(f"round trip (send 'ping' -> 'pong' -> prompt), median of {args.repeats} x {args.round_trips}:")
        print(f"  pytest-ondevice  {a * 1e3:7.2f} ms   (repeats: {', '.join(f'{x * 1e3:.2f}' for x in mine)})")
        print(f"  pytest-embedded  {b * 1e3:7.2f} ms   (repeats: {', '.join(f'{x * 1e3:.2f}' for x in other)})")
        print(f"  ratio ours/theirs: {a / b:.4f} (target <= 1.00)")
    finally:
        shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()
