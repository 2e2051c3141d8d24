"""The release workflow's first run, checked piece by piece against what the
workflow file says (issue 14, D1-D9): what reaches each tool, how artifacts are
laid out, what may fail without blocking the rest, and where a run may publish."""

from __future__ import annotations

import fnmatch
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from build_backend._options import read_options
from devtools.base import cli
from devtools.base.errors import ReleaseError
from devtools.build import repair, variants
from devtools.matrix.reader import load_matrix
from devtools.rehearse import dataflow, flowjob
from devtools.release import cisteps, publish, releaseflow

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.version import __version__

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
SCRIPTS = ROOT / ".github" / "scripts"
MATRIX = load_matrix()
V = __version__


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    data["on"] = data.pop(True)
    return data


def _step(workflow: dict[str, Any], job: str, *, uses: str = "", name: str = "") -> dict[str, Any]:
    for step in workflow["jobs"][job]["steps"]:
        if (uses and str(step.get("uses", "")).startswith(uses)) or (
            name and step.get("name") == name
        ):
            return dict(step)
    raise AssertionError(f"job {job} has no step {uses or name!r}")


def _cibw(workflow: dict[str, Any]) -> dict[str, Any]:
    return _step(workflow, "cells", name="cibuildwheel")


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


# --- the rehearsal replays what the workflow runs --------------------------------------
# devtools/release/releaseflow.py holds each job's one call and the artifacts between the jobs;
# the rehearsal replays those and reads nothing of release.yml. This rule ties the two:
# it returns what release.yml says differently (tested on the real file: nothing; and
# on edited copies: the difference is found).

#: The jobs the rehearsal replays; sdist and publish hand nothing on to them.
REHEARSED = ("matrix", "cells", "assemble", "verify")
#: run: steps of those jobs that are no devtools or nox call (the guard, the runner's
#: disk, the ROCm pre-flight, cibuildwheel itself).
OTHER_RUNS = {
    "matrix": {"Publish target"},
    "cells": {"Free disk space (Linux)", "Disk guard", "Pre-flight the builder image (ROCm)",
              "cibuildwheel", "Disk used by the job"},
}  # fmt: skip


