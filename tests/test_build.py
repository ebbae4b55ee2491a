"""The build: static archive per directory, object names by path, the cache."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import assert_built, build_report

from pytest_ondevice.compiling.elf import ElfError, machines
from pytest_ondevice.compiling.linking import host_arch


def test_second_run_with_nothing_changed_compiles_nothing(project):
    project.copy_examples()
    first = project.run("examples")
    first.assert_outcomes(passed=8)
    # 2 tests + 1 runtime + 3 library sources; 2 links
    assert build_report(first) == {"compiled": 6, "reused": 0, "linked": 2, "link_reused": 0}
    second = project.run("examples")
    second.assert_outcomes(passed=8)
    assert build_report(second) == {"compiled": 0, "reused": 6, "linked": 0, "link_reused": 2}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_build_only_reports_items_as_built_not_skipped(project, workers):
    project.copy_examples()
    result = project.run("examples", "--build-only", "-v", *workers)
    assert_built(result, 8)
    assert result.stdout.str().count(" BUILT ") == 8  # each item's status (-v), with or without xdist
    assert "SKIPPED" not in result.stdout.str() and "not run" not in result.stdout.str()


def test_a_changed_header_recompiles_only_what_includes_it(project):
    ex = project.copy_examples()
    project.run("examples").assert_outcomes(passed=8)
    header = ex / "kernels" / "reference" / "fully_connected.h"
    header.write_text(header.read_text() + "\n/* touched */\n")
    result = project.run("examples")
    result.assert_outcomes(passed=8)
    report = build_report(result)
    # fully_connected.c and fully_connected_test.cc include it; nothing else does
    assert report["compiled"] == 2
    # a comment changes no object byte: links are keyed by content and are reused
    assert report["linked"] == 0


LIB_TEST = """
    #include "micro_test.h"
    int a_value(void);
    int b_value(void);
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(BothCommonsLinked) {{
      TF_LITE_MICRO_EXPECT_EQ(a_value(), 1);
      TF_LITE_MICRO_EXPECT_EQ(b_value(), 2);
      TF_LITE_MICRO_EXPECT_EQ({n}, {n});
    }}
    TF_LITE_MICRO_TESTS_END
