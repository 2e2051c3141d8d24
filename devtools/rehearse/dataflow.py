"""Rehearse the release workflow's data flow on one machine (``nox -s rehearse_dataflow``).

``.github/workflows/release.yml``'s jobs run on different machines and hand files on as
artifacts. Each job's own work is one call (:mod:`devtools.release.releaseflow`); this replays
those calls here, job by job, each in a folder of its own (its workspace), with the
artifacts laid out between them as actions/download-artifact v4 lays them out:

1. ``matrix``: :data:`~devtools.release.releaseflow.MATRIX` (``nox -s matrix -- ...
   --github-output``), whose ``cells=`` and ``verify=`` outputs are the later jobs'
   matrices;
2. per ``cells`` job: its wheel (:func:`devtools.rehearse.flowjob.build_job`: cibuildwheel's part,
   with cells built for real or stand-ins), then :data:`~devtools.release.releaseflow.JOB_CHECK`
   (``check-repaired --cells``); a job whose check fails uploads nothing, as on GitHub;
3. ``assemble``: its downloads (each job's artifact in its own folder, since the jobs'
   wheels share names), then :data:`~devtools.release.releaseflow.ASSEMBLE` (``nox -s assemble``);
4. ``verify``: its downloads, then :data:`~devtools.release.releaseflow.VERIFY` with
   ``--no-install`` (installing torch is the verify job's own part, not repeated here);
5. the result must hold every expected cell exactly once, with the bytes its job built,
   and one combined wheel per platform x Python ABI (the ``cp39-abi3`` wheel, and one
   per free-threaded Python).

``--fail-job`` drops jobs' artifacts, as a failed job would: the run must then report
their cells absent, and ``verify`` must pass only if matrix.toml allows those jobs to fail.
A layout that merges the jobs' artifacts into one folder (download-artifact's
``merge-multiple``) would lose the wheels that share a name: it is reported, not rehearsed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import io
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import ConfigError
from devtools.matrix.jobs import Job
from devtools.matrix.model import Matrix
from devtools.rehearse.flowjob import JobWheel, build_job, buildable_here, log
from devtools.release import releaseflow
from devtools.release.releaseflow import Call, job_cells

if TYPE_CHECKING:
    from devtools.release.contents import CellStatus
    from devtools.release.distfiles import WheelInfo

__all__ = ["DEFAULT_REAL_CELLS", "FlowResult", "lay_out_artifacts", "rehearse_dataflow"]

#: Cells compiled for real by default: two C++ ABIs, both abi3 (any CPython with the
#: GIL builds them), already in the test build cache of `tests/integration` (the
#: driver's cache key makes them no-ops there).
DEFAULT_REAL_CELLS = ("linux_x86_64-t28_cpu", "linux_x86_64-t26_cpu_abi0")
#: The jobs' workspaces under the work directory (removed first when it is reused).
_OUTPUTS = ("matrix", "jobs", "assemble", "verify")
#: Marks a work directory as this rehearsal's, so a reuse may clear its outputs.
_MARKER = ".tcde-dataflow"


def _claim(work: Path) -> None:
    """Make ``work`` ready: new or empty, or an earlier run's (then its outputs go,
    since what that run left would count as this run's). Any other non-empty
    directory is refused: clearing ``dist/`` of a checkout would destroy a build."""
    if work.is_dir() and any(work.iterdir()) and not (work / _MARKER).is_file():
        raise ConfigError(
            f"--workdir {work} is not empty and is not a data-flow rehearsal's; pick another"
        )
    for name in _OUTPUTS:
        shutil.rmtree(work / name, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / _MARKER).write_text("devtools/rehearse/dataflow.py work directory\n", encoding="utf-8")


# --- the jobs' calls and artifacts ----------------------------------------------------


@contextlib.contextmanager
def _in_workspace(workspace: Path) -> Iterator[io.StringIO]:
    """The job's folder as the working directory (its relative paths are the workflow's);
    the call's output captured, then written to stderr (the rehearsal's log)."""
    previous = Path.cwd()
    output = io.StringIO()
    os.chdir(workspace)
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            yield output
    finally:
        os.chdir(previous)
        sys.stderr.write(output.getvalue())


def replay(
    call: Call, workspace: Path, values: Mapping[str, str], extra: Sequence[str] = ()
) -> str | None:
    """Run ``call`` as its job runs it (``python -m devtools``, in this process) in
    ``workspace``, the step's variables given by ``values``. ``None`` when it succeeded,
    else what it reported (its error message, or its exit status)."""
    from devtools.base import cli

    argv = call.argv(values, extra)
    log(f"{call.job}: python -m devtools {shlex.join(argv)}")
    with _in_workspace(workspace) as output:
        code = cli.main(argv)
    if code == 0:
        return None
    # cli's one report: "error: <Class>: <message>" (the message may go on for lines).
    found = re.search(r"^error: (?:\w+: )?(.*)", output.getvalue(), re.MULTILINE | re.DOTALL)
    return found.group(1).strip() if found else f"exit status {code}"


def lay_out_artifacts(
    artifacts: Mapping[str, Sequence[Path]],
    dest: Path,
    *,
    pattern: str | None = None,
    name: str | None = None,
    merge_multiple: bool = False,
) -> list[Path]:
    """Place ``artifacts`` (name -> files) under ``dest`` as actions/download-artifact v4
    (:data:`~devtools.release.releaseflow.DOWNLOAD_ARTIFACT`) does: the artifact ``name`` in
    ``dest`` itself; those matching ``pattern`` each in ``dest/<name>/``, or, with
    ``merge_multiple``, all in ``dest``. A file name placed twice would be overwritten by
    whichever extraction finishes last (v4 extracts in parallel): that is raised as an
    error instead of picking one."""
    if name is not None and name not in artifacts:
        raise ConfigError(f"no artifact named {name!r} was uploaded")
    dest.mkdir(parents=True, exist_ok=True)
    placed: dict[Path, str] = {}
    for artifact in sorted(artifacts):
        if artifact != name and (pattern is None or not fnmatch.fnmatchcase(artifact, pattern)):
            continue
        folder = dest if name is not None or merge_multiple else dest / artifact
        folder.mkdir(parents=True, exist_ok=True)
        for source in artifacts[artifact]:
            target = folder / source.name
            if target in placed or target.exists():
                earlier = placed.get(target, "an earlier download")
                raise ConfigError(
                    f"artifacts {earlier!r} and {artifact!r} both hold {source.name}: "
                    f"download-artifact would keep only one of them in {folder} (jobs' "
                    "wheels share names: one folder per artifact, no merge-multiple)"
                )
            shutil.copyfile(source, target)
            placed[target] = artifact
    return sorted(placed)


def _upload(store: dict[str, list[Path]], job: str, workspace: Path, job_id: str = "") -> None:
    """The job's upload-artifact steps: each path's files, under the artifact's name."""
    for upload in releaseflow.UPLOADS:
        if upload.job != job:
            continue
        name = upload.artifact(job_id)
        files = sorted(workspace.glob(upload.path))
        if not files:  # if-no-files-found: error
            raise ConfigError(f"{job} {job_id}: no files match {upload.path} for {name!r}")
        if name in store:
            raise ConfigError(f"two jobs upload an artifact named {name!r}")
        store[name] = files


