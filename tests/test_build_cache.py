"""The build cache never hands back a stale or foreign artifact: each test is a way it once did."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import QUIET, build_report, private_tmpdir

from pytest_ondevice.compiling import builder as build
from pytest_ondevice.compiling import store

CHECK_VALUE = """
    #include "micro_test.h"
    #include "cfg.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(ValueIsOne) {{ TF_LITE_MICRO_EXPECT_EQ({expr}, 1); }}
    TF_LITE_MICRO_TESTS_END
"""


def value_test(project, expr: str = "VALUE", name: str = "value_test.c") -> None:
    project.write(name, CHECK_VALUE.format(expr=expr))


def verdict(out: str) -> str:
    """pytest's closing line of a run's output: "1 passed", "1 failed", ..."""
    return out.strip().splitlines()[-1].strip("= ").split(" in ")[0]


def outcome(result) -> str:
    passed, failed = result.parseoutcomes().get("passed", 0), result.parseoutcomes().get("failed", 0)
    return "passed" if passed and not failed else "failed" if failed and not passed else f"{passed}/{failed}"


def test_a_new_header_that_shadows_the_old_one_rebuilds(project):
    project.write("inc2/cfg.h", "#define VALUE 1\n")
    project.write("inc1/.keep", "")
    project.write("ondevice.toml", 'include_dirs = ["inc1", "inc2"]\n')
    value_test(project)
    project.run().assert_outcomes(passed=1)
    project.write("inc1/cfg.h", "#define VALUE 2\n")  # found first from now on
    result = project.run()
    result.assert_outcomes(failed=1)
    assert build_report(result)["compiled"] == 1
    (project.path / "inc1" / "cfg.h").unlink()  # gone again: the first build is right again
    project.run().assert_outcomes(passed=1)


def test_a_header_in_a_subdirectory_shadowing_one_found_later_rebuilds(project):
    project.write("b/cfg/sub.h", "#define VALUE 1\n")
    project.write("a/cfg/.keep", "")
    project.write("ondevice.toml", 'include_dirs = ["a", "b"]\n')
    project.write("cfg.h", '#include "cfg/sub.h"\n')
    value_test(project)
    project.run().assert_outcomes(passed=1)
    project.write("a/cfg/sub.h", "#define VALUE 3\n")
    project.run().assert_outcomes(failed=1)


def test_a_system_header_outside_the_toolchain_is_part_of_the_key(project):
    sysdir = project.path / "third_party"
    project.write("third_party/cfg.h", "#define VALUE 1\n")
    project.write("ondevice.toml", f'cflags = ["-isystem", "{sysdir}"]\n')
    value_test(project)
    project.run().assert_outcomes(passed=1)
    project.write("third_party/cfg.h", "#define VALUE 5\n")
    project.run().assert_outcomes(failed=1)
    project.write("third_party/cfg.h", "#define VALUE 1\n")  # reverted: the first object is right again
    result = project.run()
    result.assert_outcomes(passed=1)
    assert build_report(result)["compiled"] == 0


def _vendor_lib(project, value: int) -> None:
    src = project.write("vendor/v.c", f"int vendor_value(void) {{ return {value}; }}\n")
    obj = src.with_suffix(".o")
    subprocess.run(["cc", "-c", str(src), "-o", str(obj)], check=True)
    lib = project.path / "vendor" / "libv.a"
    lib.unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", str(lib), str(obj)], check=True)


def test_a_rebuilt_library_named_by_libs_relinks(project):
    _vendor_lib(project, 1)
    project.write("ondevice.toml", f'ldflags = ["-L{project.path / "vendor"}"]\nlibs = ["v"]\n')
    project.write("cfg.h", "int vendor_value(void);\n#define VALUE vendor_value()\n")
    value_test(project)
    project.run().assert_outcomes(passed=1)
    _vendor_lib(project, 2)
    result = project.run()
    result.assert_outcomes(failed=1)
    assert build_report(result)["linked"] == 1


def test_a_library_that_appears_earlier_on_the_library_path_relinks(project):
    first, vendor = project.path / "first", project.path / "vendor"
    project.write("ondevice.toml", f'ldflags = ["-L{first}", "-L{vendor}"]\nlibs = ["v"]\n')
    (project.path / "first").mkdir()
    _vendor_lib(project, 1)
    project.write("cfg.h", "int vendor_value(void);\n#define VALUE vendor_value()\n")
    value_test(project)
    project.run().assert_outcomes(passed=1)
    _vendor_lib(project, 7)
    shutil.move(project.path / "vendor" / "libv.a", project.path / "first" / "libv.a")
    _vendor_lib(project, 1)  # the old one is still there, but no longer the one found
    project.run().assert_outcomes(failed=1)


def test_a_linker_input_named_in_ldflags_is_part_of_the_key(project):
    _vendor_lib(project, 1)  # leaves vendor/v.o beside the archive
    project.write("ondevice.toml", 'ldflags = ["vendor/v.o"]\n')
    project.write("cfg.h", "int vendor_value(void);\n#define VALUE vendor_value()\n")
    value_test(project)
    project.run().assert_outcomes(passed=1)
    _vendor_lib(project, 2)
    project.run().assert_outcomes(failed=1)


def test_our_header_is_keyed_by_content_not_by_where_the_plugin_is_installed(project, monkeypatch, tmp_path):
    project.write("cfg.h", "#define VALUE 1\n")
    value_test(project)
    project.run().assert_outcomes(passed=1)
    other = tmp_path / "elsewhere" / "site-packages" / "pytest_ondevice" / "include"
    shutil.copytree(build.INCLUDE_DIR, other)
    monkeypatch.setattr(build, "INCLUDE_DIR", other)  # the same plugin, installed in another venv
    result = project.run()
    result.assert_outcomes(passed=1)
    assert build_report(result) == {"compiled": 0, "reused": 2, "linked": 0, "link_reused": 1}
    (other / "micro_test.h").write_text((other / "micro_test.h").read_text() + "\n#define ONDEVICE_EDITED 1\n")
    assert build_report(project.run())["compiled"] == 1  # its content is in the key (the test includes it)


def test_a_c_and_a_cc_source_of_the_same_name_keep_their_own_binaries(project):
    value_test(project, "1", "twin_test.c")
    project.write(
        "twin_test.cc",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(CcFails) { TF_LITE_MICRO_EXPECT_EQ(2, 1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    project.write("cfg.h", "\n")
    for _ in range(3):
        result = project.run("-v")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*twin_test.c::ValueIsOne*PASSED*", "*twin_test.cc::CcFails*FAILED*"])
    links = sorted(p.name for p in (project.path / "_build" / "host" / "bin").iterdir())
    assert links == ["twin_test.c.elf", "twin_test.cc.elf"]


@pytest.mark.parametrize("what", ["value_test.c.o", "libundertest.a", "value_test.c.elf"])
def test_a_damaged_entry_is_rebuilt_and_said_so(project, what):
    project.write("lib/v.c", "int v(void) { return 1; }\n")
    project.write("ondevice.toml", 'sources = ["lib/v.c"]\n')
    project.write("cfg.h", "int v(void);\n#define VALUE v()\n")
    value_test(project)
    project.run().assert_outcomes(passed=1)
    (entry,) = (project.path / "_cache").rglob(what)
    os.chmod(entry, 0o644)
    entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])  # disk trouble, an interrupted copy
    result = project.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ondevice build: *; 1 damaged cache entry rebuilt;*"])
    assert "Traceback" not in result.stdout.str()
    again = project.run()
    again.assert_outcomes(passed=1)
    assert "damaged cache" not in next(x for x in again.outlines if x.startswith("ondevice build:"))


SLOW_CC = """#!/bin/sh
# compiles, then, when asked, dawdles so a test can edit a header "during" the compile
cc "$@" || exit $?
case " $* " in *value_test.c*)
  if [ -f "{flag}" ]; then touch "{done}"; sleep 2; fi ;;
