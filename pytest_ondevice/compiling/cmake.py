"""A CMake project as it is: configured for a board through a toolchain file made from the
board file, built with CMake's own generator (Ninja when present), its tests listed by CTest
itself (`ctest --show-only=json-v1`) and its targets by CMake's file API.

Each board has a build directory of its own. The project is configured again only when one
of CMake's inputs (its own list of them: every CMakeLists.txt and included file), the
toolchain file or the cache variables changed; building is CMake's, incremental as always.
A configure error, a board without the project's compilers, a target that did not build:
each is a CMakeError naming the file and line CMake gave, never a test's failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..config.board import Board
from ..formats import HARNESS_DIR
from .errors import BuildError
from .linking import filled_linker_script
from .toolchain import ResolvedToolchain

HOOKS_SCRIPT = Path(__file__).resolve().parent / "cmake_hooks.cmake"
# format -> (a regex of the LINK_LIBRARIES that use its framework, a regex of the headers its
# sources include, its hook in formats/harness/): linked into each such executable
FRAMEWORK_HOOKS = {
    "gtest": ("gtest|GTest", r"gtest/gtest\.h", "gtest_listener.cpp"),
    "catch2": ("Catch2", r"catch2?/catch|catch\.hpp", "catch2_listener.cpp"),
    "doctest": ("doctest", r"doctest", "doctest_listener.cpp"),
    "boosttest": ("unit_test_framework|boost_unit_test", r"boost/test/", "boosttest_observer.cpp"),
    "cpputest": ("CppUTest", r"CppUTest/", "cpputest_plugin.cpp"),
}
# formats whose verdicts a CMake build's are believed: those with a hook, and Unity, whose
# hook is the board's runtime (linked into every executable: it names Unity's running case)
RECOGNISED = (*FRAMEWORK_HOOKS, "unity")
QUERY = Path(".cmake/api/v1/query")
REPLY = Path(".cmake/api/v1/reply")
STAMP = ".ondevice-configured"  # the digest of what the last configure was given
SYSTEM = {"linux": "Linux", "baremetal": "Generic"}
# flags of a board that say what the code runs on; the rest (-O2, -Wall, -fno-rtti) is the project's to choose
TARGET_FLAG = re.compile(r"^(-m|--target=|-march=|-mcpu=|-mfpu=|-mfloat-abi=|--sysroot=|-specs=)")


class CMakeError(BuildError):
    """The project could not be configured or built for the board: an error, not a failure."""


@dataclass(frozen=True)
class CMakeProject:
    """What ondevice_cmake (the ini) or [cmake] (ondevice.toml) asks for: the source dir,
    how to configure it, which tests to run."""

    source: Path
    cache: tuple[tuple[str, str], ...] = ()  # -D NAME=VALUE
    targets: tuple[str, ...] = ()  # built (default: all)
    labels: tuple[str, ...] = ()  # only the tests with one of these CTest labels (ctest -L)
    exclude_labels: tuple[str, ...] = ()  # none with one of these (ctest -LE)
    data: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (test name glob, paths it reads from its directory)

    def selects(self, labels: tuple[str, ...]) -> bool:
        """Whether a test with these labels is run."""
        if self.labels and not set(labels) & set(self.labels):
            return False
        return not set(labels) & set(self.exclude_labels)


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # EXECUTABLE, SHARED_LIBRARY, STATIC_LIBRARY, ...
    artifacts: tuple[Path, ...]
    sources: tuple[Path, ...]


@dataclass(frozen=True)
class CTestTest:
    """One test as CTest lists it."""

    name: str
    command: tuple[str, ...]
    cwd: Path | None = None
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[str, ...] = ()
    timeout: float | None = None
    will_fail: bool = False
    disabled: bool = False
    required_files: tuple[Path, ...] = ()
    fixtures: tuple[str, ...] = ()  # FIXTURES_REQUIRED
    sets_up: tuple[str, ...] = ()  # FIXTURES_SETUP
    cleans_up: tuple[str, ...] = ()  # FIXTURES_CLEANUP
    line: int | None = None  # of its add_test in `file`
    file: Path | None = None


@dataclass
class Configured:
    """A board's configured build tree: its targets and its tests."""

    build_dir: Path
    targets: dict[str, Target] = field(default_factory=dict)
    tests: list[CTestTest] = field(default_factory=list)
    unused: tuple[str, ...] = ()  # cache variables given that the project never read
    includes: tuple[str, ...] = ()  # the CTestTestfile.cmake files' include() lines (discover steps')

    def discovered(self, target: str) -> bool:
        """Whether a discover step (gtest's, Catch2's, doctest's) lists the target's tests:
        a CTestTestfile.cmake includes a file named after it."""
        marks = (f"/{target}[", f"/{target}_include")
        return any(m in line for line in self.includes for m in marks)

    def target_of(self, executable: Path) -> Target | None:
        """The target that makes an executable CTest names (by path, or its name alone)."""
        for target in self.targets.values():
            if executable in target.artifacts or any(a.name == executable.name for a in target.artifacts):
                return target
        return None

    def shared_libraries(self) -> list[Path]:
        return [a for t in self.targets.values() if t.kind == "SHARED_LIBRARY" for a in t.artifacts if a.suffix]