def _download(store: Mapping[str, Sequence[Path]], job: str, workspace: Path) -> None:
    """The job's download-artifact steps, into its workspace."""
    for download in releaseflow.DOWNLOADS:
        if download.job == job:
            lay_out_artifacts(
                store, workspace / download.path, pattern=download.pattern,
                name=download.name, merge_multiple=download.merge_multiple,
            )  # fmt: skip


def _cells_download() -> Path:
    """Where the assemble job puts the cells jobs' artifacts, in its workspace."""
    (download,) = [d for d in releaseflow.DOWNLOADS if d.job == "assemble" and d.pattern]
    return Path(download.path)


# --- the rehearsal --------------------------------------------------------------------


@dataclasses.dataclass
class FlowResult:
    """What the rehearsal saw."""

    jobs: int
    cells: int
    real_cells: list[str]
    failed_jobs: list[str]
    statuses: list[CellStatus]
    combined_wheels: list[str]
    variant_wheels: int
    problems: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems


def _matrix_job(work: Path, only: str) -> tuple[list[Job], list[dict[str, str]]]:
    """The matrix job: its call, then its outputs, the build and the verify matrices."""
    workspace = work / "matrix"
    workspace.mkdir(parents=True)
    output = workspace / "github-output"
    values = {"CELLS": only, "GITHUB_OUTPUT": str(output)}
    failed = replay(releaseflow.MATRIX, workspace, values)
    if failed is not None:
        raise ConfigError(f"{releaseflow.MATRIX.run_line}: {failed}")
    outputs = dict(line.split("=", 1) for line in output.read_text("utf-8").splitlines())
    # The matrix command's own output, read back as it wrote it (its records unchecked).
    jobs: list[Job] = json.loads(outputs["cells"])["include"]
    verify: list[dict[str, str]] = json.loads(outputs["verify"])["include"]
    return jobs, verify


