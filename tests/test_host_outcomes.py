"""End to end on the host board: every outcome a user can meet, as they would see it."""

from __future__ import annotations

import os
import time

import pytest
from conftest import QUIET

V1_MIXED = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(AddsUp) { TF_LITE_MICRO_EXPECT_EQ(2, 1 + 1); }
    TF_LITE_MICRO_TEST(OffByOne) {
      int got = 41;
      TF_LITE_MICRO_EXPECT_EQ(got, 42);
    }
    TF_LITE_MICRO_TEST(AlsoFine) { TF_LITE_MICRO_EXPECT_NEAR(1.0f, 1.01f, 0.1f); }
    TF_LITE_MICRO_TESTS_END
"""

V2_MIXED = """
    #include "micro_test.h"
    TEST(Gemm, Identity) { EXPECT_EQ(1, 1); }
    TEST(Gemm, Wrong) {
      int acc = 7;
      EXPECT_EQ(acc, 9);
    }
    TF_LITE_MICRO_TESTS_MAIN
"""


def test_examples_pass_with_one_item_per_case(project):
    project.copy_examples()
    result = project.run("-v", "examples")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(
        [
            "*examples/kernels/depthwise_conv_test.c::SimpleTestQuantized[[]host[]] PASSED*",
            "*examples/kernels/fully_connected_test.cc::FullyConnected.Float[[]host[]] PASSED*",
        ]
    )


def test_v1_failure_shows_file_line_and_both_values(project):
    project.write("mixed_test.c", V1_MIXED)
    result = project.run("-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*mixed_test.c::OffByOne[[]host[]] FAILED*",
            "got == 42 failed at mixed_test.c:7 (41 vs 42)",
            "*device log: *mixed_test.c.log",
        ]
    )
    assert result.ret == 1


def test_v2_failure_shows_expression_and_values(project):
    project.write("gemm_test.cc", V2_MIXED)
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*gemm_test.cc::Gemm.Wrong[[]host[]] FAILED*",
            "gemm_test.cc:6: Failure",
            "*Expression:  acc == 9",
            "*Evaluated:   7 == 9",
        ]
    )


def test_crash_names_the_signal_and_later_cases_are_not_run(project):
    project.write(
        "crash_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Before) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(Crashes) {
          volatile int *p = (volatile int *)0;
          *p = 1;
        }
        TF_LITE_MICRO_TEST(After) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*Crashes[[]host[]] FAILED*",
            "*After[[]host[]] FAILED*",
            "*crashed: killed by SIGSEGV while this case was running*",
            "*not run: crashed: killed by SIGSEGV before this case*",
        ]
    )


def test_abort_is_a_failure_naming_sigabrt(project):
    project.write(
        "abort_test.c",
        """
        #include <stdlib.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Aborts) { abort(); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*crashed: killed by SIGABRT while this case was running*"])


def test_hang_is_killed_at_the_timeout_with_its_children(project):
    pidfile = project.path / "child.pid"
    project.write(
        "hang_test.c",
        f"""
        #include <stdio.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Hangs) {{
          pid_t child = fork();
          if (child == 0) {{ for (;;) pause(); }}
          FILE *f = fopen("{pidfile}", "w");
          fprintf(f, "%d", (int)child);
          fclose(f);
          for (;;) pause();
        }}
        TF_LITE_MICRO_TEST(Never) {{ TF_LITE_MICRO_EXPECT(1); }}
        TF_LITE_MICRO_TESTS_END
        """,
    )
    start = time.monotonic()
    result = project.run("--device-timeout=1.5")
    assert time.monotonic() - start < 30
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*timed out after 1.5s while this case was running*",
            "*not run: timed out after 1.5s before this case*",
        ]
    )
    child = int(pidfile.read_text())
    assert _gone(child), "the hung binary's child survived the timeout"


def _gone(pid: int, within: float = 10.0) -> bool:
    """Polls until pid is gone or a zombie; False if it still runs at the deadline."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def test_output_without_closing_summary_is_no_verdict(project):
    project.write(
        "early_exit_test.c",
        """
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Completes) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(ExitsEarly) { _exit(0); }
        TF_LITE_MICRO_TEST(NeverReached) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*Completes[[]host[]] PASSED*",
            "*no verdict: output ended while this case was running*",
            "*not run: no verdict (output ended without the closing summary)*",
        ]
    )


