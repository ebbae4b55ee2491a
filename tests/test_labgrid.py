"""A farm over several hosts: devices leased through a real labgrid coordinator and
exporter on loopback, the Pi behind the place a real sshd.

labgrid lives in a venv of its own (scripts/setup.sh makes `.venv-labgrid`, which sees
the main venv's packages): every pytest that can import labgrid loads its pytest plugin,
and the main suite must show what a user without the extra sees. So the runs here are
pytest processes started with that venv's Python."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import QUIET, private_tmpdir
from support.sshd import BinfmtLease, Sshd, free_port, new_account, remove_account
from test_fleet import SLEEPER, junit_cases

from pytest_ondevice.farm import lease

ROOT = Path(__file__).resolve().parents[1]
LG_VENV = Path(os.environ.get("ONDEVICE_LABGRID_VENV", ROOT / ".venv-labgrid"))
LG_BIN = LG_VENV / "bin"


@pytest.fixture(scope="module")
def labgrid_venv():
    if not (LG_BIN / "labgrid-coordinator").exists():
        message = f"labgrid is not installed in {LG_VENV}: run scripts/setup.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return LG_BIN


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"not listening after {timeout} s: {log.read_text()}")


class Lab:
    """A coordinator, an exporter offering each Pi as a NetworkService, and a place per Pi."""

    def __init__(self, bin_dir: Path, root: Path, pis: dict[str, Sshd]) -> None:
        self.bin = bin_dir
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        coordinator_log = root / "coordinator.log"
        coordinator = self._start(["labgrid-coordinator", "-l", self.address], coordinator_log)
        wait_for_port(self.port, coordinator, coordinator_log)
        exported = "".join(
            f"{name}:\n  NetworkService:\n    address: 127.0.0.1\n    port: {pi.port}\n    username: {pi.user}\n"
            for name, pi in pis.items()
        )
        (root / "exporter.yaml").write_text(exported)
        self._start(
            ["labgrid-exporter", "-c", self.address, "-n", "exp1", "--hostname", "127.0.0.1", "exporter.yaml"],
            root / "exporter.log",
        )
        for name in pis:
            self.client("-p", name, "create")
            self.client("-p", name, "add-match", f"exp1/{name}/NetworkService")
        deadline = time.monotonic() + 20
        while "NetworkService" not in self.client("resources").stdout:  # the exporter is up
            assert time.monotonic() < deadline, (root / "exporter.log").read_text()
            time.sleep(0.2)

    def _start(self, argv: list[str], log: Path) -> subprocess.Popen:
        out = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen(
            [str(self.bin / argv[0]), *argv[1:]], cwd=self.root, stdout=out, stderr=out, start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def client(self, *args: str, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "LG_COORDINATOR": self.address}
        if user:
            env["LG_USERNAME"] = user
        result = subprocess.run(
            [str(self.bin / "labgrid-client"), *args], env=env, capture_output=True, text=True, timeout=60
        )
        if check and result.returncode:
            raise AssertionError(f"labgrid-client {' '.join(args)}: {result.stdout}{result.stderr}")
        return result

    def holder(self, place: str) -> str | None:
        found = re.search(r"^  acquired: (.*)$", self.client("-p", place, "show").stdout, re.M)
        assert found
        return None if found.group(1) == "None" else found.group(1)

    def reservations(self) -> str:
        return self.client("reservations").stdout

    def wait_held_by_us(self, place: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            holder = self.holder(place)
            if holder and ".ondevice-" in holder:
                return holder
            time.sleep(0.3)
        raise AssertionError(f"{place} was never acquired by the run")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def binfmt():
    with BinfmtLease() as ok:
        yield ok


@pytest.fixture(scope="module")
def lab(labgrid_venv, binfmt):
    root = Path(tempfile.mkdtemp(prefix="ondevice-lab-"))
    root.chmod(0o755)  # sshd reads authorized_keys below it as the device's user
    user = new_account() if os.geteuid() == 0 else None
    sshd = Sshd.create(root / "sshd", alias="pi", user=user).start()
    lab = Lab(labgrid_venv, root, {"pi-a": sshd, "pi-b": sshd})
    lab.sshd = sshd
    yield lab
    lab.stop()
    sshd.kill()
    if user:
        remove_account(user)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def farm(project, lab, binfmt):
    board = "rpi" if binfmt else "rpi-wrapped"
    if not binfmt:
        project.write(f"boards/{board}.toml", 'extends = "rpi"\n[transport]\nexec_wrapper = "qemu-aarch64"\n')
    project.pytester.makeini(
        "[pytest]\n"
        f"ondevice_build_dir = {project.path / '_build'}\n"
        f"ondevice_cache_dir = {project.path / '_cache'}\n"
        f"ondevice_ssh_config = {lab.sshd.ssh_config}\n"
        "ondevice_boards = boards\n"
    )
    project.board = board
    project.lab = lab
    yield project
    for place in ("pi-a", "pi-b"):  # whatever a test left, the next starts from free places
        if lab.holder(place):
            lab.client("-p", place, "release", "--kick", check=False)


def fleet_file(farm, places: dict[str, str], quarantine_after: int = 2) -> None:
    lines = [
        f'[fleet]\nlease_dir = "leases"\nlabgrid_coordinator = "{farm.lab.address}"\n'
        f"quarantine_after = {quarantine_after}\n"
    ]
    for name, place in places.items():
        lines.append(f'[device.{name}]\nboard = "{farm.board}"\nlabgrid_place = "{place}"\n')
    farm.write("farm.toml", "\n".join(lines))


def pytest_argv(farm, *args: str) -> list[str]:
    return [str(LG_BIN / "python"), "-m", "pytest", "--fleet=farm.toml", "--junitxml=j.xml", *QUIET, *args]


def run(farm, *args: str, timeout: float = 300) -> pytest.RunResult:
    return farm.pytester.run(*pytest_argv(farm, "-p", "no:cacheprovider", *args), timeout=timeout)


def start(farm, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        pytest_argv(farm, "-p", "no:cacheprovider", *args),
        cwd=farm.path,
        env=private_tmpdir(farm.path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


slow = pytest.mark.slow  # the runs on the lab; the plugin probes below are quick


@slow
def test_a_place_is_acquired_for_each_binary_and_released_after(farm):
    fleet_file(farm, {"pi-a": "pi-a"})
    for name in "ab":
        farm.write(f"{name}_test.c", SLEEPER.format(ms=10))
    result = run(farm)
    result.assert_outcomes(passed=4)
    assert {p["device"] for p in junit_cases(farm.path / "j.xml").values()} == {"pi-a"}
    assert farm.lab.holder("pi-a") is None
    assert "Reservation" not in farm.lab.reservations()


@slow
def test_a_busy_place_is_waited_for_through_a_reservation_then_cancelled(farm):
    fleet_file(farm, {"pi-a": "pi-a"})
    farm.write("a_test.c", SLEEPER.format(ms=10))
    farm.lab.client("-p", "pi-a", "acquire", user="other")
    proc = start(farm, "--lease-timeout=120")
    deadline = time.monotonic() + 120
    while "state: waiting" not in farm.lab.reservations():  # the run waits in line at the coordinator
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.3)
    assert ".ondevice-" in farm.lab.reservations()
    time.sleep(lease.SAY_AFTER + 1.0)  # the run says who it waits for only after SAY_AFTER s of waiting
    farm.lab.client("-p", "pi-a", "release", user="other")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert re.search(r"waiting for a device of board \S+: pi-a is leased by \S+/other \(labgrid place pi-a\)", out), out
    assert "2 passed" in out
    assert farm.lab.holder("pi-a") is None
    assert "Reservation" not in farm.lab.reservations()  # cancelled: the place is not blocked for a minute


@slow
def test_a_place_that_stays_busy_is_an_error_naming_its_holder_not_a_failure(farm):
    fleet_file(farm, {"pi-a": "pi-a"})
    farm.write("a_test.c", SLEEPER.format(ms=10))
    farm.lab.client("-p", "pi-a", "acquire", user="other")
    result = run(farm, "--lease-timeout=2")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*came free within --lease-timeout=2 s; pi-a is leased by */other (labgrid place pi-a)*"]
    )
    assert farm.lab.holder("pi-a").endswith("/other")  # never taken from its holder
    assert "Reservation" not in farm.lab.reservations()


@slow
def test_a_place_left_acquired_by_a_killed_run_is_recovered_by_the_next(farm):
    fleet_file(farm, {"pi-a": "pi-a"})
    farm.write("slow_test.c", SLEEPER.format(ms=60000))
    proc = start(farm)
    held = farm.lab.wait_held_by_us("pi-a")
    os.killpg(proc.pid, signal.SIGKILL)  # no clean-up at all
    proc.communicate()
    assert farm.lab.holder("pi-a") == held  # labgrid keeps it acquired for ever
    farm.write("slow_test.c", SLEEPER.format(ms=10))
    started = time.monotonic()
    result = run(farm, "--lease-timeout=30")
    result.assert_outcomes(passed=2)
    assert time.monotonic() - started < 120
    assert farm.lab.holder("pi-a") is None


@slow
def test_an_interrupted_run_gives_its_place_back(farm):
    fleet_file(farm, {"pi-a": "pi-a"})
    farm.write("slow_test.c", SLEEPER.format(ms=60000))
    proc = start(farm)
    farm.lab.wait_held_by_us("pi-a")
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    out, _ = proc.communicate(timeout=60)
    assert "Interrupted" in out or "KeyboardInterrupt" in out, out
    assert farm.lab.holder("pi-a") is None
    assert "Reservation" not in farm.lab.reservations()
    assert not list((farm.path / ".tmp").iterdir())  # nor its run dir


@slow
def test_a_missing_place_is_set_aside_and_its_binaries_run_on_the_others(farm):
    # one strike: how often the ghost is tried while pi-a is busy depends on timing
    fleet_file(farm, {"pi-a": "pi-a", "ghost": "no-such-place"}, quarantine_after=1)
    for name in "abc":
        farm.write(f"{name}_test.c", SLEEPER.format(ms=10))
    result = run(farm)
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*ondevice quarantine*", "ghost: set aside after * infrastructure error*"])
    only = {"ghost": "no-such-place"}
    fleet_file(farm, only)
    result = run(farm)
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(["*there is no labgrid place no-such-place at *create it: labgrid-client*"])


@slow
def test_two_workers_lease_two_places_each_as_an_identity_of_its_own(farm):
    fleet_file(farm, {"pi-a": "pi-a", "pi-b": "pi-b"})
    for name in "abcd":
        farm.write(f"{name}_test.c", SLEEPER.format(ms=1500))
    result = run(farm, "-n", "2")
    result.assert_outcomes(passed=8)
    assert {p["device"] for p in junit_cases(farm.path / "j.xml").values()} == {"pi-a", "pi-b"}
    assert farm.lab.holder("pi-a") is None and farm.lab.holder("pi-b") is None
    assert "Reservation" not in farm.lab.reservations()


def test_without_labgrid_installed_a_place_is_a_usage_error_naming_the_extra(project):
    project.write("farm.toml", '[device.pi-a]\nboard = "rpi"\nlabgrid_place = "pi-a"\n')
    project.write("a_test.c", SLEEPER.format(ms=1))
    result = project.pytester.runpytest_subprocess("--fleet=farm.toml", "-p", "no:cacheprovider", *QUIET)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "labgrid place 'pi-a', and labgrid is not installed: pip install 'pytest-ondevice[labgrid]'" in str(
        result.stderr
    )


# -- labgrid's own pytest plugin stays out of runs that do not ask for it ----------

PROBE = """
import sys
def test_probe(pytestconfig):
    print("imported", "labgrid.pytestplugin" in sys.modules)
    print("registered", pytestconfig.pluginmanager.get_plugin("labgrid") is not None)
    print("log_format", pytestconfig.getini("log_format"))