def toolchain_file(board: Board, tc: ResolvedToolchain, linker_script: Path | None = None) -> str:
    """The board as CMake reads it: its compilers, the flags that name the target, the
    system, the emulator CTest runs a cross test under; on bare metal the board's link
    (its specs, no start files, its linker script: the runtime comes with every executable)."""
    lines = [f"# made by pytest-ondevice from {board.path}: do not edit"]
    if board.kind in SYSTEM:
        lines += [f"set(CMAKE_SYSTEM_NAME {SYSTEM[board.kind]})", f"set(CMAKE_SYSTEM_PROCESSOR {board.arch})"]
    for lang, words, own in (("C", tc.cc, board.toolchain.cflags), ("CXX", tc.cxx, board.toolchain.cxxflags)):
        lines.append(f"set(CMAKE_{lang}_COMPILER {_cmake_quote(words[0])})")
        flags = [*words[1:], *(f for f in own if TARGET_FLAG.match(f))]
        if flags:
            lines.append(f"set(CMAKE_{lang}_FLAGS_INIT {_cmake_quote(shlex.join(flags))})")
    if board.toolchain.sysroot:
        lines.append(f"set(CMAKE_SYSROOT {_cmake_quote(board.toolchain.sysroot)})")
    emulator = board.emulator or {}
    if board.kind == "linux" and emulator.get("name") == "qemu-user":
        sysroot = ["-L", emulator["sysroot"]] if emulator.get("sysroot") else []
        argv = [emulator.get("binary", "qemu-aarch64"), *sysroot]
        lines.append(f"set(CMAKE_CROSSCOMPILING_EMULATOR {' '.join(_cmake_quote(a) for a in argv)})")
    static = static_only(board, tc)
    # a Linux board's -static is for our one-file binaries; a project's shared libraries go with its tests
    link = [f for f in tc.ldflags if f != "-static" or static or board.kind == "baremetal"]
    if linker_script is not None:
        link.append(f"-T{linker_script}")
    if link:
        lines.append(f"set(CMAKE_EXE_LINKER_FLAGS_INIT {_cmake_quote(shlex.join(link))})")
    if static:
        lines.append('set(BUILD_SHARED_LIBS OFF CACHE BOOL "the device loads no shared library of this toolchain")')
    if board.kind == "baremetal":  # no link tests; no package of the host's is the board's
        lines.append("set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)")
        root = board.toolchain.sysroot or f"/usr/lib/{board.toolchain.gnu or 'none'}"
        lines.append(f"set(CMAKE_FIND_ROOT_PATH {_cmake_quote(root)})")
        lines += [f"set(CMAKE_FIND_ROOT_PATH_MODE_{kind} ONLY)" for kind in ("INCLUDE", "PACKAGE")]
        if not board.toolchain.sysroot:
            lines.append("set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)")
    if board.kind != "host":
        lines += [
            "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
            "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)" if board.toolchain.sysroot else "",
        ]
    return "\n".join(line for line in lines if line) + "\n"


def static_only(board: Board, tc: ResolvedToolchain) -> bool:
    """Whether the board's executables are static (no loader for the project's libraries)."""
    return board.kind == "baremetal" or (board.toolchain.static_only and tc.kind != "ndk")


def hook_definitions(board: Board, linker_script: Path | None = None) -> list[str]:
    """What the hooks script (cmake_hooks.cmake) is told: each framework's hook, and the
    board's runtime with the board's own defines (an UART's address), for every executable."""
    hooks = ";".join(f"{libs}={headers}={HARNESS_DIR / source}" for libs, headers, source in FRAMEWORK_HOOKS.values())
    defines = [f for f in board.toolchain.cflags if f.startswith("-D")]
    return [
        f"-DCMAKE_PROJECT_INCLUDE={HOOKS_SCRIPT}",
        f"-DONDEVICE_HOOKS={hooks}",
        f"-DONDEVICE_RUNTIME={';'.join(str(p) for p in board.toolchain.runtime)}",
        f"-DONDEVICE_RUNTIME_OPTIONS={';'.join(defines)}",
        f"-DONDEVICE_LINK_DEPENDS={linker_script or ''}",
    ]


