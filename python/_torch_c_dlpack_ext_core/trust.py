"""Trust in a file before it is loaded: OpenSSH's ``StrictModes`` rule, in one place.
:func:`open_trusted`, :func:`check_trusted` and :func:`read_trusted` walk from ``/`` with
``O_NOFOLLOW`` and check each opened descriptor's owner (root, this user, or the account
``TORCH_C_DLPACK_EXT_TRUSTED_OWNER`` names) and mode; a JIT cache, a ``LIBRARY`` override
and any JIT build output (the portable library's too) are read through them, an
:class:`~.errors.UntrustedPathError` otherwise. The build tools and the backend do not
check: they package what they build from a tree they already trust.

A JIT cache (``TORCH_C_DLPACK_EXT_CACHE_DIR``, the default user cache), a
``TORCH_C_DLPACK_EXT_LIBRARY`` override and any JIT build output hold code this process
is about to run. A build record (``<lib>.build.json``) carries the library's size and
sha256 itself, so it proves nothing about who wrote either file: only who *could* have
written them does. The rule, as OpenSSH applies it to ``authorized_keys``
(``safe_path``: resolve the path, then check every component up to ``/``):

* the file and every directory from the filesystem root down to it belong to root or to
  a trusted account (this process's effective uid, or the one account named by
  ``TORCH_C_DLPACK_EXT_TRUSTED_OWNER``);
* none of them is writable by group or others, with one exception OpenSSH's strict
  reading does not make but the kernel's semantics allow: a *sticky* directory such as
  ``/tmp`` (mode ``1777``, owned by root) may be writable by everyone when it is a
  parent, because in a sticky directory only an entry's owner (or the directory's, or
  root) can rename or remove that entry, and the entry below it must itself belong to a
  trusted account. The file itself (or the cache directory the check ends at) may never
  be other-writable, sticky or not;
* group-writable is accepted where the group is the owner's own *private* group, as
  Debian's OpenSSH accepts it (its ``user-group-modes`` patch): the group exists, the
  owner is its only member, primary or supplementary, and no other account has it as its
  primary group. Distributions that give every user such a group set the umask to 002,
  so a cache a user builds there is group-writable by that user's group alone.

Why up to the root and not only up to the cache root: whoever can write a parent of the
cache can rename the cache directory away and put one of their own in its place.

The walk opens each component with ``O_NOFOLLOW`` relative to the directory before it
(``openat``) and checks the opened descriptor (``fstat``), not a path name that could be
swapped between the check and the use; :func:`open_trusted` returns that descriptor, so
the bytes a caller reads are the bytes of the file that was checked. Symbolic links are
resolved first (``realpath``, as OpenSSH does): a link is as trustworthy as what it
leads to, and a link to a file another user owns is refused for that file. A link
swapped in after the resolution fails the ``O_NOFOLLOW`` open (``ELOOP``).

Not checked: ACLs, and Windows (no owner/mode in this sense); there the walk is skipped.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

from .errors import ConfigError, UntrustedPathError
from .naming import env_var

__all__ = [
    "TRUSTED_OWNER_VARIABLE",
    "TrustedOwners",
    "check_trusted",
    "open_trusted",
    "parse_trusted_owner",
    "read_fd",
    "read_trusted",
]

#: The setting naming one more account whose files are trusted (a shared cache it built).
TRUSTED_OWNER_VARIABLE = env_var("TRUSTED_OWNER")

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
#: ``O_NONBLOCK``: a FIFO planted where a file should be must not block the open.
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
#: The largest uid POSIX systems hand out ((uid_t)-1 means "no change" to chown).
_MAX_UID = 2**32 - 2


def _enforced() -> bool:
    return hasattr(os, "geteuid") and hasattr(os, "fstat")


def _account(uid: int) -> str:
    """``uid 1001 (alice)``, or ``uid 1001`` where the password database has no name."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def parse_trusted_owner(value: str) -> int:
    """The uid that ``TORCH_C_DLPACK_EXT_TRUSTED_OWNER=value`` names: a decimal uid, or a
    user name from the password database. Raises :class:`ConfigError` otherwise."""
    text = value.strip()
    if text.isascii() and text.isdigit():
        uid = int(text) if len(text) <= 10 else _MAX_UID + 1
        if uid <= _MAX_UID:
            return uid
        raise ConfigError(f"{TRUSTED_OWNER_VARIABLE}={value!r} is not a valid uid")
    try:
        import pwd

        return pwd.getpwnam(text).pw_uid
    except (ImportError, KeyError, ValueError):
        raise ConfigError(
            f"{TRUSTED_OWNER_VARIABLE}={value!r} names no account on this system: give the "
            "uid or user name of the account that built the shared cache"
        ) from None


@dataclasses.dataclass(frozen=True)
class TrustedOwners:
    """Who may own what is loaded: root, this process's effective uid, and ``extra``
    (the account named by ``TORCH_C_DLPACK_EXT_TRUSTED_OWNER``)."""

    extra: int | None = None

    @property
    def uids(self) -> frozenset[int]:
        own = {0, os.geteuid()} if _enforced() else set()
        return frozenset(own if self.extra is None else {*own, self.extra})

    def describe(self) -> str:
        """``root or uid 1000 (you)`` plus the trusted account, for messages."""
        you = os.geteuid() if _enforced() else None
        names = ["root"] if you in (0, None) else ["root", f"{_account(you)} (you)"]
        if self.extra is not None and self.extra not in (0, you):
            names.append(f"{_account(self.extra)} ({TRUSTED_OWNER_VARIABLE})")
        return " or ".join(names)


