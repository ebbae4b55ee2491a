"""Rust crates: their libtest binaries' cases from the sources, and `cargo test --no-run`.

Collection reads the crate's sources only (no cargo run: it must be fast, and cargo may
have to build build-scripts before it can say anything): the lib target with the module
tree it includes, each integration test and the bins' unit tests, each #[test] named as
libtest will print it. The build is cargo's own (its cache makes a warm run cheap); its JSON
messages say which test binary is which target's. A cross build links statically on Linux
gnu targets: qemu-user then runs the binary without the multiarch loader hang, and the
device needs no matching glibc.

Workspaces: point at a member crate (cargo finds its workspace by itself); a virtual
manifest (a Cargo.toml with [workspace] but no [package]) is refused with a clear error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..config.schema import ConfigError, not_utf8
from ..formats.rustsrc import scan

DEBIAN_CARGO = Path("/usr/bin/cargo")
SETUP_HINT = "run scripts/setup.sh --rust (or apt-get install rustc cargo)"
MAX_MODULE_FILES = 2000  # a module tree larger than this is not a test crate we can scan
MAX_DIAGNOSTICS = 20_000  # characters of cargo's diagnostics kept in a CargoError
_LIB_KINDS = {"lib", "rlib", "dylib", "cdylib", "staticlib", "proc-macro"}
# Debian's architecture for a Rust triple's CPU (Debian packages std for Linux gnu targets only)
_DEBIAN_ARCH = (
    (re.compile(r"^aarch64-"), "arm64"),
    (re.compile(r"^(?:armv7|thumbv7neon|arm)\w*-.*-gnueabihf$"), "armhf"),
    (re.compile(r"^arm\w*-.*-gnueabi$"), "armel"),
    (re.compile(r"^x86_64-"), "amd64"),
    (re.compile(r"^i[3-6]86-"), "i386"),
    (re.compile(r"^riscv64\w*-"), "riscv64"),
    (re.compile(r"^powerpc64le-"), "ppc64el"),
    (re.compile(r"^s390x-"), "s390x"),
    (re.compile(r"^mips64el-"), "mips64el"),
)


class CargoError(Exception):
    """The crate cannot be read, or the build failed (with cargo's words)."""


class CargoSetupError(CargoError, ConfigError):
    """cargo or the target's std is missing, or rustc knows no such target: not the crate's
    fault, so its tests are errors naming the fix, never failures (the runner reports a
    ConfigError as an error)."""


class RustCase(NamedTuple):
    name: str  # as libtest prints it: the module path from the target's root
    file: Path
    line: int
    ignored: bool


@dataclass(frozen=True)
class RustTarget:
    crate: Path  # the crate's directory
    kind: str  # "lib", "test" or "bin"
    name: str  # cargo's target name, as its JSON messages say it ("my-crate" for a lib stays so)
    root: Path  # the target's root .rs file
    cases: tuple[RustCase, ...]
    unnamed: int = 0  # #[test]s the scan cannot name (made by a macro_rules! macro)

    @property
    def all_unnamed(self) -> bool:
        """Every test is made by a macro: no case to make an item of, yet the binary runs
        tests. Its one item (as a C file's) runs it, and the device names its cases."""
        return not self.cases and self.unnamed > 0


# -- collection ----------------------------------------------------------------
def find_targets(crate_dir: Path) -> list[RustTarget]:
    """The crate's libtest targets and their cases, from Cargo.toml and the sources."""
    crate_dir = Path(crate_dir).resolve()
    manifest = _manifest(crate_dir)
    package = manifest.get("package")
    if not isinstance(package, dict) or not isinstance(package.get("name"), str):
        if "workspace" in manifest:
            raise CargoError(
                f"{crate_dir / 'Cargo.toml'} is a virtual workspace manifest: point at one of its member crates"
            )
        raise CargoError(f"{crate_dir / 'Cargo.toml'}: no [package] name")
    name = package["name"]
    found: list[tuple[str, str, Path]] = []
    lib = manifest.get("lib", {})
    lib_root = crate_dir / lib.get("path", "src/lib.rs")
    if lib_root.is_file() and _tested(lib):
        found.append(("lib", lib.get("name", name), lib_root))
    found += _declared(crate_dir, manifest, "bin", name, package.get("autobins", True))
    found += _declared(crate_dir, manifest, "test", name, package.get("autotests", True))
    return [RustTarget(crate_dir, kind, tname, root, *_cases(root)) for kind, tname, root in found]


def _manifest(crate_dir: Path) -> dict:
    path = crate_dir / "Cargo.toml"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CargoError(f"{path}: no such file (a Rust crate's directory holds its Cargo.toml)") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:  # cargo refuses it too: say where, not a traceback
        raise CargoError(not_utf8(path, raw, e)) from None
    except tomllib.TOMLDecodeError as e:
        raise CargoError(f"{path}: {e}") from None


def _tested(table: dict) -> bool:
    """Does `cargo test` build a libtest binary of this target? (harness = false is a main of its own)"""
    return table.get("test", True) is not False and table.get("harness", True) is not False


def _declared(crate_dir: Path, manifest: dict, kind: str, package: str, auto: bool) -> list[tuple[str, str, Path]]:
    """[[bin]] / [[test]] entries, plus cargo's automatic ones (src/main.rs, src/bin/*, tests/*)."""
    targets: dict[str, Path | None] = {}
    skipped: set[str] = set()
    if auto:
        for tname, root in _automatic(crate_dir, kind, package):
            targets[tname] = root
    for entry in manifest.get(kind, []):
        tname = entry.get("name")
        if not isinstance(tname, str):
            continue
        if not _tested(entry):
            skipped.add(tname)
            continue
        path = entry.get("path")
        given = crate_dir / path if path else targets.get(tname)
        targets[tname] = given or _default_root(crate_dir, kind, tname, package)
    return [(kind, n, r) for n, r in targets.items() if r is not None and r.is_file() and n not in skipped]


def _automatic(crate_dir: Path, kind: str, package: str) -> list[tuple[str, Path]]:
    base = crate_dir / ("tests" if kind == "test" else "src/bin")
    found = [(package, crate_dir / "src/main.rs")] if kind == "bin" and (crate_dir / "src/main.rs").is_file() else []
    if base.is_dir():
        for p in sorted(base.iterdir()):
            if p.suffix == ".rs" and p.is_file():
                found.append((p.stem, p))
            elif p.is_dir() and (p / "main.rs").is_file():
                found.append((p.name, p / "main.rs"))
    return found


def _default_root(crate_dir: Path, kind: str, name: str, package: str) -> Path | None:
    base = crate_dir / ("tests" if kind == "test" else "src/bin")
    candidates = [base / f"{name}.rs", base / name / "main.rs"]
    if kind == "bin" and name == package:
        candidates.insert(0, crate_dir / "src/main.rs")
    return next((c for c in candidates if c.is_file()), None)


def _cases(root: Path) -> tuple[tuple[RustCase, ...], int]:
    """Every #[test] in the module tree under root, named from root, and how many #[test]s
    there the scan could not name."""
    cases: list[RustCase] = []
    unnamed = 0
    seen: set[Path] = set()
    todo: list[tuple[Path, tuple[str, ...], Path]] = [(root, (), root.parent)]  # file, module path, its dir
    while todo and len(seen) < MAX_MODULE_FILES:
        path, module, children_dir = todo.pop(0)
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        found = scan(text)
        unnamed += found.unnamed
        for t in found.tests:
            cases.append(RustCase("::".join([*module, t.name]), path, t.line, t.ignored))
        for m in found.modules:
            child = _module_file(path, children_dir, m.parents, m.name, m.path)
            if child is not None:
                todo.append((child, (*module, *m.parents, m.name), _children_dir(child, bool(m.path))))
    return tuple(cases), unnamed


def _module_file(path: Path, children_dir: Path, parents: tuple[str, ...], name: str, attr: str | None) -> Path | None:
    """The file of `mod name;` declared in path inside the inline modules parents."""
    if attr is not None:  # #[path]: from the file's own directory, unless inside an inline module
        base = path.parent if not parents else children_dir.joinpath(*parents)
        target = base / attr
        return target if target.is_file() else None
    base = children_dir.joinpath(*parents)
    return next((c for c in (base / f"{name}.rs", base / name / "mod.rs") if c.is_file()), None)


def _children_dir(file: Path, by_path_attr: bool) -> Path:
    """Where a module file's own `mod x;` live: beside a mod.rs (or a #[path] file), else in
    a directory named after the file."""
    if by_path_attr or file.name == "mod.rs":
        return file.parent
    return file.parent / file.stem


# -- building ------------------------------------------------------------------
def toolchain(env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """The cargo to run and the rustc that goes with it: $ONDEVICE_CARGO, else Debian's
    (rustup's proxies often come first on PATH, with only the host's std), else PATH's."""
    env = os.environ if env is None else env
    cargo = env.get("ONDEVICE_CARGO") or (str(DEBIAN_CARGO) if DEBIAN_CARGO.exists() else shutil.which("cargo"))
    if not cargo:
        raise CargoSetupError(f"cargo not found: {SETUP_HINT}, or set ONDEVICE_CARGO")
    found = shutil.which(cargo) if os.sep not in cargo else cargo
    if not found or not Path(found).exists():
        raise CargoSetupError(f"cargo not found at {cargo}: {SETUP_HINT}, or set ONDEVICE_CARGO to one that exists")
    # beside it, or beside what a symlink to it points at
    rustc = next(
        (r for r in (Path(found).with_name("rustc"), Path(found).resolve().with_name("rustc")) if r.exists()), None
    )
    return found, str(rustc) if rustc else None


def _env_name(triple: str) -> str:
    return triple.upper().replace("-", "_").replace(".", "_")


def static_linking(rust_target: str | None) -> bool:
    """Linux gnu targets are linked statically (glibc's crt-static); the host build is not."""
    return bool(rust_target) and re.search(r"-linux-gnu\w*$", rust_target or "") is not None


def build_env(
    rust_target: str | None, linker: str | None, env: dict[str, str] | None = None, rustc: str | None = None
) -> dict[str, str]:
    """The environment cargo runs in: the rustc that goes with it (unless env names one),
    the target's linker and static linking."""
    out = {**os.environ, **(env or {})}
    out.setdefault("CARGO_TERM_COLOR", "never")
    if rustc and "RUSTC" not in (env or {}):
        out["RUSTC"] = rustc
    if rust_target:
        var = f"CARGO_TARGET_{_env_name(rust_target)}"
        if linker:
            out[f"{var}_LINKER"] = linker
        if static_linking(rust_target):
            flag = "-C target-feature=+crt-static"
            # RUSTFLAGS, when set, wins over the per-target flags: add ours where cargo looks
            key = "RUSTFLAGS" if out.get("RUSTFLAGS") else f"{var}_RUSTFLAGS"
            if flag not in out.get(key, ""):
                out[key] = f"{out.get(key, '')} {flag}".strip()
    return out


def build(
    crate_dir: Path,
    rust_target: str | None,
    linker: str | None,
    target_dir: Path,
    env: dict[str, str] | None = None,
    jobs: int | None = None,
) -> dict[tuple[str, str], Path]:
    """`cargo test --no-run` for the board's target: (kind, target name) -> test binary."""
    crate_dir = Path(crate_dir).resolve()
    cargo, rustc = toolchain({**os.environ, **(env or {})})
    argv = [cargo, "test", "--no-run", "--message-format=json", "--target-dir", str(target_dir)]
    argv += ["--manifest-path", str(crate_dir / "Cargo.toml")]
    if rust_target:
        argv += ["--target", rust_target]
    if jobs:
        argv += ["-j", str(jobs)]
    # cwd: cargo reads .cargo/config.toml (e.g. Debian's offline registry) from where it runs
    try:
        proc = subprocess.run(
            argv,
            cwd=crate_dir,
            env=build_env(rust_target, linker, env, rustc),
            capture_output=True,
            text=True,
            errors="replace",
        )
    except OSError as e:
        raise CargoSetupError(f"could not run {cargo}: {e}; {SETUP_HINT}") from None
    binaries: dict[tuple[str, str], Path] = {}
    diagnostics: list[str] = []
    for line in proc.stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if message.get("reason") == "compiler-message":
            rendered = (message.get("message") or {}).get("rendered")
            if rendered and rendered not in diagnostics and (message["message"].get("level") != "warning"):
                diagnostics.append(rendered)
        elif message.get("reason") == "compiler-artifact" and message.get("executable"):
            if not (message.get("profile") or {}).get("test"):
                continue  # a bin or an example built as itself, not its test binary
            target = message.get("target") or {}
            kinds = set(target.get("kind") or [])
            kind = "lib" if kinds & _LIB_KINDS else next(iter(sorted(kinds)), "")
            binaries[(kind, target.get("name", ""))] = Path(message["executable"])
    if proc.returncode != 0:
        words = "".join(diagnostics).rstrip() + ("\n" if diagnostics else "") + proc.stderr.strip()
        head = f"cargo test --no-run failed for {crate_dir}" + (f" (--target {rust_target})" if rust_target else "")
        setup = _setup_problem(cargo, rust_target, words)
        if setup:
            raise CargoSetupError(f"{setup}\n({head}: {_first_error(words)})")
        if len(words) > MAX_DIAGNOSTICS:
            words = words[:MAX_DIAGNOSTICS] + "\n... (cut)"
        raise CargoError(f"{head}\n{words}")
    return binaries


def _setup_problem(cargo: str, rust_target: str | None, words: str) -> str | None:
    """The fix, when the build failed for want of the target's std or of the target itself
    (rustc's own advice, `rustup target add`, is wrong for Debian's cargo: not repeated)."""
    if not rust_target:
        return None
    if re.search(r"can't find crate for `(?:std|core)`", words):
        return missing_std_hint(rust_target, cargo)
    if "Could not find specification for target" in words:
        return f"rustc knows no target {rust_target!r} (the board's rust_target): see `rustc --print target-list`"
    return None


def _first_error(words: str) -> str:
    return next((line.strip() for line in words.splitlines() if line.startswith("error")), "no error line")


def debian_arch(rust_target: str) -> str | None:
    """Debian's architecture name for a Linux gnu Rust triple (aarch64 -> arm64), if it has one."""
    if not static_linking(rust_target):
        return None
    return next((arch for pattern, arch in _DEBIAN_ARCH if pattern.search(rust_target)), None)


def rustups(cargo: str) -> bool:
    """Is this cargo rustup's (a proxy in ~/.cargo/bin, or a toolchain under ~/.rustup)?"""
    path = Path(cargo)
    return any(p == ".cargo" or "rustup" in p for p in path.parts) or path.resolve().name.startswith("rustup")


def missing_std_hint(rust_target: str, cargo: str = str(DEBIAN_CARGO)) -> str:
    """How to install the target's std for this cargo: rustup's way only for rustup's cargo."""
    arch = debian_arch(rust_target)
    missing = f"Rust's standard library for {rust_target} is not installed for {cargo}"
    if rustups(cargo):
        return f"{missing}: rustup target add {rust_target}"
    if arch:
        setup = "run scripts/setup.sh --rust, or " if arch == "arm64" else ""  # what setup.sh installs
        return (
            f"{missing} (Debian's libstd-rust-dev:{arch}): {setup}"
            f"dpkg --add-architecture {arch} && apt-get update && apt-get install libstd-rust-dev:{arch}"
        )
    return (
        f"Debian ships no Rust standard library for {rust_target}: use rustup (rustup target add {rust_target}) "
        "and point ONDEVICE_CARGO at its cargo"
    )