def _write_if_changed(path: Path, text: str) -> None:
    """Written only when it differs: CMake rebuilds what depends on a file that is newer."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _cmake_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def configured_and_built(
    project: CMakeProject, board: Board, tc: ResolvedToolchain, build_dir: Path, jobs: int
) -> tuple[Configured, dict[str, str]]:
    """The board's tree configured and built (CTest lists a test's command, and
    gtest_discover_tests its cases, only once the executables exist), with the targets
    that did not build. One process at a time per tree (xdist workers collect alike)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".ondevice-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        configured = configure(project, board, tc, build_dir)
        failed = build(configured, project.targets, jobs)
        lines = _testfile_lines(build_dir)
        configured.tests = list_tests(build_dir, lines)
        configured.includes = tuple(line for _, line in lines if line.startswith("include("))
    return configured, failed


def configure(project: CMakeProject, board: Board, tc: ResolvedToolchain, build_dir: Path) -> Configured:
    """The board's build tree, configured (again only when CMake's inputs changed), with
    its targets."""
    build_dir.mkdir(parents=True, exist_ok=True)
    script = filled_linker_script(board)
    linker_script = build_dir / "ondevice-link.ld" if script is not None else None
    if linker_script is not None and script is not None:
        _write_if_changed(linker_script, script)
    toolchain = build_dir / "ondevice-toolchain.cmake"
    text = toolchain_file(board, tc, linker_script)
    if toolchain.exists() and toolchain.read_text() != text:  # CMake keeps what it found with the old one
        (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
        shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)
    _write_if_changed(toolchain, text)
    for kind in ("codemodel-v2", "cmakeFiles-v1"):
        (build_dir / QUERY).mkdir(parents=True, exist_ok=True)
        (build_dir / QUERY / kind).touch()
    args = [
        _tool("cmake"),
        "-S",
        str(project.source),
        "-B",
        str(build_dir),
        f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
        *hook_definitions(board, linker_script),
        *(f"-D{name}={value}" for name, value in project.cache),
    ]
    digest = hashlib.sha256(json.dumps([args[2:], text, script]).encode()).hexdigest()
    if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):  # a tree keeps its generator
        args += ["-G", "Ninja"]
    stamp = build_dir / STAMP
    if not stamp.exists() or stamp.read_text() != digest or _inputs_changed(build_dir, stamp):
        done = subprocess.run(args, capture_output=True, text=True)
        output = done.stdout + done.stderr
        (build_dir / CONFIGURE_LOG).write_text(output)
        if done.returncode != 0:
            raise CMakeError(_configure_error(project, board, output))
        (build_dir / UNUSED).write_text("\n".join(_unused_variables(output)))
        stamp.write_text(digest)
    unused = (build_dir / UNUSED).read_text().split() if (build_dir / UNUSED).exists() else []
    return Configured(build_dir, _targets(build_dir), unused=tuple(unused))  # its tests are listed once built


CONFIGURE_LOG = "ondevice-configure.log"  # what CMake said when it last configured the tree
BUILD_LOG = "ondevice-build.log"
UNUSED = ".ondevice-unused"  # the cache variables the project did not read (a misspelt name?)


def _unused_variables(output: str) -> list[str]:
    """CMake's "Manually-specified variables were not used by the project" list."""
    _, found, rest = output.partition("Manually-specified variables were not used by the project:")
    if not found:
        return []
    names: list[str] = []
    for line in rest.splitlines()[1:]:
        if not line.strip():
            if names:
                break
            continue
        if not line.startswith("    "):
            break
        names.append(line.strip())
    return [n for n in names if not n.startswith(("CMAKE_", "ONDEVICE_"))]