HANDWRITTEN = """
    #include "micro_test.h"
    #if 0  /* declared for discovery; the output below is written by hand */
    TF_LITE_MICRO_TEST(Only) {{}}
    #endif
    int main(void) {{
      MicroPrintf("Testing Only");
      MicroPrintf("1/1 tests passed");
      MicroPrintf("{magic}");
      return {code};
    }}
"""


def test_pass_string_then_nonzero_exit_is_not_a_pass(project):
    project.write("liar_test.c", HANDWRITTEN.format(magic="~~~ALL TESTS PASSED~~~", code=3))
    result = project.run()
    result.assert_outcomes(failed=2)  # the case, and the binary's own report of why
    result.stdout.fnmatch_lines(["*binary[[]host[]]: a problem of the binary as a whole, not of one case*"])
    result.stdout.fnmatch_lines(["*~~~ALL TESTS PASSED~~~ was printed, but the binary exited with code 3*"])


def test_fail_string_with_exit_zero_is_a_failure_that_says_so(project):
    project.write("liar_test.c", HANDWRITTEN.format(magic="~~~SOME TESTS FAILED~~~", code=0))
    result = project.run()
    result.assert_outcomes(failed=2)  # the case, and the binary's own report of why
    result.stdout.fnmatch_lines(["*binary[[]host[]]: a problem of the binary as a whole, not of one case*"])
    result.stdout.fnmatch_lines(["*~~~SOME TESTS FAILED~~~ was printed, but the binary exited with code 0*"])


def test_pass_string_then_crash_is_not_a_pass(project):
    project.write(
        "crash_after_test.c",
        """
        #include <signal.h>
        #include "micro_test.h"
        #if 0
        TF_LITE_MICRO_TEST(Only) {}
        #endif
        int main(void) {
          MicroPrintf("Testing Only");
          MicroPrintf("1/1 tests passed");
          MicroPrintf("~~~ALL TESTS PASSED~~~");
          raise(SIGSEGV);
          return 0;
        }
        """,
    )
    result = project.run()
    result.assert_outcomes(failed=2)  # the case, and the binary's own report of why
    result.stdout.fnmatch_lines(["*binary[[]host[]]: a problem of the binary as a whole, not of one case*"])
    result.stdout.fnmatch_lines(
        ["*~~~ALL TESTS PASSED~~~ was printed, but then the binary crashed: killed by SIGSEGV*"]
    )


