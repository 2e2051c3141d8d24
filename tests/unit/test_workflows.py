"""The GitHub Actions workflows follow this project's release policy, checked mechanically.

The generic hardening (actions pinned to a commit SHA, ``persist-credentials: false``,
permissions, template injection, floating image tags) is zizmor's job in ``nox -s lint``;
what is here is what no zizmor or actionlint audit checks offline. Each rule is a
function returning the violations it finds, so the same rule is tested on the real
workflows (no violations) and on a small bad workflow (the violation is found): a rule
that can never fire would be worthless.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))

USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)\s*(?P<comment>#.*)?$")
# Dependabot updates a SHA pin together with this comment; zizmor's ref-version-mismatch,
# which compares the two, runs online only.
VERSION_COMMENT = re.compile(r"^#\s*v\d+(\.\d+)*\b")


def load(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    # YAML 1.1 reads the bare key `on` as the boolean True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def jobs(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return workflow.get("jobs") or {}


def steps(workflow: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in jobs(workflow).items():
        for step in job.get("steps") or []:
            yield name, step


# --- rules ---------------------------------------------------------------------------


def missing_version_comments(text: str) -> list[str]:
    return [
        f"line {number}: {match['ref']} lacks a '# vX.Y.Z' version comment"
        for number, line in enumerate(text.splitlines(), 1)
        if (match := USES_LINE.match(line)) is not None
        and not VERSION_COMMENT.match(match["comment"] or "")
    ]


def grants_id_token(permissions: Any) -> bool:
    if permissions == "write-all":
        return True
    return isinstance(permissions, dict) and permissions.get("id-token") == "write"


def id_token_jobs(workflow: dict[str, Any]) -> list[str]:
    found = ["<workflow>"] if grants_id_token(workflow.get("permissions")) else []
    found += [
        name for name, job in jobs(workflow).items() if grants_id_token(job.get("permissions"))
    ]
    return found


def unused_dispatch_inputs(workflow: dict[str, Any], text: str) -> list[str]:
    dispatch = (workflow.get("on") or {}).get("workflow_dispatch") or {}
    inputs = (dispatch or {}).get("inputs") or {}
    return [
        f"workflow_dispatch input {name!r} is never used"
        for name in inputs
        if not re.search(rf"\binputs\.{re.escape(name)}\b", text)
    ]


# --- the real workflows ---------------------------------------------------------------


def test_workflows_exist() -> None:
    assert {p.name for p in WORKFLOW_FILES} >= {"ci.yml", "release.yml"}


@pytest.fixture(params=WORKFLOW_FILES, ids=lambda p: p.name)
def workflow_file(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


def test_policy(workflow_file: Path) -> None:
    text = workflow_file.read_text(encoding="utf-8")
    workflow = load(text)
    assert missing_version_comments(text) + unused_dispatch_inputs(workflow, text) == []


def test_id_token_only_on_publish() -> None:
    assert id_token_jobs(load((WORKFLOWS / "ci.yml").read_text(encoding="utf-8"))) == []
    assert id_token_jobs(load((WORKFLOWS / "release.yml").read_text(encoding="utf-8"))) == [
        "publish"
    ]


@pytest.fixture(scope="module")
def release() -> dict[str, Any]:
    return load((WORKFLOWS / "release.yml").read_text(encoding="utf-8"))


def test_release_triggers(release: dict[str, Any]) -> None:
    assert release["on"]["push"]["tags"] == ["v*"]
    assert release["on"]["workflow_dispatch"]["inputs"]


def test_matrix_comes_from_nox(release: dict[str, Any]) -> None:
    runs = " ".join(str(step.get("run", "")) for step in release["jobs"]["matrix"]["steps"])
    assert "nox -s matrix" in runs
    cells = release["jobs"]["cells"]
    assert cells["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.cells) }}"
    assert "matrix" in cells["needs"]
    verify = release["jobs"]["verify"]
    assert verify["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.verify) }}"


def test_cells_run_cibuildwheel(release: dict[str, Any]) -> None:
    # cibuildwheel from PyPI at the pinned version (4.3.5; the action's repository
    # snapshot available here ends at v4.2.0, so no action SHA could be checked).
    assert release["env"]["CIBUILDWHEEL"] == "cibuildwheel==4.3.5"
    runs = [str(s.get("run", "")) for s in release["jobs"]["cells"]["steps"]]
    assert any('uvx --python 3.11 "$CIBUILDWHEEL" --output-dir wheelhouse' in r for r in runs)


def test_assemble_uses_the_build_session(release: dict[str, Any]) -> None:
    # One call, `nox -s assemble`, in place of `nox -s build -- --assemble-from`, the
    # contents and split-variants commands and `nox -s release -- --check-only`: the
    # session installs what the build and release sessions install.
    runs = " ".join(str(step.get("run", "")) for step in release["jobs"]["assemble"]["steps"])
    assert "nox -s assemble -- " in runs
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assemble = noxfile[noxfile.index("def assemble(") :].split("\n@nox.session", 1)[0]
    assert 'session.install(*_group("build"), *_group("release"))' in assemble


def test_publish_job(release: dict[str, Any]) -> None:
    publish = release["jobs"]["publish"]
    # The environment, its URL and the upload URL all come from the publish guard.
    assert publish["environment"] == {
        "name": "${{ needs.matrix.outputs.index }}",
        "url": "${{ needs.matrix.outputs.project_url }}",
    }
    assert publish["permissions"] == {"id-token": "write", "attestations": "write"}
    assert set(publish["needs"]) >= {"matrix", "assemble", "sdist", "verify"}
    by_action = {str(s.get("uses", "")).split("@")[0]: s for s in publish["steps"]}
    assert by_action["pypa/gh-action-pypi-publish"]["with"]["attestations"] is True
    assert "actions/attest-build-provenance" in by_action
    # No secrets: Trusted Publishing mints a short-lived token from the OIDC identity.
    assert "secrets." not in (WORKFLOWS / "release.yml").read_text(encoding="utf-8")


def test_cibuildwheel_config() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    cibw = config["tool"]["cibuildwheel"]
    # Images have one source, matrix.toml (the workflow passes each job's image).
    assert not [key for key in cibw if key.endswith("-image")]
    repair = cibw["linux"]["repair-wheel-command"]
    for lib in ("libtorch.so", "libc10.so", "libtorch_cpu.so", "libtorch_python.so"):
        assert f"--exclude {lib}" in repair
    assert "torch_c_dlpack_ext" in cibw["test-command"] or "-m devtools " in cibw["test-command"]


# --- the rules catch what they must ---------------------------------------------------

BAD = """\
name: bad
on:
  workflow_dispatch:
    inputs:
      forgotten: {type: string}
permissions: write-all
jobs:
  build:
    runs-on: ubuntu-latest
    permissions:
      id-token: write
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2
      - uses: actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065
"""


def test_rules_find_violations() -> None:
    workflow = load(BAD)
    assert missing_version_comments(BAD) == [
        "line 14: actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065"
        " lacks a '# vX.Y.Z' version comment"
    ]
    assert id_token_jobs(workflow) == ["<workflow>", "build"]
    assert unused_dispatch_inputs(workflow, BAD) == [
        "workflow_dispatch input 'forgotten' is never used"
    ]