def build(configured: Configured, targets: tuple[str, ...], jobs: int) -> dict[str, str]:
    """Build what the tests need (every target unless some are named), keeping going past a
    target that fails; the error text of each target that did not build."""
    args = [_tool("cmake"), "--build", str(configured.build_dir), "-j", str(jobs)]
    for target in targets:
        args += ["--target", target]
    generator = _generator(configured.build_dir)
    args += ["--", "-k", "0"] if generator == "Ninja" else ["--", "-k"] if "Makefiles" in generator else []
    done = subprocess.run(args, capture_output=True, text=True)
    output = done.stdout + done.stderr
    (configured.build_dir / BUILD_LOG).write_text(output)
    if done.returncode == 0:
        return {}
    failed: dict[str, str] = {}
    blocks = _failed_blocks(output)
    named = {Path(edge).name for edge in blocks}  # ninja's and make's own word
    for name, made in configured.targets.items():
        if made.kind not in ("EXECUTABLE", "SHARED_LIBRARY", "STATIC_LIBRARY") or (targets and name not in targets):
            continue
        if not all(a.exists() for a in made.artifacts) or any(a.name in named for a in made.artifacts):
            failed[name] = _why(name, made, blocks) or _tail(output)
    return failed or {"": _tail(output)}


def _failed_blocks(output: str) -> dict[str, str]:
    """Ninja's FAILED steps: what each one made, and the lines it printed (its command, the
    compiler's or linker's messages), up to the next step."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("FAILED: "):
            lines = blocks.setdefault([*line.split(), ""][1], [])
        elif line.startswith(("[", "ninja: ")):
            lines = None
            continue
        if lines is not None:
            lines.append(line)
    return {edge: "\n".join(text[:40]) for edge, text in blocks.items()}


def _why(name: str, made: Target, blocks: dict[str, str]) -> str:
    """The failed steps that are the target's own (its objects, its link), or those of what
    it depends on, said so."""
    artifacts = {a.name for a in made.artifacts}
    own = [text for edge, text in blocks.items() if f"CMakeFiles/{name}.dir/" in edge or Path(edge).name in artifacts]
    if own:
        return "\n".join(own)
    if blocks:
        return "what it depends on did not build:\n" + "\n".join(list(blocks.values())[:3])
    return ""


def list_tests(build_dir: Path, lines: list[tuple[Path, str]]) -> list[CTestTest]:
    """The tests as CTest itself lists them, with their properties."""
    done = subprocess.run([_tool("ctest"), "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True)
    if done.returncode != 0:
        raise CMakeError(f"ctest --show-only=json-v1 in {build_dir} failed: {_tail(done.stdout + done.stderr)}")
    info = json.loads(done.stdout)
    graph = info.get("backtraceGraph", {})
    tests = []
    declared = _declared(lines)
    for entry in info.get("tests", []):
        directory, command = declared.get(entry["name"], (None, ()))
        if not entry.get("command"):  # CTest drops the command of an executable not built
            entry = {**entry, "command": command}
        props = {p["name"]: p["value"] for p in entry.get("properties", [])}
        where = _where(graph, entry.get("backtrace"))
        tests.append(
            CTestTest(
                name=entry["name"],
                command=tuple(entry.get("command") or ()),
                # CTest's own default: the build directory of the CMakeLists.txt that added it
                cwd=Path(props["WORKING_DIRECTORY"]) if "WORKING_DIRECTORY" in props else directory,
                env=tuple((e.split("=", 1)[0], e.split("=", 1)[1]) for e in props.get("ENVIRONMENT", []) if "=" in e),
                labels=tuple(props.get("LABELS", [])),
                timeout=float(props["TIMEOUT"]) if "TIMEOUT" in props else None,
                will_fail=bool(props.get("WILL_FAIL", False)),
                disabled=bool(props.get("DISABLED", False)),
                required_files=tuple(Path(f) for f in props.get("REQUIRED_FILES", [])),
                fixtures=tuple(props.get("FIXTURES_REQUIRED", [])),
                sets_up=tuple(props.get("FIXTURES_SETUP", [])),
                cleans_up=tuple(props.get("FIXTURES_CLEANUP", [])),
                file=where[0],
                line=where[1],
            )
        )
    return tests


_ARGUMENT = re.compile(r'\[(=*)\[(.*?)\]\1\]|"((?:[^"\\]|\\.)*)"|([^\s()"]+)')


def _testfile_lines(build_dir: Path) -> list[tuple[Path, str]]:
    """Every line of the CTestTestfile.cmake files CMake wrote, with the directory of each:
    read once, for the tests' commands and directories and the discover steps' includes."""
    return [
        (testfile.parent, line)
        for testfile in build_dir.rglob("CTestTestfile.cmake")
        for line in testfile.read_text(errors="replace").splitlines()
    ]


def _declared(lines: list[tuple[Path, str]]) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Each test's directory and command as CMake wrote them in the CTestTestfile.cmake
    files: the directory is where CTest runs a test without a WORKING_DIRECTORY, and the
    command says whose a test is when CTest lists none (its executable is not there), so
    that its items are errors saying why."""
    found: dict[str, tuple[Path, tuple[str, ...]]] = {}
    for directory, line in lines:
        if line.startswith("add_test("):
            words = [_word(m) for m in _ARGUMENT.finditer(line[len("add_test(") :])]
            if len(words) >= 2:
                found.setdefault(words[0], (directory, tuple(words[1:])))
    return found