def _cells_jobs(
    jobs: Sequence[Job],
    store: dict[str, list[Path]],
    problems: list[str],
    *,
    work: Path,
    fail_jobs: Sequence[str],
    matrix: Matrix,
    real_cells: Sequence[str],
    host: str | None,
    build_dir: Path,
) -> dict[str, JobWheel]:
    """Every cells job: its wheel, its post-build check, its upload (none when it failed)."""
    built: dict[str, JobWheel] = {}
    for number, job in enumerate(jobs, 1):
        where = f"[job {number}/{len(jobs)}] {job['id']}"
        if job["id"] in fail_jobs:
            log(f"{where}: failed (simulated), no artifact")
            continue
        workspace = work / "jobs" / job["id"]
        result = build_job(
            job, matrix=matrix, real_cells=real_cells, host=host,
            wheelhouse=workspace / "wheelhouse", work=workspace / "build", build_dir=build_dir,
        )  # fmt: skip
        failed = replay(releaseflow.JOB_CHECK, workspace, {"TCDE_JOB_CELLS": job_cells(job)})
        if failed is not None:
            problems.append(f"{job['id']}: {releaseflow.JOB_CHECK.command}: {failed}")
            continue
        built[job["id"]] = result
        _upload(store, "cells", workspace, job["id"])
        real = f" (real: {', '.join(result.real)})" if result.real else ""
        log(f"{where}: {result.wheel.name}{real}")
    return built


def rehearse_dataflow(
    work: Path,
    *,
    real_cells: Sequence[str] = DEFAULT_REAL_CELLS,
    fail_jobs: Sequence[str] = (),
    only: str = "",
    build_dir: Path | None = None,
) -> FlowResult:
    """Run the data flow in ``work`` (see the module docstring); never raises for a
    problem the release would have, it reports it in :attr:`FlowResult.problems`."""
    from devtools.build.host import host_platform_name
    from devtools.matrix.reader import load_matrix
    from devtools.release import contents, distfiles

    started = time.monotonic()
    # Absolute: each job's call runs in its own folder.
    work = work.resolve()
    matrix = load_matrix()
    host = host_platform_name(matrix)
    _claim(work)
    jobs, verify_jobs = _matrix_job(work, only)
    log(f"{len(jobs)} jobs, {sum(len(j['cells']) for j in jobs)} cells; host {host}")
    unknown = set(fail_jobs) - {j["id"] for j in jobs}
    if unknown:
        raise ConfigError(f"--fail-job {sorted(unknown)}: no such job in the matrix")
    all_cells = {c.id: c for c in matrix.cells()}
    not_cells = sorted(set(real_cells) - all_cells.keys())
    if not_cells:
        raise ConfigError(f"--real-cells {not_cells}: not cells of matrix.toml")
    foreign = [c for c in real_cells if not buildable_here(all_cells[c], host)]
    if foreign:
        log(f"not buildable here (another platform or Python ABI), stand-ins instead: {foreign}")
    store: dict[str, list[Path]] = {}
    _upload(store, "matrix", work / "matrix")
    problems: list[str] = []
    built = _cells_jobs(
        jobs, store, problems, work=work, fail_jobs=fail_jobs, matrix=matrix,
        real_cells=real_cells, host=host, build_dir=build_dir or work / "build",
    )  # fmt: skip
    real = [cell for job in built.values() for cell in job.real]

    def result(statuses: Sequence[CellStatus] = (), wheels: Sequence[WheelInfo] = ()) -> FlowResult:
        return FlowResult(
            jobs=len(jobs),
            cells=sum(len(j["cells"]) for j in jobs),
            real_cells=real,
            failed_jobs=list(fail_jobs),
            statuses=list(statuses),
            combined_wheels=[w.path.name for w in wheels if not w.universal and not w.variant],
            variant_wheels=sum(w.variant for w in wheels),
            problems=problems,
            seconds=round(time.monotonic() - started, 1),
        )

    assemble, verify = work / "assemble", work / "verify"
    try:
        _download(store, "assemble", assemble)
    except ConfigError as exc:  # a problem of the workflow: report it, do not crash
        problems.append(f"download-artifact layout: {exc}")
        return result()
    summary = {"GITHUB_STEP_SUMMARY": str(assemble / "summary.md")}
    failed = replay(releaseflow.ASSEMBLE, assemble, summary)
    if failed is not None:
        problems.append(f"assemble ({releaseflow.ASSEMBLE.run_line}): {failed}")
        return result()
    try:
        _upload(store, "assemble", assemble)
        _download(store, "verify", verify)
    except ConfigError as exc:
        problems.append(f"the assemble job's artifacts: {exc}")
        return result()
    # Installing torch is the verify job's own part: every entry checks the same contents.
    torch = {"TORCH_MINORS": verify_jobs[0]["torch"]}
    failed = replay(releaseflow.VERIFY, verify, torch, extra=["--no-install"])
    if failed is not None:  # verify refusing is a finding of the rehearsal
        problems.append(f"verify --expect: {failed}")
    wheels = [distfiles.read_wheel(p) for p in sorted((verify / "dist").glob("*.whl"))]
    arrived = contents.arrived_jobs(assemble / _cells_download())
    statuses = contents.release_contents(load_matrix(), jobs, wheels, arrived=arrived)
    problems += _check_result(jobs, statuses, wheels, built, fail_jobs)
    return result(statuses, wheels)


