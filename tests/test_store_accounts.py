"""A build cache several UNIX accounts reach: what one account wrote never runs as another
account's verdict unless that account is trusted (real accounts, made with useradd)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import QUIET

# the venv's interpreter lives under /root (0700): other accounts run the system's python
# of the same version with the venv's packages
SYSTEM_PYTHON = Path("/usr/bin/python3")
RUNUSER = shutil.which("runuser") or "runuser"
SITE = sysconfig.get_paths()["purelib"]
REPO = Path(__file__).resolve().parent.parent  # this checkout's plugin, not the installed one's
LAUNCH = f"import site, sys; site.addsitedir({SITE!r}); sys.path.insert(0, {str(REPO)!r}); sys.argv[0] = 'x'; "

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd"),
    pytest.mark.skipif(
        not SYSTEM_PYTHON.exists()
        or subprocess.run(
            [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        ).stdout.strip()
        != str(sys.version_info[:2]),
        reason="needs /usr/bin/python3 of this version",
    ),
]

FAILING = """
    #include "micro_test.h"
    TF_LITE_MICRO_TESTS_BEGIN
    TF_LITE_MICRO_TEST(OneIsTwo) {{ TF_LITE_MICRO_EXPECT_EQ(1, {value}); }}
    TF_LITE_MICRO_TESTS_END
"""


@dataclass
class Accounts:
    base: Path  # readable by every account; the shared cache is base/cache
    group: str  # the CI group: a and b are members
    a: str
    b: str

    @property
    def cache(self) -> Path:
        return self.base / "cache"

    def home(self, user: str) -> Path:
        return self.base / user

    def checkout(self, user: str, value: int = 2, cache: Path | None = None, ini: str = "") -> Path:
        """A project of user's, with OneIsTwo comparing 1 to value, using the shared cache."""
        proj = self.home(user) / "proj"
        proj.mkdir(parents=True, exist_ok=True)
        (proj / "pytest.ini").write_text(
            f"[pytest]\nondevice_build_dir = _build\nondevice_cache_dir = {cache or self.cache}\n{ini}"
        )
        (proj / "check_test.c").write_text(textwrap.dedent(FAILING.format(value=value)))
        _chown_tree(self.home(user), user)
        return proj

    def run(self, user: str, cwd: Path, *args: str, umask: int = 0o022, shared: bool = False) -> str:
        """pytest (or, with args starting "-m", another module) as user, with that umask."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home(user)), "LANG": "C.UTF-8"}
        if shared:
            env["ONDEVICE_CACHE_SHARED"] = "1"
        if args[:1] == ("-m",):
            code = LAUNCH + f"import runpy; sys.argv[1:] = {list(args[2:])!r}; "
            code += f"runpy.run_module({args[1]!r}, run_name='__main__')"
        else:
            argv = ["--board=host", "-p", "no:cacheprovider", *QUIET, *args]
            code = LAUNCH + f"import pytest; sys.exit(pytest.main({argv!r}))"
        proc = subprocess.run(
            _as(user, umask, str(SYSTEM_PYTHON), "-c", code),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return proc.stdout + proc.stderr


def _as(user: str, umask: int, *argv: str) -> list[str]:
    """argv, run as user with that umask."""
    return [RUNUSER, "-u", user, "--", "sh", "-c", f'umask {umask:03o}; exec "$@"', "sh", *argv]


def _chown_tree(path: Path, user: str) -> None:
    subprocess.run(["chown", "-R", f"{user}:", str(path)], check=True)


@pytest.fixture
def accounts():
    tag = os.urandom(3).hex()
    group, a, b = f"odci{tag}", f"oda{tag}", f"odb{tag}"
    subprocess.run(["groupadd", group], check=True)
    for user in (a, b):  # each its own primary group, both in the CI group
        subprocess.run(["useradd", "-M", "-U", "-G", group, "-s", "/bin/sh", user], check=True)
    base = Path(tempfile.mkdtemp(prefix="ondevice-accounts-", dir="/tmp"))
    base.chmod(0o755)
    # the admin's shared cache dir, as a CI runner's README would have it made
    subprocess.run(["install", "-d", "-m", "2775", "-g", group, str(base / "cache")], check=True)
    try:
        yield Accounts(base, group, a, b)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for user in (a, b):
            subprocess.run(["userdel", user], check=False)
        subprocess.run(["groupdel", group], check=False)


def _passing_binary(acc: Accounts) -> Path:
    """What b builds in its own checkout and private cache: OneIsTwo comparing 1 to 1."""
    own = acc.home(acc.b) / "own"
    own.mkdir(parents=True)
    acc.checkout(acc.b, value=1, cache=own / "cache")
    out = acc.run(acc.b, acc.home(acc.b) / "proj")
    assert "1 passed" in out, out
    (elf,) = (own / "cache").rglob("check_test.c.elf")
    copy = own / "passing.elf"
    shutil.copy(elf, copy)
    _chown_tree(own, acc.b)
    return copy


SWAP = """
import hashlib, json, os, shutil, sys
from pathlib import Path
cache, passing, how = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if how == "move-aside":  # the root is the group's: v2 renamed, rebuilt as b's own, open to all
    if (cache / "v2").exists():
        os.rename(cache / "v2", cache / "v2.aside")
        shutil.copytree(cache / "v2.aside", cache / "v2")
        for d, _, files in os.walk(cache / "v2"):
            os.chmod(d, 0o777)
            for f in files:
                os.chmod(os.path.join(d, f), 0o777)
