"""devtools.envs.distro and the root-making it shares with devtools.envs.emulation, without root:
the host check's refusals, and debootstrap_root's temp name, prepare, marker and reuse
(debootstrap itself stood in by a function that makes the folder)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from devtools.base.errors import EmulationUnavailableError, ProvisionError
from devtools.envs import distro, emulation


def test_check_host_refuses_another_os(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distro, "host_os", lambda: "macos")
    with pytest.raises(EmulationUnavailableError, match="needs a Linux host"):
        distro.check_host()


def test_check_host_refuses_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distro, "host_os", lambda: "linux")
    monkeypatch.setattr(distro.os, "geteuid", lambda: 1000)
    with pytest.raises(EmulationUnavailableError, match="needs root"):
        distro.check_host()


class FakeDebootstrap:
    """Stands in for ``capture``: debootstrap makes its target folder (or fails)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(cmd))
        if cmd[0] == "debootstrap":
            if self.fail:
                return subprocess.CompletedProcess(cmd, 1, "", "E: no such suite")
            target = Path(cmd[-2])
            (target / "usr" / "bin").mkdir(parents=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_debootstrap_root_prepares_under_a_temp_name_then_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDebootstrap()
    monkeypatch.setattr(emulation, "capture", fake)
    seen: list[Path] = []

    def prepare(staging: Path) -> dict[str, object]:
        seen.append(staging)
        assert staging.name == "root.tmp"
        (staging / "prepared").write_text("yes")
        return {"facts": {"torch": "2.6.0+debian"}}

    root = tmp_path / "root"
    made = emulation.debootstrap_root(root, suite="trixie", include=("python3",), prepare=prepare)
    assert made == root
    assert (root / "prepared").read_text() == "yes"
    assert not (tmp_path / "root.tmp").exists()
    record = emulation.read_root_record(root)
    assert record["suite"] == "trixie"
    assert record["include"] == ["python3"]
    assert record["facts"] == {"torch": "2.6.0+debian"}
    (command,) = fake.calls
    assert command[:3] == ["debootstrap", "--variant=minbase", "--include=python3"]
    assert command[3:5] == ["trixie", str(tmp_path / "root.tmp")]
    # A second call finds the marker: no debootstrap, no prepare.
    emulation.debootstrap_root(root, suite="trixie", include=("python3",), prepare=prepare)
    assert len(fake.calls) == 1
    assert len(seen) == 1


def test_debootstrap_root_leaves_nothing_when_prepare_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(emulation, "capture", FakeDebootstrap())

    def prepare(staging: Path) -> dict[str, object]:
        raise ProvisionError("import torch fails in the new root")

    root = tmp_path / "root"
    with pytest.raises(ProvisionError, match="import torch fails"):
        emulation.debootstrap_root(root, suite="trixie", include=("python3",), prepare=prepare)
    assert not root.exists()
    assert not (tmp_path / "root.tmp").exists()


def test_debootstrap_root_reports_a_failed_debootstrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(emulation, "capture", FakeDebootstrap(fail=True))
    with pytest.raises(ProvisionError, match="debootstrap failed: E: no such suite"):
        emulation.debootstrap_root(tmp_path / "root", suite="nosuch", include=("python3",))
    assert not (tmp_path / "root").exists()


def test_run_paths_are_the_roots_view(tmp_path: Path) -> None:
    root = tmp_path / "root"
    folder = root / distro.RUNS / "run-1"
    folder.mkdir(parents=True)
    source = tmp_path / "proof.py"
    source.write_text("print(1)\n")
    run = distro.Run(root, folder)
    assert run.inside(run.venv) == "/opt/tcde/runs/run-1/venv"
    assert run.copy_in(source) == "/opt/tcde/runs/run-1/proof.py"
    assert (folder / "proof.py").read_text() == "print(1)\n"
    run.remove()
    assert not folder.exists()


def test_private_proc_mounts_in_a_namespace_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``in_root(private_proc=True)``: ``unshare --mount`` runs a shell that mounts
    ``/proc`` in the root and ``exec``s chroot; the root is ``$0``, the rest its argv."""
    fake = FakeDebootstrap()
    monkeypatch.setattr(emulation, "capture", fake)
    emulation.in_root(tmp_path, [], ["-c", "pass"], env={}, private_proc=True, program="/v/py")
    (cmd,) = fake.calls
    assert cmd[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert cmd[5:7] == ["sh", "-c"]
    assert cmd[7] == 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"'
    assert cmd[8] == str(tmp_path)
    assert cmd[9] == "/usr/bin/env"
    assert cmd[-3:] == ["/v/py", "-c", "pass"]
    fake.calls.clear()
    emulation.in_root(tmp_path, [], ["-c", "pass"], env={})
    assert fake.calls[0][:2] == ["chroot", str(tmp_path)]


def test_runs_a_killed_run_left_are_removed_later(tmp_path: Path) -> None:
    import os
    import time

    runs = tmp_path / "runs"
    old, new = runs / "run-old", runs / "run-new"
    for folder in (old, new):
        (folder / "venv").mkdir(parents=True)
    day_ago = time.time() - 25 * 3600
    os.utime(old, (day_ago, day_ago))
    distro._remove_stale_runs(runs)
    assert not old.exists()
    assert new.is_dir()
