"""Another revision of the plugin, laid out as pip installs it, to time side by side.

A git worktree on PYTHONPATH is not enough: the repository maps `transports/` to
`pytest_ondevice.transports` (pyproject's package-dir), so the old `pytest_ondevice`
would import this checkout's transports through the editable install."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def installed_layout(revision: str, dest: Path) -> Path:
    """A directory to put first on PYTHONPATH: the plugin as it was at `revision`."""
    src, site = dest / "src", dest / "site"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    config = tomllib.loads((src / "pyproject.toml").read_text())
    mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir") or {"pytest_ondevice": "pytest_ondevice"}
    for package, directory in sorted(mapping.items()):  # a package before its subpackages
        shutil.copytree(src / directory, site / package.replace(".", "/"), dirs_exist_ok=True)
    return site


def level_path(dest: Path) -> Path:
    """An empty directory for this checkout's runs to put first on PYTHONPATH when they are
    compared with a revision's: every import of a run searches each sys.path entry, and
    the revision's one extra entry alone made its 0.3 s runs 0.01 s slower (farm-bench, the
    same code both ways: 0.96 x)."""
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def first_on_path(env: Mapping[str, str], directory: str) -> dict[str, str]:
    """env with directory searched first for imports (a revision, a level path, or this
    directory's plugins)."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (directory, env.get("PYTHONPATH")) if p)}