esac
"""


def test_a_header_saved_while_its_includer_compiles_is_not_recorded_as_read(project, monkeypatch):
    flag, done = project.path / "slow.flag", project.path / "compiled.flag"
    wrapper = project.write("slowcc", SLOW_CC.format(flag=flag, done=done))
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    project.write("cfg.h", "#define VALUE 2\n")
    value_test(project)
    flag.write_text("")
    proc = _pytest_process(project.path)
    deadline = time.monotonic() + 60
    while not done.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "the compile never happened"
        time.sleep(0.02)
    project.write("cfg.h", "#define VALUE 1\n")  # saved after the compiler read it
    out, _ = proc.communicate(timeout=120)
    assert "1 failed" in out  # this run was built from what the compiler read
    flag.unlink()
    result = project.run()
    result.assert_outcomes(passed=1)  # the edit is seen: the old object was never recorded as its result
    assert build_report(result)["compiled"] == 1


def _pytest_process(cwd: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--board=host", "-p", "no:cacheprovider", *QUIET, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=private_tmpdir(cwd, env),
    )


GOOD, BUGGY = "int v(void) { return 1; }\n", "int v(void) { return 2; }\n"


def _library_project(project, source: str) -> None:
    project.write("lib/v.c", source)
    project.write("ondevice.toml", 'sources = ["lib/v.c"]\n')
    project.write("cfg.h", "int v(void);\n#define VALUE v()\n")
    value_test(project)


@pytest.mark.parametrize("point", store.WRITE_POINTS)
def test_a_kill_at_any_write_point_never_pairs_an_artifact_with_other_inputs(project, point):
    _library_project(project, GOOD)
    project.run().assert_outcomes(passed=1)
    project.write("lib/v.c", BUGGY)
    killed = _pytest_process(project.path, env={**os.environ, "ONDEVICE_TEST_KILL_AT": point})
    killed.communicate(timeout=120)
    assert killed.returncode == -9, f"the run was not killed at {point}"
    for source, expected in [(BUGGY, "failed"), (GOOD, "passed"), (BUGGY, "failed"), (GOOD, "passed")]:
        project.write("lib/v.c", source)
        assert outcome(project.run()) == expected, f"after a kill at {point}"


def test_interrupted_builds_leave_nothing_behind(project):
    _library_project(project, GOOD)
    project.run().assert_outcomes(passed=1)
    tmp = project.path / "_cache" / store.LAYOUT / "tmp"
    stale = tmp / f"{os.uname().nodename}-{_dead_pid()}-abcdef"
    stale.mkdir()
    (stale / "half.o").write_bytes(b"\x7fELF")
    project.run().assert_outcomes(passed=1)
    assert not stale.exists()
    assert list(tmp.iterdir()) == []  # and the run left none of its own


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_two_checkouts_sharing_a_cache_at_once_each_run_their_own_binary(project, tmp_path):
    _library_project(project, GOOD)
    other = tmp_path / "other-checkout"
    shutil.copytree(project.path, other)
    (other / "lib" / "v.c").write_text(BUGGY)
    for _ in range(3):
        procs = [_pytest_process(project.path), _pytest_process(other)]
        good, buggy = (p.communicate(timeout=180)[0] for p in procs)
        assert verdict(good) == "1 passed", good
        assert verdict(buggy) == "1 failed", buggy
        for d in (project.path / "lib", other / "lib"):  # touch, keep content: caches are by content
            os.utime(d / "v.c")


def test_a_second_checkout_compiles_nothing_and_gets_the_same_binary_bytes(project, tmp_path):
    project.copy_examples()
    first = project.run("examples")
    first.assert_outcomes(passed=8)
    other = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(project.path, other, ignore=shutil.ignore_patterns("_build"), symlinks=True)
    _retarget(other, project.path / "_build", other / "_build")
    out = _pytest_process(other, "examples").communicate(timeout=300)[0]
    assert "8 passed" in out and "ondevice build: 0 compiled" in out, out
    # with separate caches too: the same sources give the same bytes in any directory
    _retarget(other, project.path / "_cache", other / "_cache")
    out = _pytest_process(other, "examples").communicate(timeout=300)[0]
    assert "8 passed" in out, out
    mine = sorted((p.name, p.resolve().read_bytes()) for p in (project.path / "_build").rglob("*.elf"))
    theirs = sorted((p.name, p.resolve().read_bytes()) for p in (other / "_build").rglob("*.elf"))
    assert [n for n, _ in mine] == [n for n, _ in theirs] and len(mine) == 2
    assert mine == theirs


def _retarget(checkout: Path, old: Path, new: Path) -> None:
    ini = checkout / "tox.ini"
    ini.write_text(ini.read_text().replace(str(old), str(new)))


def test_two_configurations_live_side_by_side(project):
    project.copy_examples("gemm")
    for _ in range(2):
        for args in (["--bench-disable"], []):
            project.run("examples/gemm", *args)
    for args in (["--bench-disable"], []):
        report = build_report(project.run("examples/gemm", *args))
        assert report["compiled"] == 0 and report["linked"] == 0


def test_one_project_run_twice_at_once_with_different_flags_gets_both_verdicts_right(project):
    project.write(
        "flag_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        #ifdef ONDEVICE_BENCH_DISABLE
        TF_LITE_MICRO_TEST(Flag) { TF_LITE_MICRO_EXPECT_EQ(1, 1); }
        #else
        TF_LITE_MICRO_TEST(Flag) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
        #endif
        TF_LITE_MICRO_TESTS_END
        """,
    )
    for _ in range(3):
        procs = [_pytest_process(project.path, "--bench-disable"), _pytest_process(project.path)]
        disabled, plain = (p.communicate(timeout=180)[0] for p in procs)
        assert verdict(disabled) == "1 passed", disabled
        assert verdict(plain) == "1 failed", plain


