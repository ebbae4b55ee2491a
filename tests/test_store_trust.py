"""The store's owner and mode checks, one file at a time (as root: chown to any uid)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from pytest_ondevice.compiling import store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another account)")

STRANGER = 54321  # an account that is neither this one nor root (none need exist)
KEY = "ab" * 32


def _stored(root: Path) -> Path:
    cache = store.Store(root)
    staged = cache.staging()
    (staged / "a.elf").write_bytes(b"\x7fELF passing")
    entry = cache.commit(staged, "a.elf", KEY)
    cache.close()
    return entry.path


def _swap_meta_for_a_symlink(artifact: Path) -> None:
    elsewhere = artifact.parent.parent.parent.parent.parent / "meta-elsewhere.json"
    elsewhere.write_text((artifact.parent / "meta.json").read_text())
    (artifact.parent / "meta.json").unlink()
    (artifact.parent / "meta.json").symlink_to(elsewhere)


TAMPERING = {
    "the binary is another account's": lambda p: os.chown(p, STRANGER, -1),
    "meta.json is another account's": lambda p: os.chown(p.parent / "meta.json", STRANGER, -1),
    "the entry dir is another account's": lambda p: os.chown(p.parent, STRANGER, -1),
    "the shard is another account's": lambda p: os.chown(p.parent.parent, STRANGER, -1),
    "the binary is writable by another group": lambda p: (os.chown(p, -1, STRANGER), p.chmod(0o575)),
    "the entry dir is writable by every account": lambda p: p.parent.chmod(0o777),
    "meta.json is a symlink": _swap_meta_for_a_symlink,
    "the entry dir is sticky and writable by every account": lambda p: p.parent.chmod(0o1777),
    "the binary is a directory": lambda p: (p.unlink(), p.mkdir()),
    "meta.json names a file outside its entry": lambda p: _point_meta_outside(p),
}


def _point_meta_outside(artifact: Path) -> None:
    outside = artifact.parent.parent / "outside.elf"
    outside.write_bytes(b"\x7fELF elsewhere")
    meta = artifact.parent / "meta.json"
    meta.chmod(0o644)
    meta.write_text(json.dumps({"name": "../outside.elf", "sha256": hashlib.sha256(outside.read_bytes()).hexdigest()}))
    meta.chmod(0o444)


@pytest.mark.parametrize("tamper", TAMPERING.values(), ids=TAMPERING.keys())
def test_an_entry_another_account_could_have_written_is_not_used_and_is_built_again(tmp_path, tamper):
    artifact = _stored(tmp_path / "cache")
    tamper(artifact)
    cache = store.Store(tmp_path / "cache")
    assert cache.get(KEY) is None
    assert cache.stats.untrusted == 1
    staged = cache.staging()  # built again: stored in its place, and used
    (staged / "a.elf").write_bytes(b"\x7fELF rebuilt")
    cache.commit(staged, "a.elf", KEY)
    assert cache.get(KEY).path.read_bytes() == b"\x7fELF rebuilt"


def test_an_entry_of_this_account_with_the_usual_modes_is_used(tmp_path):
    artifact = _stored(tmp_path / "cache")
    cache = store.Store(tmp_path / "cache")
    assert cache.get(KEY).path == artifact and cache.stats.untrusted == 0
    assert cache.get("ef" * 32) is None and cache.lookup("ef" * 32, lambda r: True) is None  # nothing there
    assert (cache.stats.untrusted, cache.stats.damaged) == (0, 0)


def test_an_entry_without_its_meta_json_is_damaged_and_built_again(tmp_path):
    artifact = _stored(tmp_path / "cache")
    (artifact.parent / "meta.json").unlink()
    cache = store.Store(tmp_path / "cache")
    assert cache.get(KEY) is None and (cache.stats.damaged, cache.stats.untrusted) == (1, 0)
    assert not artifact.parent.exists()


def one_of_each(root: Path, shared: bool, umask: int, executable: bool = False) -> int:
    """A store made at root under that umask, holding one of each kind of file it writes (an
    entry, a manifest, a lock, its totals); returns the mode its session's hold file had."""
    old = os.umask(umask)
    try:
        cache = store.Store(root, shared=shared)
        staged = cache.staging()
        (staged / "a.elf").write_bytes(b"x")
        if executable:
            (staged / "a.elf").chmod(0o777 & ~umask)  # as a linker leaves it
        cache.commit(staged, "a.elf", KEY)
        cache.record("cd" * 32, {"key": KEY})
        with cache.lock("ef" * 32):
            pass
        (hold,) = (root / store.LAYOUT / "holds").iterdir()
        mode = stat.S_IMODE(hold.stat().st_mode)
        cache.close()
    finally:
        os.umask(old)
    return mode


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_what_the_store_makes_has_its_modes_whatever_the_umask(tmp_path, shared, umask):
    """Private: nobody else may write anything; shared: the group may write every dir (setgid)
    and read every file, write what is rewritten, and nobody writes an entry's files."""
    root = tmp_path / "new" / "cache"
    hold = one_of_each(root, shared, umask)
    assert not hold & 0o022 and (hold & 0o040 or not shared)  # readable by the group, written by none
    for path in [tmp_path / "new", root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if shared and path != tmp_path / "new":
            wanted = 0o2070 if path.is_dir() else 0o040 if "entries" in path.parts else 0o060
            assert mode & wanted == wanted and not mode & 0o002, (path, oct(mode))
        else:
            assert not mode & 0o022, (path, oct(mode))
        if "entries" in path.parts and path.is_file():
            assert not mode & 0o222, (path, oct(mode))  # never written again


def _trim_could_run(root: Path) -> bool:
    fd = os.open(root / store.LAYOUT / "locks" / "trim", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_no_trim_runs_while_a_session_adds_a_hold(tmp_path):
    cache = store.Store(tmp_path)
    with cache._holding(KEY):
        with cache._holding("cd" * 32):  # another thread of the session, done first
            assert not _trim_could_run(tmp_path)
        assert not _trim_could_run(tmp_path)
    assert _trim_could_run(tmp_path)
    assert KEY in store.Store(tmp_path).held()  # and what it holds, others see


@pytest.mark.parametrize(
    ("where", "change", "says"),
    [
        ("above/cache", lambda p: (os.chown(p, -1, STRANGER), p.chmod(0o775)), "is writable by the group"),
        ("above/cache", lambda p: os.chown(p, STRANGER, -1), "is owned by uid 54321"),
        ("above/cache/v2", lambda p: p.chmod(0o777), "is writable by every account"),
        ("above", lambda p: p.chmod(0o777), "is writable by every account"),
    ],
    ids=["group-writable", "another owner", "v2 writable by all", "a dir above writable by all"],
)
def test_a_cache_dir_another_account_can_write_is_an_error_naming_the_fix(tmp_path, where, change, says):
    root = tmp_path / "above" / "cache"
    _stored(root)
    change(tmp_path / where)
    with pytest.raises(store.CacheError) as e:
        store.Store(root)
    text = str(e.value)
    assert f"{tmp_path / where} {says}" in text and "a failing test would pass" in text, text
    fix = f"chown root {tmp_path / where}" if "owned" in says else f"chmod go-w {tmp_path / where}"
    assert fix in text, text
    if where == "above/cache" and "group" in says:  # the one a team would want to share: how to
        assert "set ondevice_cache_shared = true" in text and f"chmod g+s {tmp_path / where}" in text, text


def test_a_sticky_dir_above_or_as_the_cache_dir_is_fine(tmp_path):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp").chmod(0o1777)
    _stored(tmp_path / "tmp" / "cache")
    assert store.Store(tmp_path / "tmp" / "cache").get(KEY) is not None
    (tmp_path / "tmp" / "cache").chmod(0o1777)  # a tmpfs mount point: others may add names, not take ours
    assert store.Store(tmp_path / "tmp" / "cache").get(KEY) is not None


def test_a_shared_cache_dir_must_be_setgid(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o775)
    with pytest.raises(store.CacheError, match=rf"is not setgid.*chmod g\+s {root}"):
        store.Store(root, shared=True)
    root.chmod(0o2775)
    cache = store.Store(root, shared=True)
    staged = cache.staging()
    (staged / "a.elf").write_bytes(b"x")
    entry = cache.commit(staged, "a.elf", KEY)
    assert entry.path.parent.stat().st_mode & 0o2070 == 0o2070  # the group's to trim, whatever the umask


def test_a_manifest_of_another_account_is_not_followed(tmp_path):
    cache = store.Store(tmp_path)
    cache.record("cd" * 32, {"key": KEY, "deps": {}, "misses": {}})
    assert cache.lookup("cd" * 32, lambda r: True) == KEY
    manifest = next((tmp_path / store.LAYOUT / "manifests").rglob("*.json"))
    os.chown(manifest, STRANGER, -1)
    again = store.Store(tmp_path)
    assert again.lookup("cd" * 32, lambda r: True) is None
    assert json.loads(manifest.read_text())["results"][0]["key"] == KEY  # there, but never used


MEMBER, OUTSIDER, GROUP = 54321, 54322, 54320


@pytest.fixture
def members(monkeypatch):
    """The group GROUP has one member besides root: MEMBER (accounts need not exist)."""
    monkeypatch.setattr(store.strictmodes, "member", lambda uid, gid: (uid, gid) == (MEMBER, GROUP))


@pytest.mark.parametrize(("owner", "used"), [(MEMBER, True), (OUTSIDER, False)])
def test_a_shared_cache_uses_what_its_groups_members_stored_only(tmp_path, members, owner, used):
    root = tmp_path / "cache"
    root.mkdir()
    os.chown(root, 0, GROUP)
    root.chmod(0o2775)
    cache = store.Store(root, shared=True)
    staged = cache.staging()
    (staged / "a.elf").write_bytes(b"x")
    entry = cache.commit(staged, "a.elf", KEY)
    cache.close()
    for path in (entry.path, entry.path.parent / "meta.json", entry.path.parent, entry.path.parent.parent):
        os.chown(path, owner, GROUP)  # as that account would have stored it
    again = store.Store(root, shared=True)
    assert (again.get(KEY) is not None) is used
    assert again.stats.untrusted == (0 if used else 1)
    with pytest.raises(store.CacheError, match="is owned by uid 54322, an account not trusted here"):
        os.chown(root / store.LAYOUT, OUTSIDER, GROUP)
        store.Store(root, shared=True)


def test_the_same_cache_is_not_shared_without_the_opt_in(tmp_path, members):
    root = tmp_path / "cache"
    root.mkdir()
    os.chown(root, 0, GROUP)
    root.chmod(0o2775)
    with pytest.raises(store.CacheError, match="set ondevice_cache_shared = true"):
        store.Store(root)


@pytest.mark.parametrize(
    ("value", "shared"),
    [("1", True), ("true", True), ("Yes", True), (" on ", True), ("0", False), ("", False), ("false", False)],
)
def test_the_opt_in_from_the_environment(monkeypatch, value, shared):
    monkeypatch.setenv(store.SHARED_ENV, value)
    assert store.shared_from_env() is shared


@pytest.mark.skipif(store.strictmodes.private_group(0) != 0, reason="root's group is not a user private group here")
def test_dirs_writable_by_this_accounts_own_private_group_are_fine(tmp_path):
    """umask 002 on a user-private-group system: nobody else is in that group."""
    _stored(tmp_path / "cache")
    for path in (tmp_path / "cache", tmp_path / "cache" / store.LAYOUT, tmp_path / "cache" / store.LAYOUT / "entries"):
        os.chown(path, 0, 0)
        path.chmod(0o775)
    assert store.Store(tmp_path / "cache").get(KEY) is not None


def test_a_cache_dir_this_account_cannot_write_names_the_shared_opt_in():
    err = PermissionError(13, "Permission denied", "/srv/cache/v2/tmp")
    text = str(store.unusable(Path("/srv/cache"), err))
    assert "Permission denied (/srv/cache/v2/tmp)" in text and "needs ondevice_cache_shared = true" in text, text
    assert "ondevice_cache_shared" not in str(store.unusable(Path("/b"), err, "build dir"))


@pytest.mark.parametrize("kind", ["entries", "manifests", "locks"])
def test_a_shard_another_account_made_is_moved_aside_when_storing(tmp_path, kind):
    cache = store.Store(tmp_path)
    shard = tmp_path / store.LAYOUT / kind / KEY[:2]
    shard.mkdir()
    (shard / "planted").write_text("theirs")
    os.chown(shard, STRANGER, -1)
    staged = cache.staging()
    (staged / "a.elf").write_bytes(b"ours")
    {
        "entries": lambda: cache.commit(staged, "a.elf", KEY),
        "manifests": lambda: cache.record(KEY, {"key": "cd" * 32}),
        "locks": lambda: cache.lock(KEY).__enter__(),
    }[kind]()
    assert shard.stat().st_uid == 0 and not (shard / "planted").exists()


def test_a_manifest_another_account_wrote_is_replaced_not_extended(tmp_path):
    cache = store.Store(tmp_path)
    cache.record(KEY, {"key": "ef" * 32})  # theirs, say
    manifest = next((tmp_path / store.LAYOUT / "manifests").rglob("*.json"))
    os.chown(manifest, STRANGER, -1)
    cache.record(KEY, {"key": "cd" * 32})
    assert [r["key"] for r in json.loads(manifest.read_text())["results"]] == ["cd" * 32]


@pytest.mark.parametrize("theirs", ["whole", "damaged"])
def test_two_sessions_storing_the_same_inputs_keep_one_entry(tmp_path, theirs):
    first, second = store.Store(tmp_path), store.Store(tmp_path)
    mine = second.staging()
    (mine / "a.elf").write_bytes(b"same")
    staged = first.staging()
    (staged / "a.elf").write_bytes(b"same")
    entry = first.commit(staged, "a.elf", KEY)
    if theirs == "damaged":
        entry.path.chmod(0o644)
        entry.path.write_bytes(b"half")
    kept = second.commit(mine, "a.elf", KEY)
    assert kept.path == entry.path and kept.path.read_bytes() == b"same"
    assert not mine.exists()  # the staging dir went: renamed into place, or removed
    assert (second.stats.damaged, second.stats.untrusted) == ((1, 0) if theirs == "damaged" else (0, 0))
