"""The build store's edges, as a user of the cache meets them: the exact modes of what it
makes, each message naming a path and its fix, what a trim, a clean and a sweep remove and
keep, the totals `cache stats` shows, and a session killed at each write point. Found
missing by mutation testing (store.py)."""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_build_cache import _dead_pid
from test_store_holds import REPO, _entry, _left, oldest_first
from test_store_trust import KEY, STRANGER, _stored, _trim_could_run, one_of_each

from pytest_ondevice.compiling import store
from pytest_ondevice.config.assemble import parse_size

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another account)")
OTHER_KEY = "cd" * 32


def _modes(root: Path) -> dict[str, set[str]]:
    """The modes of what the store made under root, by kind of file."""
    found: dict[str, set[str]] = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        parts = path.relative_to(root).parts
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "binary" if path.name == "a.elf" else "meta.json"
        if stat.S_ISREG(st.st_mode) and "entries" not in parts:
            kind = "lock file" if "locks" in parts else "rewritten file"
        found.setdefault(kind, set()).add(f"{stat.S_IMODE(st.st_mode):o}")
    return found


# the mode of a directory made above the cache dir (the group of a shared one passes through it),
# then the modes of: its dirs, a binary, meta.json, a rewritten file, a lock file, a hold file
MODES = {
    (False, 0o000): "755 755 555 444 644 644 644",
    (False, 0o077): "700 700 500 400 644 600 600",
    (True, 0o000): "755 2775 555 444 664 664 644",
    (True, 0o077): "710 2770 540 440 664 660 640",
}


@needs_root
@pytest.mark.parametrize(("shared", "umask"), MODES)
def test_each_kind_of_file_the_store_makes_has_exactly_its_mode_whatever_the_umask(tmp_path, shared, umask):
    """Nobody else writes anything of a private cache; in a shared one the group reads every
    file and writes what is rewritten, never an entry; a hold file only its session writes."""
    root = tmp_path / "new" / "cache"
    hold = one_of_each(root, shared, umask, executable=True)
    above, *modes = MODES[shared, umask].split()
    assert f"{stat.S_IMODE((tmp_path / 'new').stat().st_mode):o}" == above
    kinds = ("dir", "binary", "meta.json", "rewritten file", "lock file")
    assert _modes(root) == {kind: {mode} for kind, mode in zip(kinds, modes[:5], strict=True)}
    assert f"{hold:o}" == modes[5]


ELSEWHERE = "ondevice_cache_dir / ondevice_build_dir"


@pytest.mark.parametrize(
    ("errno_", "what", "fix"),
    [
        (errno.ENOSPC, "cache dir", f"free some space, or point {ELSEWHERE} elsewhere"),
        (
            errno.EROFS,
            "cache dir",
            f"make it writable for this user, or set {ELSEWHERE} to a directory that is (a cache several "
            "accounts write needs ondevice_cache_shared = true)",
        ),
        (errno.EPERM, "build dir", f"make it writable for this user, or set {ELSEWHERE} to a directory that is"),
        (errno.EIO, "cache dir", f"check the directory, or set {ELSEWHERE} to another one"),
    ],
    ids=["full", "read-only", "not permitted", "other"],
)
def test_every_way_a_dir_cannot_be_written_is_one_message_with_its_fix(errno_, what, fix):
    error = OSError(errno_, os.strerror(errno_), "/c/v2/tmp/x")
    said = store.unusable(Path("/c"), error) if what == "cache dir" else store.unusable(Path("/c"), error, what)
    assert str(said) == (f"the {what} /c cannot be used: {os.strerror(errno_)} (/c/v2/tmp/x); {fix}")
    unnamed = OSError(errno_, os.strerror(errno_))  # no file named: the directory is
    assert f"{os.strerror(errno_)} (/c); " in str(store.unusable(Path("/c"), unnamed, what))