def test_an_unusable_build_dir_is_one_clear_error(project, monkeypatch, tmp_path_factory):
    temp = tmp_path_factory.mktemp("temp")  # where the session makes its run dir
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    project.write("cfg.h", "#define VALUE 1\n")
    value_test(project)
    project.write("not-a-dir", "")
    project.pytester.makeini(
        f"""
        [pytest]
        ondevice_build_dir = {project.path / "not-a-dir" / "build"}
        ondevice_cache_dir = {project.path / "_cache"}
        """
    )
    result = project.run()
    assert result.ret != 0
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        ["*the build dir */not-a-dir/build cannot be used: Not a directory*ondevice_build_dir*"]
    )
    assert list(temp.iterdir()) == []  # the run dir made before the error is gone with it


def test_a_relative_build_dir_is_relative_to_the_ini_file_from_any_subdirectory(project):
    project.write("sub/cfg.h", "#define VALUE 1\n")
    value_test(project, name="sub/value_test.c")
    project.pytester.makeini(
        f"""
        [pytest]
        ondevice_build_dir = out
        ondevice_cache_dir = {project.path / "_cache"}
        """
    )
    project.run().assert_outcomes(passed=1)
    os.chdir(project.path / "sub")
    project.run().assert_outcomes(passed=1)
    assert not (project.path / "sub" / "out").exists()
    assert (project.path / "out" / "host" / "logs").is_dir()


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs (CI runs as root)")
def test_a_full_cache_disk_is_an_error_naming_the_cause_never_a_failure(project, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(full)], capture_output=True)
    if mounted.returncode != 0:
        pytest.fail(f"could not mount a tmpfs: {mounted.stderr.decode()}")
    try:
        project.copy_examples()
        project.pytester.makeini(
            f"""
            [pytest]
            ondevice_build_dir = {project.path / "_build"}
            ondevice_cache_dir = {full}
            """
        )
        result = project.run("examples")
        outcomes = result.parseoutcomes()
        assert "failed" not in outcomes and outcomes.get("errors", outcomes.get("error")) == 8, outcomes
        result.stdout.fnmatch_lines(["*No space left on device*"])
        assert "Traceback" not in result.stdout.str()
    finally:
        subprocess.run(["umount", str(full)], check=False)


