"""The crash line and a fault's registers, read bounded and tolerant of garbage; the
addr2line output read frame by frame."""

from __future__ import annotations

from pytest_ondevice.compiling.symbolize import Frame, _parse
from pytest_ondevice.formats.crashline import MAX_FRAMES, Crash, CrashWatch, from_fault, parse_crash_line
from pytest_ondevice.formats.tflm_parser import parse_bytes
from pytest_ondevice.formats.verdicts import RunEnd


def test_a_crash_line_gives_its_signal_registers_base_and_frames():
    crash = parse_crash_line("SIGSEGV pc=0x55d4c0a01234 lr=0x10 base=0x55d4c0a00000 frames=0x55d4c0a01300,0x7f0012")
    assert crash == Crash("SIGSEGV", pc=0x55D4C0A01234, lr=0x10, frames=(0x55D4C0A01300, 0x7F0012), base=0x55D4C0A00000)


def test_garbage_in_a_crash_line_is_left_out_and_frames_are_bounded():
    assert parse_crash_line("") is None
    assert parse_crash_line("segfault pc=0x10") is None
    crash = parse_crash_line("SIGBUS pc=zz lr= base=0x1g frames=0x1,0x2,nonsense,0x3 extra words=")
    assert crash == Crash("SIGBUS", frames=(1, 2))
    many = ",".join(f"0x{i + 1:x}" for i in range(500))
    crash = parse_crash_line(f"SIGSEGV pc=0x1 frames={many}")
    assert crash is not None and len(crash.frames) <= MAX_FRAMES
    assert parse_crash_line("SIGSEGV pc=0x" + "f" * 40) == Crash("SIGSEGV")


def test_a_fault_line_gives_pc_and_lr():
    crash = from_fault("UsageFault (INVSTATE) pc=0x00000000 lr=0x080017e5 CFSR=0x00020000 HFSR=0x00000000")
    assert crash == Crash("UsageFault (INVSTATE)", pc=0, lr=0x080017E5)
    assert from_fault("LoadAccessFault pc=0x80000120 mcause=0x00000005 mtval=0xfffffff0") == Crash(
        "LoadAccessFault", pc=0x80000120
    )
    assert from_fault("lockup: the CPU could not take a fault") is None


def test_a_crash_line_counts_only_for_the_signal_the_run_died_of():
    watch = CrashWatch()
    watch.line("SIGABRT pc=0x10")  # a forked child's (a death test): the run went on
    watch.line("SIGSEGV pc=0x20")
    assert watch.of(RunEnd(signal="SIGSEGV"), "A") == Crash("SIGSEGV", pc=0x20, case="A")
    assert watch.of(RunEnd(signal="SIGBUS"), "A") is None
    assert watch.of(RunEnd(exit_code=0), "A") is None
    assert watch.of(RunEnd(signal="SIGSEGV", timed_out=2.0), "A") is None
    assert watch.of(RunEnd(fault="HardFault pc=0x08000120 lr=0x08000201"), None) == Crash(
        "HardFault", pc=0x08000120, lr=0x08000201
    )


def test_the_parser_hands_the_crash_of_the_running_case_on():
    out = b"Testing A\nTesting B\n\n#ondevice crash SIGSEGV pc=0x1234 frames=0x1300\n"
    result = parse_bytes([out], ["A", "B", "C"], RunEnd(signal="SIGSEGV"))
    assert result.crash == Crash("SIGSEGV", pc=0x1234, frames=(0x1300,), case="B")
    assert result.cases["B"].message == "crashed: killed by SIGSEGV while this case was running"
    fault = parse_bytes([b"Testing A\n#ondevice fault HardFault pc=0x10 lr=0x21\n"], ["A"], RunEnd(exit_code=3))
    assert fault.crash == Crash("HardFault", pc=0x10, lr=0x21, case="A")
    assert fault.cases["A"].message == "fault: HardFault pc=0x10 lr=0x21 while this case was running"


def test_addr2line_output_is_read_with_inlined_frames_and_unknowns():
    output = "\n".join(
        [
            "0x0000000000001234",
            "store_at",
            "./src/kernel.c:6 (discriminator 2)",
            "main",
            "././crash_test.c:19",
            "0x0000000000009999",
            "??",
            "??:0",
        ]
    )
    frames = _parse(output, [0x1234, 0x9999, 0x5555])
    assert frames[0x1234] == [Frame("store_at", "src/kernel.c", 6, inlined=True), Frame("main", "crash_test.c", 19)]
    assert frames[0x9999] == [Frame(None)]
    assert frames[0x5555] == [Frame(None)]
