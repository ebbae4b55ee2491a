"""A device-bound suite on 1 vs N loopback "Pis" with `-n N`, side by side in one run.

    python benchmarks/fleet_speedup.py [--devices 4,8] [--binaries 64] [--seconds 3] [--repeats 2]

Each device runs one binary at a time (`jobs = 1`), and each binary holds it for
--seconds (a case that sleeps on the device, as a slow kernel or a long flash would),
so the figure is what leasing and spreading give: with one device the N workers take
turns at it; with N, each has its own. How the suite is device-bound on a 2-core
machine: the device's time is a sleep in the binary (its process, under sshd, is idle),
so the N devices need no cores; what the machine's cores do is the plugin's own work
(N xdist workers starting, connecting and reporting), which is what the figure charges.
Each fleet size runs the same binaries from a warm build cache, alternating with the
one-device run of the same -n, and the speed-up is the ratio of the medians (targets:
>= 3.8x on 4 devices, >= 7x on 8). Needs root (throwaway sshds and a device account,
binfmt_misc for the aarch64 binaries).
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

CASE = """\
#include <unistd.h>
#include "micro_test.h"
TF_LITE_MICRO_TESTS_BEGIN
TF_LITE_MICRO_TEST(HoldsTheDevice) {{ usleep({us}); TF_LITE_MICRO_EXPECT_EQ(1, 1); }}
TF_LITE_MICRO_TEST(Adds) {{ TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }}
TF_LITE_MICRO_TESTS_END
"""


def make_project(root: Path, servers: list[Sshd], binaries: int, seconds: float, board: str, sizes: list[int]) -> None:
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
    for count in sorted({1, *sizes}):
        lines = [f'[fleet]\nlease_dir = "leases-{count}"\n']
        lines += [f'[device.pi-{i}]\nboard = "{board}"\naddress = "pi-{i}"\njobs = 1\n' for i in range(1, count + 1)]
        (root / f"fleet-{count}.toml").write_text("\n".join(lines))


def timed_pytest(root: Path, *args: str) -> float:
    return timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default="4,8", help="fleet sizes, comma-separated (each against 1 device)")
    parser.add_argument("--binaries", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each binary holds its device")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(n) for n in args.devices.split(",")]
    if os.geteuid() != 0:
        sys.exit("needs root: throwaway sshds, a device account and binfmt_misc")
    work = Path(tempfile.mkdtemp(prefix="ondevice-fleet-bench-"))
    work.chmod(0o755)
    servers: list[Sshd] = []
    figures: dict[tuple[int, int], list[float]] = {}
    try:
        with BinfmtLease() as binfmt:
            user = device_user()
            for i in range(1, max(sizes) + 1):
                servers.append(Sshd.create(work / f"sshd-{i}", alias=f"pi-{i}", user=user).start())
            project = work / "project"
            project.mkdir()
            make_project(project, servers, args.binaries, args.seconds, "rpi" if binfmt else "rpi-wrapped", sizes)
            timed_pytest(project, "--fleet=fleet-1.toml", "--build-only")  # the build cache warm for all
            timed_pytest(project, f"--fleet=fleet-{max(sizes)}.toml", "-n", str(max(sizes)))  # every device has them
            for _ in range(args.repeats):
                for n in sizes:
                    for count in (1, n):  # alternating: both see the same machine load
                        run = timed_pytest(project, f"--fleet=fleet-{count}.toml", "-n", str(n))
                        figures.setdefault((n, count), []).append(run)
    finally:
        for server in servers:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
    device_time = args.binaries * args.seconds
    print(f"{args.binaries} binaries, each holding its device {args.seconds:g} s ({device_time:g} s of device time)")
    targets = {4: 3.8, 8: 7.0}
    for n in sizes:
        one, many = statistics.median(figures[(n, 1)]), statistics.median(figures[(n, n)])
        runs = ", ".join(f"{t:.1f}" for t in figures[(n, n)])
        print(
            f"-n {n}: 1 device {one:6.1f} s, {n} devices {many:6.1f} s (runs: {runs}; ideal {device_time / n:.1f}): "
            f"speed-up {one / many:.2f}x (ideal {n}x{f', target >= {targets[n]}x' if n in targets else ''})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
