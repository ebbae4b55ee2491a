"""A repository that merely has the plugin installed pays (almost) nothing for it."""

from __future__ import annotations


def test_a_run_without_a_board_imports_nothing_heavy():
    """Start-up cost for repositories that merely have the plugin installed."""
    import subprocess
    import sys

    light = (  # the plugin, the keys it shares with the nodes, and the packages they sit in
        "pytest_ondevice.plugin",
        "pytest_ondevice.config",
        "pytest_ondevice.config.keys",
        "pytest_ondevice.farm",
        "pytest_ondevice.farm.labgrid_plugin",
    )
    code = (
        "import sys, pytest_ondevice.plugin as p; "
        f"heavy = [m for m in sys.modules if m.startswith('pytest_ondevice.') and m not in {light!r}]; print(heavy)"
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


def test_a_board_run_freezes_its_imports_and_items_only_until_pytest_has_collected_garbage(project):
    """gc.freeze spares the run's full collections and pytest's at exit the walk over every
    imported object and every collected item; the freeze is given back after them, so
    nothing stays out of the collector afterwards."""
    import subprocess
    import sys

    project.copy_examples()
    project.write(
        "gcprobe.py",
        """
        import gc
        seen = []
        def pytest_runtest_setup(item):
            if not seen:
                seen.append(item)
                print("items frozen:", not any(o is item for o in gc.get_objects()))
        def pytest_unconfigure(config):
            print("frozen at unconfigure:", gc.get_freeze_count() > 0)
        """,
    )
    code = (
        "import gc, sys, pytest; sys.path.insert(0, '.'); "
        "rc = pytest.main(['--board=host', '-p', 'no:cacheprovider', '-p', 'gcprobe', '-s', 'examples']); "
        "print('frozen after the run:', gc.get_freeze_count()); sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=project.path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "items frozen: True" in out.stdout, out.stdout
    assert "frozen at unconfigure: True" in out.stdout, out.stdout
    assert "frozen after the run: 0" in out.stdout, out.stdout
