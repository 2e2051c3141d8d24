"""The release workflow's data flow, rehearsed on this machine (``devtools/rehearse/dataflow.py``,
``nox -s rehearse_dataflow``): the whole matrix, each job's one call replayed in a folder
of its own (``devtools/release/releaseflow.py``), from ``nox -s matrix`` through job wheels
(repaired with the real repair command where this host can) and their post-build check,
the artifact layout of download-artifact v4, ``nox -s assemble`` (contents, the twine
check) and ``verify --expect``.

Cost: the whole-matrix stand-in run takes ~15 s (14 jobs, 45 cells; a tiny C library
per Linux x86_64 cell, auditwheel on 7 job wheels), the narrower ones ~5-10 s each.
The slow test compiles two cells for real into the build cache the other integration
tests use (test_wheels builds the same two cells: one of the two compiles them).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import zipfile
from pathlib import Path

import pytest
from devtools.matrix.reader import load_matrix
from devtools.rehearse import dataflow, flowjob
from devtools.release import releaseflow

from _torch_c_dlpack_ext_core.version import __version__ as V

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("the rehearsal builds Linux x86_64 job wheels", allow_module_level=True)

MATRIX = load_matrix()
#: The cells the release builds (3.13t ones are built locally only).
RELEASED = [c for c in MATRIX.cells() if not c.not_released]
#: The portable table of each group, built by the group's first job (issue 30).
PORTABLE = [p for j in MATRIX.jobs() for p in flowjob.job_portable_cells(MATRIX, j)]


def _manifest(wheel: Path) -> list[dict[str, object]]:
    with zipfile.ZipFile(wheel) as archive:
        return list(json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))["libraries"])


def test_whole_matrix_with_stand_ins(tmp_path: Path) -> None:
    result = dataflow.rehearse_dataflow(tmp_path, real_cells=())
    assert result.problems == []
    assert result.jobs == len(MATRIX.jobs()) == 14
    assert result.cells == len(RELEASED)
    assert sorted(s.cell for s in result.statuses) == sorted(
        [*(c.id for c in RELEASED), *(p.id for p in PORTABLE)]
    )
    assert len(PORTABLE) == 8  # one per combined wheel
    assert {s.state for s in result.statuses} == {"present"}
    # One combined wheel per platform x Python ABI: the abi3 one of each platform and
    # one cp314t wheel each; each with every cell of its group.
    groups = {(c.python, c.platform.name) for c in RELEASED}
    assert len(result.combined_wheels) == len(groups) == 8
    # One variant per platform x Python ABI x torch minor (issue 44).
    assert result.variant_wheels == len({(c.platform.name, c.python, c.torch.minor)
                                         for c in RELEASED})  # fmt: skip
    x86 = f"torch_c_dlpack_ext-{V}-cp39-abi3-manylinux_2_28_x86_64.whl"
    assert x86 in result.combined_wheels
    assert f"torch_c_dlpack_ext-{V}-cp314-cp314t-manylinux_2_28_x86_64.whl" in (
        result.combined_wheels
    )
    libraries = _manifest(tmp_path / "verify" / "dist" / x86)
    want = [c.library for c in [*RELEASED, *PORTABLE] if c.python == "abi3"
            and c.platform.name == "linux_x86_64"]  # fmt: skip
    assert sorted(Path(str(e["file"])).name for e in libraries) == sorted(want)
    assert {e["python"] for e in libraries} == {"abi3"}
    # The cuda job's and the rocm jobs' wheels had one name; both arrived intact.
    cells_dir = tmp_path / "assemble" / "cells"
    same_name = sorted(p.parent.name for p in cells_dir.rglob(x86))
    assert same_name == sorted(f"cell-{j['id']}" for j in MATRIX.jobs()
                               if j["python"] != "3.14t"
                               and j["platform"] == "linux_x86_64")  # fmt: skip
    assert len(same_name) > 1
    notes = (tmp_path / "assemble" / "release-notes" / "NOTES.md").read_text(encoding="utf-8")
    every = len(RELEASED) + len(PORTABLE)
    assert f"{every} of {every} cells" in notes


def test_failed_jobs_are_reported_and_only_allowed_ones_pass(tmp_path: Path) -> None:
    only = "linux_x86_64-*,win_amd64-*"
    rocm = "linux_x86_64-rocm6.4"
    allowed = dataflow.rehearse_dataflow(tmp_path / "a", real_cells=(), only=only,
                                         fail_jobs=[rocm])  # fmt: skip
    assert allowed.problems == []
    absent = [s for s in allowed.statuses if s.state == "absent"]
    assert absent
    assert {s.job for s in absent} == {rocm}
    assert all(s.allowed and "uploaded no wheels" in s.reason for s in absent)

    cpu = "win_amd64-cpu"
    blocked = dataflow.rehearse_dataflow(tmp_path / "b", real_cells=(), only=only,
                                         fail_jobs=[cpu])  # fmt: skip
    assert len(blocked.problems) == 1, blocked.problems
    # Its 6 cells and its group's portable table (it is the group's first job).
    assert blocked.problems[0].startswith("verify --expect: 7 cell(s) not in the release")
    notes = (tmp_path / "b" / "assemble" / "release-notes" / "NOTES.md").read_text("utf-8")
    assert "7 of these block publishing" in notes


def test_merged_download_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workflow as it was (merge-multiple: true): the rehearsal must catch the clobber.
    merged = tuple(
        dataclasses.replace(d, merge_multiple=True) if d.pattern else d
        for d in releaseflow.DOWNLOADS
    )
    monkeypatch.setattr(releaseflow, "DOWNLOADS", merged)
    result = dataflow.rehearse_dataflow(tmp_path, real_cells=(), only="linux_x86_64-*")
    assert len(result.problems) == 1
    assert "both hold" in result.problems[0]


@pytest.mark.slow
def test_real_cells_in_the_flow(tmp_path: Path, build_cache: Path) -> None:
    """Two cells compiled for real through the in-tree backend (as cibuildwheel runs
    it), repaired by the real auditwheel command with torch's libraries excluded,
    merged with the stand-ins of the other Linux x86_64 jobs (the whole matrix is
    rehearsed above; this adds what only real libraries show)."""
    real = ("linux_x86_64-t28_cpu", "linux_x86_64-t26_cpu_abi0")
    result = dataflow.rehearse_dataflow(
        tmp_path, real_cells=real, build_dir=build_cache / "cells", only="linux_x86_64-*"
    )
    assert result.problems == []
    assert sorted(result.real_cells) == sorted(real)
    assert {s.state for s in result.statuses} == {"present"}
    # This host's toolchain may need a newer glibc than the image's policy: that job
    # wheel is then tagged for this host, and the combined wheel takes the newer tag.
    (x86,) = (tmp_path / "verify" / "dist").glob(f"*-{V}-cp39-abi3-manylinux_*_x86_64.whl")
    toolchains = {Path(str(e["file"])).name: e["toolchain"] for e in _manifest(x86)}
    for cell in MATRIX.select(list(real)):
        assert toolchains[cell.library] != "stand-in", cell.id
    # The group's portable table (issue 30), built by the real cells' job, is real too.
    portable = [name for name in toolchains if "-portable" in name]
    assert len(portable) <= 1, portable
    stand_ins = len(toolchains) - len(real) - len(portable)
    assert list(toolchains.values()).count("stand-in") == stand_ins
