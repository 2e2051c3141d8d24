"""The build identities (devtools/matrix/cells.py): the names of a cell, its job and its group
folder, and finding a built library's cell again by the cell id its manifest entry
carries, from the build that writes the id to the wheels assembled from it."""

from __future__ import annotations

import json
import re
import time
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
from build_backend._metadata import project_metadata
from build_backend._wheel import assemble_wheel
from devtools.base.errors import MatrixError
from devtools.base.wheelnames import is_variant_name, parse_wheel_name
from devtools.build import cellbuild as build
from devtools.build import cellresults, wheels
from devtools.envs import torchenv
from devtools.matrix.cells import (
    Cell,
    cell_for_entry,
    group_dir,
    library_entry,
    portable_cell_for_entry,
    portable_cells,
)
from devtools.matrix.reader import load_matrix
from devtools.rehearse import flowjob

from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.files import load_manifest, write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix()
CELLS = MATRIX.cells()


def _cell(cell_id: str) -> Cell:
    (cell,) = MATRIX.select([cell_id])
    return cell


def _entry(of: Cell, **changes: Any) -> ManifestEntry:
    """The manifest entry ``nox -s build`` writes for the library of cell ``of``."""
    entry = library_entry(
        of, file=of.library, size=1, sha256="0" * 64, toolchain="g++ 12.2.0", dlpack="1.3"
    )
    return entry._replace(**changes)


@pytest.mark.parametrize(
    ("cell_id", "job", "group", "label"),
    [
        ("linux_x86_64-t28_cpu", "linux_x86_64-cuda", "linux_x86_64-abi3", "t28_cpu"),
        ("linux_x86_64-t26_cuda_abi0", "linux_x86_64-cuda", "linux_x86_64-abi3", "t26_cuda_abi0"),
        ("linux_x86_64-t29_rocm", "linux_x86_64-rocm6.4", "linux_x86_64-abi3", "t29_rocm"),
        (
            "linux_x86_64-t29_cpu-cp314t",
            "linux_x86_64-cuda-cp314t",
            "linux_x86_64-cp314t",
            "t29_cpu",
        ),
        ("win_amd64-t28_cpu", "win_amd64-cpu", "win_amd64-abi3", "t28_cpu"),
    ],
)
def test_the_identities_of_a_cell(cell_id: str, job: str, group: str, label: str) -> None:
    cell = _cell(cell_id)
    assert (cell.id, cell.job_id, cell.group, cell.label) == (cell_id, job, group, label)
    assert group_dir(Path("build/cells"), cell) == Path("build/cells") / group


def test_every_cell_is_found_by_its_id() -> None:
    for cell in CELLS:
        assert cell_for_entry(CELLS, _entry(cell), "manifest.json") is cell


def test_the_build_hosts_platform_tag_does_not_matter() -> None:
    # A macOS library carries the deployment target of the Python that built it
    # (macosx_14_0_arm64), the matrix names the platform macosx_11_0_arm64: the id decides.
    cell = _cell("macosx_11_0_arm64-t28_cpu")
    assert cell_for_entry(CELLS, _entry(cell, platform="macosx_14_0_arm64"), "m.json") == cell


def test_an_entry_without_a_cell_id_is_a_matrix_error_naming_the_file() -> None:
    entry = _entry(_cell("linux_x86_64-t28_cpu"), cell=None)
    with pytest.raises(MatrixError) as info:
        cell_for_entry(CELLS, entry, Path("build/cells/linux_x86_64-abi3/manifest.json"))
    message = str(info.value)
    assert message.startswith("build/cells/linux_x86_64-abi3/manifest.json: ")
    assert "carries no cell id" in message
    assert "rebuild that cell with `nox -s build -- --cells" in message


def test_an_unknown_cell_id_is_a_matrix_error_with_a_hint() -> None:
    entry = _entry(_cell("linux_x86_64-t28_cpu"), cell="linux_x86_64-t28_cpux")
    with pytest.raises(
        MatrixError,
        match=r"^a\.whl: .*cell 'linux_x86_64-t28_cpux', which is no "
        r"cell of matrix\.toml \(did you mean 'linux_x86_64-t28_cpu'\?\)",
    ):
        cell_for_entry(CELLS, entry, "a.whl")