def test_case_the_board_compiles_out_is_skipped_naming_the_condition(project):
    project.write(
        "partial_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Runs) { TF_LITE_MICRO_EXPECT(1); }
        #ifdef HAVE_DSP
        TF_LITE_MICRO_TEST(NeedsDsp) { TF_LITE_MICRO_EXPECT(1); }
        #endif
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*NeedsDsp[[]host[]] SKIPPED*", "*compiled out on host: `#ifdef HAVE_DSP`*"])


def test_case_generated_by_a_macro_is_reported_not_dropped(project):
    project.write(
        "generated_test.c",
        """
        #include "micro_test.h"
        #define KERNEL_TEST(kernel) TF_LITE_MICRO_TEST(kernel##_Works)
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Plain) { TF_LITE_MICRO_EXPECT(1); }
        KERNEL_TEST(Conv) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v", "-rf")
    result.stdout.fnmatch_lines(["*generated_test.c::Conv_Works[[]host[]]*FAILED*"])
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*was not found in the source*"])


def test_an_unlisted_case_is_an_item_of_its_own_in_every_report(project):
    project.write(
        "generated_test.c",
        """
        #include "micro_test.h"
        #define KERNEL_TEST(kernel) TF_LITE_MICRO_TEST(kernel##_Works)
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Plain) { TF_LITE_MICRO_EXPECT(1); }
        KERNEL_TEST(Conv) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
        KERNEL_TEST(Pool) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    import xml.etree.ElementTree as ET

    for extra in ((), ("-n", "2")):  # in-process and through xdist's workers
        junit = project.path / "junit.xml"
        result = project.run("-v", f"--junitxml={junit}", *extra)
        result.assert_outcomes(passed=2, failed=1)
        assert result.ret == 1
        result.stdout.fnmatch_lines_random(
            ["*generated_test.c::Pool_Works[[]host[]] PASSED*", "*generated_test.c::Conv_Works[[]host[]] FAILED*"]
        )
        cases = {c.get("name"): c for c in ET.parse(junit).iter("testcase")}
        assert set(cases) == {"Plain[host]", "Conv_Works[host]", "Pool_Works[host]"}, cases
        failure = cases["Conv_Works[host]"].find("failure")
        assert failure is not None and "1 == 2 failed" in failure.get("message"), ET.tostring(cases["Conv_Works[host]"])
        props = {p.get("name"): p.get("value") for p in cases["Conv_Works[host]"].iter("property")}
        assert props["found_on_device"] == "case 'Conv_Works' ran on the device but was not found in the source"
        assert props["board"] == "host" and "binary_sha256" in props, props


def test_skip_extension_reports_skipped_with_reason(project):
    project.write(
        "skip_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(NeedsFpu) { TF_LITE_MICRO_SKIP("no FPU on this board"); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    project.write(
        "skip2_test.cc",
        """
        #include "micro_test.h"
        TEST(Dsp, Smlad) { GTEST_SKIP(); }
        TF_LITE_MICRO_TESTS_MAIN
        """,
    )
    result = project.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no FPU on this board*"])


def test_compile_error_fails_that_binary_only(project):
    project.write(
        "broken_test.c",
        '#include "micro_test.h"\nTF_LITE_MICRO_TESTS_BEGIN\n'
        "TF_LITE_MICRO_TEST(A) { int x = ; }\nTF_LITE_MICRO_TESTS_END\n",
    )
    project.write("gemm_test.cc", V2_MIXED)
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["*broken_test.c::A[[]host[]] FAILED*", "*build failed for board host*", "*broken_test.c:3:*error*"]
    )


def test_live_log_is_prefixed_with_the_board(project):
    project.write("mixed_test.c", V1_MIXED)
    result = project.run("-s")
    result.stdout.fnmatch_lines(["[[]host[]] Testing AddsUp", "[[]host[]] ~~~SOME TESTS FAILED~~~"])
    quiet = project.run()
    assert "[host] Testing AddsUp" not in quiet.stdout.str()
    live = project.run("--device-log=live")
    live.stdout.fnmatch_lines(["[[]host[]] Testing AddsUp"])


def test_failure_report_carries_the_device_log_and_the_log_file(project):
    project.write("mixed_test.c", V1_MIXED)
    result = project.run()
    result.stdout.fnmatch_lines(["*Captured stdout (device log) call*", "Testing OffByOne"])
    log = project.path / "_build" / "host" / "logs" / "mixed_test.c.log"
    text = log.read_text()
    assert "Testing AddsUp" in text and "~~~SOME TESTS FAILED~~~" in text
    assert "exited with code 1" in text


def test_without_board_nothing_is_collected_or_built(project):
    project.write("mixed_test.c", V1_MIXED)
    project.pytester.makepyfile(test_plain="def test_python():\n    assert True\n")
    result = project.pytester.runpytest("-p", "no:cacheprovider", *QUIET)
    result.assert_outcomes(passed=1)
    assert not (project.path / "_build").exists()


def test_select_with_k_and_junit_per_case(project):
    project.write("mixed_test.c", V1_MIXED)
    junit = project.path / "out.xml"
    result = project.run("-k", "OffByOne or AddsUp", f"--junitxml={junit}")
    result.assert_outcomes(passed=1, failed=1)
    xml = junit.read_text()
    assert 'name="AddsUp[host]"' in xml and 'name="OffByOne[host]"' in xml
    assert 'name="AlsoFine' not in xml  # not selected (its source may show in a failure's context)
    assert 'name="board" value="host"' in xml


def test_last_failed_reruns_only_the_failing_case(project):
    project.write("mixed_test.c", V1_MIXED)
    project.pytester.runpytest("--board=host", *QUIET)
    result = project.pytester.runpytest("--board=host", "--lf", "-v", *QUIET)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*OffByOne[[]host[]] FAILED*"])


def test_parallel_workers_with_xdist(project):
    project.write("mixed_test.c", V1_MIXED)
    project.write("gemm_test.cc", V2_MIXED)
    result = project.run("-n", "2")
    result.assert_outcomes(passed=3, failed=2)


