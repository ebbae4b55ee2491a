"""The cost of a case as a suite grows from a hundred cases to a hundred thousand, against
pytest's own cost of a trivial Python test, measured side by side; and a cold build of the
same binaries against `make -j2` running the compiler commands the plugin ran.

    python benchmarks/suite_scale.py [--cases 100,1000,10000,100000] [--repeats 3]
                                     [--build 1000] [--workdir DIR] [--against REVISION]

Each size is a tree of test files with 10 trivial cases each (100 cases: 10 binaries;
100,000: 10,000 binaries), 100 files per directory, run with `pytest --board=host` from a
warm build cache. Three things are timed at each size, interleaved, as whole processes:

  plugin   pytest --board=host over the tree (collection, the build store's look-ups,
           scheduling, the local runs, parsing, reports, JUnit XML)
  own      the binaries themselves, run one after another by a shell loop (their own cost)
  pytest   the same number of trivial Python tests (`def test_N(): pass`, 10 per file, the
           same layout) under plain pytest, with JUnit XML too

and each tool's start-up is timed on a tree of one trivial Python test. --floor adds a
fourth, `floor`: the plugin's own items with every binary's result made beforehand
(_replay.py), no build check, run or parsing: what the items alone cost in pytest; and a
fifth, `bare`: a bare plugin that only runs the binaries, one after another in pytest's
process (_bare_host.py: the cases read from the source, each binary run once, its
verdicts read; nothing of ours), whose one more case against pytest's says what a C case
costs with nothing but its run.

The figure compared is the cost of one more case: (plugin - own - plugin's start-up) /
cases against (pytest - pytest's start-up) / cases (target: <= 1.0), and it should stay
flat as the suite grows. That start-up has no C test, so what a run pays once for having
any (the side process's fork, the compiler's version, the first binary's wait) is spread
over the cases: at 100 cases, 0.2 ms a case. The last column takes each tool's start-up
with one trivial test of its own kind instead (the plugin: one binary of one case, less
that binary's own time; pytest: one Python test), the slope of each: ((plugin - own) -
(plugin1 - own1)) / (cases - 1) against (pytest - pytest0) / (cases - 1).

--build N: N binaries built from cold (empty build dir and cache) by the plugin
(`--build-only`) and by `make -j2` running the same compile and link commands, recorded
from the plugin's own build by a compiler wrapper (target: <= 1.1).

--against REVISION: the plugin as it was at REVISION, laid out as pip installs it, timed in the
same rounds on the same trees (`against`); its whole run against this checkout's is printed
for each size (the target of a refactoring: no slowdown, <= 1.0 within the noise).

A tree is generated once under --workdir (default a temporary dir) and reused; the
100,000-case tree's first (cold) build takes minutes and about 1 GB.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _revision import first_on_path, installed_layout, level_path
from _timing import timed

PER_FILE = 10
PER_DIR = 100
CASES = "".join(f"TF_LITE_MICRO_TEST(Case{n}) {{ TF_LITE_MICRO_EXPECT_EQ({n}, {n}); }}\n" for n in range(PER_FILE))
TEST_C = '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n' + CASES + "TF_LITE_MICRO_TESTS_END\n"
TEST_PY = "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(PER_FILE))
QUIET = ["-q", "-p", "no:cacheprovider"]
ENV = dict(os.environ)  # pytest with the plugins installed here, ours among them, for both
PLUGIN: list[str] = []
AGAINST: dict[str, str] = {}  # --against: "ours" and "theirs", the directories first on PYTHONPATH
WRAPPER = """#!/bin/sh
# records each compiler command the plugin runs (its cwd and argv), then runs it
printf '%s\\t%s\\n' "$PWD" "$*" >> "{log}"
exec cc "$@"
"""


def tree(root: Path, files: int, suffix: str, text: str) -> Path:
    """files test files of 10 cases, 100 per directory; made once."""
    done = root / ".complete"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        (root / "tests").mkdir(parents=True)
        for i in range(files):
            d = root / "tests" / f"d{i // PER_DIR:03d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"k{i:05d}_test{suffix}").write_text(text)
        (root / "pytest.ini").write_text(
            f"[pytest]\nondevice_build_dir = {root / '_build'}\nondevice_cache_dir = {root / '_cache'}\n"
        )
        done.touch()
    return root


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *QUIET, *args]


def shell_loop(binaries: list[Path]) -> list[str]:
    """The binaries run one after another, their output discarded: their own cost."""
    return ["sh", "-c", 'for b in "$@"; do "$b" > /dev/null || exit 1; done', "sh", *map(str, binaries)]


def median_times(commands: dict[str, tuple[list[str], Path, dict]], repeats: int) -> dict[str, float]:
    """Each command's median; and under "paired", the median over rounds of one round's
    ratio of one more case (plugin's to pytest's), each from runs a second apart: a
    difference of medians taken over minutes moves with the machine's drift."""
    runs: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(repeats):  # interleaved: the machine's drift falls on all alike
        for name, (argv, cwd, env) in commands.items():
            runs[name].append(timed(argv, cwd, env))
    medians = {k: statistics.median(v) for k, v in runs.items()}
    rounds = zip(runs["plugin"], runs["own"], runs["plugin0"], runs["pytest"], runs["pytest0"], strict=True)
    medians["paired"] = statistics.median((p - o - p0) / (t - t0) for p, o, p0, t, t0 in rounds)
    return medians


