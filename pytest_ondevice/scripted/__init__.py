"""Scripted device tests: Python test functions that drive a leased device through the
`device` fixture (build, flash, run, expect on the console), beside the test binaries.

    fixtures.py  the pytest side: the `device` and `device_factory` fixtures, the `board`
                 marker, one test per selected board, reports
    device.py    what a test holds: one leased device and its transport
    console.py   pexpect's expect engine over a program's output on the device
    testlog.py   the device log of one test (every stream it opened, prefixed)
"""
