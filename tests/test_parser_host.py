"""End to end on the host board: what a test prints cannot move a verdict, every file
is run, a closed output is not a crash, logs are bounded and reach JUnit."""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET


def _verdicts(result) -> dict[str, str]:
    """{case: PASSED|FAILED|SKIPPED} from a -v run."""
    found = {}
    for line in result.outlines:
        m = re.search(r"::(\S+)\[host\] (PASSED|FAILED|SKIPPED)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


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


def test_printed_start_of_another_case_is_not_a_pass_even_selected_alone(project):
    project.write(
        "forge_test.c",
        """
        #include <stdio.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Liar) {
          printf("Testing Victim\\n");
          fflush(stdout);
          TF_LITE_MICRO_EXPECT_EQ(41, 42);
        }
        TF_LITE_MICRO_TEST(Victim) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v", "-k", "Liar")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*41 == 42 failed at *forge_test.c:8 (41 vs 42)*"])
    whole = project.run("-v")
    assert _verdicts(whole) == {"Liar": "FAILED", "Victim": "PASSED"}


def test_pass_string_inside_a_case_does_not_steal_the_verdict(project):
    project.write(
        "chatty_test.c",
        """
        #include <stdio.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Chatty) {
          printf("~~~ALL TESTS PASSED~~~\\n1/1 tests passed\\n");
          fflush(stdout);
          TF_LITE_MICRO_EXPECT_EQ(41, 42);
        }
        TF_LITE_MICRO_TEST(Fine) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    assert _verdicts(result) == {"Chatty": "FAILED", "Fine": "PASSED"}
    result.stdout.fnmatch_lines(["*41 == 42 failed at *chatty_test.c:8 (41 vs 42)*"])


def test_a_pass_printed_before_main_by_a_binary_of_our_header_is_not_believed(project):
    """TFLM's own output is judged without a nonce, but a binary built with our header
    carries its marker: code that prints TFLM's pass lines and exits before main fails."""
    project.write(
        "x_test.c",
        """
        #include <stdio.h>
        #include <unistd.h>
        #include "micro_test.h"
        __attribute__((constructor)) static void forge(void) {
          printf("Testing Real\\n1/1 tests passed\\n~~~ALL TESTS PASSED~~~\\n");
          fflush(stdout);
          _exit(0);
        }
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Real) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    assert _verdicts(result) == {"Real": "FAILED", "binary": "FAILED"}
    result.stdout.fnmatch_lines(["*its output never declared the run's nonce*"])


def test_file_whose_cases_are_all_made_by_a_macro_is_run_and_reported(project):
    project.write(
        "plain_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Plain) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    project.write(
        "macro_test.c",
        """
        #include "micro_test.h"
        #define MYTEST(n) TF_LITE_MICRO_TEST(n)
        TF_LITE_MICRO_TESTS_BEGIN
        MYTEST(Good) { TF_LITE_MICRO_EXPECT(1); }
        MYTEST(Bad) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    result.stdout.fnmatch_lines(["*macro_test.c::Bad[[]host[]]*FAILED*"])
    assert result.ret != 0
    assert _verdicts(result)["Plain"] == "PASSED"
    assert _verdicts(result)["Good"] == "PASSED"


def test_file_with_no_visible_case_that_prints_none_fails(project):
    project.write("empty_test.c", "int main(void) { return 0; }\nvoid ondevice_unused(void) {}\n")
    result = project.run("-v")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*empty_test.c::binary[[]host[]]*FAILED*", "*found no test case*"])


def test_duplicate_case_name_is_named_and_the_others_pass(project):
    project.write(
        "dup_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Same) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(Same) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(Other) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v")
    assert _verdicts(result) == {"Same": "FAILED", "Other": "PASSED"}
    result.stdout.fnmatch_lines(["*Same is declared at lines 4, 5*", "*more than one case in this file has this name*"])


CLOSES_OUTPUT = """
    #include <stdlib.h>
    #include <unistd.h>
    #include "micro_test.h"
    static void close_then_work(void) {
      close(1);
      close(2);
      usleep(300000);
    }
    TF_LITE_MICRO_TESTS_BEGIN
    atexit(close_then_work);
    TF_LITE_MICRO_TEST(Fine) { TF_LITE_MICRO_EXPECT(1); }
    TF_LITE_MICRO_TESTS_END
"""


def test_binary_that_closes_its_output_before_exiting_is_waited_for(project):
    project.write("closes_test.c", CLOSES_OUTPUT)
    result = project.run("-v")
    result.assert_outcomes(passed=1)


def test_binary_that_closes_its_output_and_hangs_still_times_out(project):
    project.write("closes_test.c", CLOSES_OUTPUT.replace("usleep(300000)", "for (;;) pause()"))
    start = time.monotonic()
    result = project.run("--device-timeout=1")
    assert time.monotonic() - start < 20
    result.assert_outcomes(failed=2)  # the case, and the binary: summary then a hang
    result.stdout.fnmatch_lines(["*timed out after 1s*"])


def test_binary_that_exits_leaving_a_child_running_passes_and_the_child_is_ended(project):
    pidfile = project.path / "child.pid"
    project.write(
        "child_test.c",
        f"""
        #include <stdio.h>
        #include <unistd.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Forks) {{
          pid_t child = fork();
          if (child == 0) {{ for (;;) pause(); }}
          FILE *f = fopen("{pidfile}", "w");
          fprintf(f, "%d", (int)child);
          fclose(f);
          TF_LITE_MICRO_EXPECT(child > 0);
        }}
        TF_LITE_MICRO_TESTS_END
        """,
    )
    start = time.monotonic()
    result = project.run("--device-timeout=30")
    assert time.monotonic() - start < 20, "the run waited for the child instead of the binary"
    result.assert_outcomes(passed=1)
    assert _gone(int(pidfile.read_text())), "the child the binary left behind is still running"


def test_failing_case_log_reaches_junit_system_out(project):
    project.write(
        "mixed_test.c",
        """
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Good) { TF_LITE_MICRO_EXPECT(1); }
        TF_LITE_MICRO_TEST(OffByOne) { TF_LITE_MICRO_EXPECT_EQ(41, 42); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    xml = project.path / "junit.xml"
    result = project.run(f"--junitxml={xml}", "-o", "junit_logging=all")
    result.assert_outcomes(passed=1, failed=1)
    cases = {tc.get("name"): tc for tc in ET.parse(xml).getroot().iter("testcase")}
    failed = next(tc for name, tc in cases.items() if "OffByOne" in name)
    out = failed.findtext("system-out") or ""
    assert "Testing OffByOne" in out and "41 == 42 failed at" in out


def test_device_log_file_keeps_head_and_tail_and_says_what_was_cut(project):
    project.write(
        "flood_test.c",
        """
        #include <stdio.h>
        #include "micro_test.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(Floods) {
          for (int i = 0; i < 40000; i++) printf("flood line %06d ......................................\\n", i);
          fflush(stdout);
          TF_LITE_MICRO_EXPECT(1);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    project.pytester.makeini(
        f"""
        [pytest]
        ondevice_build_dir = {project.path / "_build"}
        ondevice_cache_dir = {project.path / "_cache"}
        ondevice_log_max = 64K
        """
    )
    result = project.run()
    result.assert_outcomes(passed=1)
    log = project.path / "_build" / "host" / "logs" / "flood_test.c.log"
    text = log.read_text()
    assert log.stat().st_size < 64 * 1024 + 1024
    assert "flood line 000000" in text and "flood line 039999" in text
    m = re.search(r"# pytest-ondevice: (\d+) lines \((\d+) bytes\) cut here", text)
    assert m, text[:2000]
    kept = sum(1 for line in text.splitlines() if line.startswith("flood line"))
    assert kept + int(m.group(1)) == 40000
    assert "~~~ALL TESTS PASSED~~~" in text and "exited with code 0" in text


def test_macro_generated_failing_case_log_reaches_junit_too(project):
    project.write(
        "macro_test.c",
        """
        #include "micro_test.h"
        #define MYTEST(n) TF_LITE_MICRO_TEST(n)
        TF_LITE_MICRO_TESTS_BEGIN
        MYTEST(Bad) { TF_LITE_MICRO_EXPECT_EQ(1, 2); }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    xml = project.path / "junit.xml"
    project.run(f"--junitxml={xml}", "-o", "junit_logging=all")
    cases = {tc.get("name"): tc for tc in ET.parse(xml).getroot().iter("testcase")}
    bad = next(tc for name, tc in cases.items() if "Bad" in name)
    assert "1 == 2 failed at" in (bad.findtext("system-out") or "")
