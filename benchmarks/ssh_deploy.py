"""Deploy-and-run of 30 aarch64 test binaries on a loopback "Pi", three ways, in one run.

    python benchmarks/ssh_deploy.py [--binaries 30] [--repeats 3] [--against REVISION]

(a) what users do today: `scp` then `ssh` per binary (OpenSSH processes);
(b) an ideal hand-written paramiko script: one connection (TCP_NODELAY), push all, exec each;
(c) pytest-ondevice: `pytest --board=rpi --device=testpi` with the build cache warm and a
    fresh device (the board's default: two binaries at a time), the same one binary at a
    time (`device_jobs = 1`, as (b) runs them), then again with nothing changed (warm: every
    binary already on the device, its sha256 verified there before its first run), the same
    with that verification patched out (what it costs), and from scratch (cold: empty build
    cache, fresh device);
(f) a bare plugin that does only (b)'s device work, (b)'s way (_bare_ssh.py: collect, push
    the built binaries with paramiko's SFTP over one connection, run, read the verdict; no
    board, build check, device cache or parsing). Its CPU against (b)'s is what is left
    for a plugin inside pytest that pushes and runs that way: pytest's own import and
    protocol are in it.
Each figure is the median of the repeats of a whole process, measured side by side on the
same machine and sshd, and the ratios are what to compare (these machines are noisy).
Needs root (a throwaway sshd and device account, binfmt_misc for the ARM binaries).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _kernels import write_kernel_tests
from _revision import first_on_path, installed_layout, level_path
from _timing import timed, timed_with_cpu

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support.sshd import BinfmtLease, Sshd, disable_binfmt, enable_binfmt  # noqa: E402

IDEAL = r"""
import socket, sys, paramiko
cfg = paramiko.SSHConfig.from_path(sys.argv[1]).lookup(sys.argv[2])
sock = socket.create_connection((cfg["hostname"], int(cfg["port"])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
client = paramiko.SSHClient()
client.load_host_keys(cfg["userknownhostsfile"])
client.set_missing_host_key_policy(paramiko.RejectPolicy())
client.connect(cfg["hostname"], int(cfg["port"]), cfg["user"], key_filename=cfg["identityfile"][0], sock=sock,
               allow_agent=False, look_for_keys=False)
sftp = client.open_sftp()
dest = "/tmp/ondevice-bench-b"
client.exec_command(f"rm -rf {dest}; mkdir -p {dest}")[1].channel.recv_exit_status()
for path in sys.argv[3:]:
    remote = f"{dest}/{path.rsplit('/', 1)[1]}"
    sftp.put(path, remote)
    sftp.chmod(remote, 0o755)
failed = 0
for path in sys.argv[3:]:
    _, out, _ = client.exec_command(f"cd {dest} && ./{path.rsplit('/', 1)[1]}")
    text = out.read()
    failed += out.channel.recv_exit_status() != 0 or b"~~~ALL TESTS PASSED~~~" not in text
client.close()
sys.exit(1 if failed else 0)
"""


def loopback_pi(prefix: str) -> tuple[Path, Sshd]:
    """A temporary root (readable by the device account) and a loopback sshd started in it."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    return root, Sshd.create(root / "sshd").start()


def make_project(root: Path, count: int, sshd: Sshd) -> Path:
    project = root / "project"
    write_kernel_tests(project / "tests", count)
    (project / "boards").mkdir()
    (project / "boards" / "rpi-serial.toml").write_text('extends = "rpi"\n[transport]\ndevice_jobs = 1\n')
    (project / "pytest.ini").write_text(
        f"[pytest]\nondevice_build_dir = {project / '_build'}\nondevice_ssh_config = {sshd.ssh_config}\n"
        f"ondevice_cache_dir = {root / 'build-cache'}\n"
        "ondevice_boards = boards\n"
    )
    return project


NO_VERIFY = """
from pytest_ondevice.transports.device_cache import DeviceCache
DeviceCache._verify = lambda self, sha256: True  # trust what the device holds: the cost of not doing so
"""


# CPU seconds: the ideal script, the plugin, the floor, the plugin at --against
CPU: dict[str, list[float]] = {"b": [], "c": [], "f": [], "x": []}


def timed_here(argv: list[str], cwd: Path, extra_path: str = "", cpu: str = "", **variables: str) -> float:
    """Only our plugin: unrelated plugins installed on the machine would be timed too.
    cpu: also keep the process's CPU seconds under that name; variables: this run's own."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **variables}
    if extra_path:
        env = first_on_path(env, extra_path)
    if not cpu:
        return timed(argv, cwd, env)
    wall, used = timed_with_cpu(argv, cwd, env)
    CPU[cpu].append(used)
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--against",
        metavar="REVISION",
        help="also time (c) with the plugin at this git revision (e.g. before a change), interleaved",
    )
    args = parser.parse_args()
    if os.geteuid() != 0 or not enable_binfmt():
        raise SystemExit("needs root and binfmt_misc (see tests/support/sshd.py)")
    root, sshd = loopback_pi("ondevice-bench-")
    try:
        project = make_project(root, args.binaries, sshd)
        pytest_cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_ondevice.plugin",
            "--board=rpi",
            f"--device={sshd.alias}",
            "tests",
        ]
        device_cache = Path(os.path.expanduser(f"~{sshd.user}")) / ".cache" / "pytest-ondevice"
        (root / "noverify").mkdir()
        (root / "noverify" / "ondevice_noverify.py").write_text(NO_VERIFY)
        serial_cmd = [a if a != "--board=rpi" else "--board=rpi-serial" for a in pytest_cmd]
        bare_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_bare_ssh", "-c", os.devnull]
        bare_cmd += ["--rootdir", str(project), "tests"]
        bare_env = {  # the bare plugin's alone: no other run carries them
            "BARE_SSH_CONFIG": str(sshd.ssh_config),
            "BARE_SSH_HOST": sshd.alias,
            "BARE_SSH_BIN": str(project / "_build" / "rpi" / "bin" / "tests"),
        }
        against_path = str(installed_layout(args.against, root / "against")) if args.against else ""
        ours_path = str(level_path(root / "level")) if args.against else ""  # as long a sys.path as the revision's
        for cmd in (pytest_cmd, serial_cmd):  # the build cache is warm
            timed_here([*cmd, "--build-only"], project)
        if against_path:
            timed_here([*pytest_cmd, "--build-only"], project, against_path)
        bins = sorted(str(p) for p in (project / "_build" / "rpi" / "bin").rglob("*_test*") if p.is_file())
        assert len(bins) == args.binaries, bins
        ssh = ["ssh", "-F", str(sshd.ssh_config), sshd.alias]
        scp = ["scp", "-q", "-F", str(sshd.ssh_config)]

        def scp_ssh() -> float:
            start = time.perf_counter()
            subprocess.run([*ssh, "rm -rf /tmp/ondevice-bench-a; mkdir -p /tmp/ondevice-bench-a"], check=True)
            for b in bins:
                subprocess.run([*scp, b, f"{sshd.alias}:/tmp/ondevice-bench-a/"], check=True)
                out = subprocess.run(
                    [*ssh, f"cd /tmp/ondevice-bench-a && ./{Path(b).name}"], capture_output=True, check=True
                ).stdout
                assert b"~~~ALL TESTS PASSED~~~" in out
            return time.perf_counter() - start

        def ideal() -> float:
            return timed_here([sys.executable, "-c", IDEAL, str(sshd.ssh_config), sshd.alias, *bins], project, cpu="b")

        def ours_fresh_device() -> float:
            shutil.rmtree(device_cache, ignore_errors=True)
            return timed_here(pytest_cmd, project, ours_path, cpu="c")

        def bare_plugin() -> float:
            return timed_here(bare_cmd, project, str(REPO / "benchmarks"), cpu="f", **bare_env)

        def against_fresh_device() -> float:
            shutil.rmtree(device_cache, ignore_errors=True)
            return timed_here(pytest_cmd, project, against_path, cpu="x")

        def ours_one_at_a_time() -> float:
            shutil.rmtree(device_cache, ignore_errors=True)
            return timed_here(serial_cmd, project)

        def ours_warm() -> float:
            return timed_here(pytest_cmd, project)

        def ours_warm_unverified() -> float:
            return timed_here([*pytest_cmd, "-p", "ondevice_noverify"], project, str(root / "noverify"))

        def ours_cold() -> float:
            shutil.rmtree(project / "_build" / "rpi", ignore_errors=True)
            shutil.rmtree(root / "build-cache", ignore_errors=True)
            shutil.rmtree(device_cache, ignore_errors=True)
            elapsed = timed_here(pytest_cmd, project)
            timed_here([*serial_cmd, "--build-only"], project)  # (c1) of the next round starts warm
            if against_path:  # and the revision's: its build keys are its own (the emptied cache held them)
                timed_here([*pytest_cmd, "--build-only"], project, against_path)
            return elapsed

        figures: dict[str, list[float]] = {n: [] for n in ("a", "b", "c", "f", "c1", "warm", "warm0", "cold", "x")}
        for _ in range(args.repeats):  # interleaved, so drifts in machine load hit all alike
            figures["a"].append(scp_ssh())
            figures["b"].append(ideal())
            figures["c"].append(ours_fresh_device())
            figures["f"].append(bare_plugin())
            if against_path:
                figures["x"].append(against_fresh_device())
            figures["c1"].append(ours_one_at_a_time())
            figures["warm"].append(ours_warm())
            figures["warm0"].append(ours_warm_unverified())
            figures["cold"].append(ours_cold())
        med = {k: statistics.median(v) for k, v in figures.items() if v}
        if os.environ.get("BENCH_VERBOSE"):
            print({k: [round(x, 2) for x in v] for k, v in figures.items()})
        print(f"{args.binaries} aarch64 test binaries, loopback sshd, median of {args.repeats} runs (seconds)")
        print(f"  (a) scp + ssh per binary          {med['a']:7.2f}")
        print(f"  (b) ideal paramiko script         {med['b']:7.2f}")
        print(f"  (c) pytest-ondevice, fresh device {med['c']:7.2f}   (build cache warm)")
        print(f"      ... one binary at a time      {med['c1']:7.2f}   (device_jobs = 1)")
        print(f"  (f) a bare pytest plugin         {med['f']:7.2f}   (_bare_ssh.py: (b)'s work only)")
        print(f"      pytest-ondevice, warm rerun   {med['warm']:7.2f}   (each binary's sha256 verified on the device)")
        print(f"      ... verification patched out  {med['warm0']:7.2f}")
        print(f"      pytest-ondevice, cold         {med['cold']:7.2f}   (empty build cache, fresh device)")
        print("ratios:")
        cpu_b, cpu_c, cpu_f = (statistics.median(CPU[k]) for k in "bcf")
        print(f"  (c) / (b)   = {med['c'] / med['b']:.2f}   (target <= 1.05)")
        print(f"  CPU (b) {cpu_b:.3f} s, (c) {cpu_c:.3f} s: (c) / (b) = {cpu_c / cpu_b:.2f}   (target <= 1.5)")
        print(
            f"  CPU (f) {cpu_f:.3f} s: (f) / (b) = {cpu_f / cpu_b:.2f}, (b)'s device work inside pytest; "
            f"(c) / (f) = {cpu_c / cpu_f:.2f}"
        )
        print(f"  (c1) / (b)  = {med['c1'] / med['b']:.2f}   (one binary at a time, like (b))")
        print(f"  (a) / (c)   = {med['a'] / med['c']:.1f}    (target >= 12)")
        print(f"  warm / cold = {med['warm'] / med['cold']:.2f}   (target <= 0.25)")
        if against_path:
            print(f"  (c) with {args.against}: {med['x']:.2f} s; (c) / that = {med['c'] / med['x']:.2f}")
            cpu_x = statistics.median(CPU["x"])
            ratio = statistics.median(CPU["c"]) / cpu_x
            print(f"  CPU (c) with {args.against}: {cpu_x:.3f} s; (c) / that = {ratio:.2f}")
        cost = med["warm"] - med["warm0"]
        print(
            f"  sha256 verification of {args.binaries} cached binaries: {cost:+.3f} s "
            f"({cost / args.binaries * 1000:+.1f} ms per binary, {cost / med['warm0'] * 100:+.0f} % of the warm rerun)"
        )
    finally:
        sshd.kill()
        if not any(p for p in BinfmtLease.DIR.glob("*") if Path(f"/proc/{p.name}").exists()):
            disable_binfmt()  # unless a test run shares it
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
