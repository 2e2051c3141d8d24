"""The release workflow's small steps: its job matrices as ``$GITHUB_OUTPUT`` lines
(``matrix --github-output``), the check of a job's repaired wheels (``check-repaired``)
and cibuildwheel's test command for one job's wheel (``test-installed``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.version import Version

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, PACKAGE
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import MatrixError, ReleaseError
from devtools.base.hostenv import dev_cache_root
from devtools.matrix.jobs import JobRecord, job_torch
from devtools.matrix.tables import python_sort_key, python_within
from devtools.release.diagnose import DIAGNOSE_TIMEOUT, INSTALL_TIMEOUT, check_against_torch

__all__ = [
    "check_installed_job",
    "check_repaired",
    "free_build_cache",
    "github_matrix",
    "github_output_lines",
    "verify_matrix",
]


def verify_matrix(jobs: Sequence[JobRecord]) -> list[dict[str, str]]:
    """The verify job's matrix: the abi3 wheel is installed on the oldest and the newest
    CPython each torch minor supports on the platform (the jobs' ``torch`` field), with
    that minor's torch; a free-threaded wheel on its own Python. One entry per (runner,
    Python), naming the torch minors it checks (``"2.4,2.5"``); a runner installs only
    wheels of its own platform."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for job in jobs:
        for minor, pythons in job_torch(job).items():
            if not pythons:
                continue
            ordered = sorted(pythons, key=python_sort_key)
            for python in {ordered[0], ordered[-1]}:
                wanted.setdefault((str(job["runner"]), python), set()).add(str(minor))
    ordered_pairs = sorted(wanted, key=lambda pair: (pair[0], python_sort_key(pair[1]), pair[1]))
    return [
        {
            "runner": runner,
            "python": python,
            "torch": ",".join(sorted(wanted[runner, python], key=Version)),
        }
        for runner, python in ordered_pairs
    ]


def github_matrix(
    matrix: object, *, requires_python: str | None = None
) -> dict[str, dict[str, object]]:
    """From ``nox -s matrix`` JSON, the build matrix and the verify matrix.

    The build matrix keeps the jobs as they are (``{"include": [jobs]}``). The
    matrix yields no job for a Python outside ``requires_python``; one in the
    input (a hand-made file) is an error, since cibuildwheel would select
    nothing for it. The verify matrix is :func:`verify_matrix`'s.
    """
    if not isinstance(matrix, dict) or not isinstance(matrix.get("include"), list):
        raise MatrixError('matrix JSON must be an object with an "include" list of jobs')
    jobs = matrix["include"]
    bad = [
        job for job in jobs if not isinstance(job, dict) or not {"runner", "python"} <= job.keys()
    ]
    if bad:
        raise MatrixError(f"matrix job lacks 'runner' or 'python': {bad[0]!r}")
    outside = [job for job in jobs if not python_within(str(job["python"]), requires_python)]
    if outside:
        raise MatrixError(
            f"job {outside[0].get('id')!r}: Python {outside[0]['python']} is outside "
            f"requires-python {requires_python!r}; regenerate the file with `nox -s matrix`"
        )
    if not jobs:
        raise MatrixError("the matrix selects no jobs; check --only against matrix.toml")
    verify = {"include": verify_matrix(jobs)}
    if not verify["include"]:
        raise MatrixError(
            "no job names the CPythons of its torch minors ('torch'); regenerate the file "
            "with `nox -s matrix`"
        )
    return {"cells": {**matrix, "include": jobs}, "verify": verify}


def github_output_lines(matrix: object, *, requires_python: str | None = None) -> list[str]:
    """:func:`github_matrix`'s two matrices as ``$GITHUB_OUTPUT`` lines (``cells=<JSON>``,
    ``verify=<JSON>``: one line each, which is all that file's ``key=value`` form takes)."""
    matrices = github_matrix(matrix, requires_python=requires_python)
    return [f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in matrices.items()]


def check_repaired(directory: Path, cells: Sequence[str] | None = None) -> list[Path]:
    """Every wheel in ``directory`` bundles only its own libraries: a repair tool that
    grafted a copy of torch's (or anything else) is an error naming the files.

    ``cells``: the cell ids the job built (its ``TCDE_JOB_CELLS``); the wheels' manifests
    must then name exactly those, each once, so a job whose before-build compiled other
    cells fails in that job, not later in the assemble job."""
    from devtools.build.repair import grafted_libraries

    found = sorted(directory.glob("*.whl"))
    if not found:
        raise ReleaseError(f"{directory}: no wheels; did the build and repair steps run?")
    for wheel in found:
        grafted = grafted_libraries(wheel)
        if grafted:
            raise ReleaseError(
                f"{wheel.name}: the repair step grafted {', '.join(grafted[:5])}; "
                "exclude them in [tool.cibuildwheel] (devtools/build/repair.py AUDITWHEEL_EXCLUDES)"
            )
    if cells is not None:
        _check_job_cells(found, cells)
    return found


