"""What an installed plugin brings of its repository: the manual and the nightly job.

A user who installed the wheel has no checkout, so a message that says "see docs/farm.md"
or "run examples/nightly/run.sh" points at nothing. The wheel ships both (setup.py's
roots `pytest_ondevice.docs` and `pytest_ondevice.nightly`), and the messages name the
command that shows them: `pytest-ondevice docs PAGE`, `pytest-ondevice nightly DIR`.
"""

from __future__ import annotations

import difflib
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # the package: the wheel installs docs/ and nightly/ in it
# installed: in the package; in a checkout: the repository's own directories
MANUAL = HERE / "docs" if (HERE / "docs").is_dir() else HERE.parent / "docs"
NIGHTLY = HERE / "nightly" if (HERE / "nightly").is_dir() else HERE.parent / "examples" / "nightly"


def see(page: str) -> str:
    """How a message refers to a page of the manual: a command that works where the wheel is."""
    return f"pytest-ondevice docs {page}"


def pages() -> list[str]:
    return sorted(p.relative_to(MANUAL).with_suffix("").as_posix() for p in MANUAL.rglob("*.md"))


def docs_command(page: str | None) -> int:
    """Without a page: the list, each with its title. With one: the page's Markdown."""
    if not MANUAL.is_dir():
        print(f"pytest-ondevice docs: the manual is not installed ({MANUAL})", file=sys.stderr)
        return 1
    if page is None:
        print(f"The manual ({MANUAL}); pytest-ondevice docs PAGE prints one:")
        for name in pages():
            print(f"  {name:24} {_title(MANUAL / f'{name}.md')}")
        return 0
    page = page.split("#", 1)[0]  # a link's anchor: the page is printed whole
    path = MANUAL / f"{page.removesuffix('.md').removeprefix('docs/')}.md"
    if not path.is_file():
        close = difflib.get_close_matches(page, pages(), n=3, cutoff=0.6) or [n for n in pages() if page in n]
        hint = f"; did you mean {', '.join(close)}?" if close else "; pytest-ondevice docs lists them"
        print(f"pytest-ondevice docs: no page {page!r}{hint}", file=sys.stderr)
        return 2
    sys.stdout.write(path.read_text(encoding="utf-8"))
    return 0


def nightly_command(dest: Path) -> int:
    """A copy of the farm's nightly job to edit: run.sh, the fleet file, systemd units, a CI
    schedule. Nothing existing is overwritten."""
    files = sorted(p for p in NIGHTLY.iterdir() if p.is_file() and p.suffix != ".py" and p.name != "__init__.py")
    clashes = [dest / p.name for p in files if (dest / p.name).exists()]
    if clashes:
        print(f"pytest-ondevice nightly: {', '.join(map(str, clashes))} exist; nothing was written", file=sys.stderr)
        return 1
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, dest / path.name)
        if path.suffix == ".sh":
            (dest / path.name).chmod(0o755)  # a wheel keeps no modes
    print(f"the nightly job is in {dest}: {', '.join(p.name for p in files)}")
    print(
        f"add your devices to {dest / 'farm.toml'}, then run TESTS=<your tests> {dest / 'run.sh'}; the systemd "
        f"units and the CI schedule name a checkout's paths: adjust them (see: {see('farm')})"
    )
    return 0


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""