def test_target(target):
    print("target fixture True")
"""
OURS_FIRST = """
import sys, sysconfig
site = sysconfig.get_paths()["purelib"]  # labgrid's; the main venv's (ours) follows it
sys.path.remove(site)
sys.path.append(site)
import pytest
raise SystemExit(pytest.console_main())
"""
PYTEST_LOG_FORMAT = "%(levelname)-8s %(name)s:%(filename)s:%(lineno)d %(message)s"


def probe(pytester, first: str, *args: str) -> dict[str, str]:
    pytester.makepyfile(test_probe=PROBE)
    if first == "labgrid":  # where the venv lists labgrid before us: its plugin is imported first
        argv = [str(LG_BIN / "python"), "-m", "pytest"]
    else:
        (pytester.path / "ours_first.py").write_text(OURS_FIRST)
        argv = [str(LG_BIN / "python"), str(pytester.path / "ours_first.py")]
    result = pytester.run(*argv, "-s", "-q", "-p", "no:cacheprovider", "test_probe.py", *args, timeout=120)
    out = result.stdout.str()
    seen = {key: m.group(1) for key in PROBED if (m := re.search(rf"{key} (.*)$", out, re.M))}
    assert {"imported", "registered", "log_format"} <= set(seen), out
    if "target fixture" not in seen:  # test_target did not run: no such fixture, or labgrid's failed
        seen["target fixture"] = "False" if "fixture 'target' not found" in out else "there, but failing"
    return seen


PROBED = ("imported", "registered", "log_format", "target fixture")


def test_labgrids_plugin_is_never_imported_when_our_plugin_loads_first(pytester, labgrid_venv):
    seen = probe(pytester, "ours")
    assert seen == {
        "imported": "False",
        "registered": "False",
        "log_format": PYTEST_LOG_FORMAT,
        "target fixture": "False",
    }


def test_labgrids_plugin_loaded_before_ours_is_unregistered_before_it_acts(pytester, labgrid_venv):
    seen = probe(pytester, "labgrid")
    assert seen["registered"] == "False"
    assert seen["log_format"] == PYTEST_LOG_FORMAT  # its own default undone
    assert seen["target fixture"] == "False"


def test_a_run_that_asks_for_labgrids_plugin_keeps_it(pytester, labgrid_venv):
    env_file = pytester.path / "env.yaml"
    env_file.write_text("targets:\n  main:\n    resources: []\n")
    seen = probe(pytester, "ours", f"--lg-env={env_file}")
    assert seen["registered"] == "True"
    assert seen["target fixture"] == "True"


RELEASE_THEN_LOOK = """
import sys, time
from pathlib import Path
from pytest_ondevice.farm.fleet import Device
from pytest_ondevice.farm.labgrid_places import Coordinator

