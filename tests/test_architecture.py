"""The package tree keeps the pipeline's one-way flow (docs/architecture.md): each stage
imports only the stages it is allowed to, and no module imports itself back in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_ondevice.transports

import pytest_ondevice

CORE = Path(pytest_ondevice.__file__).resolve().parent
TRANSPORTS = Path(pytest_ondevice.transports.__file__).resolve().parent  # installed under the package
# The stages, in the order data flows (docs/architecture.md): each may import at run time
# only itself and the stages named here (type-only imports under TYPE_CHECKING aside). The
# top-level modules (plugin.py) may import any of them.
ALLOWED = {
    "config": {"transports"},  # a board names its transport, whose options it checks
    "compiling": {"config", "formats"},  # a harness format says what its binaries link
    "transports": {"config", "compiling"},  # option kinds; the store's ownership rules
    "farm": {"config", "transports"},
    "formats": {"transports"},  # how a run ended
    # one binary's life: built, placed on a device, run, parsed
    "run": {"config", "compiling", "farm", "formats", "transports"},
    "records": {"config", "compiling", "formats", "transports"},
    # Python tests that drive a device themselves
    "scripted": {"config", "compiling", "farm", "formats", "transports"},
    # the pytest side: collection, items, reports, summaries
    "session": {"config", "compiling", "farm", "formats", "records", "run", "scripted", "transports"},
    # the `pytest-ondevice` command's tools
    "commands": {"config", "compiling", "farm", "formats", "records", "session", "transports"},
}
STAGES = tuple(ALLOWED)
TOP_LEVEL_MAX = 12  # entries at the package's top: the stages and the entry point
# names a build tree or an installer uses for what it writes: a source directory named so is
# hidden by ignore files, by pytest's norecursedirs and by formatters, and misread by people
OUTPUT_NAMES = {"build", "_build", "dist", "out", "output", "target", "site", "bin", "obj", "htmlcov", "__pycache__"}


def _module(path: Path) -> str:
    if path.is_relative_to(TRANSPORTS):
        prefix, rel = ["pytest_ondevice", "transports"], path.relative_to(TRANSPORTS).with_suffix("")
    else:
        prefix, rel = ["pytest_ondevice"], path.relative_to(CORE).with_suffix("")
    return ".".join([*prefix, *(p for p in rel.parts if p != "__init__")])


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else "glue"


def _runtime_imports(path: Path) -> set[str]:
    """The modules a file imports when it is imported (not those inside functions, which
    run later, nor those under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in [node] if not isinstance(node, (ast.Try, ast.If)) else ast.walk(node):
            if isinstance(sub, ast.ImportFrom):
                if sub.level:
                    base = package.split(".")[: len(package.split(".")) - (sub.level - 1)]
                    target = ".".join([*base, *([sub.module] if sub.module else [])])
                else:
                    target = sub.module or ""
                if not target.startswith("pytest_ondevice"):
                    continue
                for alias in sub.names:
                    candidate = f"{target}.{alias.name}"
                    found.add(candidate if _is_module(candidate) else target)
            elif isinstance(sub, ast.Import):
                found.update(a.name for a in sub.names if a.name.startswith("pytest_ondevice"))
    return found


def _is_module(name: str) -> bool:
    parts = name.split(".")[1:]
    base, rel = (TRANSPORTS, Path(*parts[1:])) if parts[:1] == ["transports"] else (CORE, Path(*parts))
    if not rel.parts:
        return (base / "__init__.py").is_file()
    return (base / rel).with_suffix(".py").is_file() or (base / rel / "__init__.py").is_file()


def _sources() -> list[Path]:
    found = {*CORE.rglob("*.py"), *TRANSPORTS.rglob("*.py")}
    return sorted(p for p in found if "__pycache__" not in p.parts and not p.is_symlink())


def test_each_stage_imports_only_the_stages_before_it():
    wrong = []
    for path in _sources():
        stage = _stage(_module(path))
        if stage == "glue":
            continue
        for target in _runtime_imports(path):
            other = _stage(target)
            if other not in (stage, *ALLOWED[stage]):
                wrong.append(f"{_module(path)} imports {target} ({other})")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back_in_a_circle():
    graph = {_module(p): {t for t in _runtime_imports(p) if _is_module(t)} for p in _sources()}
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert not circles, "\n".join(circles)


def test_no_source_file_of_the_project_is_ignored_by_git():
    """A module a .gitignore pattern hides (build/ once hid pytest_ondevice/compiling/*) works
    here and is missing from every clone."""
    import shutil
    import subprocess

    import pytest

    repo = CORE.parent
    if not (repo / ".git").exists():
        pytest.skip(f"{repo} is not a git checkout (no .git: an unpacked sdist?): what git ignores cannot be told")
    if shutil.which("git") is None:
        pytest.fail("git is not installed (apt-get install git; scripts/setup.sh installs it)")
    found = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", "pytest_ondevice", "transports",
         "boards", "examples", "benchmarks", "scripts", "docs"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    sources = [f for f in found if f.endswith((".py", ".c", ".h", ".cc", ".cu", ".toml", ".md", ".sh", ".rs", ".ld"))]
    # what an example's own .gitignore keeps out is its generated output (prebuilt's vendor/):
    # the project-wide patterns of the root .gitignore are the ones that can hide a source
    why = subprocess.run(
        ["git", "check-ignore", "-v", "--stdin"], cwd=repo, input="\n".join(sources), capture_output=True, text=True
    ).stdout.splitlines()
    hidden = [line.split("\t", 1)[1] for line in why if line.startswith(".gitignore:")]
    assert hidden == [], f"ignored by git, so missing from a clone: {hidden}"


def test_the_package_top_holds_the_stages_and_the_entry_point_only():
    entries = sorted(p.name for p in CORE.iterdir() if p.name != "__pycache__" and not p.name.startswith("."))
    assert len(entries) <= TOP_LEVEL_MAX, entries
    modules = [e for e in entries if e.endswith(".py")]
    assert modules == ["__init__.py", "plugin.py"], modules
    packages = {e for e in entries if (CORE / e / "__init__.py").is_file()}
    assert packages == set(STAGES) - {"transports"}, packages


def test_each_stage_says_what_enters_and_what_leaves():
    """A stage's __init__ is where a reader starts: its docstring names what it takes in and
    what it hands on."""
    for stage in STAGES:
        init = (TRANSPORTS if stage == "transports" else CORE / stage) / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc.split()) >= 12, f"{init}: the docstring should say what enters and what leaves the stage"


def test_no_source_directory_is_named_like_build_output():
    """`build/` once hid two modules from every clone: a name a tool treats as output is
    never a source directory's."""
    roots = [CORE, TRANSPORTS, *(CORE.parent / d for d in ("boards", "examples", "benchmarks", "scripts", "docs"))]
    wrong = []
    for root in roots:
        for path in [root, *root.rglob("*")]:
            named_so = path.is_dir() and path.name in OUTPUT_NAMES and path.name != "__pycache__"
            if named_so and any(f.suffix in (".py", ".c", ".h", ".cc", ".rs", ".toml", ".md") for f in path.rglob("*")):
                wrong.append(str(path))
    assert not wrong, f"source directories named like build output: {wrong}"