def _check_job_cells(wheels: Sequence[Path], cells: Sequence[str]) -> None:
    from devtools.matrix.cells import portable_cells
    from devtools.matrix.reader import load_matrix
    from devtools.release.distfiles import read_wheel

    held = [(w.name, e.cell) for w in wheels for e in read_wheel(w).libraries]
    problems = []
    unnamed = [name for name, cell in held if cell is None]
    if unnamed:
        problems.append(f"{unnamed[0]} has a library whose manifest entry names no cell")
    ids = [cell for _, cell in held if cell is not None]
    # The group's portable table rides in the job wheel of the group's first job
    # (devtools.matrix.cells.PortableCell), beside the job's cells: allowed once, never required.
    portable = {p.id for p in portable_cells(load_matrix().cells())}
    if extra := sorted(set(ids) - set(cells) - portable):
        problems.append(f"cells the job does not build: {', '.join(extra)}")
    if missing := [cell for cell in cells if cell not in ids]:
        problems.append(f"cells of the job missing: {', '.join(missing)}")
    if twice := sorted({cell for cell in ids if ids.count(cell) > 1}):
        problems.append(f"cells in more than one library: {', '.join(twice)}")
    if problems:
        raise ReleaseError(
            f"the job's wheels ({', '.join(w.name for w in wheels)}) do not hold exactly its "
            f"{len(cells)} cell(s): {'; '.join(problems)}; check TCDE_JOB_CELLS and "
            "[tool.cibuildwheel] before-build"
        )


def _installed_manifest(python: Path) -> tuple[ManifestEntry, ...]:
    # Locate the installed package without importing it (importing would run the
    # selector before the matching torch is installed).
    probe = (
        "import importlib.util, sys; "
        f"spec = importlib.util.find_spec({PACKAGE!r}); "
        "sys.stdout.write(spec.submodule_search_locations[0])"
    )
    package_dir = Path(run([python, "-c", probe], timeout=DIAGNOSE_TIMEOUT).stdout.strip())
    path = package_dir / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path}: installed wheel has no readable manifest ({exc})") from None
    return tuple(ManifestEntry.from_json(item) for item in data.get("libraries", []))


#: GitHub's own marker of a hosted run (``true``), passed into the build container by
#: ``[tool.cibuildwheel] environment-pass``: only there may the test step delete the
#: build's caches (see :func:`free_build_cache`). Not a project variable on purpose:
#: the runtime reports unknown ``TORCH_C_DLPACK_EXT_*`` names and loads nothing.
FREE_BUILD_CACHE = "GITHUB_ACTIONS"


def _uv_cache_dir(environ: Mapping[str, str]) -> Path:
    # uv's documented default locations (UV_CACHE_DIR wins).
    if environ.get("UV_CACHE_DIR"):
        return Path(environ["UV_CACHE_DIR"])
    if os.name == "nt":
        return Path(environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "uv" / "cache"
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"


def _tree_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(folder) / name).lstat().st_size
    return total


def free_build_cache(environ: Mapping[str, str] = os.environ) -> list[tuple[Path, int]]:
    """Between a release job's build and its test: delete the cells' torch build
    environments (``$TCDE_DEV_CACHE/envs``) and uv's cache, which hold
    ~12 GB on a CUDA job (7 torch envs of 1.6-1.7 GB; uv hard-links them from its
    cache, so both must go) before the test installs a ~5 GB importable torch.
    Only on GitHub Actions (``GITHUB_ACTIONS=true``: the runners are thrown away; a
    developer's caches are not). Returns ``[(path, bytes freed)]``."""
    if environ.get(FREE_BUILD_CACHE) != "true":
        print(f"build caches kept ({FREE_BUILD_CACHE} is not true)", file=sys.stderr)
        return []
    envs = dev_cache_root(environ) / "envs"
    freed = []
    for path in (envs, _uv_cache_dir(environ)):
        if path.is_dir():
            size = _tree_size(path)
            shutil.rmtree(path, ignore_errors=True)
            freed.append((path, size))
            print(f"freed {size / 2**30:.1f} GiB: {path}", file=sys.stderr)
    return freed


def check_installed_job(python: Path) -> str:
    """cibuildwheel's test command. The job's wheel is installed in ``python``'s
    environment: free the build's caches (release runners only), install the newest
    torch minor it bundles (from the index, as a user would) and check the decision.
    The verify job covers every minor."""
    free_build_cache()
    entries = _installed_manifest(python)
    if not entries:
        raise ReleaseError(
            "the job's wheel bundles no library; check TCDE_JOB_CELLS and before-build"
        )
    torch = max({e.torch for e in entries}, key=Version)
    # No pip cache: a CUDA torch is ~3 GB of wheels the runner's disk cannot spare.
    run(
        [python, "-m", "pip", "install", "--no-cache-dir", f"torch=={torch}.*"],
        timeout=INSTALL_TIMEOUT,
    )
    return check_against_torch(python, entries, torch)