def _refuse(
    target: Path, component: Path, info: os.stat_result, why: str, owners: TrustedOwners
) -> UntrustedPathError:
    mode = stat.S_IMODE(info.st_mode)
    what = "it" if component == target else f"its directory {component}"
    if info.st_uid in owners.uids:
        repair = f"chmod go-w {component}"
    else:
        you = os.geteuid() if _enforced() else 0
        repair = f"chown {'root' if you == 0 else you} {component}, or rebuild it yourself"
    fix = (
        f"a loaded file and every directory above it must belong to {owners.describe()} "
        "and be writable by no one else (a sticky directory such as /tmp may be shared). "
        f"Fix it ({repair}), point "
        f"{env_var('CACHE_DIR')} (or {env_var('LIBRARY')}) at a location of your own, or, "
        f"for a cache another account built, set {TRUSTED_OWNER_VARIABLE}=<that account>"
    )
    return UntrustedPathError(
        f"refusing to load {target}: {what} is owned by {_account(info.st_uid)} with mode "
        f"{mode:04o}, {why}; {fix}",
        path=target,
        component=component,
        owner=info.st_uid,
        mode=mode,
    )


def _private_group(gid: int, owner: int) -> bool:
    """Whether group ``gid`` has ``owner`` as its one member (the module's rule)."""
    try:
        import grp
        import pwd

        group = grp.getgrgid(gid)
        name = pwd.getpwuid(owner).pw_name
        primary = [account.pw_uid for account in pwd.getpwall() if account.pw_gid == gid]
    except (ImportError, KeyError):
        return False
    if any(uid != owner for uid in primary) or any(m != name for m in group.gr_mem):
        return False
    return bool(primary or group.gr_mem)


def _check(
    info: os.stat_result, target: Path, component: Path, owners: TrustedOwners, *, last: bool
) -> None:
    if info.st_uid not in owners.uids:
        raise _refuse(target, component, info, "an account this process does not trust", owners)
    if info.st_mode & _WRITABLE_BY_OTHERS:
        # A sticky parent: others may add entries, but not rename or remove ours (the next
        # component, which this walk checks as well).
        if not last and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX:
            return
        if not info.st_mode & stat.S_IWOTH and _private_group(info.st_gid, info.st_uid):
            return
        whom = "group" if not info.st_mode & stat.S_IWOTH else "others"
        raise _refuse(target, component, info, f"writable by {whom}", owners)


def open_trusted(
    path: Path | str, owners: TrustedOwners | None = None, *, directory: bool = False
) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only (without following a final symlink or blocking on a FIFO)
    after checking it and every directory above it (the module's rule); return the
    descriptor and its ``fstat``. ``directory``: ``path`` is a directory (the cache one).

    Raises :class:`UntrustedPathError` naming the component, its owner and mode, and the
    fix; an ``OSError`` where a component is missing or cannot be opened (``ELOOP``: one
    became a symlink during the walk). The caller closes the descriptor.
    """
    owners = TrustedOwners() if owners is None else owners
    if not _enforced():
        fd = os.open(path, (os.O_RDONLY if directory else _FILE_FLAGS) | getattr(os, "O_BINARY", 0))
        return fd, os.fstat(fd)
    target = Path(os.path.realpath(path))
    parts = target.parts
    component = Path(parts[0])
    fd = os.open(component, _DIR_FLAGS)
    try:
        info = os.fstat(fd)
        _check(info, target, component, owners, last=len(parts) == 1)
        for index, name in enumerate(parts[1:], start=2):
            last = index == len(parts)
            flags = _FILE_FLAGS if last and not directory else _DIR_FLAGS
            child = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = child
            component = component / name
            info = os.fstat(fd)
            _check(info, target, component, owners, last=last)
        return fd, info
    except BaseException:
        os.close(fd)
        raise


def check_trusted(
    path: Path | str, owners: TrustedOwners | None = None, *, directory: bool = False
) -> None:
    """Raise :class:`UntrustedPathError` unless :func:`open_trusted` accepts ``path``
    (nothing is checked where owners and modes do not apply: Windows)."""
    if not _enforced():
        return  # and Windows cannot os.open() a directory
    fd, _ = open_trusted(path, owners, directory=directory)
    os.close(fd)


def read_trusted(path: Path | str, limit: int, owners: TrustedOwners | None = None) -> bytes:
    """Up to ``limit`` bytes of the regular file ``path``, read from the descriptor whose
    trust :func:`open_trusted` checked. Raises :class:`UntrustedPathError`, or ``OSError``
    (``EINVAL`` for something that is not a regular file)."""
    fd, info = open_trusted(path, owners)
    try:
        if not stat.S_ISREG(info.st_mode):
            raise OSError(22, "not a regular file", str(path))
        return read_fd(fd, limit)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of an open file, from its current offset (what the checked
    descriptors of this module, and the manifest's verified reads, are read with)."""
    chunks: list[bytes] = []
    total = 0
    while total < limit and (chunk := os.read(fd, min(1 << 20, limit - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
