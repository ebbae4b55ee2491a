"""The plugin as users get it: the sdist and the wheel built from this checkout, the wheel
installed with `[all]` into a fresh venv outside it, and a project of the user's own
(tests/user_project: its own ini, board file, library, TFLM-style, GoogleTest and scripted
tests) copied to a temporary directory and run there, with nothing of this repository on
the path: no editable install, no `addopts = "-p pytester"`, no conftest, no examples/.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import REPO
from support.sshd import BinfmtLease, host_blocks, loopback_pis
from test_fleet import junit_cases

USER_PROJECT = Path(__file__).parent / "user_project"


def _setup_roots() -> dict[str, str]:
    """setup.py's ROOTS (installed name -> source directory), read without running setup()."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ROOTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no ROOTS")


# source directory -> where the wheel installs it
ROOTS = {source: installed.replace(".", "/") for installed, source in _setup_roots().items()}
# what a user's shell has, less what would lean on this checkout or on the suite's own run
LEANING = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_", "ONDEVICE_", "COV_CORE_")


def tree_files() -> dict[str, str]:
    """Every file of the three source roots (caches left out): its path in the tree, and
    where the wheel installs it."""
    found = {}
    for source, installed in ROOTS.items():
        for path in (REPO / source).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                inside = path.relative_to(REPO / source).as_posix()
                found[f"{source}/{inside}"] = f"{installed}/{inside}"
    return found


def _checkout_output(directory: str, names: list[str]) -> set[str]:
    """What a working checkout holds and a clean clone does not (at its top: only there is
    `build/` output; pytest_ondevice/compiling/ is a source package)."""
    dropped = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    if Path(directory) == REPO:
        dropped |= {n for n in names if n in {".git", "build", "dist", ".ondevice"} or n.startswith(".venv")}
    return dropped


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """`python -m build` as a release would run it: the sdist, then the wheel built from it."""
    out = tmp_path_factory.mktemp("dist")
    work = tmp_path_factory.mktemp("build-src")
    # a copy of the tree without the checkout's own build output, as a clean clone has it
    shutil.copytree(REPO, work, dirs_exist_ok=True, ignore=_checkout_output)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(work)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl"))}


def test_the_wheel_holds_every_module_and_data_file_of_the_tree(dists):
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = {n for n in wheel.namelist() if ".dist-info/" not in n}
        entry_points = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")))
    assert set(tree_files().values()) - names == set(), "in the source tree but not in the wheel"
    assert {n for n in names if not n.startswith("pytest_ondevice/")} == set(), "a top-level package besides ours"
    # every module an entry point names is in the wheel
    for module in re.findall(rb"= *([\w.]+)(?::\w+)?", entry_points):
        path = module.decode().replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, module


def test_the_sdist_rebuilds_the_same_tree(dists):
    with tarfile.open(dists["sdist"]) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        names = {n.removeprefix(top + "/") for n in sdist.getnames()}
    assert set(tree_files()) - names == set(), "in the source tree but not in the sdist"
    assert {"setup.py", "pyproject.toml", "README.md"} <= names


def test_twine_finds_the_distributions_fit_to_upload(dists):
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists["sdist"]), str(dists["wheel"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2


# -- the installed wheel in a user's venv and project ------------------------------------


@pytest.fixture(scope="module")
def venv(dists, tmp_path_factory) -> Path:
    """A fresh venv outside the checkout with the wheel and every extra of `[all]`."""
    where = tmp_path_factory.mktemp("user-venv") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(where)], check=True, timeout=120)
    installed = subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--no-input", f"{dists['wheel']}[all]"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return where


def user_env(venv: Path, **extra: str) -> dict[str, str]:
    """A user's shell with the venv activated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LEANING)}
    ours = str(REPO)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(ours)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    env.update(extra)
    return env


class UserProject:
    def __init__(self, venv: Path, root: Path) -> None:
        self.venv = venv
        self.path = root / "dotkernels"
        shutil.copytree(USER_PROJECT, self.path)
        self.env = user_env(venv, ONDEVICE_CACHE_DIR=str(root / "cache"))

    def run(self, tool: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(self.venv / "bin" / tool), *args],
            cwd=self.path,
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )
        done.output = done.stdout + done.stderr
        return done

    def pytest(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("pytest", "-p", "no:cacheprovider", "-rfEs", "--junitxml=junit.xml", *args)

    def cases(self) -> dict[str, dict[str, str]]:
        return junit_cases(self.path / "junit.xml")


@pytest.fixture
def project(venv, tmp_path) -> UserProject:
    return UserProject(venv, tmp_path)


def outcomes(done: subprocess.CompletedProcess) -> dict[str, int]:
    """pytest's closing line as {"passed": 9, ...}."""
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last)}


KERNELS = ("DotOfOnesIsLength", "DotOfExtremes", "SaturatesBothWays", "BenchDot256")
GTEST = ("Dot.Empty", "Dot.Mixed", "Sat.Clamps")
SCRIPTED = ("test_arguments", "test_interactive")