def test_an_id_naming_another_library_is_a_matrix_error() -> None:
    # The id of a CPU cell on a CUDA library: matrix.toml changed what the id means.
    entry = _entry(_cell("linux_x86_64-t28_cuda"), cell="linux_x86_64-t28_cpu")
    with pytest.raises(
        MatrixError,
        match=r"is not a library of cell linux_x86_64-t28_cpu .*"
        r"--cells linux_x86_64-t28_cpu",
    ):
        cell_for_entry(CELLS, entry, "a.whl")


# --- from the build that writes the id to the wheels ------------------------------------


@pytest.fixture
def fake_compile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``build_one`` with its torch tree and the driver replaced: a compile writes
    stand-in bytes and returns the entry the driver would (which knows no cell)."""
    tree = types.SimpleNamespace(torch_dir=tmp_path / "torch", site_packages=tmp_path / "site")
    monkeypatch.setattr(torchenv, "torch_tree", lambda *a, **k: tree)

    def compile_library(request: driver.BuildRequest, *_: Any, **__: Any) -> Any:
        backend, output_dir, cxx11_abi = request.backend, request.output_dir, request.cxx11_abi
        (cell,) = [
            c
            for c in CELLS
            if c.backend is backend
            and c.cxx11_abi == cxx11_abi
            and c.torch.release == "2.8.0"
            and c.platform.name == "linux_x86_64"
            and not c.freethreaded
        ]
        entry, _ = flowjob.stand_in_library(cell, output_dir, elf=False)
        return entry._replace(cell=None)

    monkeypatch.setattr(driver, "compile_library", compile_library)


@pytest.mark.usefixtures("fake_compile")
def test_the_build_records_each_librarys_cell_and_assembly_reads_it(tmp_path: Path) -> None:
    chosen = [_cell("linux_x86_64-t28_cpu"), _cell("linux_x86_64-t28_cuda")]
    build_dir = tmp_path / "build" / "cells"
    results = [build.build_one(cell, build_dir) for cell in chosen]
    assert [r.status for r in results] == ["built", "built"], results
    assert [r.entry and r.entry.cell for r in results] == [c.id for c in chosen]
    cellresults.write_group_manifests(chosen, {r.cell: r for r in results}, build_dir)
    group = group_dir(build_dir, chosen[0])
    assert [e.cell for e in load_manifest(group / MANIFEST_NAME)] == [c.id for c in chosen]
    copied = cellresults.copy_libs(chosen, results, build_dir, tmp_path / "job-libs")
    assert [e.cell for e in copied] == [c.id for c in chosen]
    assert load_manifest(tmp_path / "job-libs" / MANIFEST_NAME) == tuple(copied)
    made = wheels.assemble_dist(
        {group: {c.library for c in chosen}}, tmp_path / "dist", matrix=MATRIX, repair=False
    )
    labels = sorted(str(parse_wheel_name(p.name).label) for p in made if is_variant_name(p.name))
    assert labels == ["t28"]  # one variant per torch minor, both backends in it
    (variant,) = [p for p in made if p.name.endswith("-t28.whl")]
    with zipfile.ZipFile(variant) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
    assert [e["cell"] for e in manifest["libraries"]] == [c.id for c in chosen]


def test_a_build_folder_from_before_cell_ids_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    cell = _cell("linux_x86_64-t28_cpu")
    group = tmp_path / "linux_x86_64-abi3"
    entry, _ = flowjob.stand_in_library(cell, group, elf=False)
    write_manifest(group / MANIFEST_NAME, [entry._replace(cell=None)])
    out = tmp_path / "dist"
    where = re.escape(str(group / MANIFEST_NAME))
    with pytest.raises(MatrixError, match=rf"^{where}: .*carries no cell id"):
        wheels.assemble_dist({group: {cell.library}}, out, matrix=MATRIX, repair=False)
    assert not out.exists() or list(out.iterdir()) == []


def test_a_job_wheel_without_cell_ids_is_refused_naming_the_wheel(tmp_path: Path) -> None:
    cell = _cell("linux_x86_64-t28_cpu")
    entry, path = flowjob.stand_in_library(cell, tmp_path / "libs", elf=False)
    folder = tmp_path / "cells" / "cell-linux_x86_64-cuda"
    folder.mkdir(parents=True)
    wheel = assemble_wheel(
        folder,
        meta=project_metadata(ROOT),
        libraries=[(entry._replace(cell=None), path)],
        platform="manylinux_2_28_x86_64",
    )
    with pytest.raises(MatrixError, match=rf"^{re.escape(str(wheel))}: .*carries no cell id"):
        wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist")


# The portable table (issue 30): one torch-agnostic cell per group.


@pytest.mark.parametrize(
    ("group_of", "cell_id", "library", "job"),
    [
        (
            "linux_x86_64-t28_cpu",
            "linux_x86_64-portable",
            "libtorch_c_dlpack_ext-portable.so",
            "linux_x86_64-cuda",
        ),
        (
            "linux_x86_64-t29_cpu-cp314t",
            "linux_x86_64-portable-cp314t",
            "libtorch_c_dlpack_ext-portable-cp314t.so",
            "linux_x86_64-cuda-cp314t",
        ),
        (
            "win_amd64-t28_cpu",
            "win_amd64-portable",
            "torch_c_dlpack_ext-portable.dll",
            "win_amd64-cpu",
        ),
    ],
)
def test_each_group_has_one_portable_cell(
    group_of: str, cell_id: str, library: str, job: str
) -> None:
    native = _cell(group_of)
    by_id = {p.id: p for p in portable_cells(CELLS)}
    portable = by_id[cell_id]
    assert (portable.group, portable.library, portable.job_id) == (native.group, library, job)
    assert group_dir(Path("b"), portable) == group_dir(Path("b"), native)
    # One per group: as many portable cells as groups.
    assert len(by_id) == len({c.group for c in CELLS})


def _portable_entry(cell_id: str, python: str = "abi3", **changes: Any) -> ManifestEntry:
    return ManifestEntry(
        file="libtorch_c_dlpack_ext-portable.so",
        torch="any",
        torch_build="any",
        backend=None,
        cxx11_abi=None,
        dlpack="1.3",
        toolchain="gcc 12.2.0",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python=python,
        size=1,
        sha256="0" * 64,
        cell=cell_id,
    )._replace(**changes)


def test_a_portable_entry_is_found_by_its_portable_cell_never_as_a_native_one() -> None:
    entry = _portable_entry("linux_x86_64-portable")
    assert portable_cell_for_entry(CELLS, entry, "m.json").id == "linux_x86_64-portable"
    with pytest.raises(MatrixError, match="is the portable table, no native cell"):
        cell_for_entry(CELLS, entry, "m.json")
    for bad in (
        _portable_entry("linux_x86_64-t28_cpu"),
        _portable_entry("linux_x86_64-portable", python="3.14t"),
        _portable_entry("nowhere-portable"),
    ):
        with pytest.raises(MatrixError, match=r"no portable cell of matrix\.toml"):
            portable_cell_for_entry(CELLS, bad, "m.json")


def test_a_cell_without_its_free_threaded_cpython_fails_in_its_set_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devtools.matrix.cells import portable_cells

    cells = load_matrix().cells()
    native = next(c for c in cells if c.freethreaded)
    portable = next(c for c in portable_cells(cells) if c.freethreaded)

    def freethreaded_python(version: str) -> str:
        time.sleep(0.2)  # a provisioner that looked for a while
        return f"no CPython {version}"

    monkeypatch.setattr(build, "freethreaded_python", freethreaded_python)
    for result in (
        build.build_one(native, tmp_path),
        build.build_portable_one(portable, tmp_path),
    ):
        assert (result.status, result.entry) == ("failed", None), result
        assert result.reason == f"ProvisionError: no CPython {native.python}"
        assert result.setup_seconds == result.seconds >= 0.2
