"""pyOCD's entry point for the stand-in probe (../qemugdb_probe.py), importable from this directory.

The dist-info beside this file registers `qemugdb = ondevice_qemugdb_plugin:QemuGdbProbePlugin`
in the `pyocd.probe` group, so pyOCD's own plugin scan (run once, when pyOCD is first imported)
finds the probe whenever this directory is on sys.path: PYTHONPATH for a subprocess.

The probe lives in the tests' `support` package: the tests directory is appended to sys.path
when it is not there, so the module is the same `support.qemugdb_probe` a test imports. When
that module is itself what imports pyOCD first, the scan runs while it is half-imported: the
plugin then declines to load, and the module registers its class when its import completes.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from pyocd.core.plugin import Plugin

MODULE = "support.qemugdb_probe"
TESTS_DIR = Path(__file__).resolve().parents[2]


def probe_module() -> ModuleType | None:
    """support.qemugdb_probe, or None while it is still being imported."""
    module = sys.modules.get(MODULE)
    if module is not None:
        return module if hasattr(module, "QemuGdbProbe") else None
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        if str(TESTS_DIR) in sys.path:
            raise
        sys.path.append(str(TESTS_DIR))
        return importlib.import_module(MODULE)


class QemuGdbProbePlugin(Plugin):
    """Hands pyOCD support.qemugdb_probe.QemuGdbProbe."""

    def should_load(self) -> bool:
        return probe_module() is not None

    def load(self) -> type:
        module = probe_module()
        assert module is not None
        return module.QemuGdbProbe

    @property
    def name(self) -> str:
        return "qemugdb"

    @property
    def description(self) -> str:
        return "QEMU gdbstub as a debug probe (pytest-ondevice tests only)"