def test_a_cache_dir_under_a_file_is_an_error_naming_it(tmp_path):
    (tmp_path / "file").write_text("")
    root = tmp_path / "file" / "cache"
    with pytest.raises(store.CacheError) as e:
        store.Store(root)
    assert str(e.value) == (
        f"the cache dir {root} cannot be used: Not a directory ({root}); check the directory, or set "
        "ondevice_cache_dir / ondevice_build_dir to another one"
    )


def test_a_cache_dir_that_is_a_file_is_refused_saying_so(tmp_path):
    (tmp_path / "cache").write_text("")
    with pytest.raises(store.CacheError) as e:
        store.Store(tmp_path / "cache")
    assert (
        f"cannot be trusted: {tmp_path / 'cache'} is not a directory (owner root (uid 0), group root, mode 0644)"
        in (str(e.value))
    )


def test_the_default_cache_dir_is_per_user_like_ccaches(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert store.default_dir() == tmp_path / "xdg" / "pytest-ondevice"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert store.default_dir() == tmp_path / "home" / ".cache" / "pytest-ondevice"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("5G", 5 << 30),
        ("500M", 500 << 20),
        ("2048K", 2 << 20),
        ("1T", 1 << 40),
        ("1.5GiB", 3 << 29),
        ("4096", 4096),
        ("1B", 1),
    ],
)
def test_sizes_are_read_as_ccache_reads_them(text, size):
    assert parse_size(text) == size
    assert parse_size(f" {text.lower()} ") == size


def test_a_size_that_is_none_is_an_error_saying_how_to_write_one():
    with pytest.raises(ValueError, match=r"^not a size: 'lots' \(write e.g. 5G or 500M\)$"):
        parse_size("lots")
    with pytest.raises(ValueError, match=r"^must be more than 0: '0M'$"):
        parse_size("0M")


def test_the_same_inputs_in_any_order_have_one_key():
    assert store.key_of("cc", {"a": 1, "b": 2}) == store.key_of("cc", {"b": 2, "a": 1})
    assert store.key_of("cc", {"a": 1}) != store.key_of("c++", {"a": 1})
    assert len(store.key_of("cc")) == 64


def test_a_sweep_removes_dead_sessions_and_day_old_strangers_staging_and_nothing_live(tmp_path):
    cache = store.Store(tmp_path / "cache")
    tmp = tmp_path / "cache" / store.LAYOUT / "tmp"
    host, dead = socket.gethostname(), _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # another session, running
    try:
        mine = cache.staging()
        names = {
            "dead here": f"{host}-{dead}-0a1b2c",
            "live here": f"{host}-{live.pid}-0a1b2c",
            "elsewhere, fresh": f"build-7-{dead}-0a1b2c",  # its pid says nothing here
            "elsewhere, old": f"build-7-{dead}-3d4e5f",
            "not a session's": "lost+found",
        }
        for name in names.values():
            (tmp / name).mkdir()
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "keep").write_text("x")
        (tmp / f"{host}-{dead}-4a5b6c").symlink_to(tmp_path / "elsewhere")  # removed, never followed
        day_ago = time.time() - 86400 - 60
        os.utime(tmp / names["elsewhere, old"], (day_ago, day_ago))
        assert cache.sweep() == 3
        assert sorted(p.name for p in tmp.iterdir()) == sorted(
            [mine.name, names["live here"], names["elsewhere, fresh"], names["not a session's"]]
        )
        assert (tmp_path / "elsewhere" / "keep").read_text() == "x"
        assert live.poll() is None  # asked whether it lives, nothing more
    finally:
        live.kill()
        live.wait()


