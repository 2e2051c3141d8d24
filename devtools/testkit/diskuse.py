"""How much disk the suite's caches take, measured without double counting: bytes per inode
once (uv hard-links every environment's files from its cache), new cache entries between
two moments, and the filesystem's used bytes sampled for their peak.

Used by the test suite's footprint report (``tests/footprint.py``,
:mod:`devtools.testkit.footprint`). Every function reads; nothing here writes or deletes.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import threading
from collections.abc import Iterable, Mapping
from email.parser import BytesHeaderParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from devtools.base.hostenv import dev_cache_root
from devtools.base.steps import find_uv

__all__ = [
    "CacheEntries",
    "DiskSampler",
    "InodeCounter",
    "filesystem_size",
    "filesystem_used",
    "own_bytes",
    "pip_cache_dir",
    "same_filesystem",
    "uv_cache_dir",
    "watched_folders",
    "wheel_label",
]


class InodeCounter:
    """Bytes allocated to files and folders under a path, each inode counted once across
    every call of one counter (what ``du`` does within one invocation)."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, int]] = set()

    def count(self, root: Path) -> int:
        """The bytes of the inodes under ``root`` (itself included) no earlier call
        counted; symbolic links are not followed, unreadable entries are skipped."""
        total = 0
        stack = [root]
        try:
            info = root.lstat()
        except OSError:
            return 0
        total += self._once(info)
        if not stat.S_ISDIR(info.st_mode):
            return total
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    entry_info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += self._once(entry_info)
                if stat.S_ISDIR(entry_info.st_mode):
                    stack.append(Path(entry.path))
        return total

    def _once(self, info: os.stat_result) -> int:
        key = (info.st_dev, info.st_ino)
        if key in self._seen:
            return 0
        self._seen.add(key)
        return info.st_blocks * 512


def own_bytes(root: Path) -> int:
    """The bytes under ``root`` that no other path shares: files with one link, and the
    folders (an env's hard links into uv's cache cost nothing more)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in (".", *files):
            try:
                info = (Path(folder) / name).lstat()
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode) or info.st_nlink == 1:
                total += info.st_blocks * 512
    return total


def uv_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$UV_CACHE_DIR``, else what ``uv cache dir`` says."""
    override = environ.get("UV_CACHE_DIR")
    if override:
        return Path(override)
    from _torch_c_dlpack_ext_core.run import run

    return Path(run([find_uv(), "cache", "dir"], echo=False).stdout.strip())


def pip_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$PIP_CACHE_DIR``, else pip's default on Linux (``$XDG_CACHE_HOME/pip``)."""
    override = environ.get("PIP_CACHE_DIR")
    if override:
        return Path(override)
    xdg = environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pip"


def watched_folders(uv_cache: Path, dev_cache: Path | None = None) -> dict[str, Path]:
    """The folders whose entries are made once and never changed afterwards, by label:
    uv's unpacked wheels, the dev cache's torch envs, its CPythons and its Debian roots."""
    dev = dev_cache if dev_cache is not None else dev_cache_root()
    return {
        "uv wheels": uv_cache / "archive-v0",
        "torch envs": dev / "envs",
        "built CPythons": dev / "python",
        "Debian roots": dev / "distro",
    }


@dataclasses.dataclass(frozen=True)
class CacheEntries:
    """The entries of :func:`watched_folders` at one moment."""

    names: Mapping[str, frozenset[str]]

    @classmethod
    def now(cls, folders: Mapping[str, Path]) -> CacheEntries:
        return cls({label: _names(folder) for label, folder in folders.items()})

    def new_since(self, before: CacheEntries, folders: Mapping[str, Path]) -> dict[str, list[Path]]:
        """The entries present now and not ``before``, by label, sorted by name."""
        return {
            label: [
                folders[label] / n for n in sorted(names - before.names.get(label, frozenset()))
            ]
            for label, names in self.names.items()
        }


def _names(folder: Path) -> frozenset[str]:
    """The entries of ``folder`` but its lock files (none: it does not exist yet)."""
    try:
        return frozenset(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))
    except OSError:
        return frozenset()


def wheel_label(entry: Path) -> str:
    """What an entry of uv's ``archive-v0`` holds: ``torch 2.8.0 cp311`` (distribution,
    version and Python tag from its ``.dist-info``: the folder's name as
    :func:`packaging.utils.parse_wheel_filename` reads it, the ``WHEEL`` file as
    :mod:`email.parser` reads it), else the entry's own name."""
    infos = sorted(entry.glob("*.dist-info"))
    if not infos:
        return entry.name
    stem = infos[0].name.removesuffix(".dist-info")
    try:
        name, version, _, _ = parse_wheel_filename(f"{stem}-py3-none-any.whl")
    except InvalidWheelFilename:
        return entry.name
    try:
        with (infos[0] / "WHEEL").open(encoding="utf-8") as wheel:
            tags = BytesHeaderParser().parsebytes(wheel.read().encode()).get_all("Tag", [])
    except OSError:
        tags = []
    label = f"{name} {version}"
    # A CPython tag (cp311, cp314t) tells one torch wheel from another; py2/py3 does not.
    python = str(tags[0]).split("-")[0] if tags else ""
    return f"{label} {python}" if python.startswith("cp") else label


def filesystem_used(path: Path) -> int:
    """The used bytes of the filesystem holding ``path`` (what ``df`` shows as used)."""
    return shutil.disk_usage(path).used


def filesystem_size(path: Path) -> int:
    """The size in bytes of the filesystem holding ``path``."""
    return shutil.disk_usage(path).total


class DiskSampler:
    """A thread that reads :func:`filesystem_used` every ``interval_s`` and keeps the
    highest value since :meth:`take_peak` last ran. Daemonic; :meth:`stop` ends it."""

    def __init__(self, path: Path, interval_s: float = 0.5) -> None:
        self.path = path
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._peak = filesystem_used(path)
        #: How many times the thread has sampled (a test waits on it).
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="disk-sampler", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.note()
            self.samples += 1

    def note(self) -> int:
        """Sample now; the used bytes."""
        used = filesystem_used(self.path)
        with self._lock:
            self._peak = max(self._peak, used)
        return used

    def take_peak(self) -> int:
        """The highest used bytes since the last call (or the start); restarts from now."""
        used = self.note()
        with self._lock:
            peak, self._peak = self._peak, used
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def same_filesystem(paths: Iterable[Path]) -> bool:
    """Whether the existing ``paths`` all live on one filesystem (so one ``statvfs``
    sees what each of them adds)."""
    devices = set()
    for path in paths:
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        devices.add(probe.stat().st_dev)
    return len(devices) <= 1