def _load(text: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(text)
    data["on"] = data.pop(True)
    return data


def _uses(step: dict[str, Any], action: str) -> bool:
    return str(step.get("uses", "")).startswith(f"actions/{action}@")


def _call_problems(workflow: dict[str, Any]) -> list[str]:
    problems = []
    for call in releaseflow.CALLS:
        steps = workflow["jobs"][call.job]["steps"]
        found = [s for s in steps if s.get("run") == call.run_line]
        if len(found) != 1:
            problems.append(f"{call.job}: {len(found)} steps run {call.run_line!r}, expected 1")
            continue
        env = dict(found[0].get("env") or {})
        wanted = {v for v in call.variables if v not in releaseflow.RUNNER_VARIABLES}
        if env != dict(call.env) or set(env) != wanted:
            problems.append(f"{call.job}: the step's env is {env}, the rehearsal's {call.env}")
        runs = {s.get("name") for s in steps if "run" in s and s is not found[0]}
        if runs != OTHER_RUNS.get(call.job, set()):
            problems.append(f"{call.job}: more than one call: {sorted(map(str, runs))}")
    return problems


def _artifact_problems(workflow: dict[str, Any]) -> list[str]:
    problems = []
    for job in REHEARSED:
        steps = workflow["jobs"][job]["steps"]
        uploads = [s["with"] for s in steps if _uses(s, "upload-artifact")]
        want_up = [
            {"name": u.workflow_name, "path": u.path, "if-no-files-found": "error"}
            for u in releaseflow.UPLOADS
            if u.job == job
        ]
        if uploads != want_up:
            problems.append(f"{job} uploads {uploads}, the rehearsal {want_up}")
        downloads = [s for s in steps if _uses(s, "download-artifact")]
        want_down = [
            {"name": d.name, "pattern": d.pattern, "path": d.path}
            | ({"merge-multiple": True} if d.merge_multiple else {})
            for d in releaseflow.DOWNLOADS
            if d.job == job
        ]
        got = [{"name": None, "pattern": None, **s["with"]} for s in downloads]
        if got != want_down:
            problems.append(f"{job} downloads {got}, the rehearsal {want_down}")
        problems += [
            f"{job} uses {s['uses']}; the rehearsal models the layout of "
            f"{releaseflow.DOWNLOAD_ARTIFACT}: check that release's rules, then update it"
            for s in downloads
            if s["uses"] != releaseflow.DOWNLOAD_ARTIFACT
        ]
    return problems


def tie_problems(workflow: dict[str, Any]) -> list[str]:
    """Where release.yml and devtools/release/releaseflow.py (what the rehearsal replays) differ."""
    cibw = _step(workflow, "cells", name="cibuildwheel")
    cells = (cibw.get("env") or {}).get(releaseflow.JOB_CELLS_VARIABLE)
    problems = [] if cells == releaseflow.JOB_CELLS else [f"cibuildwheel's cells: {cells!r}"]
    return problems + _call_problems(workflow) + _artifact_problems(workflow)


def test_the_rehearsal_replays_what_release_yml_runs(workflow: dict[str, Any]) -> None:
    assert tie_problems(workflow) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        # The old layout: every job's wheels merged into one folder.
        ("          pattern: cell-*\n          path: cells\n",
         "          pattern: cell-*\n          path: cells\n          merge-multiple: true\n",
         "assemble downloads"),
        ("name: cell-${{ matrix.id }}", "name: wheels-${{ matrix.id }}", "cells uploads"),
        ("--dist dist --variants", "--dist out --variants", "assemble: 0 steps run"),
        ('--torch "$TORCH_MINORS"', "--torch 2.8", "verify: 0 steps run"),
        ("TORCH_MINORS: ${{ matrix.torch }}", "TORCH_MINORS: 2.8,2.9", "verify: the step's env"),
        ("          TCDE_JOB_CELLS: ${{ join(matrix.cells, ',') }}\n        run: $DEVTOOLS",
         "          TCDE_JOB_CELLS: ${{ matrix.id }}\n        run: $DEVTOOLS",
         "cells: the step's env"),
        ("      - uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2\n"
         "        with:\n          name: dist-wheels",
         "      - run: $DEVTOOLS split-variants dist variants\n"
         "      - uses: actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2\n"
         "        with:\n          name: dist-wheels",
         "assemble: more than one call"),
    ],
)  # fmt: skip
def test_a_workflow_that_says_otherwise_is_found(old: str, new: str, problem: str) -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    problems = tie_problems(_load(text.replace(old, new)))
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize("call", releaseflow.CALLS, ids=lambda c: c.job)
def test_each_call_is_the_devtools_command_it_names(call: releaseflow.Call) -> None:
    """A nox session's call runs exactly ``python -m devtools <command>`` with the
    session's arguments (what the rehearsal runs in its stead), and the command exists."""
    import types

    assert call.command in {c.name for c in cli.COMMANDS}
    if call.session is None:
        return
    import noxfile

    ran: list[tuple[str, ...]] = []
    session = types.SimpleNamespace(
        posargs=["--x"], install=lambda *a, **k: None, run=lambda *a, **k: ran.append(a)
    )
    getattr(noxfile, call.session)(session)
    assert ran == [("python", "-m", "devtools", call.command, "--x")]