def test_cache_stats_add_up_every_sessions_counts_and_clean_starts_them_again(tmp_path):
    first = store.Store(tmp_path)
    _entry(first, KEY, 0)
    _entry(first, OTHER_KEY, 0)
    first.record(OTHER_KEY, {"key": KEY})
    first.close()
    second = store.Store(tmp_path)
    assert second.get(KEY) is not None
    staged = second.staging()
    (staged / "a.elf").write_bytes(b"inputs changed meanwhile")
    private = second.keep_private(staged, "a.elf")
    assert private.path == staged / "a.elf" and private.sha256 == hashlib.sha256(private.path.read_bytes()).hexdigest()
    second.close()
    assert not staged.exists()  # used once, never stored
    store.Store(tmp_path).close()  # a session that did nothing adds nothing
    totals = {"hits": 1, "misses": 3, "damaged": 0, "uncached": 1, "untrusted": 0}
    assert store.Store(tmp_path).totals() == totals
    cleaner = store.Store(tmp_path)
    meta = next((tmp_path / store.LAYOUT / "entries").rglob(f"{KEY}/meta.json")).stat().st_size
    assert cleaner.usage() == (2, 2 * (1000 + meta))  # each binary and its meta.json
    assert cleaner.clear() == (2, 2 * (1000 + meta), 0)
    assert cleaner.totals() == {} and cleaner.lookup(OTHER_KEY, lambda r: True) is None
    assert cleaner.usage() == (0, 0)
    cleaner.record(OTHER_KEY, {"key": KEY})  # an empty cache, as usable as a new one
    assert store.Store(tmp_path).lookup(OTHER_KEY, lambda r: True) == KEY


def test_a_manifest_keeps_the_16_newest_input_sets_and_skips_one_it_cannot_judge(tmp_path):
    cache = store.Store(tmp_path)
    keys = [f"{i:02x}" * 32 for i in range(17)]
    for n, key in enumerate(keys):
        cache.record(OTHER_KEY, {"key": key, "n": n})
    cache.record(OTHER_KEY, {"key": keys[5], "n": 5})  # the same result again: moved to the newest, not added
    again = store.Store(tmp_path)
    assert again.lookup(OTHER_KEY, lambda r: True) == keys[5]
    assert again.lookup(OTHER_KEY, lambda r: r["n"] == 0) is None  # the oldest of 17 is forgotten
    assert again.lookup(OTHER_KEY, lambda r: r["n"] == 1) == keys[1]  # the 16 newest are kept
    cache.record(KEY, {"key": keys[0], "deps": {"cfg.h": "1"}})
    cache.record(KEY, {"key": keys[2]})  # an input set written by another version: no deps
    assert again.lookup(KEY, lambda r: r["deps"]["cfg.h"] == "1") == keys[0]


# -- trust: who may have written what is run, and the fix when a dir is not ours alone -----


@needs_root
def test_a_manifest_another_account_wrote_is_counted_as_untrusted(tmp_path):
    cache = store.Store(tmp_path)
    cache.record(OTHER_KEY, {"key": KEY})
    os.chown(next((tmp_path / store.LAYOUT / "manifests").rglob("*.json")), STRANGER, -1)
    again = store.Store(tmp_path)
    assert again.lookup(OTHER_KEY, lambda r: True) is None and again.stats.untrusted == 1


@needs_root
def test_an_entry_another_account_stored_first_is_replaced_by_ours_when_storing(tmp_path):
    """Not counted as untrusted: it was never about to be used, ours was just built."""
    artifact = _stored(tmp_path)
    os.chown(artifact, STRANGER, -1)
    cache = store.Store(tmp_path)
    staged = cache.staging()
    (staged / "a.elf").write_bytes(b"\x7fELF ours")
    entry = cache.commit(staged, "a.elf", KEY)
    assert entry.path == artifact and artifact.read_bytes() == b"\x7fELF ours" and artifact.stat().st_uid == 0
    assert (cache.stats.untrusted, cache.stats.damaged, cache.stats.misses) == (0, 0, 1)


