"""Deploy-and-run of N aarch64 test binaries on an Android device through the adb server, three ways.

    python benchmarks/adb_deploy.py [--binaries 10] [--repeats 5] [--against REVISION]

The device is the tests' stand-in (tests/support/adb_standin.py: adbd's wire protocol, real
aarch64 binaries through qemu-user) behind the real adb server (Debian's `adb`):
(a) what users do by hand: `adb push` then `adb shell` per binary (adb's own client);
(b) an ideal adbutils script: one AdbClient and device, a sync push of each binary (0755),
    then `shell2(v2=True)` per binary, its exit status and pass line checked;
(c) pytest-ondevice: `pytest --board=android-arm64 --device=adb:SERIAL` with the build cache
    warm and a fresh device (its binary cache removed before each run).
Each figure is the median of the repeats of a whole process, the three interleaved. CPU is
what the timed process and its children used; "server+device" is what the adb server and the
stand-in (a Python adbd, which real phones do not pay on the host) used meanwhile.
Needs adb, qemu-aarch64, unshare and a private binfmt_misc (Linux >= 6.7), as the ADB tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _kernels import write_kernel_tests
from _revision import first_on_path, installed_layout, level_path
from _timing import timed_with_cpu

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support.adb_standin import AdbServer, StandinDevice, standin_unavailable  # noqa: E402

PASS_LINE = "~~~ALL TESTS PASSED~~~"
IDEAL = r"""
import sys, warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import adbutils
port, serial, dest = int(sys.argv[1]), sys.argv[2], sys.argv[3]
device = adbutils.AdbClient(port=port).device(serial)
device.shell2(f"rm -rf {dest}; mkdir -p {dest}", v2=True)
for path in sys.argv[4:]:
    device.sync.push(path, f"{dest}/{path.rsplit('/', 1)[1]}", mode=0o755)
failed = 0
for path in sys.argv[4:]:
    result = device.shell2(f"cd {dest} && ./{path.rsplit('/', 1)[1]}", v2=True)
    failed += result.returncode != 0 or "~~~ALL TESTS PASSED~~~" not in result.stdout
