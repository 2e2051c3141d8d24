"""CI's jobs as JSON: the record ``nox -s matrix`` writes per job (:class:`Job`), and the
checked readers of a job read back from a file, which may be hand-made (:data:`JobRecord`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from devtools.base.errors import MatrixError

__all__ = ["Job", "JobRecord", "job_str", "job_strings", "job_torch"]


class Job(TypedDict):
    """One CI job of ``nox -s matrix``'s JSON (:meth:`Matrix.jobs` writes it)."""

    id: str
    python: str
    platform: str
    backend: str
    runner: str
    cibw_build: str
    arch: str
    image: str
    toolkit: str
    #: matrix.toml's ``allow_failure`` reason for the job's backend (``""``: none).
    allow_failure: str
    cells: list[str]
    portable: list[str]
    #: The CPythons each torch minor of the job serves (``{"2.8": ["3.9", "3.14"]}``).
    torch: dict[str, list[str]]


#: A job as read back from a matrix JSON file (maybe hand-made, with fields missing):
#: its fields are checked where they are read (:func:`job_str`, :func:`job_strings`,
#: :func:`job_torch`). A :class:`Job` is one.
JobRecord = Mapping[str, object]


def job_str(job: JobRecord, key: str) -> str:
    """``job[key]`` as a string (``""`` when absent or null; a number as written)."""
    value = job.get(key)
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)):
        raise MatrixError(f"matrix job {job.get('id')!r}: {key} must be a string, got {value!r}")
    return str(value)


def job_strings(job: JobRecord, key: str) -> list[str]:
    """``job[key]``, a list of strings (``[]`` when absent)."""
    value = job.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MatrixError(
            f"matrix job {job.get('id')!r}: {key} must be a list of strings, got {value!r}"
        )
    return [str(item) for item in value]


def job_torch(job: JobRecord) -> dict[str, list[str]]:
    """``job["torch"]``: the CPythons per torch minor (``{}`` when absent or null)."""
    value = job.get("torch") or {}
    if not isinstance(value, dict):
        raise MatrixError(f"matrix job {job.get('id')!r}: torch must be a table, got {value!r}")
    torch: dict[str, list[str]] = {}
    for minor, pythons in value.items():
        if not isinstance(pythons, list) or not all(isinstance(p, str) for p in pythons):
            raise MatrixError(
                f"matrix job {job.get('id')!r}: torch.{minor} must be a list of Pythons, "
                f"got {pythons!r}"
            )
        torch[str(minor)] = [str(p) for p in pythons]
    return torch
