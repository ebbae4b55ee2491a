"""Which packages and data files the wheel holds, found from the tree, never listed by hand.

The source tree keeps the design's top-level layout (`pytest_ondevice/`, `transports/`,
`boards/`, `docs/`, `examples/`) while the wheel installs one package, `pytest_ondevice`,
with transports, boards, the manual and the nightly job inside it. A package or a data
file added under any of the roots is in the next wheel without an edit here
(tests/test_installed_wheel.py checks the built wheel against the tree).
Everything else about the distribution is in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent
# installed name -> source directory
ROOTS = {
    "pytest_ondevice": "pytest_ondevice",
    "pytest_ondevice.transports": "transports",
    "pytest_ondevice.boards": "boards",
    # what a user without a checkout is pointed at (pytest_ondevice/commands/manual.py)
    "pytest_ondevice.docs": "docs",
    "pytest_ondevice.nightly": "examples/nightly",
}
SKIPPED = ("__pycache__", "*.egg-info")


def _packages() -> dict[str, Path]:
    """Every directory under the roots (data-only ones too: setuptools ships data per package)."""
    found: dict[str, Path] = {}
    for name, where in ROOTS.items():
        found[name] = HERE / where
        for sub in find_namespace_packages(where, exclude=[*SKIPPED, *(f"*.{s}" for s in SKIPPED)]):
            found[f"{name}.{sub}"] = HERE / where / sub.replace(".", "/")
    return found


def _data(directory: Path) -> list[str]:
    """A package's files that are not Python modules: board files, runtime C, linker scripts, headers."""
    return sorted(p.name for p in directory.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc"))


PACKAGES = _packages()
setup(
    packages=sorted(PACKAGES),
    package_dir={name: str(path.relative_to(HERE)) for name, path in PACKAGES.items()},
    package_data={name: files for name, path in PACKAGES.items() if (files := _data(path))},
    include_package_data=False,
)