def test_plain_pytest_in_a_project_of_python_tests_is_as_without_the_plugin(venv, tmp_path):
    """No arguments, no ini: installed, the plugin adds nothing where it is not asked for."""
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1\n\n\ndef test_two():\n    assert 2\n")
    env = user_env(venv)

    def pytest(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "pytest"), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    with_plugin, without = pytest(), pytest("-p", "no:ondevice")
    assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr
    assert without.returncode == 0, without.stdout + without.stderr
    assert outcomes(with_plugin) == outcomes(without) == {"passed": 2}
    assert with_plugin.stderr == ""
    lines = [line for line in with_plugin.stdout.splitlines() if not line.startswith("plugins:")]
    assert not [line for line in lines if "ondevice" in line.lower()]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == [".pytest_cache", "test_plain.py"]


@pytest.mark.slow
def test_host_board_runs_every_format_and_the_device_fixture(project):
    done = project.pytest("--board=host", "-n", "2")
    assert done.returncode == 0, done.output
    assert outcomes(done) == {"passed": 9}
    names = {name.rsplit(".", 1)[-1].split("[")[0] for name in project.cases()}
    assert {*KERNELS, "Empty", "Mixed", "Clamps", *SCRIPTED} <= names
    assert "dot_s8_256" in done.stdout  # the bench table


@pytest.mark.slow
def test_bluepill_qemu_runs_the_c_cases_and_says_why_it_skips_the_rest(project):
    done = project.pytest("--board=bluepill-qemu", "-n", "2")
    assert done.returncode == 0, done.output
    assert outcomes(done) == {"passed": 4, "skipped": 5}
    assert "gtest tests need a host or linux board; bluepill-qemu is baremetal" in done.stdout
    assert "instructions" in done.stdout  # QEMU's exact count is the bench clock


@pytest.mark.slow
def test_the_projects_own_pi_board_under_qemu_user(project):
    done = project.pytest("--board=rpi-lab", "--device=qemu", "-n", "2")
    assert done.returncode == 0, done.output
    assert outcomes(done) == {"passed": 9}
    listed = project.run("pytest-ondevice", "boards")
    assert listed.returncode == 0, listed.output
    assert "rpi-lab" in listed.stdout  # the project's board, found through its ini


@pytest.fixture
def two_pis(project):
    """Two Pis on loopback sshds (the device runs aarch64 through binfmt_misc + qemu-user,
    or the exec wrapper where binfmt_misc cannot be used), in one ssh config."""
    with BinfmtLease() as binfmt, loopback_pis(2, prefix="ondevice-userpi-") as servers:
        board = "rpi-lab"
        if not binfmt:
            board = "rpi-lab-wrapped"
            (project.path / "boards" / f"{board}.toml").write_text(
                'extends = "rpi-lab"\n[transport]\nexec_wrapper = "qemu-aarch64"\n'
            )
        config = project.path / "ssh_config"
        config.write_text(host_blocks(servers))
        (project.path / "farm.toml").write_text(
            "[fleet]\nquarantine_after = 2\n"
            + "".join(f'[device.pi-{n}]\nboard = "{board}"\naddress = "pi-{n}"\n' for n in (1, 2))
        )
        yield config


@pytest.mark.slow
def test_a_two_pi_fleet_with_history_and_report(project, two_pis):
    args = ("--fleet=farm.toml", "-n", "2", "--history=history.db", "-o", f"ondevice_ssh_config={two_pis}")
    for night in (1, 2):
        done = project.pytest(*args)
        assert done.returncode == 0, f"night {night}: {done.output}"
        assert outcomes(done) == {"passed": 9}
    devices = {case["device"] for case in project.cases().values() if "device" in case}
    assert devices == {"pi-1", "pi-2"}, project.cases()  # two workers, two idle Pis: one each
    report = project.run("pytest-ondevice", "report", "history.db", "--html", "report.html")
    assert report.returncode == 0, report.output
    page = (project.path / "report.html").read_text()
    assert "pytest-ondevice nightly report" in page
    assert "dot_s8_256" in page


def test_the_manual_and_the_nightly_job_come_with_the_wheel(venv, tmp_path):
    """What the messages point a user at (pytest-ondevice docs PAGE, pytest-ondevice nightly
    DIR) is there without a checkout."""
    env = user_env(venv)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "pytest-ondevice"), *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    listed = cli("docs")
    assert listed.returncode == 0 and str(venv) in listed.stdout, listed.stdout + listed.stderr
    assert "transports/ssh" in listed.stdout and "farm" in listed.stdout
    page = cli("docs", "transports/renode")
    assert page.returncode == 0 and page.stdout == (REPO / "docs" / "transports" / "renode.md").read_text()
    job = cli("nightly", "farm-job")
    assert job.returncode == 0, job.stderr
    assert {p.name for p in (tmp_path / "farm-job").iterdir()} == {
        p.name for p in (REPO / "examples" / "nightly").iterdir()
    }
    assert os.access(tmp_path / "farm-job" / "run.sh", os.X_OK)
    assert "pytest-ondevice docs transports/renode" in cli("boards").stdout  # renode missing here: where to read