sys.exit(1 if failed else 0)
"""


def make_project(root: Path, count: int, server: AdbServer) -> Path:
    project = root / "project"
    write_kernel_tests(project / "tests", count)
    (project / "pytest.ini").write_text(
        f"[pytest]\nondevice_build_dir = {project / '_build'}\n"
        f"ondevice_cache_dir = {root / 'build-cache'}\n"
        f"ondevice_adb_server = 127.0.0.1:{server.port}\n"
    )
    return project


def cpu_seconds(pid: int) -> float:
    """CPU a live process and its reaped children used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def standin_pids(device: StandinDevice, server: AdbServer) -> list[int]:
    """The adb server, `unshare` and the stand-in's Python (its child) under it."""
    assert device.proc is not None and server.proc is not None
    pids = [server.proc.pid, device.proc.pid]
    children = Path(f"/proc/{device.proc.pid}/task/{device.proc.pid}/children")
    pids += [int(p) for p in children.read_text().split()]
    return pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--against",
        metavar="REVISION",
        help="also time (c) with the plugin at this git revision (e.g. before a change), interleaved",
    )
    args = parser.parse_args()
    reason = standin_unavailable()
    if reason:
        raise SystemExit(f"no stand-in ADB device here: {reason}")
    root = Path(tempfile.mkdtemp(prefix="ondevice-adb-bench-"))
    server = AdbServer(root / "adb-home").start()
    device = StandinDevice(root / "device").start()
    try:
        server.connect(device)
        project = make_project(root, args.binaries, server)
        env = {**server.env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # only our plugin is timed
        pytest_cmd = [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_ondevice.plugin"),
            *("--board=android-arm64", f"--device=adb:{device.serial}", "tests"),
        ]
        against_env = None
        ours_env = env
        if args.against:
            against_env = first_on_path(env, str(installed_layout(args.against, root / "against")))
            ours_env = first_on_path(env, str(level_path(root / "level")))  # as long a sys.path as the revision's
            timed_with_cpu([*pytest_cmd, "--build-only"], project, against_env)
        timed_with_cpu([*pytest_cmd, "--build-only"], project, env)  # the build cache is warm from here
        bins = sorted(str(p) for p in (project / "_build" / "android-arm64" / "bin").rglob("*_test*") if p.is_file())
        assert len(bins) == args.binaries, bins
        device_cache = device.host_path("/data/local/tmp/ondevice-shell")
        adb = [server.adb_path, "-P", str(server.port), "-s", device.serial]

        def cli() -> tuple[float, float]:
            dest = "/data/local/tmp/bench-a"
            before = cpu_self()
            start = time.perf_counter()
            subprocess.run([*adb, "shell", f"rm -rf {dest}; mkdir -p {dest}"], env=env, check=True)
            for b in bins:
                subprocess.run([*adb, "push", b, f"{dest}/"], env=env, check=True, capture_output=True)
                out = subprocess.run(
                    [*adb, "shell", f"cd {dest} && ./{Path(b).name}"], env=env, capture_output=True, check=True
                ).stdout
                assert PASS_LINE.encode() in out, out
            return time.perf_counter() - start, cpu_self() - before

        def ideal() -> tuple[float, float]:
            argv = [sys.executable, "-c", IDEAL, str(server.port), device.serial, "/data/local/tmp/bench-b", *bins]
            return timed_with_cpu(argv, project, env)

        def ours_fresh_device(run_env: dict[str, str]) -> tuple[float, float]:
            shutil.rmtree(device_cache, ignore_errors=True)
            return timed_with_cpu(pytest_cmd, project, run_env)

        runs = {"a": cli, "b": ideal, "c": lambda: ours_fresh_device(ours_env)}
        if against_env is not None:
            runs["x"] = lambda: ours_fresh_device(against_env)
        wall: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        far: dict[str, list[float]] = {k: [] for k in runs}  # the adb server's and the stand-in's CPU
        for _ in range(args.repeats):  # interleaved, so drifts in machine load hit all alike
            for name, run in runs.items():
                pids = standin_pids(device, server)
                far_before = sum(cpu_seconds(p) for p in pids)
                seconds, used = run()
                far[name].append(sum(cpu_seconds(p) for p in pids) - far_before)
                wall[name].append(seconds)
                cpu[name].append(used)
        med = {k: statistics.median(v) for k, v in wall.items()}
        mcpu = {k: statistics.median(v) for k, v in cpu.items()}
        mfar = {k: statistics.median(v) for k, v in far.items()}
        if os.environ.get("BENCH_VERBOSE"):
            print({k: [round(x, 3) for x in v] for k, v in wall.items()})
            print({k: [round(x, 3) for x in v] for k, v in cpu.items()})
        n = args.binaries
        print(f"{n} aarch64 test binaries, adb server + stand-in device, median of {args.repeats} runs (seconds)")
        print("                                     wall     CPU   server+device CPU")
        labels = {
            "a": "(a) adb push + adb shell per binary",
            "b": "(b) ideal adbutils script         ",
            "c": "(c) pytest-ondevice, fresh device ",
            "x": f"(c) at {args.against or '':27.27}",
        }
        for k in runs:
            print(f"  {labels[k]} {med[k]:7.2f} {mcpu[k]:7.2f} {mfar[k]:11.2f}")
        print("ratios:")
        print(f"  (c) / (b) wall = {med['c'] / med['b']:.2f}   (target <= 1.10)")
        print(f"  (c) / (b) CPU  = {mcpu['c'] / mcpu['b']:.2f}")
        print(f"  (a) / (c) wall = {med['a'] / med['c']:.1f}")
        print(
            f"  per binary beyond (b): {(med['c'] - med['b']) / n * 1000:+.1f} ms wall, "
            f"{(mcpu['c'] - mcpu['b']) / n * 1000:+.1f} ms CPU"
        )
        if against_env is not None:
            print(
                f"  (c) with {args.against}: {med['x']:.2f} s, {mcpu['x']:.2f} s CPU; "
                f"(c) / that = {med['c'] / med['x']:.2f} wall, {mcpu['c'] / mcpu['x']:.2f} CPU"
            )
    finally:
        server.disconnect(device)
        device.stop()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def cpu_self() -> float:
    """CPU of this process's reaped children so far (the adb clients of (a))."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
