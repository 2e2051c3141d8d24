"""The footprint report of a test run (``pytest --footprint FILE``): per test module its
time, outcomes and what it added to the disk, per torch environment what its creation
added to uv's cache, the filesystem's peak; written as JSON for
``devtools.testkit.footprint`` (tables: ``python -m devtools footprint``), and summed up at
the end of the terminal output.

Registered by ``tests/conftest.py`` only when ``--footprint`` is given. The disk figures
are exact where the run has its filesystem to itself (a CI runner, a rehearsal's
loop-mounted image); elsewhere the filesystem's numbers include other writers, while the
cache entries a module made are still its own.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class _Module:
    name: str
    started: float
    disk_start: int
    entries: Any
    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    envs_used: list[str] = dataclasses.field(default_factory=list)


class FootprintPlugin:
    """The pytest plugin and the torchenv observer of one footprint run (the tests pass
    it to torchenv through ``tests/conftest.py``'s ``env_observer``)."""

    def __init__(self, config: pytest.Config, out: Path, shard: str) -> None:
        from devtools.base.hostenv import dev_cache_root
        from devtools.testkit import diskuse

        self.config = config
        self.out = out
        self.shard = shard
        self.diskuse = diskuse
        self.dev_cache = dev_cache_root()
        self.uv_cache = diskuse.uv_cache_dir()
        self.folders = diskuse.watched_folders(self.uv_cache, self.dev_cache)
        self.counter = diskuse.InodeCounter()
        self.modules: list[Any] = []
        self.envs: list[Any] = []
        self.envs_seen: set[str] = set()
        self.current: _Module | None = None
        self.skips: list[Any] = []
        self.env_starts: dict[str, tuple[float, Any]] = {}

    # -- the run ------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.monotonic()
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.sampler = self.diskuse.DiskSampler(ROOT)
        self.disk_start = self.sampler.take_peak()
        self.peak = self.disk_start

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        module = item.nodeid.split("::")[0]
        if self.current is None or self.current.name != module:
            self._close_module()
            self.current = _Module(module, time.monotonic(), self.sampler.note(), self._entries())
        yield

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.current is None:
            return
        if report.when == "call":
            outcome = report.outcome
        elif report.skipped:
            outcome = "skipped"
        elif report.failed:
            outcome = "error"
        else:
            return
        self.current.outcomes[outcome] = self.current.outcomes.get(outcome, 0) + 1
        if outcome == "skipped":
            from devtools.testkit.footprint import Skip

            self.skips.append(Skip(report.nodeid, _skip_reason(report)))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from devtools.testkit import footprint

        self._close_module()
        self.sampler.stop()
        disk_end = self.diskuse.filesystem_used(ROOT)
        run = footprint.RunRecord(
            shard=self.shard,
            python=platform.python_version(),
            platform=f"{sys.platform}-{platform.machine()}",
            started=self.started_at,
            seconds=round(time.monotonic() - self.started, 1),
            one_filesystem=self.diskuse.same_filesystem([ROOT, *self._areas().values()]),
            filesystem_size=self.diskuse.filesystem_size(ROOT),
            disk_start=self.disk_start,
            disk_peak=self.peak - self.disk_start,
            disk_end=disk_end - self.disk_start,
            areas=self._area_sizes(),
            modules=tuple(self.modules),
            envs=tuple(self.envs),
            skips=tuple(self.skips),
            as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
            root_step=self.config.option.markexpr == "needs_root",
        )
        footprint.write_run(self.out, run)
        self.run = run

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        run = getattr(self, "run", None)
        if run is None:
            return
        from devtools.testkit.footprint import gib

        terminalreporter.section("footprint")
        terminalreporter.write_line(
            f"shard {run.shard}: {run.seconds / 60:.1f} min, disk peak {gib(run.disk_peak)} "
            f"GiB above the start, {gib(run.disk_end)} GiB at the end; written to {self.out}"
        )
        for name, size in run.areas.items():
            terminalreporter.write_line(f"  {name}: {gib(size)} GiB")
        heavy = [m for m in sorted(run.modules, key=lambda m: -m.cache_added) if m.cache_added]
        for m in heavy[:6]:
            terminalreporter.write_line(
                f"  {m.module}: {gib(m.cache_added)} GiB of cache entries, {m.seconds:.0f} s"
            )
        for m in sorted(run.modules, key=lambda m: -m.seconds)[:6]:
            terminalreporter.write_line(f"  {m.module}: {m.seconds:.0f} s")
        if run.modules:
            peak = max(run.modules, key=lambda m: m.disk_peak)
            terminalreporter.write_line(f"  the disk peaked during {peak.module}")

    # -- torchenv's observer ---------------------------------------------------------------

    def _ours(self, root: Path) -> bool:
        # The dev cache's envs only: unit tests make stand-ins under their tmp_path.
        return root.parent == self.dev_cache / "envs"

    def before(self, root: Path) -> None:
        if not self._ours(root):
            return
        if self.current is not None and root.name not in self.current.envs_used:
            self.current.envs_used.append(root.name)
        self.env_starts[root.name] = (time.monotonic(), self._entries())

    def after(self, root: Path, created: bool) -> None:
        if not created or not self._ours(root):
            return
        _, before = self.env_starts.pop(root.name, (0.0, self._entries()))
        new = self._entries().new_since(before, self.folders)
        wheels = tuple(self._wheel(entry) for entry in new["uv wheels"])
        module = self.current.name if self.current is not None else ""
        self.envs.append(self._env_record(root, wheels, module))
        self.envs_seen.add(root.name)

    # -- helpers ------------------------------------------------------------------------

    def _entries(self) -> Any:
        return self.diskuse.CacheEntries.now(self.folders)

    def _wheel(self, entry: Path) -> Any:
        from devtools.testkit.footprint import Wheel

        # Its own counter: a wheel's size does not depend on what was counted before.
        return Wheel(self.diskuse.wheel_label(entry), self.diskuse.InodeCounter().count(entry))

    def _env_record(self, root: Path, wheels: tuple[Any, ...], module: str) -> Any:
        from devtools.envs import torchenv
        from devtools.testkit.footprint import EnvRecord

        try:
            record = json.loads((root / torchenv.MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        if root.name.startswith("tree-"):
            kind = "tree"
        elif record.get("importable"):
            kind = "importable"
        else:
            kind = "compile-only" if record.get("compile_only") else "no-deps"
        seconds = record.get("seconds")
        return EnvRecord(
            name=root.name,
            module=module,
            seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
            cuda=_cuda_of(root),
            kind=kind,
            wheels=wheels,
            own=self.diskuse.own_bytes(root),
        )

    def _close_module(self) -> None:
        from devtools.testkit.footprint import ModuleRecord

        module, self.current = self.current, None
        if module is None:
            return
        new = self._entries().new_since(module.entries, self.folders)
        wheels = tuple(self._wheel(entry) for entry in new["uv wheels"])
        made = [p.name for p in new["torch envs"]]
        for env in new["torch envs"]:
            # Made by a subprocess (``python -m devtools build`` makes its trees): seen now.
            if env.name not in self.envs_seen:
                self.envs.append(self._env_record(env, (), module.name))
                self.envs_seen.add(env.name)
        cache_added = sum(w.size for w in wheels) + sum(
            self.diskuse.own_bytes(p)
            for label in ("torch envs", "built CPythons", "Debian roots")
            for p in new[label]
        )
        peak = self.sampler.take_peak()
        self.peak = max(self.peak, peak)
        self.modules.append(
            ModuleRecord(
                module=module.name,
                seconds=round(time.monotonic() - module.started, 1),
                outcomes=dict(module.outcomes),
                disk_added=self.diskuse.filesystem_used(ROOT) - module.disk_start,
                disk_peak=peak - self.disk_start,
                cache_added=cache_added,
                new_wheels=wheels,
                envs_made=tuple(made),
                envs_used=tuple(module.envs_used),
            )
        )

    def _areas(self) -> dict[str, Path]:
        return {
            "uv cache": self.uv_cache,
            "torch envs": self.dev_cache / "envs",
            "dev cache (CPythons, Debian roots)": self.dev_cache,
            "pip cache": self.diskuse.pip_cache_dir(),
            "nox envs": ROOT / ".nox",
            "build cache": _build_cache(),
            "pytest temp": _pytest_temp(self.config),
        }

    def _area_sizes(self) -> dict[str, int]:
        counter = self.diskuse.InodeCounter()
        return {name: counter.count(path) for name, path in self._areas().items()}


def _skip_reason(report: pytest.TestReport) -> str:
    """What pytest says of a skip: the reason without its ``Skipped: `` prefix."""
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _cuda_of(root: Path) -> str | None:
    for version_py in sorted(root.glob("lib/python3*/site-packages/torch/version.py")) + sorted(
        root.glob("torch/version.py")
    ):
        for line in version_py.read_text(encoding="utf-8").splitlines():
            if line.startswith("cuda"):
                value = line.split("=", 1)[1].strip().strip("'\"")
                return None if value in ("None", "") else value
    return None


def _build_cache() -> Path:
    override = os.environ.get("TCDE_TEST_BUILD_CACHE")
    return Path(override) if override else ROOT / ".cache" / "test-builds"


def _pytest_temp(config: pytest.Config) -> Path:
    basetemp = config.option.basetemp
    if basetemp:
        return Path(basetemp)
    return Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
