"""What each job of ``.github/workflows/release.yml`` runs for its own work and what it
hands on, as data.

Each job's own work is one call (:data:`CALLS`): a ``python -m devtools`` command (the
workflow's ``$DEVTOOLS``) or a nox session running one; the ``cells`` job's build is
cibuildwheel's, driven by ``[tool.cibuildwheel]``, with one post-build call. The jobs
pass files on as artifacts (:data:`UPLOADS`, :data:`DOWNLOADS`).

The data-flow rehearsal (:mod:`devtools.rehearse.dataflow`) replays exactly these calls and lays
the artifacts out as download-artifact does; it reads nothing of the workflow.
``tests/unit/test_workflows_dataflow.py`` reads release.yml and fails where it says
anything else (a run line, a step's variables, an artifact's name, path or download
settings), so this module and the workflow cannot drift apart unnoticed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from devtools.matrix.jobs import JobRecord, job_strings

__all__ = [
    "ASSEMBLE",
    "CALLS",
    "CELL_ARTIFACT_PREFIX",
    "DOWNLOADS",
    "DOWNLOAD_ARTIFACT",
    "JOB_CELLS",
    "JOB_CELLS_VARIABLE",
    "JOB_CHECK",
    "MATRIX",
    "RUNNER_VARIABLES",
    "UPLOADS",
    "VERIFY",
    "Call",
    "Download",
    "Upload",
    "job_cells",
]

#: The cells job's cell ids, comma-joined, as its steps pass them (cibuildwheel's
#: ``before-build`` and the post-build check read this variable).
JOB_CELLS_VARIABLE = "TCDE_JOB_CELLS"
#: What release.yml sets :data:`JOB_CELLS_VARIABLE` to; :func:`job_cells` is its value.
JOB_CELLS = "${{ join(matrix.cells, ',') }}"
#: Variables the runner provides to every step (files a step appends to).
RUNNER_VARIABLES = ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")
#: The cells jobs' artifacts are ``cell-<job id>``; the assemble job downloads them by
#: this prefix, and the release notes tell arrived jobs from failed ones by it.
CELL_ARTIFACT_PREFIX = "cell-"
#: The download-artifact release whose layout the rehearsal models, read from its source
#: at this commit (src/download-artifact.ts): a download by ``name`` or with
#: ``merge-multiple`` extracts into ``path``, any other into ``path/<artifact name>``,
#: artifacts in parallel. Later majors flatten a download that matched one artifact; a
#: workflow pinning another commit must re-check this.
DOWNLOAD_ARTIFACT = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"


def job_cells(job: JobRecord) -> str:
    """:data:`JOB_CELLS` for one entry of the build matrix: its cell ids, comma-joined."""
    return ",".join(job_strings(job, "cells"))


@dataclasses.dataclass(frozen=True)
class Call:
    """One job's own work: a ``run:`` step of release.yml running one devtools command.

    ``args`` are the step's words after the command; ``"$NAME"`` stands for the step's
    variable ``NAME``, which ``env`` maps to what release.yml assigns (or the runner
    provides: :data:`RUNNER_VARIABLES`)."""

    job: str
    command: str
    args: tuple[str, ...]
    #: The nox session that runs ``command`` (its dependencies installed); ``None``:
    #: the workflow's ``$DEVTOOLS``.
    session: str | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def run_line(self) -> str:
        """The step's ``run:`` line, word for word."""
        words = [f'"{arg}"' if arg.startswith("$") else arg for arg in self.args]
        if self.session is None:
            return " ".join(["$DEVTOOLS", self.command, *words])
        return " ".join(["uvx nox -s", self.session, "--", *words])

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables the step's words use."""
        return tuple(arg[1:] for arg in self.args if arg.startswith("$"))

    def argv(self, values: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
        """The ``python -m devtools`` arguments the step runs, each variable replaced by
        its value in ``values`` (then ``extra``)."""
        words = [values[arg[1:]] if arg.startswith("$") else arg for arg in self.args]
        return [self.command, *words, *extra]


#: The matrix job: the matrix JSON for the later jobs and its outputs (the publish guard,
#: ``publish-target``, is its other step and hands on no files).
MATRIX = Call(
    "matrix",
    "matrix",
    ("--only", "$CELLS", "--output", "matrix.json", "--github-output", "$GITHUB_OUTPUT"),
    session="matrix",
    env={"CELLS": "${{ inputs.cells }}"},
)
#: The cells job after cibuildwheel: the repaired wheel holds exactly the job's cells.
JOB_CHECK = Call(
    "cells",
    "check-repaired",
    ("wheelhouse", "--cells", f"${JOB_CELLS_VARIABLE}"),
    env={JOB_CELLS_VARIABLE: JOB_CELLS},
)
#: The assemble job: dist/, the release notes, the twine check, the variants apart.
ASSEMBLE = Call(
    "assemble",
    "assemble",
    (
        "--cells",
        "cells",
        "--matrix",
        "matrix.json",
        "--dist",
        "dist",
        "--variants",
        "variants",
        "--notes",
        "release-notes",
        "--summary",
        "$GITHUB_STEP_SUMMARY",
    ),
    session="assemble",
)
#: A verify job: every cell there, then each wheel with its torch minors.
VERIFY = Call(
    "verify",
    "verify",
    ("dist", "--expect", "matrix.json", "--torch", "$TORCH_MINORS"),
    env={"TORCH_MINORS": "${{ matrix.torch }}"},
)
CALLS = (MATRIX, JOB_CHECK, ASSEMBLE, VERIFY)


@dataclasses.dataclass(frozen=True)
class Upload:
    """An upload-artifact step: ``name`` (``{id}``: the cells job's matrix id) and the
    ``path`` glob in the job's workspace."""

    job: str
    name: str
    path: str

    @property
    def workflow_name(self) -> str:
        """The ``name`` as release.yml writes it."""
        return self.name.replace("{id}", "${{ matrix.id }}")

    def artifact(self, job_id: str = "") -> str:
        """The artifact's name for the job ``job_id``."""
        return self.name.replace("{id}", job_id)


@dataclasses.dataclass(frozen=True)
class Download:
    """A download-artifact step: one artifact by ``name``, or those matching ``pattern``,
    into ``path`` in the job's workspace."""

    job: str
    path: str
    name: str | None = None
    pattern: str | None = None
    merge_multiple: bool = False


UPLOADS = (
    Upload("matrix", "release-matrix", "matrix.json"),
    # Jobs' wheels share file names (the cuda and rocm jobs of one platform all make a
    # cp39-abi3 wheel): one artifact per job.
    Upload("cells", CELL_ARTIFACT_PREFIX + "{id}", "wheelhouse/*.whl"),
    Upload("assemble", "dist-wheels", "dist/*.whl"),
    Upload("assemble", "variants", "variants/*"),
    Upload("assemble", "release-notes", "release-notes/*"),
)
DOWNLOADS = (
    # No merge-multiple: each job's artifact in cells/cell-<job id>/.
    Download("assemble", "cells", pattern=CELL_ARTIFACT_PREFIX + "*"),
    Download("assemble", ".", name="release-matrix"),
    Download("verify", "dist", name="dist-wheels"),
    Download("verify", "dist", name="variants"),
    Download("verify", ".", name="release-matrix"),
)