@needs_root
def test_root_s_dirs_are_trusted_by_every_account(tmp_path, monkeypatch):
    """An admin made the cache dir (and /var/cache above it): another account uses it."""
    _stored(tmp_path / "cache")
    monkeypatch.setattr(store.os, "geteuid", lambda: STRANGER)
    assert store.Store(tmp_path / "cache").get(KEY) is not None


@needs_root
def test_a_cache_dir_of_another_owner_names_chown_and_not_the_shared_opt_in(tmp_path):
    root = tmp_path / "cache"
    _stored(root)
    os.chown(root, STRANGER, -1)
    with pytest.raises(store.CacheError) as e:
        store.Store(root)
    assert str(e.value) == (
        f"the cache dir {root} cannot be trusted: {root} is owned by uid {STRANGER}, an account not trusted here "
        f"(owner uid {STRANGER}, group root, mode 0755); another account could put binaries there that run as yours "
        f"(a failing test would pass). Make it this account's alone (chown root {root}), or point "
        "ondevice_cache_dir at a private directory"
    )


@needs_root
@pytest.mark.parametrize(("where", "mode"), [("cache", 0o777), ("cache/v2", 0o775)])
def test_the_shared_opt_in_is_offered_only_for_a_cache_dir_its_group_alone_can_write(tmp_path, where, mode):
    root = tmp_path / "cache"
    _stored(root)
    os.chown(tmp_path / where, -1, STRANGER)
    (tmp_path / where).chmod(mode)
    with pytest.raises(store.CacheError) as e:
        store.Store(root)
    assert f"(chmod go-w {tmp_path / where}), or point ondevice_cache_dir at a private directory" in str(e.value)
    assert "ondevice_cache_shared" not in str(e.value)


@needs_root
def test_the_group_writable_cache_dir_says_how_to_share_it(tmp_path):
    root = tmp_path / "cache"
    _stored(root)
    os.chown(root, -1, STRANGER)
    root.chmod(0o775)
    with pytest.raises(store.CacheError) as e:
        store.Store(root)
    assert str(e.value).endswith(
        f"private directory; to share it with every member of the group gid {STRANGER}, set ondevice_cache_shared "
        f"= true (or ONDEVICE_CACHE_SHARED=1) and chmod g+s {root}"
    )


@needs_root
@pytest.mark.parametrize(("gid", "group"), [(STRANGER, f"gid {STRANGER}"), (0, "root")])
def test_a_shared_cache_names_its_group_and_what_to_fix_when_a_dir_is_an_outsiders(tmp_path, gid, group):
    root = tmp_path / "cache"
    root.mkdir()
    os.chown(root, 0, gid)
    root.chmod(0o2775)
    store.Store(root, shared=True).close()
    v2 = root / store.LAYOUT
    os.chown(v2, STRANGER + 1, gid)
    with pytest.raises(store.CacheError) as e:
        store.Store(root, shared=True)
    assert str(e.value) == (
        f"the cache dir {root} cannot be trusted: {v2} is owned by uid {STRANGER + 1}, an account not trusted here "
        f"(owner uid {STRANGER + 1}, group {group}, mode 2775); another account could put binaries there that run "
        f"as yours (a failing test would pass). A shared cache trusts the members of its group {group} only: fix the "
        f"owner or mode of {v2}, or remove it (what others wrote is not used)"
    )