def _check_result(
    jobs: Sequence[Job],
    statuses: Sequence[CellStatus],
    wheels: Sequence[WheelInfo],
    built: Mapping[str, JobWheel],
    fail_jobs: Sequence[str],
) -> list[str]:
    """Every expected cell exactly once, with its job's bytes; one combined wheel
    per platform x Python ABI (``cp39-abi3``, ``cp314-cp314t``); failed jobs' cells,
    and only those, absent."""
    from devtools.base.wheelnames import parse_wheel_name, platform_key

    def where(name: str) -> str:
        tag = min(parse_wheel_name(name).tags, key=str)
        return f"{tag.interpreter}-{tag.abi}-{'_'.join(platform_key(tag.platform))}"

    problems = []
    failed_cells = {c for j in jobs if j["id"] in fail_jobs for c in (*j["cells"], *j["portable"])}
    for status in statuses:
        want = "absent" if status.cell in failed_cells else "present"
        if status.state != want:
            problems.append(f"{status.cell}: {status.state} ({status.reason}), expected {want}")
    combined = [w for w in wheels if not w.variant and not w.universal]
    shipped = {
        (where(w.path.name), Path(e.file).name): e.sha256 for w in combined for e in w.libraries
    }
    for job in built.values():
        for file, sha in job.libraries.items():
            if shipped.get((where(job.wheel.name), file)) != sha:
                problems.append(f"{job.job}: {file} is not in the release with the bytes it built")
    groups: dict[str, list[str]] = {}
    for wheel in combined:
        groups.setdefault(where(wheel.path.name), []).append(wheel.path.name)
    problems += [f"{key}: {len(names)} combined wheels {names}" for key, names in groups.items()
                 if len(names) != 1]  # fmt: skip
    return problems


def print_summary(result: FlowResult) -> None:
    """Counts, the real cells, each problem."""
    present = sum(s.state == "present" for s in result.statuses)
    print(
        f"{result.jobs} jobs, {result.cells} cells: {present} present exactly once, "
        f"{len(result.real_cells)} built for real ({', '.join(result.real_cells) or 'none'}), "
        f"{len(result.failed_jobs)} job(s) failed on purpose; {len(result.combined_wheels)} "
        f"combined and {result.variant_wheels} variant wheels; {result.seconds:.0f} s"
    )
    for problem in result.problems:
        print(f"PROBLEM: {problem}")
    print("data flow ok" if result.ok else f"{len(result.problems)} problem(s)")
