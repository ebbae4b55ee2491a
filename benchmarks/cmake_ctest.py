"""pytest-ondevice on a CMake project against CTest on the same build tree, side by side.

    python benchmarks/cmake_ctest.py [--repeats 5] [--workdir DIR] [--project DIR --cache NAME=VALUE]

On examples/cmake (a shared library; Unity, GoogleTest, Catch2, doctest and Boost.Test cases;
a plain exit-status test; a test reading input files), or another project (--project: a
checkout of cJSON, say), each figure the median of whole processes run in turn:

  host   `pytest --board=host` against `ctest` in the tree pytest configured and built:
         the same verdicts (every test passes in both), per case where ctest has a line
         per executable or per discovered case;
  rpi    `pytest --board=rpi --device=qemu` against `ctest` in the rpi tree, whose
         CMAKE_CROSSCOMPILING_EMULATOR (from the board file) runs each test under
         qemu-aarch64 (target: wall time <= 1.1 x);
  cold   an emptied rpi build tree: pytest (configure, build, run) against
         `cmake -S -B -G Ninja` + `cmake --build -j2` + `ctest` with the same toolchain
         file (target: <= 1.1 x);
  touch  one source touched: what each rebuilds (ninja's own plan: only its targets).

The floor: pytest itself, on one trivial Python test (`pytest floor`), what any plugin of
pytest pays before its first test; on a project of five tiny tests it is most of the ratio.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import timed

REPO = Path(__file__).resolve().parent.parent
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def project(work: Path, source: Path | None, cache: list[str]) -> Path:
    """The project to compare on, copied (examples/cmake by default, with its Unity)."""
    root = work / "project"
    if not root.exists():
        shutil.copytree(source or REPO / "examples" / "cmake", root / "proj")
        if source is None:
            cache = [f"UNITY_DIR={REPO / 'tests' / 'support' / 'unity'}", *cache]
        (root / "pytest.ini").write_text(
            "[pytest]\nondevice_cmake = proj\nondevice_cmake_cache =\n"
            + "".join(f"    {c}\n" for c in cache)
            + f"ondevice_build_dir = {root / '_build'}\n"
        )
    return root


def tree(root: Path, board: str) -> Path:
    (found,) = (root / "_build" / board / "cmake").iterdir()
    return found


def ctest_verdicts(build_dir: Path) -> dict[str, bool]:
    out = subprocess.run(["ctest"], cwd=build_dir, capture_output=True, text=True).stdout
    return {m.group(1): m.group(2) == "Passed" for m in re.finditer(r"Test +#\d+: (.+?) \.+ *(?:\*\*\*)?(\w+)", out)}


def medians(commands: dict[str, tuple[list[str], Path]], repeats: int) -> dict[str, float]:
    runs: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(repeats):
        for name, (argv, cwd) in commands.items():
            runs[name].append(timed(argv, cwd, None))
    return {k: statistics.median(v) for k, v in runs.items()}


def hooks_seconds(build_dir: Path) -> float:
    """The compile time of what pytest-ondevice adds to a tree (its runtime's and its hooks'
    objects), from ninja's own log: the floor of a cold build beside the project's own."""
    total = 0
    for line in (build_dir / ".ninja_log").read_text().splitlines()[1:]:
        start, end, _, output, _ = line.split("\t")
        if "_ondevice_" in output:
            total += int(end) - int(start)
    return total / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--project", type=Path, help="another CMake project (a checkout of cJSON, say)")
    parser.add_argument("--cache", action="append", default=[], help="NAME=VALUE for its configure")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ondevice-cmake-"))
    root = project(work, args.project, args.cache)
    cache_args = [f"-D{c}" for c in ([f"UNITY_DIR={REPO / 'tests' / 'support' / 'unity'}"] if not args.project else [])]
    cache_args += [f"-D{c}" for c in args.cache]
    floor = work / "floor"
    floor.mkdir(exist_ok=True)
    (floor / "test_one.py").write_text("def test_one():\n    pass\n")
    for board in (["--board=host"], ["--board=rpi", "--device=qemu"]):  # configured and built once, warm after
        subprocess.run([*PYTEST, *board], cwd=root, check=True, capture_output=True)
    host, rpi = tree(root, "host"), tree(root, "rpi")
    for board, where in (("host", host), ("rpi", rpi)):
        verdicts = ctest_verdicts(where)
        print(f"ctest on the {board} tree: {sum(verdicts.values())} of {len(verdicts)} passed")
        ours = (
            subprocess.run(
                [*PYTEST, f"--board={board}", *(["--device=qemu"] if board == "rpi" else [])],
                cwd=root,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()
        )
        print(f"pytest --board={board}: {ours[-1] if ours else '?'}")
    warm = medians(
        {
            "pytest host": ([*PYTEST, "--board=host"], root),
            "ctest host": (["ctest", "-Q"], host),
            "pytest rpi": ([*PYTEST, "--board=rpi", "--device=qemu"], root),
            "ctest rpi": (["ctest", "-Q"], rpi),
            "pytest floor": ([*PYTEST, "-p", "no:ondevice", "test_one.py"], floor),
        },
        args.repeats,
    )
    for name, value in warm.items():
        print(f"  {name:12s} {value:6.3f} s")
    print(f"host: pytest / ctest = {warm['pytest host'] / warm['ctest host']:.2f}")
    print(f"rpi:  pytest / ctest = {warm['pytest rpi'] / warm['ctest rpi']:.2f}   (target <= 1.1)")
    floor_ratio = (warm["pytest floor"] + warm["ctest rpi"]) / warm["ctest rpi"]
    ours = warm["pytest rpi"] - warm["pytest floor"]
    print(
        f"the floor: pytest alone takes {warm['pytest floor']:.3f} s; ctest's run plus that is "
        f"{floor_ratio:.2f} x ctest's; what is ours on rpi: {ours:.3f} s against ctest's "
        f"{warm['ctest rpi']:.3f} s ({ours / warm['ctest rpi']:.2f} x)"
    )

    toolchain = rpi / "ondevice-toolchain.cmake"
    kept = work / "toolchain.cmake"
    shutil.copy(toolchain, kept)
    by_hand = work / "by-hand"
    cold_pytest, cold_cmake = [], []
    for _ in range(max(1, args.repeats // 2)):
        shutil.rmtree(root / "_build" / "rpi", ignore_errors=True)
        shutil.rmtree(root / "_cache", ignore_errors=True)
        cold_pytest.append(timed([*PYTEST, "--board=rpi", "--device=qemu"], root, None))
        shutil.rmtree(by_hand, ignore_errors=True)
        script = (
            f"cmake -S {root / 'proj'} -B {by_hand} -G Ninja -DCMAKE_TOOLCHAIN_FILE={kept} "
            f"{' '.join(cache_args)} >/dev/null && "
            f"cmake --build {by_hand} -j2 >/dev/null && cd {by_hand} && ctest -Q"
        )
        cold_cmake.append(timed(["sh", "-c", script], root, None))
    cold = statistics.median(cold_pytest) / statistics.median(cold_cmake)
    ours = hooks_seconds(tree(root, "rpi"))
    print(f"of the cold build, our runtime and hooks (one object each) took {ours:.2f} s of compile time")
    print(
        f"cold (configure, build, run) on rpi: pytest {statistics.median(cold_pytest):.2f} s, "
        f"cmake + ctest {statistics.median(cold_cmake):.2f} s: {cold:.2f}   (target <= 1.1)"
    )

    touched = next(p for p in sorted((root / "proj").rglob("*.c")) if "test" in str(p.relative_to(root / "proj")))
    touched.touch()
    plan = subprocess.run(["ninja", "-n", "-C", str(tree(root, "rpi"))], capture_output=True, text=True).stdout
    rebuilt = [line for line in plan.splitlines() if "Building" in line or "Linking" in line]
    print(f"touch {touched.relative_to(root / 'proj')}: ninja would rebuild {len(rebuilt)} steps:")
    for line in rebuilt:
        print(f"  {line.split('] ', 1)[-1]}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