def _word(m: re.Match) -> str:
    """One argument of CMake's: [=[bracketed]=], "quoted" (with escapes) or bare."""
    if m.group(2) is not None:
        return m.group(2)
    if m.group(3) is not None:
        return re.sub(r"\\(.)", r"\1", m.group(3))
    return m.group(4)


def _where(graph: dict, index: int | None) -> tuple[Path | None, int | None]:
    if index is None:
        return None, None
    node = graph["nodes"][index]
    return Path(graph["files"][node["file"]]), node.get("line")


def _targets(build_dir: Path) -> dict[str, Target]:
    """Every target of the project (CMake's file API): its kind, what it makes, its sources."""
    reply = build_dir / REPLY
    index = max(reply.glob("index-*.json"), default=None)
    if index is None:
        return {}
    objects = json.loads(index.read_text())["objects"]
    codemodel = next((o for o in objects if o["kind"] == "codemodel"), None)
    if codemodel is None:
        return {}
    model = json.loads((reply / codemodel["jsonFile"]).read_text())
    source_root = Path(model["paths"]["source"])
    configuration = model["configurations"][0]
    found = {}
    for ref in configuration["targets"]:
        target = json.loads((reply / ref["jsonFile"]).read_text())
        artifacts = tuple(build_dir / a["path"] for a in target.get("artifacts", []))
        sources = tuple(
            (source_root / s["path"]).resolve() for s in target.get("sources", []) if not s.get("isGenerated")
        )
        found[target["name"]] = Target(target["name"], target["type"], artifacts, sources)
    return found


def _inputs_changed(build_dir: Path, stamp: Path) -> bool:
    """Whether a file CMake read when it configured is newer than that configure."""
    reply = build_dir / REPLY
    index = max(reply.glob("index-*.json"), default=None)
    if index is None:
        return True
    objects = json.loads(index.read_text())["objects"]
    files = next((o for o in objects if o["kind"] == "cmakeFiles"), None)
    if files is None:
        return True
    data = json.loads((reply / files["jsonFile"]).read_text())
    source = Path(data["paths"]["source"])
    made = stamp.stat().st_mtime
    for entry in data["inputs"]:
        if entry.get("isCMake") or entry.get("isExternal") or entry.get("isGenerated"):
            continue
        path = source / entry["path"]
        try:
            if path.stat().st_mtime > made:
                return True
        except FileNotFoundError:
            return True
    return False


def _generator(build_dir: Path) -> str:
    cache = build_dir / "CMakeCache.txt"
    for line in cache.read_text(errors="replace").splitlines() if cache.exists() else []:
        if line.startswith("CMAKE_GENERATOR:INTERNAL="):
            return line.split("=", 1)[1]
    return ""


_ERROR_AT = re.compile(r"CMake Error at (\S+?):(\d+)")


_NO_COMPILER = re.compile(  # CMake's three ways of saying a language has no working compiler
    r"No CMAKE_(C|CXX)_COMPILER could be found|The CMAKE_(C|CXX)_COMPILER:\s+\S+\s+is not a full path"
    r"|The (C|CXX) compiler\s.*?is not able to compile",
    re.DOTALL,
)


def _configure_error(project: CMakeProject, board: Board, output: str) -> str:
    m = _ERROR_AT.search(output)
    where = f" ({m.group(1)}:{m.group(2)})" if m else ""
    start = output.find("CMake Error")
    excerpt = output[start:] if start >= 0 else output
    said = f"CMake could not configure {project.source} for board {board.name}{where}:\n{_tail(excerpt, 40)}"
    missing = _NO_COMPILER.search(output)
    if missing:  # the project's languages need a compiler the board's toolchain lacks
        lang = {"C": "C", "CXX": "C++"}[next(g for g in missing.groups() if g)]
        install = f": apt-get install {board.toolchain.debian_package}" if board.toolchain.debian_package else ""
        said = f"board {board.name} has no working {lang} compiler for this project{install}\n{said}"
    return said


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _tool(name: str) -> str:
    """CMake's own tools: the one on PATH (Debian's cmake, or the pip wheel's in a venv)."""
    found = shutil.which(name)
    if found is None:
        raise CMakeError(f"{name} is not installed: apt-get install cmake (or pip install cmake)")
    return found