def with_benchmarks(**variables: str) -> dict:
    """The environment of a run that loads a plugin of this directory (-p _name), with these."""
    return {**first_on_path(ENV, str(Path(__file__).resolve().parent)), **variables}


def replay_env(mode: str, tree: Path) -> dict:
    """The environment of a run with _replay.py: recording every binary's result, or replaying it."""
    return with_benchmarks(ONDEVICE_REPLAY=mode, ONDEVICE_REPLAY_FILE=str(tree / "replay.pickle"))


def warm_binaries(root: Path) -> list[Path]:
    """The tree's binaries, built (the builds are not what is timed here)."""
    subprocess.run(
        pytest_cmd(*PLUGIN, "--board=host", "--build-only", "tests"), cwd=root, env=ENV, capture_output=True, check=True
    )
    return sorted(p for p in (root / "_build" / "host" / "bin").rglob("*_test.c.elf") if p.is_file())


def scale(work: Path, sizes: list[int], repeats: int, floor: bool = False) -> None:
    empty_c = tree(work / "empty-c", 0, "", "")
    empty_py = tree(work / "empty-py", 0, "", "")
    for empty in (empty_c, empty_py):  # one trivial test, so neither run ends with "no tests ran"
        (empty / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    one_c = tree(work / "one-c", 1, ".c", TEST_C.replace(CASES, CASES.splitlines(keepends=True)[0]))
    (one_binary,) = warm_binaries(one_c)
    print(
        f"{'cases':>8} {'binaries':>8} {'plugin s':>9} {'own s':>7} {'pytest s':>9} | per case, whole run (ms): "
        f"{'plugin':>7} {'pytest':>7} {'ratio':>6} | one more case (ms): {'plugin':>7} {'pytest':>7} {'ratio':>6} "
        f"| start-up of its own kind: {'plugin':>7} {'ratio':>6}"
    )
    for cases in sizes:
        files = cases // PER_FILE
        c_tree = tree(work / f"c-{cases}", files, ".c", TEST_C)
        py_tree = tree(work / f"py-{cases}", files, ".py", TEST_PY)
        binaries = warm_binaries(c_tree)
        assert len(binaries) == files, (len(binaries), files)
        junit = ["--junitxml", "junit.xml"]
        ours = first_on_path(ENV, AGAINST["ours"]) if AGAINST else ENV  # as long a sys.path as the revision's
        commands = {
            "plugin": (pytest_cmd(*PLUGIN, "--board=host", *junit, "tests"), c_tree, ours),
            "own": (shell_loop(binaries), c_tree, ENV),
            "pytest": (pytest_cmd(*junit, "tests"), py_tree, ENV),
            "plugin0": (pytest_cmd(*PLUGIN, "--board=host", "tests"), empty_c, ENV),
            "pytest0": (pytest_cmd("tests"), empty_py, ENV),
            "plugin1": (pytest_cmd(*PLUGIN, "--board=host", *junit, "tests"), one_c, ENV),
            "own1": (shell_loop([one_binary]), one_c, ENV),
        }
        if AGAINST:
            theirs = first_on_path(ENV, AGAINST["theirs"])
            warm = pytest_cmd(*PLUGIN, "--board=host", "--build-only", "tests")
            subprocess.run(warm, cwd=c_tree, env=theirs, capture_output=True, check=True)  # its own build keys
            commands["against"] = (pytest_cmd(*PLUGIN, "--board=host", *junit, "tests"), c_tree, theirs)
        if floor:
            replayed = pytest_cmd(*PLUGIN, "-p", "_replay", "--board=host", *junit, "tests")
            timed(replayed, c_tree, replay_env("record", c_tree))
            commands["floor"] = (replayed, c_tree, replay_env("replay", c_tree))
            bare = pytest_cmd("-p", "_bare_host", "-c", os.devnull, "--rootdir", str(c_tree), *junit, "tests")
            commands["bare"] = (bare, c_tree, with_benchmarks(BARE_HOST_BIN=str(c_tree / "_build" / "host" / "bin")))
        figures = median_times(commands, repeats)
        whole = ((figures["plugin"] - figures["own"]) / cases * 1000, figures["pytest"] / cases * 1000)
        more = (
            (figures["plugin"] - figures["own"] - figures["plugin0"]) / cases * 1000,
            (figures["pytest"] - figures["pytest0"]) / cases * 1000,
        )
        own_kind = (
            (figures["plugin"] - figures["own"] - figures["plugin1"] + figures["own1"]) / (cases - 1) * 1000,
            (figures["pytest"] - figures["pytest0"]) / (cases - 1) * 1000,
        )
        print(
            f"{cases:8d} {files:8d} {figures['plugin']:9.2f} {figures['own']:7.2f} {figures['pytest']:9.2f} | "
            f"{'':25s}{whole[0]:7.3f} {whole[1]:7.3f} {whole[0] / whole[1]:6.2f} | "
            f"{'':19s}{more[0]:7.3f} {more[1]:7.3f} {more[0] / more[1]:6.2f} | "
            f"{'':25s}{own_kind[0]:7.3f} {own_kind[0] / own_kind[1]:6.2f}",
            flush=True,
        )
        print(f"{'':8s} one more case, the median of each round's ratio: {figures['paired']:.2f}", flush=True)
        if AGAINST:
            print(
                f"{'':8s} against {AGAINST['revision']}: {figures['against']:.2f} s; this checkout / that = "
                f"{figures['plugin'] / figures['against']:.3f} (whole run); one more case "
                f"{(figures['plugin'] - figures['own']) / (figures['against'] - figures['own']):.3f}",
                flush=True,
            )
        if floor:
            items = (figures["floor"] - figures["plugin0"]) / cases * 1000
            print(
                f"{'':8s} floor (results made beforehand): {figures['floor']:.2f} s, one more case "
                f"{items:.3f} ms, {items / more[1]:.2f} x pytest's; the build check, runs and parsing "
                f"add {more[0] - items:.3f} ms a case",
                flush=True,
            )
            bare = (figures["bare"] - figures["own"] - figures["pytest0"]) / cases * 1000
            print(
                f"{'':8s} a bare plugin, runs only (_bare_host.py): {figures['bare']:.2f} s, one more case "
                f"{bare:.3f} ms, {bare / more[1]:.2f} x pytest's",
                flush=True,
            )
    print(
        f"start-up (one trivial Python test): plugin {figures['plugin0']:.3f} s, pytest {figures['pytest0']:.3f} s; "
        f"the plugin with one binary of one case: {figures['plugin1']:.3f} s (that binary's own: {figures['own1']:.4f})"
    )
    print(
        "whole run: (plugin - own) / cases against pytest / cases, start-up included, as a user waits "
        "(the target: <= 1.0); one more case: each tool's start-up taken away"
    )


def cold_build(work: Path, count: int, repeats: int) -> None:
    root = tree(work / f"build-{count}", count, ".c", TEST_C)
    log = root / "commands.log"
    wrapper = root / "cc-wrapper"
    wrapper.write_text(WRAPPER.format(log=log))
    wrapper.chmod(0o755)

    def clean() -> None:
        for d in ("_build", "_cache", "_make"):
            shutil.rmtree(root / d, ignore_errors=True)

    clean()
    log.unlink(missing_ok=True)
    subprocess.run(
        pytest_cmd(*PLUGIN, "--board=host", "--build-only", "tests"),
        cwd=root,
        env={**ENV, "CC": str(wrapper)},
        capture_output=True,
        check=True,
    )
    makefile = root / "Makefile"
    makefile.write_text(makefile_of(log.read_text().splitlines(), root / "_make"))
    plugin, make = [], []
    for _ in range(repeats):
        clean()
        plugin.append(timed(pytest_cmd(*PLUGIN, "--board=host", "--build-only", "tests"), root, ENV))
        clean()
        make.append(timed(["make", "-s", "-j2", "-f", str(makefile), "all"], root, ENV))
    p, m = statistics.median(plugin), statistics.median(make)
    print(
        f"cold build of {count} binaries: plugin {p:.1f} s, make -j2 {m:.1f} s "
        f"(runs: {', '.join(f'{x:.1f}' for x in plugin)} / {', '.join(f'{x:.1f}' for x in make)}); "
        f"plugin / make = {p / m:.2f} (target <= 1.1)"
    )


def makefile_of(lines: list[str], out: Path) -> str:
    """One rule per command the plugin ran, with the same compiler and flags. The plugin
    wrote each output in a private staging dir and linked objects from its store; here
    every output, its dependency file included, goes to out/ under its own name."""
    rules, targets = [], []
    for line in lines:
        cwd, _, args = line.partition("\t")
        argv = shlex.split(args)
        if "-o" not in argv:  # the compiler asked its version: not a build step
            continue
        produced = Path(argv[argv.index("-o") + 1])
        staging = str(produced.parent)
        argv = [a.replace(f"{staging}/link.d", f"{out}/{produced.name}.d").replace(staging, str(out)) for a in argv]
        objects = [a for a in argv if a.endswith(".o") and Path(a).parent != out]
        argv = [str(out / Path(a).name) if a in objects else a for a in argv]
        target = str(out / produced.name)
        deps = " ".join(str(out / Path(o).name) for o in objects)
        rules.append(f"{target}: {out}/.dir {deps}\n\tcd {shlex.quote(cwd)} && cc {shlex.join(argv)}\n")
        targets.append(target)
    return f"all: {' '.join(targets)}\n\n{out}/.dir:\n\tmkdir -p {out} && touch $@\n\n" + "".join(rules)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="100,1000,10000,100000", help="suite sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build", type=int, default=1000, help="binaries in the cold-build comparison (0: none)")
    parser.add_argument("--workdir", type=Path, help="keep the generated trees here (reused by later runs)")
    parser.add_argument(
        "--floor", action="store_true", help="also time the plugin's items with every result made beforehand"
    )
    parser.add_argument("--against", metavar="REVISION", help="also time the plugin as it was at REVISION")
    parser.add_argument(
        "--bare", action="store_true", help="no other installed pytest plugin loaded, in either (the plugin by -p)"
    )
    args = parser.parse_args()
    if args.bare:
        ENV["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        PLUGIN.extend(["-p", "pytest_ondevice.plugin"])
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ondevice-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.against:
        AGAINST.update(
            revision=args.against,
            theirs=str(installed_layout(args.against, work / f"against-{args.against}")),
            ours=str(level_path(work / "level")),
        )
    try:
        if args.cases:
            scale(work, [int(c) for c in args.cases.split(",")], args.repeats, args.floor)
        if args.build:
            cold_build(work, args.build, args.repeats)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