def test_a_call_fills_in_its_variables() -> None:
    call = releaseflow.VERIFY
    assert call.run_line == '$DEVTOOLS verify dist --expect matrix.json --torch "$TORCH_MINORS"'
    assert call.variables == ("TORCH_MINORS",)
    argv = call.argv({"TORCH_MINORS": "2.8,2.9"}, ["--no-install"])
    assert argv == [
        "verify",
        "dist",
        "--expect",
        "matrix.json",
        "--torch",
        "2.8,2.9",
        "--no-install",
    ]
    assert releaseflow.MATRIX.run_line.startswith('uvx nox -s matrix -- --only "$CELLS" ')
    assert releaseflow.job_cells({"cells": ["a", "b"]}) == "a,b"


# --- D1: job wheels never clobber each other -------------------------------------------


def test_d1_assemble_downloads_one_folder_per_artifact(workflow: dict[str, Any]) -> None:
    (download,) = [d for d in releaseflow.DOWNLOADS if d.job == "assemble" and d.pattern]
    assert download.pattern == "cell-*"
    assert download.merge_multiple is False
    # What the rehearsal lays out is what the workflow downloads (see the tie below).
    step = _step(workflow, "assemble", uses="actions/download-artifact@")
    assert step["with"] == {"pattern": "cell-*", "path": "cells"}


def test_rehearsal_refuses_a_download_artifact_it_does_not_model() -> None:
    text = WORKFLOW.read_text(encoding="utf-8")
    assert releaseflow.DOWNLOAD_ARTIFACT in text
    other = text.replace(releaseflow.DOWNLOAD_ARTIFACT, "actions/download-artifact@" + "0" * 40)
    assert any("the rehearsal models the layout of" in p for p in tie_problems(_load(other)))


def test_d1_equal_wheel_names_collide_only_when_merged(tmp_path: Path) -> None:
    # The cuda and the rocm job of one platform repair to the same file name (abi3).
    name = f"torch_c_dlpack_ext-{V}-cp39-abi3-manylinux_2_28_x86_64.whl"
    artifacts = {}
    for job in ("linux_x86_64-cuda", "linux_x86_64-rocm6.4"):
        folder = tmp_path / "upload" / job
        folder.mkdir(parents=True)
        (folder / name).write_bytes(job.encode())
        artifacts[f"cell-{job}"] = [folder / name]
    artifacts["release-matrix"] = [tmp_path / "upload" / "ignored.json"]
    placed = dataflow.lay_out_artifacts(
        artifacts, tmp_path / "cells", pattern="cell-*", merge_multiple=False
    )
    assert sorted(p.relative_to(tmp_path / "cells").as_posix() for p in placed) == [
        f"cell-linux_x86_64-cuda/{name}",
        f"cell-linux_x86_64-rocm6.4/{name}",
    ]
    assert {p.read_bytes() for p in placed} == {
        b"linux_x86_64-cuda",
        b"linux_x86_64-rocm6.4",
    }
    with pytest.raises(ConfigError, match=f"both hold {name}"):
        dataflow.lay_out_artifacts(
            artifacts, tmp_path / "merged", pattern="cell-*", merge_multiple=True
        )


def test_d1_artifact_names_are_unique_per_job(workflow: dict[str, Any]) -> None:
    (upload,) = [u for u in releaseflow.UPLOADS if u.job == "cells"]
    (download,) = [d for d in releaseflow.DOWNLOADS if d.job == "assemble" and d.pattern]
    names = [upload.artifact(job["id"]) for job in MATRIX.jobs()]
    assert len(set(names)) == len(names) == len(MATRIX.jobs())
    assert all(fnmatch.fnmatchcase(n, str(download.pattern)) for n in names)