def test_concurrent_builders_of_the_same_inputs_build_once(project, tmp_path):
    project.copy_examples()
    results: list[str] = []

    def run() -> None:
        proc = _pytest_process(project.path, "examples")
        results.append(proc.communicate(timeout=300)[0])

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    compiled = []
    for out in results:
        assert "8 passed" in out, out
        line = next(x for x in out.splitlines() if x.startswith("ondevice build:"))
        compiled.append(int(line.split()[2]))
    assert sum(compiled) == 6  # each object compiled by one of the two; the other waited and reused it


def test_a_warm_run_is_not_held_up_by_another_session_holding_the_build_locks(project):
    """A look-up that finds its entry takes no lock file: another session building the same
    step for other inputs (another checkout's header) does not make it wait."""
    value_test(project)
    project.write("cfg.h", "#define VALUE 1\n")
    project.run().assert_outcomes(passed=1)
    locks = [p for p in (project.path / "_cache").rglob("locks/*/*") if re.fullmatch("[0-9a-f]{64}", p.name)]
    assert len(locks) >= 3, locks  # the steps': the runtime's and the test's compiles, the link
    held = [os.open(p, os.O_RDONLY) for p in locks]
    try:
        for fd in held:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = _pytest_process(project.path)
        try:
            out = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the warm run waited for the locks: {proc.communicate()[0]}")
    finally:
        for fd in held:
            os.close(fd)
    assert verdict(out) == "1 passed", out
    assert "0 compiled" in out, out