def test_a_host_binary_runs_when_its_cases_are_reached_so_x_stops_the_ones_after(project):
    """A local run is not queued ahead on another thread (it costs more than it saves):
    after -x stops the session at a failure, no later binary has run."""
    project.write("a_test.c", V1_MIXED)
    project.write("b_test.cc", V2_MIXED)
    result = project.run("-x")
    result.assert_outcomes(passed=1, failed=1)
    logs = project.path / "_build" / "host" / "logs"
    assert (logs / "a_test.c.log").is_file()
    assert not (logs / "b_test.cc.log").exists()


def test_a_board_of_a_remote_transport_still_runs_ahead():
    from pytest_ondevice import transports

    assert transports.runs_ahead({"name": "ssh"}) and transports.runs_ahead({"name": "qemu-user"})
    assert not transports.runs_ahead({"name": "local"})
    # a local loader with a device's console: the device's time is worth overlapping
    assert transports.runs_ahead({"name": "local", "console": "uart"})


def test_timeout_from_ini_and_per_file_override(project):
    hang = """
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Sleeps) { sleep(30); }
        TF_LITE_MICRO_TESTS_END
    """
    project.write("a/slow_test.c", hang)
    project.write("a/ondevice.toml", '[files."slow_test.c"]\ntimeout = 0.5\n')
    project.write("b/slow_test.c", hang)
    project.pytester.makeini(f"[pytest]\nondevice_build_dir = {project.path / '_build'}\nondevice_timeout = 1\n")
    result = project.run("-v")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        ["*timed out after 0.5s while this case was running*", "*timed out after 1s while this case was running*"]
    )


