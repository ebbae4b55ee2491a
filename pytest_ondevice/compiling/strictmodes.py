"""OpenSSH's StrictModes, for every cache whose files are run: who may have written them.

The host build store (store.py) and the device cache (transports/device_cache.py) both
hand over for execution what they find in a directory, so both use it only if no account
but trusted ones could have put it there or changed it since. One lstat result is judged
at a time (a symlink is never followed: it is itself a reason), so a caller checks every
directory from the top down to the file.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Callable


def problem(
    st: os.stat_result,
    owner_ok: Callable[[int], bool],
    group_ok: Callable[[int], bool] = lambda gid: False,
    sticky_ok: bool = False,
    owners: str = "an account not trusted here",
    local: bool = True,
) -> str | None:
    """Why another account could change what st describes, or None.

    owner_ok: whose files are trusted (owners: who they are, for the message); group_ok:
    which group may also write (a shared cache's); sticky_ok: a sticky directory writable
    by all is fine (/tmp above a cache: others cannot rename what is ours there); local:
    st is this machine's (its ids are named from our account database, a device's not)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if not owner_ok(st.st_uid):
        return f"is owned by {user_name(st.st_uid) if local else f'uid {st.st_uid}'}, {owners}"
    if sticky_ok and st.st_mode & stat.S_ISVTX:
        return None
    if st.st_mode & 0o002:
        return "is writable by every account"
    if st.st_mode & 0o020 and not group_ok(st.st_gid):
        return f"is writable by the group {group_name(st.st_gid) if local else f'gid {st.st_gid}'}"
    return None


def describe(path: object, st: os.stat_result, why: str) -> str:
    """PATH WHY (owner, group, mode): what a person needs to see to fix it."""
    return (
        f"{path} {why} (owner {user_name(st.st_uid)}, group {group_name(st.st_gid)}, "
        f"mode {stat.S_IMODE(st.st_mode):04o})"
    )


def member(uid: int, gid: int) -> bool:
    """Whether the account uid belongs to group gid (its primary group, or listed in it)."""
    try:
        account = pwd.getpwuid(uid)
    except KeyError:  # an account that no longer exists: nobody vouches for its files
        return False
    if account.pw_gid == gid:
        return True
    try:
        return account.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


def private_group(uid: int) -> int | None:
    """uid's user private group (Debian's and Fedora's convention: named after the account,
    its primary group, no other member listed), whose write bit lets no one else in."""
    try:
        account = pwd.getpwuid(uid)
        group = grp.getgrgid(account.pw_gid)
    except KeyError:
        return None
    if group.gr_name == account.pw_name and set(group.gr_mem) <= {account.pw_name}:
        return group.gr_gid
    return None


def login(uid: int) -> str:
    """The account's name as chown takes it (its number if it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"