def test_a_download_by_name_lands_in_its_path_and_never_overwrites(tmp_path: Path) -> None:
    # The verify job downloads dist-wheels and variants into one folder, dist/.
    upload = tmp_path / "upload"
    upload.mkdir()
    for name in ("a.whl", "b.whl", "variants.json"):
        (upload / name).write_bytes(name.encode())
    store = {"dist-wheels": [upload / "a.whl"], "variants": [upload / "b.whl"]}
    dist = tmp_path / "verify" / "dist"
    assert dataflow.lay_out_artifacts(store, dist, name="dist-wheels") == [dist / "a.whl"]
    assert dataflow.lay_out_artifacts(store, dist, name="variants") == [dist / "b.whl"]
    with pytest.raises(ConfigError, match="no artifact named 'release-matrix'"):
        dataflow.lay_out_artifacts(store, tmp_path, name="release-matrix")
    # A second artifact holding a name already there would overwrite it: refused.
    store["more"] = [upload / "a.whl"]
    with pytest.raises(ConfigError, match=r"both hold a\.whl"):
        dataflow.lay_out_artifacts(store, dist, name="more")


def test_a_replayed_call_runs_in_its_jobs_folder_and_reports_its_error(tmp_path: Path) -> None:
    from build_backend._metadata import project_metadata
    from build_backend._wheel import assemble_wheel

    workspace = tmp_path / "jobs" / "linux_x86_64-cuda"
    (workspace / "wheelhouse").mkdir(parents=True)
    values = {"TCDE_JOB_CELLS": "linux_x86_64-t28_cpu"}
    before = Path.cwd()
    failed = dataflow.replay(releaseflow.JOB_CHECK, workspace, values)
    assert failed == "wheelhouse: no wheels; did the build and repair steps run?"
    assert Path.cwd() == before
    (cell,) = MATRIX.select(["linux_x86_64-t28_cpu"])
    pair = flowjob.stand_in_library(cell, tmp_path / "libs", elf=False)
    assemble_wheel(workspace / "wheelhouse", meta=project_metadata(ROOT), libraries=[pair],
                   platform="manylinux_2_28_x86_64")  # fmt: skip
    assert dataflow.replay(releaseflow.JOB_CHECK, workspace, values) is None
    other = {"TCDE_JOB_CELLS": "linux_x86_64-t28_cpu,linux_x86_64-t28_cuda"}
    failed = dataflow.replay(releaseflow.JOB_CHECK, workspace, other)
    assert failed is not None
    assert "cells of the job missing: linux_x86_64-t28_cuda" in failed


# --- D2: Windows jobs get MSVC ----------------------------------------------------------


def test_d2_msvc_environment_before_cibuildwheel(workflow: dict[str, Any]) -> None:
    steps = workflow["jobs"]["cells"]["steps"]
    uses = [str(s.get("uses", "")) for s in steps]
    (index,) = [i for i, u in enumerate(uses) if u.startswith("ilammy/msvc-dev-cmd@")]
    msvc = steps[index]
    assert msvc["if"] == "runner.os == 'Windows'"
    assert msvc["with"] == {"arch": "x64"}
    assert index < steps.index(_cibw(workflow))
    assert any(job["runner"].startswith("windows") for job in MATRIX.jobs())


# --- D3, D4, smaller: the repair commands -----------------------------------------------


def _flags(command: str, flag: str) -> list[str]:
    words = shlex.split(command)
    return [words[i + 1] for i, word in enumerate(words) if word == flag]


def test_one_exclude_list_for_auditwheel() -> None:
    command = _pyproject()["tool"]["cibuildwheel"]["linux"]["repair-wheel-command"]
    assert sorted(_flags(command, "--exclude")) == sorted(repair.AUDITWHEEL_EXCLUDES)


def test_d4_linux_repair_gives_exactly_the_images_policy() -> None:
    command = _pyproject()["tool"]["cibuildwheel"]["linux"]["repair-wheel-command"]
    words = shlex.split(command)
    assert "--only-plat" in words
    assert _flags(command, "--plat") == ["$AUDITWHEEL_PLAT"]