def test_an_unknown_transport_is_a_usage_error_naming_the_file(project):
    project.write("boards/broken.toml", 'extends = "host"\n[transport]\nname = "carrier-pigeon"\n')
    project.write("mixed_test.c", V1_MIXED)
    result = project.run(board="broken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # said when the board file loads, before anything is built
    result.stderr.fnmatch_lines(["*broken.toml: 'transport': unknown transport 'carrier-pigeon'; known transports: *"])


def test_an_unreachable_device_is_an_error_not_a_failure(project):
    project.write("boards/pi.toml", 'extends = "rpi"\n[transport]\nhost = "127.0.0.1"\nconnect_timeout = 2.0\n')
    project.write("mixed_test.c", V1_MIXED)
    result = project.run("--device=127.0.0.1:1", board="pi")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*127.0.0.1*cannot connect*"])


def test_a_device_error_is_its_message_and_no_traceback_is_formatted_for_it(project, monkeypatch):
    """Formatting a traceback of the plugin's frames cost ~50 ms an item: a board set aside
    early in a 100,000-case run took 13 minutes to report its errors."""
    from _pytest._code.code import ExceptionInfo

    project.write(
        "boards/noemu.toml", 'extends = "host"\n[transport]\nname = "qemu-user"\nbinary = "/nonexistent/qemu"\n'
    )
    project.write("mixed_test.c", V1_MIXED)
    formatted = []
    getrepr = ExceptionInfo.getrepr
    monkeypatch.setattr(
        ExceptionInfo, "getrepr", lambda self, *a, **k: formatted.append(self.typename) or getrepr(self, *a, **k)
    )
    result = project.run(board="noemu")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*noemu: /nonexistent/qemu not found; install QEMU*"])
    assert formatted == []


def test_pid_of_this_process_is_not_touched(project):
    """Killing a hung binary's group never reaches pytest: the group is the binary's own."""
    info = project.path / "pgid.txt"
    project.write(
        "spin_test.c",
        f"""
        #include <stdio.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Spins) {{
          FILE *f = fopen("{info}", "w");
          fprintf(f, "%d %d", (int)getpid(), (int)getpgid(0));
          fclose(f);
          for (;;) {{}}
        }}
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("--device-timeout=0.5")
    result.assert_outcomes(failed=1)
    pid, pgid = map(int, info.read_text().split())
    assert pgid == pid != os.getpgid(0)
    assert _gone(pid)


DATA_TEST = """
    #include <stdio.h>
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(ReadsGoldenFile) {
      char buf[32] = {0};
      FILE *f = fopen("golden.txt", "r");
      TF_LITE_MICRO_EXPECT(f != NULL);
      if (f) { fgets(buf, sizeof buf, f); fclose(f); }
      TF_LITE_MICRO_EXPECT_STRING_EQ(buf, "71 -34 99 -20");
    }
    TF_LITE_MICRO_TESTS_END
"""


def test_data_files_declared_in_ondevice_toml_are_beside_the_binary(project):
    project.write("testdata/golden.txt", "71 -34 99 -20")
    project.write("ondevice.toml", '[files."golden_test.c"]\ndata = ["testdata/golden.txt"]\n')
    project.write("golden_test.c", DATA_TEST)
    result = project.run()
    result.assert_outcomes(passed=1)


def test_a_failure_shows_each_failing_source_line_with_context(project):
    project.write(
        "ctx_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(TwoWrong) {
          int first = 1;
          TF_LITE_MICRO_EXPECT_EQ(first, 2);
          int second = 3;
          TF_LITE_MICRO_EXPECT_EQ(second, 4);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "first == 2 failed at ctx_test.c:6 (1 vs 2)",
            "  ctx_test.c:4     TF_LITE_MICRO_TEST(TwoWrong) {",
            "  ctx_test.c:5       int first = 1;",
            "> ctx_test.c:6       TF_LITE_MICRO_EXPECT_EQ(first, 2);",
            "  ctx_test.c:7       int second = 3;",
            "  ctx_test.c:8       TF_LITE_MICRO_EXPECT_EQ(second, 4);",
            "second == 4 failed at ctx_test.c:8 (3 vs 4)",
            "*",
            "> ctx_test.c:8       TF_LITE_MICRO_EXPECT_EQ(second, 4);",
            "*",
            "device log: *ctx_test.c.log",
        ]
    )


def test_the_short_summary_and_junit_carry_the_failure_message(project):
    project.write("mixed_test.c", V1_MIXED)
    junit = project.path / "out.xml"
    result = project.run("-rf", f"--junitxml={junit}")
    result.stdout.fnmatch_lines(["FAILED mixed_test.c::OffByOne[[]host[]] - got == 42 failed at mixed_test.c:7*"])
    assert 'message="got == 42 failed at mixed_test.c:7 (41 vs 42)"' in junit.read_text()


def test_binaries_run_with_a_short_switch_interval_and_it_is_restored(project):
    """The threads reading the binaries' output wait for the interpreter lock at each
    wake-up: the session shortens the interval while it runs them, and gives it back."""
    import sys

    project.write("adds_test.c", V1_MIXED)
    project.write(
        "conftest.py",
        """
        import sys
        def pytest_runtest_call(item):
            item.config._interval_seen = sys.getswitchinterval()
        def pytest_unconfigure(config):
            print(f"interval during the run: {getattr(config, '_interval_seen', None)}")
        """,
    )
    before = sys.getswitchinterval()
    result = project.run("-s")
    result.stdout.fnmatch_lines(["*interval during the run: 0.001*"])
    assert sys.getswitchinterval() == before


def test_a_file_a_binary_leaves_in_its_working_directory_is_not_seen_by_the_next(project):
    """An emptied run directory is handed on to the next binary; one with anything in it never."""
    project.write(
        "a_writes_test.c",
        """
        #include <stdio.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(LeavesAFile) {
          FILE *f = fopen("leftover.txt", "w");
          TF_LITE_MICRO_EXPECT(f != NULL);
          fclose(f);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    for name in ("b_reads_test.c", "c_reads_test.c"):
        project.write(
            name,
            """
            #include <stdio.h>
            #include "micro_test.h"
            TF_LITE_MICRO_TESTS_BEGIN
            TF_LITE_MICRO_TEST(StartsInAnEmptyDirectory) {
              TF_LITE_MICRO_EXPECT(fopen("leftover.txt", "r") == NULL);
              TF_LITE_MICRO_EXPECT(fopen("mine.txt", "r") == NULL);
              FILE *f = fopen("mine.txt", "w");
              fclose(f);
              remove("mine.txt");
            }
            TF_LITE_MICRO_TESTS_END
            """,
        )
    result = project.run("-v", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