ours, theirs = Coordinator(sys.argv[1]), Coordinator(sys.argv[1])
pi = Device("pi-b", "rpi", place="pi-b")
assert theirs.claim(pi, Path("their.0.lock"), True)
assert ours.claim(pi, Path("our.0.lock"), True) is None  # busy: we wait in line
theirs.release(pi, Path("their.0.lock"))
while (address := ours.claim(pi, Path("our.0.lock"), False)) is None:
    time.sleep(0.1)
print("address", address)
ours.release(pi, Path("our.0.lock"))
print("after release:", theirs.holder(pi))  # still running: nothing of ours may block the place
theirs.close()
ours.close()
"""


@slow
def test_a_reservation_is_cancelled_as_soon_as_its_place_is_released(lab, pytester):
    (pytester.path / "look.py").write_text(RELEASE_THEN_LOOK)
    result = pytester.run(str(LG_BIN / "python"), "look.py", lab.address, timeout=120)
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(
        [f"address {lab.sshd.user}@127.0.0.1:{lab.sshd.port}", "after release: nobody just now*"]
    )


@slow
def test_doctor_asks_the_coordinator_about_each_place_and_takes_none(farm):
    fleet_file(farm, {"pi-a": "pi-a", "ghost": "no-such-place"})
    farm.lab.client("-p", "pi-a", "acquire", user="other")
    result = farm.pytester.run(*pytest_argv(farm, "--ondevice-doctor"), timeout=120)
    assert result.ret == 10, result.stdout.str()  # the board can run, but a device cannot be used
    result.stdout.fnmatch_lines(
        [
            "pi-a * (labgrid place pi-a) * reachable * labgrid place pi-a acquired by */other; opened in *",
            "ghost * (labgrid place no-such-place) * unusable * there is no labgrid place no-such-place at *",
        ]
    )
    assert farm.lab.holder("pi-a").endswith("/other")
    fleet_file(farm, {"ghost": "no-such-place"})
    result = farm.pytester.run(*pytest_argv(farm, "--ondevice-doctor"), timeout=120)
    assert result.ret == 1