def test_d3_macos_repair_tolerates_rpath_dependencies() -> None:
    command = _pyproject()["tool"]["cibuildwheel"]["macos"]["repair-wheel-command"]
    assert "--ignore-missing-dependencies" in shlex.split(command)
    assert sorted(_flags(command, "--exclude")) == sorted(repair.DELOCATE_EXCLUDES)
    assert set(repair.DELOCATE_EXCLUDES) == {
        "libc10.dylib",
        "libtorch.dylib",
        "libtorch_cpu.dylib",
        "libtorch_python.dylib",
    }


def test_windows_repair_is_explicitly_none() -> None:
    # cibuildwheel 4 defaults to delvewheel, which would vendor torch's DLLs.
    assert _pyproject()["tool"]["cibuildwheel"]["windows"]["repair-wheel-command"] == ""


def test_repaired_wheels_are_checked_for_grafted_libraries(workflow: dict[str, Any]) -> None:
    steps = workflow["jobs"]["cells"]["steps"]
    check = _step(
        workflow, "cells",
        name="The repaired wheel holds exactly the job's cells and only its own libraries",
    )  # fmt: skip
    assert check["run"] == '$DEVTOOLS check-repaired wheelhouse --cells "$TCDE_JOB_CELLS"'
    assert steps.index(_cibw(workflow)) < steps.index(check)


# --- D5, D9: the ROCm images ----------------------------------------------------------


def test_d5_rocm_jobs_preflight_their_image(workflow: dict[str, Any]) -> None:
    steps = workflow["jobs"]["cells"]["steps"]
    preflight = _step(workflow, "cells", name="Pre-flight the builder image (ROCm)")
    assert preflight["if"] == "matrix.backend == 'rocm'"
    assert preflight["env"]["IMAGE"] == "${{ matrix.image }}"
    assert preflight["env"]["ROCM_VERSION"] == "${{ matrix.toolkit }}"
    assert "preflight-image.sh" in preflight["run"]
    assert steps.index(preflight) < steps.index(_cibw(workflow))
    # ... and a failing ROCm job does not fail the run.
    assert workflow["jobs"]["cells"]["continue-on-error"] == "${{ matrix.allow_failure != '' }}"
    rocm = [job for job in MATRIX.jobs() if job["backend"] == "rocm"]
    assert rocm
    assert all(job["allow_failure"] and job["toolkit"] for job in rocm)
    assert not [job for job in MATRIX.jobs() if job["backend"] != "rocm" and job["allow_failure"]]


