"""A device-bound suite on 1 vs 4 loopback "Pis" with `-n 4`, side by side in one run.

    python benchmarks/fleet_speedup.py [--binaries 32] [--seconds 3] [--repeats 2]

Each device runs one binary at a time (`jobs = 1`), and each binary holds it for
--seconds (a case that sleeps on the device, as a slow kernel or a long flash would),
so the figure is what leasing and spreading give:
with one device the four workers take turns at it; with four, each has its own.
Both fleets run the same binaries from a warm build cache, alternating, and the
speed-up is the ratio of the medians (target: >= 3.6x). Needs root (throwaway sshds
and a device account, binfmt_misc for the aarch64 binaries).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from _timing import timed

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support.sshd import BinfmtLease, Sshd, device_user  # noqa: E402

DEVICES = 4
CASE = """\
#include <unistd.h>
#include "micro_test.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(HoldsTheDevice) {{ usleep({us}); TF_LITE_MICRO_EXPECT_EQ(1, 1); }}
TF_LITE_MICRO_TEST(Adds) {{ TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }}
TF_LITE_MICRO_TESTS_END
"""


def make_project(root: Path, servers: list[Sshd], binaries: int, seconds: float, board: str) -> None:
    (root / "ssh_config").write_text("\n".join(s.ssh_config.read_text().split("\nHost 127.0.0.1")[0] for s in servers))
    (root / "pytest.ini").write_text(
        textwrap.dedent(
            f"""\
            [pytest]
            ondevice_build_dir = {root / "_build"}
            ondevice_cache_dir = {root / "_cache"}
            ondevice_ssh_config = {root / "ssh_config"}
            ondevice_boards = boards
            """
        )
    )
    (root / "boards").mkdir()
    if board != "rpi":
        (root / "boards" / f"{board}.toml").write_text('extends = "rpi"\n[transport]\nexec_wrapper = "qemu-aarch64"\n')
    for n in range(binaries):
        (root / f"k{n:02d}_test.c").write_text(CASE.format(us=int(seconds * 1e6)))
    for count in (1, DEVICES):
        lines = [f'[fleet]\nlease_dir = "leases-{count}"\n']
        lines += [f'[device.pi-{i}]\nboard = "{board}"\naddress = "pi-{i}"\njobs = 1\n' for i in range(1, count + 1)]
        (root / f"fleet-{count}.toml").write_text("\n".join(lines))


def timed_pytest(root: Path, *args: str) -> float:
    return timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each binary holds its device")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: throwaway sshds, a device account and binfmt_misc")
    work = Path(tempfile.mkdtemp(prefix="ondevice-fleet-bench-"))
    work.chmod(0o755)
    servers: list[Sshd] = []
    try:
        with BinfmtLease() as binfmt:
            user = device_user()
            for i in range(1, DEVICES + 1):
                servers.append(Sshd.create(work / f"sshd-{i}", alias=f"pi-{i}", user=user).start())
            project = work / "project"
            project.mkdir()
            make_project(project, servers, args.binaries, args.seconds, "rpi" if binfmt else "rpi-wrapped")
            timed_pytest(project, "--fleet=fleet-1.toml", "--build-only")  # the build cache warm for both
            timed_pytest(project, "--fleet=fleet-4.toml", "-n", "4")  # every device holds the binaries
            figures: dict[int, list[float]] = {1: [], DEVICES: []}
            for _ in range(args.repeats):
                for count in (1, DEVICES):  # alternating: both see the same machine load
                    figures[count].append(timed_pytest(project, f"--fleet=fleet-{count}.toml", "-n", "4"))
    finally:
        for server in servers:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
    one, four = statistics.median(figures[1]), statistics.median(figures[DEVICES])
    device_time = args.binaries * args.seconds
    print(f"{args.binaries} binaries, each holding its device {args.seconds:g} s ({device_time:g} s of device time)")
    print(f"1 device,  -n 4: {one:6.1f} s  (runs: {', '.join(f'{t:.1f}' for t in figures[1])})")
    print(f"{DEVICES} devices, -n 4: {four:6.1f} s  (runs: {', '.join(f'{t:.1f}' for t in figures[DEVICES])})")
    print(f"speed-up: {one / four:.2f}x (target >= 3.6x; ideal {DEVICES}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
