"""devtools/matrix/jobs.py: a CI job read back from a matrix JSON file (maybe hand-made) is
checked field by field where it is read; what ``Matrix.jobs`` writes reads back whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from devtools.base.errors import MatrixError
from devtools.matrix.jobs import job_str, job_strings, job_torch
from devtools.matrix.reader import load_matrix
from devtools.release.cisteps import verify_matrix
from devtools.release.contents import load_jobs


def test_the_matrix_jobs_read_back_through_the_checked_readers(tmp_path: Path) -> None:
    jobs = load_matrix().jobs()
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"include": jobs}), encoding="utf-8")
    read = load_jobs(path)
    assert [job_strings(job, "cells") for job in read] == [job["cells"] for job in jobs]
    assert [job_torch(job) for job in read] == [job["torch"] for job in jobs]
    assert [job_str(job, "allow_failure") for job in read] == [job["allow_failure"] for job in jobs]


def test_missing_fields_read_as_empty() -> None:
    assert (job_str({}, "id"), job_strings({}, "cells"), job_torch({})) == ("", [], {})
    assert job_str({"id": None}, "id") == ""


@pytest.mark.parametrize(
    ("job", "read", "message"),
    [
        ({"id": "j", "cells": "a,b"}, lambda j: job_strings(j, "cells"), "cells must be a list"),
        ({"id": "j", "cells": [1]}, lambda j: job_strings(j, "cells"), "cells must be a list"),
        ({"id": "j", "id2": ["x"]}, lambda j: job_str(j, "id2"), "id2 must be a string"),
        ({"id": "j", "torch": ["2.8"]}, job_torch, "torch must be a table"),
        ({"id": "j", "torch": {"2.8": "3.9"}}, job_torch, r"torch\.2\.8 must be a list"),
    ],
)
def test_a_mistyped_field_is_a_matrix_error_naming_the_job(
    job: dict[str, object], read: object, message: str
) -> None:
    assert callable(read)
    with pytest.raises(MatrixError, match=f"matrix job 'j': {message}"):
        read(job)


def test_verify_matrix_refuses_a_mistyped_torch_table() -> None:
    with pytest.raises(MatrixError, match="torch must be a table"):
        verify_matrix([{"id": "j", "runner": "ubuntu", "torch": ["2.8"]}])


def test_load_jobs_refuses_a_job_that_is_no_object(tmp_path: Path) -> None:
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps({"include": [{"id": "a"}, "b"]}), encoding="utf-8")
    with pytest.raises(MatrixError, match="a job is not an object: 'b'"):
        load_jobs(path)