def _preflight(root: Path, *args: str, plat: str | None = "manylinux_2_28_x86_64") -> Any:
    env = {"PATH": os.environ["PATH"], "PREFLIGHT_ROOT": str(root)}
    if plat is not None:
        env["AUDITWHEEL_PLAT"] = plat
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, str(SCRIPTS / "preflight-image.sh"), *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _image_tree(root: Path, *, rocm: str | None) -> Path:
    python = root / "opt" / "python" / "cp311-cp311" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    auditwheel = root / "usr" / "local" / "bin" / "auditwheel"
    auditwheel.parent.mkdir(parents=True)
    auditwheel.write_text("#!/bin/sh\n")
    auditwheel.chmod(0o755)
    if rocm is not None:
        (root / "opt" / "rocm" / ".info").mkdir(parents=True)
        (root / "opt" / "rocm" / ".info" / "version").write_text(f"{rocm}-123\n")
        (root / "opt" / "rocm" / "include" / "hip").mkdir(parents=True)
    return root


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_d5_preflight_script_passes_a_good_image(tmp_path: Path) -> None:
    root = _image_tree(tmp_path, rocm="6.2.4")
    result = _preflight(root, "cp311", "6.2.4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "builder image ok" in result.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_d5_preflight_script_reports_every_problem_loudly(tmp_path: Path) -> None:
    # D9: an image of another ROCm version is refused, not silently used.
    root = _image_tree(tmp_path, rocm="6.4.1")
    result = _preflight(root, "cp312", "6.2", plat=None)
    assert result.returncode == 1
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 4, result.stdout
    assert "cp312-cp312" in errors[0]
    assert "cp311-cp311" in errors[0]  # what the image does have
    assert "AUDITWHEEL_PLAT" in errors[1]
    assert "ROCm 6.4.1-123, the flavour declares 6.2" in errors[2]
    assert "3 problem(s)" in errors[3]
    assert _preflight(tmp_path / "empty", "cp311", "6.4").returncode == 1


def test_d9_rocm_image_and_the_cell_name_one_version() -> None:
    # (The variant metadata names the torch minor only since issue 44: no amd property.)
    for cell in MATRIX.cells():
        if cell.backend.value != "rocm":
            continue
        assert cell.image == MATRIX.backend_images[cell.backend][str(cell.toolkit)]
        assert variants.variant_properties(cell.torch.minor) == [
            f"abi_dependency :: torch :: {cell.torch.minor}"
        ]
        assert f"rocm{cell.toolkit}-" in str(cell.image)


# --- D6: runner disk ---------------------------------------------------------------------


def test_d6_disk_is_freed_and_guarded_before_the_build(workflow: dict[str, Any]) -> None:
    steps = workflow["jobs"]["cells"]["steps"]
    free = _step(workflow, "cells", name="Free disk space (Linux)")
    guard = _step(workflow, "cells", name="Disk guard")
    assert free["if"] == "runner.os == 'Linux'"
    assert "/usr/share/dotnet" in free["run"]
    assert "disk-guard.sh" in guard["run"]
    assert steps.index(free) < steps.index(guard) < steps.index(_cibw(workflow))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_d6_disk_guard_fails_loudly(tmp_path: Path) -> None:
    def guard(needed: str) -> Any:
        return subprocess.run(
            ["bash", str(SCRIPTS / "disk-guard.sh"), needed, str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    assert guard("0").returncode == 0
    short = guard("1000000")
    assert short.returncode == 1
    assert "::error title=runner disk::" in short.stdout
    assert "needs 1000000 GiB" in short.stdout


# --- D7: the `cells` input reaches the job's build as cell ids ----------------------


def test_d7_job_build_gets_the_jobs_cell_ids(workflow: dict[str, Any]) -> None:
    import argparse

    from devtools.commands import build

    parser = argparse.ArgumentParser()
    build.add_arguments(parser)

    value = _cibw(workflow)["env"][releaseflow.JOB_CELLS_VARIABLE]
    assert value == "${{ join(matrix.cells, ',') }}" == releaseflow.JOB_CELLS
    cibw = _pyproject()["tool"]["cibuildwheel"]
    # before-build compiles the cells into the libs dir the backend packs (checked there).
    args, libs_dir = flowjob.read_job_build()
    assert cibw["config-settings"] == {"libs-dir": libs_dir}
    # Windows runs the same command, in cmd.exe's syntax.
    windows = (
        cibw["windows"]["before-build"]
        .replace("cd /d ", "cd ")
        .replace('set "PYTHONPATH=python" && ', "PYTHONPATH=python ")
        .replace("%TCDE_JOB_CELLS%", "$TCDE_JOB_CELLS")
    )
    assert windows == cibw["before-build"]
    # The backend only packs that folder: no matrix, no cells of its own.
    options = read_options(pyproject={}, config_settings=cibw["config-settings"], root=ROOT,
                           environ={})  # fmt: skip
    assert options.libs_dir == ROOT / libs_dir
    # A dispatch run narrowed to one cell: the job keeps its id, but only that cell
    # is built (the job id would select all 14 cells of the job).
    (job,) = MATRIX.jobs(MATRIX.select(["linux_x86_64-t28_cpu"]))
    assert job["id"] == "linux_x86_64-cuda"

    def selected(job: dict[str, Any]) -> list[str]:
        passed = releaseflow.job_cells(job)
        argv = [passed if a == "$TCDE_JOB_CELLS" else a for a in args]
        cells = parser.parse_args(argv).cells
        return [c.id for c in MATRIX.select(cells.split(","))]

    assert selected(job) == ["linux_x86_64-t28_cpu"]
    assert len(MATRIX.select([job["id"]])) > 1
    # Every job of the full matrix: the job's build selects exactly the job's cells.
    for full in MATRIX.jobs():
        assert selected(full) == full["cells"]


# --- D8: the publish guard -------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "ref", "may_publish", "index"),
    [
        ("push", f"refs/tags/v{V}", False, "pypi"),
        ("push", f"refs/tags/v{V}", True, "pypi"),
        ("workflow_dispatch", "refs/heads/main", True, "testpypi"),
        ("workflow_dispatch", f"refs/tags/v{V}", True, "testpypi"),
        ("workflow_dispatch", "refs/heads/main", False, "none"),
    ],
)
def test_d8_publish_target(event: str, ref: str, may_publish: bool, index: str) -> None:
    target = publish.publish_target(event, ref, may_publish)
    assert target.index == index
    if index == "pypi":
        assert target.repository_url == "https://upload.pypi.org/legacy/"
        assert target.project_url.startswith("https://pypi.org/project/")
    elif index == "testpypi":
        assert target.repository_url == "https://test.pypi.org/legacy/"
        assert target.project_url.startswith("https://test.pypi.org/project/")
    else:
        assert target.repository_url == target.project_url == ""


@pytest.mark.parametrize(
    ("event", "ref", "message"),
    [
        ("push", "refs/tags/v9.9.9", "does not match"),
        ("push", "refs/heads/main", "not a tag push"),
        ("pull_request", "refs/pull/1/merge", "never publishes"),
    ],
)
def test_d8_publish_guard_refuses(event: str, ref: str, message: str) -> None:
    with pytest.raises(ReleaseError, match=message):
        publish.publish_target(event, ref, True)


def test_d8_workflow_publishes_only_where_the_guard_says(workflow: dict[str, Any]) -> None:
    inputs = workflow["on"]["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"cells", "publish"}  # no way to pick PyPI by hand
    target = _step(workflow, "matrix", name="Publish target")
    assert "publish-target" in target["run"]
    publish = workflow["jobs"]["publish"]
    assert publish["if"] == (
        "needs.matrix.outputs.index == 'pypi' || needs.matrix.outputs.index == 'testpypi'"
    )
    upload = _step(workflow, "publish", uses="pypa/gh-action-pypi-publish@")
    assert upload["with"]["repository-url"] == "${{ needs.matrix.outputs.repository_url }}"
    outputs = workflow["jobs"]["matrix"]["outputs"]
    for key in ("index", "repository_url", "project_url"):
        assert outputs[key] == f"${{{{ steps.target.outputs.{key} }}}}"


def test_d8_publish_target_command_writes_output_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["publish-target", "--event", "workflow_dispatch", "--ref", "refs/heads/x"]
    assert cli.main([*argv, "--publish", "false"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "index=none",
        "repository_url=",
        "project_url=",
    ]
    assert cli.main([*argv, "--publish", "maybe"]) == ConfigError.exit_code


# --- one failing job does not block the others -------------------------------------------


def test_failures_do_not_block_the_rest(workflow: dict[str, Any]) -> None:
    jobs = workflow["jobs"]
    assert jobs["cells"]["strategy"]["fail-fast"] is False
    assert jobs["verify"]["strategy"]["fail-fast"] is False
    assert jobs["assemble"]["if"] == "${{ !cancelled() && needs.matrix.result == 'success' }}"
    assert jobs["verify"]["if"] == "${{ !cancelled() && needs.assemble.result == 'success' }}"
    contents = _step(
        workflow,
        "assemble",
        name="nox -s assemble (dist, release notes, twine check, variants apart)",
    )
    assert "--matrix matrix.json --dist dist" in contents["run"]
    assert "--cells cells" in contents["run"]
    assert '--summary "$GITHUB_STEP_SUMMARY"' in contents["run"]
    verify = jobs["verify"]["steps"][-1]
    # Each verify entry installs the torch minors it names (oldest / newest CPython).
    assert verify["run"] == '$DEVTOOLS verify dist --expect matrix.json --torch "$TORCH_MINORS"'
    assert verify["env"] == {"TORCH_MINORS": "${{ matrix.torch }}"}
    setup = next(s for s in jobs["verify"]["steps"] if "setup-python" in str(s.get("uses")))
    assert setup["with"]["python-version"] == "${{ matrix.python }}"


def test_images_come_from_the_matrix(workflow: dict[str, Any]) -> None:
    env = _cibw(workflow)["env"]
    assert env["CIBW_MANYLINUX_X86_64_IMAGE"] == "${{ matrix.image }}"
    assert env["CIBW_MANYLINUX_AARCH64_IMAGE"] == "${{ matrix.image }}"
    assert "manylinux-x86_64-image" not in _pyproject()["tool"]["cibuildwheel"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_workflow_scripts_pass_shellcheck() -> None:
    scripts = sorted(SCRIPTS.glob("*.sh"))
    assert [p.name for p in scripts] == ["disk-guard.sh", "preflight-image.sh"]
    result = subprocess.run(
        ["shellcheck", *map(str, scripts)], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout


def test_d6_build_caches_are_freed_before_the_test_torch(
    workflow: dict[str, Any], tmp_path: Path
) -> None:
    passed = _pyproject()["tool"]["cibuildwheel"]["environment-pass"]
    assert "GITHUB_ACTIONS" in passed
    # The build's table of cells reaches the job summary from inside the container.
    assert "GITHUB_STEP_SUMMARY" in passed
    assert not [n for n in passed if n.startswith("TORCH_C_DLPACK_EXT_")]
    dev, uv = tmp_path / "dev", tmp_path / "uv"
    for folder in (dev / "envs" / "py3.11-torch2.8.0", uv / "archive-v0"):
        folder.mkdir(parents=True)
        (folder / "blob").write_bytes(b"x" * 4096)
    keep = dev / "keep.txt"
    keep.write_text("not an env")
    environ = {"TCDE_DEV_CACHE": str(dev), "UV_CACHE_DIR": str(uv)}
    # A developer's machine (not GitHub Actions): nothing is touched.
    assert cisteps.free_build_cache(environ) == []
    assert cisteps.free_build_cache({**environ, "GITHUB_ACTIONS": "false"}) == []
    assert (dev / "envs").is_dir()
    assert uv.is_dir()
    freed = cisteps.free_build_cache({**environ, "GITHUB_ACTIONS": "true"})
    assert freed == [(dev / "envs", 4096), (uv, 4096)]
    assert not (dev / "envs").exists()
    assert not uv.exists()
    assert keep.read_text() == "not an env"


def test_rehearsal_work_directory_is_claimed_safely(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "dist").mkdir(parents=True)
    (checkout / "dist" / "precious.whl").write_bytes(b"a build")
    with pytest.raises(ConfigError, match="is not empty and is not a data-flow rehearsal's"):
        dataflow._claim(checkout)
    assert (checkout / "dist" / "precious.whl").is_file()
    # Its own directory, reused: an earlier run's artifacts must not count again.
    work = tmp_path / "work"
    dataflow._claim(work)
    cells = work / "assemble" / dataflow._cells_download()
    stale = cells / "cell-win_amd64-cpu" / "old.whl"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"from the last run")
    (work / "notes.txt").write_text("kept")
    dataflow._claim(work)
    assert not cells.exists()
    assert (work / "notes.txt").read_text() == "kept"
    # Every download lands inside its job's workspace.
    for download in releaseflow.DOWNLOADS:
        path = Path(download.path)
        assert not path.is_absolute()
        assert ".." not in path.parts