@needs_root
def test_a_shared_cache_dir_that_is_not_setgid_says_chmod_g_s(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    root.chmod(0o775)
    with pytest.raises(store.CacheError) as e:
        store.Store(root, shared=True)
    assert str(e.value) == (
        f"the shared cache dir {root} is not setgid (owner root (uid 0), group root, mode 0775): what each account "
        f"writes there must stay its group's; make it so: chmod g+s {root}"
    )


# -- trim, clean and holds ------------------------------------------------------------------


def test_a_trim_stops_as_soon_as_the_cache_is_down_to_90_percent(tmp_path):
    keys = oldest_first(tmp_path, 11)
    each = store.Store(tmp_path).usage()[1] // 11
    assert store.Store(tmp_path).trim(max_size=10 * each) == 2  # 11 entries down to 9: exactly 90 %
    assert _left(tmp_path, keys) == keys[2:]


def test_a_symlink_among_the_shards_is_never_followed_by_a_clean(tmp_path):
    outside = tmp_path / "elsewhere" / KEY
    outside.mkdir(parents=True)
    (outside / "precious").write_bytes(b"x" * 5000)
    cache = store.Store(tmp_path / "cache")
    (tmp_path / "cache" / store.LAYOUT / "entries" / "zz").symlink_to(tmp_path / "elsewhere")
    assert cache.usage() == (0, 0)
    assert cache.clear() == (0, 0, 0)
    assert (outside / "precious").read_bytes() == b"x" * 5000


def test_a_live_sessions_hold_file_with_a_damaged_line_still_holds_its_keys(tmp_path):
    first = store.Store(tmp_path)
    _entry(first, KEY, 0)
    _entry(first, OTHER_KEY, 0)
    first.close()
    live = store.Store(tmp_path)
    assert live.get(KEY) is not None
    holds = tmp_path / store.LAYOUT / "holds"
    (hold,) = holds.iterdir()
    assert hold.read_text().splitlines() == [
        f"# pytest-ondevice session: host {socket.gethostname()} pid {os.getpid()}",  # for a person to look up
        KEY,
    ]
    with open(hold, "ab") as f:
        f.write(b"\xff\xfe not a key\n")
    for n in range(20):  # stray links, listed before and after it: none stops the others being read
        (holds / f"{n:02d}-gone").symlink_to(tmp_path / "nowhere")
    assert store.Store(tmp_path).held() == {KEY}
    removed, _size, kept = store.Store(tmp_path).clear()
    assert (removed, kept) == (1, 1) and _left(tmp_path, [KEY, OTHER_KEY]) == [KEY]


def test_a_clean_waits_while_a_session_adds_a_hold(tmp_path):
    """What a session found stays there: a clean (or trim) chooses only once the hold is written."""
    first = store.Store(tmp_path)
    _entry(first, KEY, 0)
    first.close()
    session = store.Store(tmp_path)
    cleaned: list[tuple] = []
    with session._holding(KEY):  # as get() and commit() do, around looking
        assert not _trim_could_run(tmp_path)
        cleaner = threading.Thread(target=lambda: cleaned.append(store.Store(tmp_path).clear()))
        cleaner.start()
        cleaner.join(0.5)
        assert cleaner.is_alive() and cleaned == []
    cleaner.join(10)
    assert cleaned[0][0] == 0 and cleaned[0][2] == 1  # the entry was held by then: kept
    assert _left(tmp_path, [KEY]) == [KEY]


def test_a_lock_file_that_is_a_symlink_is_never_followed(tmp_path):
    cache = store.Store(tmp_path)
    (tmp_path / "elsewhere").write_text("")
    shard = tmp_path / store.LAYOUT / "locks" / KEY[:2]
    shard.mkdir()
    (shard / KEY).symlink_to(tmp_path / "elsewhere")
    refused = pytest.raises(store.CacheError, match=r"cannot be used: Too many levels of symbolic links")
    with refused, cache.lock(KEY):
        pass


def test_a_closed_session_leaves_no_file_open_and_can_hold_again(tmp_path):
    """A long-lived process (an IDE's test runner) opens sessions again and again."""
    first = store.Store(tmp_path)
    _entry(first, KEY, 0)
    first.close()
    before = len(os.listdir("/proc/self/fd"))
    cache = store.Store(tmp_path)
    assert cache.get(KEY) is not None
    with cache.lock(OTHER_KEY):
        pass
    cache.close()
    assert len(os.listdir("/proc/self/fd")) == before
    assert store.Store(tmp_path).held() == set()
    assert cache.get(KEY) is not None  # used again after its end: held again, seen by others
    assert store.Store(tmp_path).held() == {KEY}
    cache.release()
    assert len(os.listdir("/proc/self/fd")) == before


STORE_ONE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from pytest_ondevice.compiling import store
from pytest_ondevice.config.assemble import parse_size
cache = store.Store(Path(sys.argv[2]))
staged = cache.staging()
(staged / "a.elf").write_bytes(b"built")
cache.commit(staged, "a.elf", sys.argv[3])
cache.record(sys.argv[4], {"key": sys.argv[3]})
print("stored", flush=True)
"""


# what a session that stores one binary and records its inputs leaves when killed at each of
# the store's points: (stored, recorded); the builder's points (build.py) it never reaches
AT_KILL = {"meta-written": (False, False), "entry-renamed": (True, False), "manifest-written": (True, True)}


@pytest.mark.parametrize("point", store.WRITE_POINTS)
def test_a_session_killed_at_a_write_point_leaves_whole_entries_and_no_staging(tmp_path, point):
    env = {**os.environ, "ONDEVICE_TEST_KILL_AT": point}
    argv = [sys.executable, "-c", STORE_ONE, str(REPO), str(tmp_path), KEY, OTHER_KEY]
    killed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if point in ("artifact-built", "link-published"):
        assert killed.stdout == "stored\n", killed.stderr
        return
    stored, recorded = AT_KILL[point]
    assert killed.returncode == -9 and "stored" not in killed.stdout, killed.stderr
    after = store.Store(tmp_path)  # sweeps what the dead session left in tmp/
    assert list((tmp_path / store.LAYOUT / "tmp").iterdir()) == []
    entry = after.get(KEY)
    assert (entry is not None and entry.path.read_bytes() == b"built") is stored
    assert (after.lookup(OTHER_KEY, lambda r: True) == KEY) is recorded
    assert (after.stats.damaged, after.stats.untrusted) == (0, 0)
    untouched = subprocess.run(argv, capture_output=True, text=True, timeout=60)  # no kill asked for
    assert untouched.stdout == "stored\n", untouched.stderr


def _chattr(flag: str, path: Path) -> None:
    if subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr cannot make a directory immutable here")


@needs_root
def test_a_damaged_entry_that_cannot_be_moved_into_tmp_is_moved_aside_in_its_shard_and_removed(tmp_path):
    """Another account's entry dir in a shared cache may not get a new parent (only its owner
    may rename it elsewhere; here tmp/ is made immutable instead): renamed beside itself."""
    artifact = _stored(tmp_path)
    artifact.chmod(0o644)
    artifact.write_bytes(b"half")
    cache = store.Store(tmp_path)
    assert cache.get(OTHER_KEY) is None  # the session's hold file is made before
    tmp = tmp_path / store.LAYOUT / "tmp"
    _chattr("+i", tmp)
    try:
        assert cache.get(KEY) is None and cache.stats.damaged == 1
    finally:
        _chattr("-i", tmp)
    assert list(artifact.parent.parent.iterdir()) == []  # neither the entry nor a .gone- dir is left


@pytest.mark.parametrize(
    "meta",
    [b"{not json", b'{"sha256": "00"}', b'{"name": "a.elf"}', b'["a.elf"]', b'{"name": "\xff\xfe"}'],
    ids=["not JSON", "no name", "no digest", "not an object", "not UTF-8"],
)
def test_an_entry_whose_meta_json_cannot_be_read_is_damaged_and_built_again(tmp_path, meta):
    artifact = _stored(tmp_path)
    (artifact.parent / "meta.json").chmod(0o644)
    (artifact.parent / "meta.json").write_bytes(meta)
    cache = store.Store(tmp_path)
    assert cache.get(KEY) is None and (cache.stats.damaged, cache.stats.untrusted) == (1, 0)
    assert not artifact.parent.exists()
