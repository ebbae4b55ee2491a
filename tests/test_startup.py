"""A repository that merely has the plugin installed pays (almost) nothing for it."""

from __future__ import annotations


def test_a_run_without_a_board_imports_nothing_heavy():
    """Start-up cost for repositories that merely have the plugin installed."""
    import subprocess
    import sys

    code = (
        "import sys, pytest_ondevice.plugin as p; "
        "heavy = [m for m in sys.modules if m.startswith('pytest_ondevice.') and m not in "
        "('pytest_ondevice.plugin', 'pytest_ondevice.keys', 'pytest_ondevice.labgrid_plugin')]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_c_only_run_imports_no_rust_machinery(project):
    """cargo's scanner and builder cost ~50 ms to import: only a run with a crate pays it."""
    project.copy_examples()
    project.write(
        "conftest.py",
        """
        import sys
        def pytest_sessionfinish(session):
            rust = sorted(m for m in sys.modules if m.split(".")[-1] in ("cargo", "rustbuild", "rustsrc"))
            print("rust modules:", rust)
        """,
    )
    result = project.pytester.runpytest_subprocess("--board=host", "-p", "no:cacheprovider", "-s", "examples")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*rust modules: [[][]]"])