"""


def test_library_compiled_once_into_an_archive_shared_by_all_tests(project):
    project.write("lib/a/common.c", "int a_value(void) { return 1; }\n")
    project.write("lib/b/common.c", "int b_value(void) { return 2; }\n")
    project.write("ondevice.toml", 'sources = ["lib/**/*.c"]\n')
    for n in range(3):
        project.write(f"t{n}_test.c", LIB_TEST.format(n=n))
    result = project.run("-v")
    result.assert_outcomes(passed=3)
    # 2 library objects (once, not per test) + 3 tests + 1 runtime
    assert build_report(result)["compiled"] == 6
    cache = project.path / "_cache"
    objs = list(cache.rglob("common.c.o"))  # same basename, two entries: neither replaced the other
    assert len(objs) == 2 and len({o.read_bytes() for o in objs}) == 2
    archives = list(cache.rglob("libundertest.a"))
    assert len(archives) == 1
    members = subprocess.run(["ar", "t", str(archives[0])], capture_output=True, text=True, check=True).stdout
    assert members.split().count("common.c.o") == 2


def test_under_xdist_each_object_is_counted_once_whichever_worker_built_it(project):
    project.write("lib/a/common.c", "int a_value(void) { return 1; }\n")
    project.write("lib/b/common.c", "int b_value(void) { return 2; }\n")
    project.write("ondevice.toml", 'sources = ["lib/**/*.c"]\n')
    for n in range(4):
        project.write(f"t{n}_test.c", LIB_TEST.format(n=n))
    cold = project.run("-n", "2")
    cold.assert_outcomes(passed=4)
    # 2 library objects + 4 tests + 1 runtime, each once: both workers needed the library and the runtime
    assert build_report(cold) == {"compiled": 7, "reused": 0, "linked": 4, "link_reused": 0}
    warm = project.run("-n", "2")
    assert build_report(warm) == {"compiled": 0, "reused": 7, "linked": 0, "link_reused": 4}


def test_library_compile_error_names_the_library_and_the_diagnostic(project):
    project.write("lib/bad.c", "int broken( {\n")
    project.write("ondevice.toml", 'sources = ["lib/bad.c"]\n')
    project.write("x_test.c", LIB_TEST.format(n=0))
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the library declared in *ondevice.toml failed to build*", "*lib/bad.c:1*"])


def test_missing_toolchain_names_the_package(project, monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc-anywhere")
    project.write("x_test.c", LIB_TEST.format(n=0))
    result = project.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no toolchain for board 'host'*apt-get install build-essential*"])


def test_prebuilt_library_per_board_is_linked_and_checked_for_its_architecture(project):
    project.copy_examples("prebuilt")
    ok = project.run("examples/prebuilt", "-v")  # its conftest makes vendor/host/libvendor.a
    ok.assert_outcomes(passed=2)  # linked as `prebuilt`, and found through pkg-config
    ok.stdout.fnmatch_lines(["*vendor_test.c::VendorDotProduct[[]host[]] PASSED*"])
    vendor = project.path / "examples" / "prebuilt" / "vendor"
    assert machines(vendor / "host" / "libvendor.a") == {host_arch()}

    assert_built(project.run("examples/prebuilt", "--build-only", board="bluepill-qemu"), 2)
    assert machines(vendor / "bluepill-qemu" / "libvendor.a") == {"arm"}
    shutil.copy(vendor / "bluepill-qemu" / "libvendor.a", vendor / "host" / "libvendor.a")  # the wrong one
    wrong = project.run("examples/prebuilt")
    wrong.assert_outcomes(failed=2)
    wrong.stdout.fnmatch_lines(
        [f"*prebuilt 'vendor/{{board}}/libvendor.a': libvendor.a was built for arm, but board host is {host_arch()}*"]
    )
    wrong.stdout.fnmatch_lines(
        [f"*pkg-config's -lvendor: libvendor.a was built for arm, but board host is {host_arch()}*"]
    )


def test_machines_reads_objects_and_archives_and_refuses_other_files(tmp_path):
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 1; }\n")
    subprocess.run(["cc", "-c", str(src), "-o", str(tmp_path / "x.o")], check=True)
    subprocess.run(["ar", "rcs", str(tmp_path / "libx.a"), str(tmp_path / "x.o")], check=True)
    assert machines(tmp_path / "x.o") == machines(tmp_path / "libx.a") == {host_arch()}
    with pytest.raises(ElfError, match="neither an ELF file nor an ar archive"):
        machines(src)


def test_directories_with_different_flags_do_not_evict_each_others_runtime(project):
    case = (
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
        "TF_LITE_MICRO_TEST(T) { TF_LITE_MICRO_EXPECT(1); }\nTF_LITE_MICRO_TESTS_END\n"
    )
    project.write("a/ondevice.toml", 'defines = ["FROM_A=1"]\n')
    project.write("a/a_test.c", case)
    project.write("b/ondevice.toml", 'cflags = ["-std=c11"]\n')
    project.write("b/b_test.c", case)
    project.run().assert_outcomes(passed=2)
    # each directory's binary links a runtime compiled with its own flags
    assert len(list((project.path / "_cache").rglob("ondevice_host.c.o"))) == 2
    for _ in range(2):  # whatever order the binaries build in, a rerun compiles nothing
        again = project.run()
        again.assert_outcomes(passed=2)
        assert build_report(again)["compiled"] == 0


def test_pkg_config_finds_the_boards_own_library(project):
    project.copy_examples("prebuilt")
    for board in ("host", "bluepill-qemu"):
        result = project.run("examples/prebuilt/pkgconfig", "-v", board=board)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines([f"*VendorThroughPkgConfig[[]{board}[]] PASSED*"])


def test_a_package_pkg_config_cannot_find_makes_the_items_errors_not_failures(project):
    """A missing library is the machine's set-up: an error naming the package, as for a missing compiler."""
    project.write("ondevice.toml", 'pkg_config = ["ondevice-no-such-package"]\n')
    project.write("a_test.c", LIB_TEST.format(n=1))
    project.write("b_test.c", LIB_TEST.format(n=2))
    result = project.run()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of BothCommonsLinked on host*",
            "host: */ondevice.toml: pkg-config found no ondevice-no-such-package*",
        ]
    )
    assert "build failed" not in result.stdout.str()


def test_pkg_config_never_hands_a_cross_board_the_hosts_library(project, monkeypatch):
    project.copy_examples("prebuilt")
    toml = project.path / "examples" / "prebuilt" / "pkgconfig" / "ondevice.toml"
    toml.write_text('pkg_config = ["vendor"]\npkg_config_path = ["../nothing-for/{board}"]\n')
    project.run("examples/prebuilt/vendor_test.c").assert_outcomes(passed=1)  # makes the host's vendor.pc
    host_pc = project.path / "examples" / "prebuilt" / "vendor" / "host" / "pkgconfig"
    assert (host_pc / "vendor.pc").is_file()
    monkeypatch.setenv("PKG_CONFIG_PATH", str(host_pc))  # the host's .pc is on the usual path...
    result = project.run("examples/prebuilt/pkgconfig", board="mps2-an386")  # ...and is not used
    result.assert_outcomes(errors=1)  # the board's library is missing: the set-up's fault, not the code's
    result.stdout.fnmatch_lines(
        ["*pkg-config found no vendor for board mps2-an386 (searched */nothing-for/mps2-an386)*"]
    )
