"""``devtools.envs.torchenv`` reports progress while it creates an env: which env, what
it installs, the elapsed time, and a heartbeat while uv runs."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from devtools.envs import torchenv


def test_progress_names_the_env_and_beats_while_uv_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lines: list[str] = []
    monkeypatch.setattr(torchenv.PROGRESS, "heartbeat_s", 0.05)

    def slow_uv(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        time.sleep(0.3)
        return subprocess.CompletedProcess(cmd, 0, "", "Installed 1 package in 3ms\n")

    monkeypatch.setattr(torchenv, "run", slow_uv)
    monkeypatch.setattr(torchenv.PROGRESS, "current", ("py3.11-torch2.8.0", time.monotonic() - 5))
    # monkeypatch restores the session's sink (tests/conftest.py) afterwards.
    monkeypatch.setattr(torchenv.PROGRESS, "sink", None)
    torchenv.set_progress(lines.append)
    torchenv._uv("uv", "pip", "install", "torch==2.8.0")
    assert lines, "no progress at all"
    assert all(line.startswith("torchenv [py3.11-torch2.8.0, ") for line in lines), lines
    beats = [line for line in lines if "still running uv pip install torch==2.8.0" in line]
    assert len(beats) >= 2, lines
    assert any("uv: Installed 1 package" in line for line in lines)
    assert re.search(r":\s+done in \d+\.\d s$", lines[-1]), lines[-1]
    # The elapsed time counts from the start of the env's creation (5 s ago).
    assert int(lines[0].split(", ")[1].split(" s]")[0]) >= 5


def test_progress_goes_to_stderr_without_a_sink(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torchenv.PROGRESS, "sink", None)
    torchenv.PROGRESS.log("hello")
    assert capsys.readouterr().err == "torchenv: hello\n"
