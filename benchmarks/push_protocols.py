"""What pushing 30 binaries costs the pushing process, by four protocols over one paramiko
connection, side by side in one run: could a push cheaper than SFTP's make room under the
SSH CPU target (docs/performance.md)?

    python benchmarks/push_protocols.py [--binaries 30] [--repeats 7]

(s) paramiko's own SFTP put, then chmod: the ideal script's push (ssh_deploy.py's (b));
(o) the plugin's SFTP put (transports/sftp_push.py: one SSH packet a write request), then
    chmod, over AES-GCM: what the plugin pushes with;
(e) one exec channel a binary, `cat > FILE && chmod 700 FILE`: no SFTP requests or
    replies, but a session and a shell started on the device for every binary;
(h) one exec channel for all, a shell loop on the device reading a `NAME SIZE` line, then
    `head -c SIZE > NAME`: one round trip a binary. It needs a `head` that reads no byte
    past SIZE from a pipe: GNU coreutils' does; busybox's reads through stdio, which reads
    ahead, so the next binary's bytes would be lost (busybox head.c): not a protocol a
    plugin can use on every Linux board.

Each protocol runs in a process of its own, connected before the clock starts; the figure
is the CPU seconds of that process (all its threads) and the wall time of its pushes
alone, the median of the repeats. Every push is checked: the device's sha256 of each file
must match. Needs root (a throwaway sshd and device account).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from ssh_deploy import loopback_pi, make_project

PUSH = r"""
import hashlib, json, os, socket, sys, time
import paramiko
mode, config, alias, dest, *paths = sys.argv[1:]
cfg = paramiko.SSHConfig.from_path(config).lookup(alias)
sock = socket.create_connection((cfg["hostname"], int(cfg["port"])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def gcm_first(*args, **kwargs):
    transport = paramiko.Transport(*args, **kwargs)
    options = transport.get_security_options()
    gcm = tuple(c for c in options.ciphers if c.endswith("-gcm@openssh.com"))
    options.ciphers = gcm + tuple(c for c in options.ciphers if c not in gcm)
    return transport


client = paramiko.SSHClient()
client.load_host_keys(cfg["userknownhostsfile"])
client.set_missing_host_key_policy(paramiko.RejectPolicy())
client.connect(cfg["hostname"], int(cfg["port"]), cfg["user"], key_filename=cfg["identityfile"][0], sock=sock,
               allow_agent=False, look_for_keys=False, transport_factory=None if mode == "s" else gcm_first)
transport = client.get_transport()


def run(command):
    chan = transport.open_session()
    chan.exec_command(command)
    out = chan.makefile("rb").read()
    assert chan.recv_exit_status() == 0, command
    return out


def send(chan, data):  # sendall(bytes) copies what is left after every packet: quadratic
    view, step = memoryview(data), chan.out_max_packet_size - 64
    for start in range(0, len(data), step):
        chan.sendall(view[start : start + step])


run(f"rm -rf {dest} && mkdir -p {dest}")
if mode in "so":
    from pytest_ondevice.transports.sftp_push import OnePacketSftp
    sftp = (OnePacketSftp if mode == "o" else paramiko.SFTPClient).from_transport(transport)
cpu, wall = time.process_time(), time.perf_counter()
if mode in "so":
    for path in paths:
        remote = f"{dest}/{os.path.basename(path)}"
        sftp.put(path, remote)
        sftp.chmod(remote, 0o700)
elif mode == "e":
    for path in paths:
        remote = f"{dest}/{os.path.basename(path)}"
        chan = transport.open_session()
        chan.exec_command(f"cat > {remote} && chmod 700 {remote}")
        with open(path, "rb") as f:
            send(chan, f.read())
        chan.shutdown_write()
        assert chan.recv_exit_status() == 0
else:
    chan = transport.open_session()
    chan.exec_command("sh -c 'while read -r n s; do head -c \"$s\" > \"$n\" && chmod 700 \"$n\"; echo \"ok $?\"; done'")
    replies = chan.makefile("rb")
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        chan.sendall(f"{dest}/{os.path.basename(path)} {len(data)}\n".encode())
        send(chan, data)
        assert replies.readline() == b"ok 0\n"
    chan.shutdown_write()
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
sums = dict(line.split()[::-1] for line in run(f"cd {dest} && sha256sum *").decode().splitlines())
for path in paths:
    with open(path, "rb") as f:
        assert sums[os.path.basename(path)] == hashlib.sha256(f.read()).hexdigest(), path
client.close()
print(json.dumps({"cpu": cpu, "wall": wall}))
"""

MODES = {
    "s": "paramiko's SFTP put + chmod (the ideal script's)",
    "o": "the plugin's SFTP put + chmod, AES-GCM",
    "e": "an exec channel a binary: cat > FILE",
    "h": "one channel, head -c (GNU head only)",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (a throwaway sshd and device account: see tests/support/sshd.py)")
    root, sshd = loopback_pi("ondevice-push-")
    try:
        project = make_project(root, args.binaries, sshd)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        build = [sys.executable, "-m", "pytest", "-q", "-p", "pytest_ondevice.plugin", "--board=rpi", "--build-only"]
        subprocess.run([*build, "tests"], cwd=project, env=env, capture_output=True, check=True)
        bins = sorted(str(p.resolve()) for p in (project / "_build" / "rpi" / "bin").rglob("*_test*") if p.is_file())
        assert len(bins) == args.binaries, bins
        head = subprocess.run(
            ["ssh", "-F", str(sshd.ssh_config), sshd.alias, "head --version 2>&1 | head -n 1"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        figures: dict[str, dict[str, list[float]]] = {m: {"cpu": [], "wall": []} for m in MODES}
        for _ in range(args.repeats):  # interleaved, so drifts in machine load hit all alike
            for mode in MODES:
                argv = [sys.executable, "-c", PUSH, mode, str(sshd.ssh_config), sshd.alias, f"/tmp/push-{mode}", *bins]
                out = subprocess.run(argv, env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"({mode}) failed:\n{out.stderr[-3000:]}")
                for key, value in json.loads(out.stdout).items():
                    figures[mode][key].append(value)
        size = sum(Path(b).stat().st_size for b in bins) / 1e6
        print(f"{args.binaries} aarch64 binaries ({size:.1f} MB), loopback sshd, the device's head: {head or '?'}")
        print(f"median of {args.repeats} runs (ms): the pushing process's CPU, and its pushes' wall time")
        ours = statistics.median(figures["o"]["cpu"])
        for mode, what in MODES.items():
            cpu, wall = (statistics.median(figures[mode][k]) * 1000 for k in ("cpu", "wall"))
            print(f"  ({mode}) {what:50} CPU {cpu:6.1f}  wall {wall:6.1f}   CPU / (o) {cpu / 1000 / ours:.2f}")
    finally:
        sshd.kill()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