digest = hashlib.sha256(passing.read_bytes()).hexdigest()
for elf in (cache / "v2" / "entries").glob("*/*/check_test.c.elf"):
    tmp = elf.with_name(".swap")
    shutil.copy(passing, tmp)
    os.replace(tmp, elf)
    (elf.parent / ".meta").write_text(json.dumps({"name": elf.name, "sha256": digest}))
    os.replace(elf.parent / ".meta", elf.parent / "meta.json")
    print("swapped", elf)
"""


@pytest.mark.parametrize(("how", "umask"), [("replace", 0o002), ("move-aside", 0o022)])
def test_another_account_cannot_make_a_failing_case_pass(accounts, how, umask):
    """A group-writable cache dir (the README's CI set-up) used without the shared opt-in:
    b replaces a's cached binary and meta.json with a passing one, or (umask 022) moves v2
    aside and makes its own. a's failing case never passes; the error names the fix."""
    acc = accounts
    passing = _passing_binary(acc)
    proj = acc.checkout(acc.a)
    first = acc.run(acc.a, proj, umask=umask)
    swap = acc.home(acc.b) / "swap.py"
    swap.write_text(SWAP)
    subprocess.run(_as(acc.b, umask, str(SYSTEM_PYTHON), str(swap), str(acc.cache), str(passing), how), check=True)
    again = acc.run(acc.a, proj, umask=umask)
    assert "passed" not in again.splitlines()[-1], f"{first}\n---\n{again}"
    for out in (first, again):
        assert "cannot be trusted" in out and "writable by the group" in out, out
        assert "ondevice_cache_shared = true" in out and f"chmod go-w {acc.cache}" in out, out
        assert "Traceback" not in out, out


def test_an_account_that_left_the_group_cannot_make_a_failing_case_pass(accounts):
    """The shared opt-in trusts the group's members only: b, who left the group, rewrote the
    entry b had stored; a does not use it, rebuilds, and says so."""
    acc = accounts
    passing = _passing_binary(acc)
    mine = acc.checkout(acc.a, value=1)
    assert "1 passed" in acc.run(acc.a, mine, umask=0o002, shared=True)
    theirs = acc.checkout(acc.b)  # the failing source, in b's checkout: b's entries
    assert "1 failed" in acc.run(acc.b, theirs, umask=0o002, shared=True)
    swap = acc.home(acc.b) / "swap.py"
    swap.write_text(SWAP)
    out = subprocess.run(
        _as(acc.b, 0o002, str(SYSTEM_PYTHON), str(swap), str(acc.cache), str(passing), "replace"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "swapped" in out
    subprocess.run(["gpasswd", "-d", acc.b, acc.group], check=True, capture_output=True)
    acc.checkout(acc.a)  # a's source now is b's
    result = acc.run(acc.a, mine, umask=0o002, shared=True)
    assert "1 failed" in result, result
    assert "ondevice build: 1 compiled, 1 reused; 1 linked, 0 reused" in result, result  # b's: rebuilt
    stats = acc.run(acc.a, mine, "-m", "pytest_ondevice.commands.cli", "cache", "stats", shared=True)
    assert "untrusted, rebuilt 2 " in stats, stats  # b's object and binary


@pytest.mark.parametrize("opt_in", ["ini", "env"])
def test_a_shared_cache_works_for_two_accounts_with_the_usual_umask(accounts, opt_in):
    """ondevice_cache_shared = true (or ONDEVICE_CACHE_SHARED=1): a's entries serve b's
    checkout, what b stores serves a, and either can clean it; both with umask 022."""
    acc = accounts
    ini = "ondevice_cache_shared = true\n" if opt_in == "ini" else ""
    mine, theirs = acc.checkout(acc.a, value=1, ini=ini), acc.checkout(acc.b, value=1, ini=ini)
    shared = opt_in == "env"
    first = acc.run(acc.a, mine, shared=shared)
    assert "1 passed" in first and "ondevice build: 2 compiled" in first, first
    second = acc.run(acc.b, theirs, shared=shared)
    assert "1 passed" in second and "ondevice build: 0 compiled" in second, second
    (theirs / "check_test.c").write_text(textwrap.dedent(FAILING.format(value=3)))
    assert "1 failed" in acc.run(acc.b, theirs, shared=shared)
    (mine / "check_test.c").write_text(textwrap.dedent(FAILING.format(value=3)))
    reused = acc.run(acc.a, mine, shared=shared)
    assert "1 failed" in reused and "ondevice build: 0 compiled" in reused, reused
    cleaned = acc.run(acc.b, theirs, "-m", "pytest_ondevice.commands.cli", "cache", "clean", shared=shared)
    assert "removed 5 entries" in cleaned, cleaned  # the runtime, two objects and two binaries
    assert "1 failed" in acc.run(acc.a, mine, shared=shared)
    for path in acc.cache.rglob("*"):  # what either account made: the group's, never others'
        st = path.lstat()
        assert st.st_gid == acc.cache.stat().st_gid and not st.st_mode & 0o002, path
        if stat.S_ISDIR(st.st_mode):
            assert st.st_mode & 0o2070 == 0o2070, path
