"""CTest's fixtures in a session: a test that requires fixture F runs after every test that
sets F up (on the same board) and not at all when one of them failed, as CTest reports it
("Not Run", a failure); a test that cleans F up runs after every test that requires it.

The tests of a fixture run in pytest's process in item order (ways.choose queues none of
them ahead), so waiting for one is running it, never a thread waiting on a queue behind it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..formats.verdicts import BinaryVerdicts, Outcome, Verdict
from .results import BinaryResult, Ran
from .spec import BinarySpec


class FixtureGate:
    def __init__(self, specs: list[BinarySpec]) -> None:
        self._setups: dict[tuple[str, str], list[BinarySpec]] = {}
        self._requirers: dict[tuple[str, str], list[BinarySpec]] = {}
        self.keys: set[tuple] = set()  # the binaries that take part in a fixture
        for spec in specs:
            run = spec.ctest
            if run is None or not (run.requires or run.sets_up or run.cleans_up):
                continue
            self.keys.add(spec.key)
            for name in run.sets_up:
                self._setups.setdefault((spec.board.name, name), []).append(spec)
            for name in run.requires:
                self._requirers.setdefault((spec.board.name, name), []).append(spec)
        self._visiting = threading.local()

    def before(self, spec: BinarySpec, result_of: Callable[[BinarySpec], BinaryResult]) -> str | None:
        """Run what must come first (result_of runs it, or has its result); why the binary
        must not run, else None."""
        run = spec.ctest
        if run is None or spec.key not in self.keys:
            return None
        visiting: set = getattr(self._visiting, "keys", set())
        self._visiting.keys = visiting | {spec.key}
        try:
            first = [(name, s) for name in run.requires for s in self._setups.get((spec.board.name, name), [])]
            present = {t for _, s in first for t in s.ctest.tests}  # type: ignore[union-attr]
            missing = [t for t in run.setup_tests if t not in present and t not in run.tests]
            if missing:  # CTest would add it: said, never run without it
                return f"not run: its fixtures' setup test {', '.join(missing)} is left out of this run: select it too"
            first += [(name, s) for name in run.cleans_up for s in self._requirers.get((spec.board.name, name), [])]
            for name, other in first:
                if other.key == spec.key:
                    continue
                if other.key in visiting:  # it waits for this one: neither could start
                    return f"not run: CTest's fixtures of {', '.join(run.tests)} form a cycle (through {name})"
                result = result_of(other)
                if name in run.requires and not _passed(result):
                    return f"not run: fixture {name}'s setup test {', '.join(other.ctest.tests)} failed"  # type: ignore[union-attr]
            return None
        finally:
            self._visiting.keys = visiting


def _passed(result: BinaryResult) -> bool:
    return isinstance(result, Ran) and all(v.outcome is Outcome.PASSED for v in result.verdicts.cases.values())


def not_run(spec: BinarySpec, why: str) -> Ran:
    """Every case failed, not run: CTest counts a test whose fixture's setup failed as failed."""
    return Ran(verdicts=BinaryVerdicts({n: Verdict(Outcome.FAILED, why) for n in spec.cases}, {}, []))