def test_cache_stats_and_clean(project, capsys):
    from pytest_ondevice.commands.cli import main

    project.copy_examples()
    project.run("examples").assert_outcomes(passed=8)
    project.run("examples").assert_outcomes(passed=8)
    cache = str(project.path / "_cache")
    assert main(["cache", "stats", "--cache-dir", cache]) == 0
    out = capsys.readouterr().out
    # 6 compiles, 1 archive, 2 links the first time; all of them served the second time
    assert "hits / misses     9 / 9 (50.0 % hits)" in out, out
    assert "entries           9 " in out, out
    assert main(["cache", "clean", "--cache-dir", cache]) == 0
    assert "removed 9 entries" in capsys.readouterr().out
    assert build_report(project.run("examples"))["compiled"] == 6


def test_cache_stats_and_clean_in_a_project_use_its_cache_dir(project, capsys, monkeypatch, tmp_path):
    """Run from anywhere in a project, they act on the cache its runs use (its ini's
    ondevice_cache_dir), never on the per-user one; --cache-dir still names another."""
    from pytest_ondevice.commands.cli import main

    monkeypatch.delenv("ONDEVICE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "per-user"))
    project.copy_examples()
    project.run("examples").assert_outcomes(passed=8)
    monkeypatch.chdir(project.path / "examples")
    assert main(["cache", "stats"]) == 0
    out = capsys.readouterr().out
    assert f"cache directory   {project.path / '_cache'}\n" in out and "entries           9 " in out, out
    other = tmp_path / "other"
    assert main(["cache", "stats", "--cache-dir", str(other)]) == 0
    out = capsys.readouterr().out
    assert f"cache directory   {other}\n" in out and "entries           0 " in out, out
    assert main(["cache", "clean"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("removed 9 entries (") and out.endswith(f" MiB) from {project.path / '_cache'}\n"), out
    assert not (tmp_path / "per-user" / "pytest-ondevice").exists()


def test_cache_stats_reads_a_relative_cache_dir_from_pyproject(tmp_path, capsys, monkeypatch):
    from pytest_ondevice.commands.cli import main

    monkeypatch.delenv("ONDEVICE_CACHE_DIR", raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nondevice_cache_dir = "build/cache"\n')
    (tmp_path / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "src" / "deep")
    assert main(["cache", "stats"]) == 0
    assert f"cache directory   {tmp_path / 'build' / 'cache'}\n" in capsys.readouterr().out


def test_listing_tests_builds_nothing(project):
    project.copy_examples()
    result = project.run("examples", "--collect-only", "-q")
    assert result.ret == 0
    assert not list((project.path / "_cache").rglob("*.o"))
    assert not any(line.startswith("ondevice build") for line in result.outlines)


def test_a_collection_error_elsewhere_builds_and_runs_nothing(project):
    """pytest stops before the first test when a file fails to collect (a Python test in a
    TFLM tree needs tensorflow): a full cold build and every binary's run were wasted."""
    project.copy_examples()
    project.write("examples/needs_tf_test.py", "import tensorflow_is_not_here\n")
    result = project.run("examples")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert not list((project.path / "_cache").rglob("*.o"))
    again = project.run("examples", "--continue-on-collection-errors")
    again.assert_outcomes(passed=8, errors=1)


def test_a_long_build_says_so_in_a_ci_log_and_is_not_charged_to_the_first_test(project, monkeypatch):
    wrapper = project.write("slowcc", '#!/bin/sh\ncc "$@" || exit $?\nsleep 1\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    project.copy_examples()
    junit = project.path / "junit.xml"
    result = project.run("examples", f"--junitxml={junit}")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(
        ["ondevice: building, * of 6 objects so far (host: *)", "ondevice: 6 objects built or checked in * s"]
    )
    # the total is known from the first line on: it never grows while binaries are planned
    totals = {line.split(" of ")[1].split()[0] for line in result.outlines if line.startswith("ondevice: building")}
    assert totals == {"6"}, result.outlines
    import xml.etree.ElementTree as ET

    times = [float(case.get("time")) for case in ET.parse(junit).iter("testcase")]
    assert max(times) < 1.0, times  # six compiles of a second each went to the build, not to a test


def test_a_build_error_shared_by_a_binarys_cases_is_shown_once(project):
    project.write(
        "broken_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(One) { TF_LITE_MICRO_EXPECT_EQ(undeclared_thing, 1); }
        TF_LITE_MICRO_TEST(Two) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(Three) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run()
    result.assert_outcomes(failed=3)
    text = result.stdout.str()
    assert text.count("undeclared (first use in this function)") == 1, text
    result.stdout.fnmatch_lines(
        ["*build failed for board host: the error is shown in full at broken_test.c::One[[]host[]]*"]
    )


def test_a_cached_binary_that_cannot_be_executed_is_an_error_not_a_traceback(project):
    project.write("cfg.h", "#define VALUE 1\n")
    value_test(project)
    project.run().assert_outcomes(passed=1)
    (binary,) = (project.path / "_cache").rglob("value_test.c.elf")
    binary.chmod(0o444)  # same bytes, digest intact, but not executable any more
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*cannot execute */value_test.c.elf: Permission denied*"])
    assert "Traceback" not in result.stdout.str()


def test_xdist_workers_share_one_build_and_report_it(project):
    project.copy_examples()
    result = project.run("examples", "-n", "2")
    result.assert_outcomes(passed=8)
    # each object is compiled by one worker; a worker that needs it too reuses it
    result.stdout.fnmatch_lines(["ondevice build: 6 compiled, * reused; 2 linked, * reused; * (by 2 workers);*"])


def test_a_stop_during_a_cold_build_ends_the_compilers_at_once(project, monkeypatch):
    import signal

    # a compiler driver whose child outlives it unless its whole group is killed
    wrapper = project.write("slowcc", '#!/bin/sh\ncase " $* " in *" -c "*) sleep 3607 & wait ;; esac\ncc "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    for n in range(6):
        project.write(f"lib/k{n}.c", f"int k{n}(void) {{ return {n}; }}\n")
    project.write("ondevice.toml", 'sources = ["lib/*.c"]\n')
    project.write("cfg.h", "#define VALUE 1\n")
    value_test(project)
    proc = _pytest_process(project.path)
    deadline = time.monotonic() + 30
    while "sleep 3607" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "no compile started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    start = time.monotonic()
    proc.communicate(timeout=60)
    assert time.monotonic() - start < 5, "pytest waited for the compilers"
    deadline = time.monotonic() + 5
    while "sleep 3607" in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "a compiler outlived the session"
        time.sleep(0.05)


def _store_entry(cache: store.Store, key: str, size: int, age: float) -> None:
    staged = cache.staging()
    (staged / "a.elf").write_bytes(os.urandom(size))
    entry = cache.commit(staged, "a.elf", key)
    then = time.time() - age
    os.utime(entry.path.parent, (then, then))  # when it was last used


def test_a_session_that_stores_trims_the_cache_least_recently_used_first(tmp_path):
    old = store.Store(tmp_path)
    for i, age in enumerate((300, 100, 200)):  # k0 oldest, then k2, then k1
        _store_entry(old, f"k{i}" * 32, 1000, age)
    old.close()
    now = store.Store(tmp_path)
    assert now.get("k0" * 32) is not None  # used this session: never trimmed, however old
    _store_entry(now, "k3" * 32, 1000, 0)
    now.close(max_size=4000)  # ~4400 bytes stored (with each entry's meta.json): to 90 %, oldest unused first
    left = store.Store(tmp_path)
    assert [left.get(f"k{i}" * 32) is not None for i in range(4)] == [True, True, False, True]


def test_a_session_that_only_reuses_leaves_the_cache_as_it_was(tmp_path):
    """It cannot have grown the cache, so it does not read every entry at its end."""
    first = store.Store(tmp_path)
    for i in range(3):
        _store_entry(first, f"k{i}" * 32, 1000, 10 * i)
    first.close()
    reuser = store.Store(tmp_path)
    assert reuser.get("k0" * 32) is not None
    reuser.close(max_size=1000)
    assert store.Store(tmp_path).usage()[0] == 3
