"""A crash is placed in the code: the failing case names the function and `file:line`
where it struck (a hosted binary's backtrace, a bare-metal fault's pc and lr), said once."""

from __future__ import annotations

import pytest

KERNEL = """\
    #include "relu.h"

    __attribute__((noinline)) void relu_store(signed char *out, int i, signed char v) {
      out[i] = v;
    }

    void relu_s8(const signed char *in, signed char *out, int n) {
      for (int i = 0; i < n; ++i) relu_store(out, i, in[i] > 0 ? in[i] : 0);
    }
"""

PROLOGUE = """\
    #include "micro_test.h"
    #include "relu.h"

    typedef int (*op_fn)(int);
    op_fn missing_op;  /* never set: a null function pointer */

    __attribute__((noinline)) int apply(op_fn op, int x) {
      return op(x) + 1;
    }

    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(ReluWritesItsOutput) {
      const signed char in[4] = {1, -2, 3, -4};
      signed char out[4];
      relu_s8(in, out, 4);
      TF_LITE_MICRO_EXPECT_EQ(out[1], 0);
    }
"""
NULL_OUTPUT = """\
    TF_LITE_MICRO_TEST(ReluIntoNullOutput) {
      const signed char in[4] = {1, -2, 3, -4};
      relu_s8(in, (signed char *)0, 4);
    }
"""
NULL_CALL = """\
    TF_LITE_MICRO_TEST(CallsANullOp) {
      MicroPrintf("%d", apply(missing_op, 3));
    }
"""


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


KERNEL_STORE_LINE, KERNEL_CALL_LINE = _line(KERNEL, "out[i] = v;"), _line(KERNEL, "relu_store(out, i")
APPLY_CALL_LINE = _line(PROLOGUE, "return op(x)")


def _kernel_project(project, *cases: str) -> int:
    """A library kernel and a TFLM-style test of it (the binary stops at the first crash:
    `cases` in run order); returns the line of the null-output call."""
    project.write("lib/relu.h", "void relu_s8(const signed char *in, signed char *out, int n);\n")
    project.write("lib/relu.c", KERNEL)
    project.write("ondevice.toml", 'sources = ["lib/relu.c"]\ninclude_dirs = ["lib"]\n')
    text = PROLOGUE + "".join(cases) + "    TF_LITE_MICRO_TESTS_END\n"
    project.write("crash_test.c", text)
    return _line(text, "relu_s8(in, (signed char *)0, 4);") if NULL_OUTPUT in cases else 0


def _failure_of(result, case: str) -> str:
    """The failure section of one case, as the terminal shows it."""
    text = result.stdout.str()
    start = text.index(f" {case} on ")
    end = text.find("device log:", start)
    return text[start:end]


def test_a_null_write_on_host_names_the_function_and_line_of_each_frame(project):
    null_output_line = _kernel_project(project, NULL_OUTPUT, NULL_CALL)
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=2)
    shown = _failure_of(result, "ReluIntoNullOutput")
    assert "crashed: killed by SIGSEGV while this case was running" in shown
    result.stdout.fnmatch_lines(
        [
            f"  #0 relu_store at lib/relu.c:{KERNEL_STORE_LINE} (pc=0x*)",
            f">*lib/relu.c:{KERNEL_STORE_LINE} *out[[]i[]] = v;",
            f"  #1 relu_s8 at lib/relu.c:{KERNEL_CALL_LINE}",
            f"  #2 main at crash_test.c:{null_output_line}",
            f">*crash_test.c:{null_output_line} *relu_s8(in, (signed char [*])0, 4);",
        ]
    )
    assert "#ondevice crash" not in shown.split("Captured stdout")[0]  # the raw line is the log's
    not_run = _failure_of(result, "CallsANullOp")
    assert "not run: crashed: killed by SIGSEGV before this case" in not_run and "#0" not in not_run


def test_a_call_through_a_null_function_pointer_on_host_names_the_caller(project):
    _kernel_project(project, NULL_CALL, NULL_OUTPUT)
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "crashed: killed by SIGSEGV while this case was running",
            "  #0 pc=0x0: not in the program (a call through a null function pointer?)",
            f"  #1 apply at crash_test.c:{APPLY_CALL_LINE} (lr=0x*): the caller",
        ]
    )


def test_a_googletest_crash_names_the_test_s_function(project):
    project.write(
        "g_test.cc",
        """
        #include <gtest/gtest.h>
        volatile int *target = nullptr;
        __attribute__((noinline)) void poke(volatile int *p) { *p = 1; }
        TEST(Crash, Fine) { EXPECT_EQ(1, 1); }
        TEST(Crash, Null) { poke(target); }
        """,
    )
    result = project.run("-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["crashed: killed by SIGSEGV while this case was running", "  #0 poke(int volatile[*]) at g_test.cc:4 (pc=0x*)"]
    )


@pytest.mark.slow
def test_a_null_write_on_rpi_under_qemu_user_names_the_function_and_line(project):
    null_output_line = _kernel_project(project, NULL_OUTPUT, NULL_CALL)
    result = project.run("-v", "--device=qemu", board="rpi")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "crashed: killed by SIGSEGV while this case was running",
            f"  #0 relu_store at lib/relu.c:{KERNEL_STORE_LINE} (pc=0x*)",
            f"  #1 relu_s8 at lib/relu.c:{KERNEL_CALL_LINE}",
            f"  #2 main at crash_test.c:{null_output_line}",
        ]
    )


@pytest.mark.slow
def test_a_bare_metal_null_call_shows_the_fault_once_and_the_caller(project):
    _kernel_project(project, NULL_CALL, NULL_OUTPUT)
    result = project.run("-v", board="mps2-an386")
    result.assert_outcomes(passed=1, failed=2)
    shown = _failure_of(result, "CallsANullOp").split("Captured stdout")[0]
    assert shown.count("UsageFault (INVSTATE)") == 1, shown
    result.stdout.fnmatch_lines(
        [
            "fault: UsageFault (INVSTATE) pc=0x00000000 lr=0x* while this case was running",
            "  #0 pc=0x0: not in the program (a call through a null function pointer?)",
            f"  #1 apply at crash_test.c:{APPLY_CALL_LINE} (lr=0x*): the caller",
        ]
    )


@pytest.mark.slow
def test_a_bare_metal_bad_write_names_the_function_that_wrote(project):
    _kernel_project(project)
    project.write(
        "bad_test.c",
        """
        #include "micro_test.h"
        #include "relu.h"
        TF_LITE_MICRO_TESTS_BEGIN
        TF_LITE_MICRO_TEST(ReluIntoUnmappedOutput) {
          const signed char in[4] = {1, -2, 3, -4};
          relu_s8(in, (signed char *)0xFFFFFFF0, 4);
        }
        TF_LITE_MICRO_TESTS_END
        """,
    )
    result = project.run("-v", "bad_test.c", board="bluepill-qemu")
    result.assert_outcomes(failed=1)
    shown = _failure_of(result, "ReluIntoUnmappedOutput").split("Captured stdout")[0]
    assert shown.count("BusFault (PRECISERR)") == 1, shown
    result.stdout.fnmatch_lines(
        [
            "fault: BusFault (PRECISERR) pc=0x08* BFAR=0xfffffff0 while this case was running",
            f"  #0 relu_store at lib/relu.c:{KERNEL_STORE_LINE} (pc=0x8*)",
            f"  #1 relu_s8 at lib/relu.c:{KERNEL_CALL_LINE} (lr=0x8*): the caller",
        ]
    )
