"""Variant wheels (PEP 825, PEP 850 metadata) as devtools/build/wheels.py assembles them
(one per torch minor; devtools/build/variants.py writes the metadata), and the variant
invariant checked on a dist (devtools/release/variantcheck.py).

No compiler here: libraries are stand-in bytes; what is under test is the layout, the
metadata as uv 0.13.10's parser takes it, the index file and the selector's decisions
(the invariant check runs the selector's pure policy on the manifests, loads nothing).
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from devtools.matrix.cells import Cell, cell_for_entry, portable_cells
from devtools.matrix.reader import load_matrix

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.files import load_manifest, sha256_of, write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import ANY, portable_library_filename

variantlib = pytest.importorskip("variantlib", reason="variantlib is in the test dependency group")

from devtools.base import wheelnames  # noqa: E402
from devtools.base.errors import MatrixError, ReleaseError  # noqa: E402
from devtools.base.paths import ROOT  # noqa: E402
from devtools.build import variants, wheels  # noqa: E402
from devtools.release.distfiles import read_wheel  # noqa: E402
from devtools.release.variantcheck import check_variants, decisions, torch_cases  # noqa: E402

MATRIX = load_matrix()
PROPERTY_RE = re.compile(r"^[a-z0-9_]+ :: [a-z0-9_]+ :: [a-z0-9_.]+$")


def _cell(cell_id: str) -> Cell:
    (cell,) = MATRIX.select([cell_id])
    return cell


def test_labels_and_properties_name_the_torch_minor_only() -> None:
    assert variants.variant_label("2.8") == "t28"
    assert variants.variant_label("2.10") == "t210"
    assert variants.minor_of_label("t210") == "2.10"
    assert variants.variant_properties("2.6") == ["abi_dependency :: torch :: 2.6"]
    assert all(PROPERTY_RE.match(p) for p in variants.variant_properties("2.6"))
    for bad in ("t28_cpu", "null", "t2"):
        with pytest.raises(BuildError, match="not a torch minor"):
            variants.minor_of_label(bad)
    with pytest.raises(BuildError, match=r"major\.minor"):
        variants.variant_label("2")


def test_variant_json_is_pep850_as_uv_reads_it() -> None:
    data = json.loads(variants.variant_json("2.6"))
    assert data == {
        "$schema": "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json",
        "default-priorities": {"namespace": ["abi_dependency"]},
        "providers": {"abi_dependency": {"builtin": "abi_dependency"}},
        "variants": {"t26": {"abi_dependency": {"torch": ["2.6"]}}},
    }
    assert variants.check_metadata(data, "t26") == data
    _check_pep825(data)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        # What variantlib 0.2.2 writes: uv says "Unknown variant metadata schema".
        ({"$schema": "https://variants-schema.wheelnext.dev/v0.2.0.json"}, r"\$schema is"),
        # Keys uv's parser denies (variantlib writes feature/property priorities).
        ({"default-priorities": {"namespace": ["abi_dependency"], "feature": {}}}, "feature"),
        ({"extra": 1}, "extra not accepted"),
        ({"providers": {"abi_dependency": {"builtin": "abi_dependency", "enable-if": "x"}}},
         "enable-if"),
        # A namespace ranked without a provider, and the reverse.
        ({"providers": {}}, "providers must be declared"),
        ({"variants": {"null": {}}}, "null variant"),
        ({"variants": {"t28": {"nvidia": {"cuda_version_lower_bound": ["12.8"]}}}},
         "nvidia, which has no priority"),
        # Malformed documents: a clear error, never a traceback.
        ({"providers": {"abi_dependency": "builtin"}}, "must be an object"),
        ({"variants": {"t28": ["abi_dependency"]}}, "must map namespaces"),
        ({"variants": {"t28": {"abi_dependency": {"torch": [2.8]}}}}, "string values"),
        ({"variants": {"t28": {"abi_dependency": {"torch": []}}}}, "string values"),
        ({"variants": {}}, "at least one label"),
    ],
)  # fmt: skip
def test_metadata_uv_would_refuse_is_refused(change: dict[str, Any], error: str) -> None:
    data = {**json.loads(variants.variant_json("2.8")), **change}
    with pytest.raises(BuildError, match=error):
        variants.check_metadata(data, "x")


def test_emulated_abi_dependency_is_a_static_list_of_the_users_minor() -> None:
    index = variants.variant_metadata(["2.6", "2.8"])
    emulated = variants.emulate_abi_dependency(index, "2.8")
    assert emulated["providers"] == {"abi_dependency": {"static-properties": {"torch": ["2.8"]}}}
    assert index["providers"]["abi_dependency"] == {"builtin": "abi_dependency"}  # a copy
    assert variants.check_metadata(emulated, "emulated") == emulated


def _check_pep825(data: dict[str, Any]) -> None:
    """The rules PEP 825 states for variant metadata."""
    namespaces = data["default-priorities"]["namespace"]
    for label, props in data["variants"].items():
        assert re.fullmatch(r"[0-9a-z._]{1,16}", label)
        assert label != "null"
        for namespace, features in props.items():
            assert namespace in namespaces
            for feature, values in features.items():
                assert re.fullmatch(r"[a-z0-9_]+", feature)
                assert values
                assert all(re.fullmatch(r"[a-z0-9_.]+", v) for v in values)


def _group(tmp_path: Path, cells: list[Cell], *, portable_table: bool = True) -> Path:
    libs = tmp_path / "group"
    libs.mkdir()
    entries = []
    for cell in cells:
        path = libs / cell.library
        path.write_bytes(b"stand-in for " + cell.id.encode())
        entries.append(
            ManifestEntry(
                file=cell.library, torch=cell.torch.minor, torch_build=cell.torch.release,
                backend=cell.backend, cxx11_abi=cell.cxx11_abi, dlpack="1.3",
                toolchain="g++ 12.2.0",
                gpu_toolkit=cell.toolkit, platform=cell.platform.name, python=cell.python,
                size=path.stat().st_size, sha256=sha256_of(path), cell=cell.id,
            )
        )  # fmt: skip
    for portable in portable_cells(cells) if portable_table else ():
        name = portable_library_filename(portable.python)
        path = libs / name
        path.write_bytes(b"stand-in for " + portable.id.encode())
        entries.append(
            ManifestEntry(
                file=name, torch=ANY, torch_build=ANY, backend=None, cxx11_abi=None,
                dlpack="1.3", toolchain="gcc 12.2.0", gpu_toolkit=None,
                platform=portable.platform.name, python=portable.python,
                size=path.stat().st_size, sha256=sha256_of(path), cell=portable.id,
            )
        )  # fmt: skip
    write_manifest(libs / "manifest.json", entries)
    return libs


def _libraries(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
    return sorted(e["file"].rsplit("/", 1)[-1] for e in manifest["libraries"])


def test_assemble_group_makes_one_variant_per_torch_minor(tmp_path: Path) -> None:
    cells = [
        _cell(f"linux_x86_64-{label}")
        for label in ("t26_cuda_abi0", "t26_cpu_abi0", "t26_cpu_abi1", "t28_cpu", "t28_cuda")
    ]
    libs = _group(tmp_path, cells)
    out = tmp_path / "dist"
    out.mkdir()
    made = wheels.assemble_group(libs, out, matrix=MATRIX, repair=False)
    names = sorted(p.name for p in made)
    # One abi3 wheel for every CPython >= 3.9 with the GIL, and a variant per torch minor.
    assert names == [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t26.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t28.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl",
    ]
    # Each variant: every backend and C++ ABI of its minor, and the portable table.
    assert _libraries(out / names[0]) == [
        "libtorch_c_dlpack_ext-portable.so",
        "libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi0.so",
        "libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi1.so",
        "libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi0.so",
    ]
    assert _libraries(out / names[1]) == [
        "libtorch_c_dlpack_ext-portable.so",
        "libtorch_c_dlpack_ext-torch2.8-cpu-cxx11abi1.so",
        "libtorch_c_dlpack_ext-torch2.8-cuda-cxx11abi1.so",
    ]
    with zipfile.ZipFile(out / names[0]) as archive:
        variant = json.loads(archive.read("torch_c_dlpack_ext-0.2.0.dist-info/variant.json"))
        assert variant["variants"] == {"t26": {"abi_dependency": {"torch": ["2.6"]}}}
    with zipfile.ZipFile(out / names[2]) as archive:
        assert not [n for n in archive.namelist() if n.endswith("variant.json")]
    assert len(_libraries(out / names[2])) == 6
    index = variants.variants_index([p for p in made if p.name != names[2]])
    assert sorted(index["variants"]) == ["t26", "t28"]
    _check_pep825(index)


def test_dist_holds_the_selected_cells_only(tmp_path: Path) -> None:
    """The group directory is a cache: a library an earlier run built there (torch 2.4
    here) stays out of a dist/ assembled for other cells."""
    cells = [_cell(f"linux_x86_64-{label}") for label in ("t24_cpu", "t28_cpu", "t28_cuda")]
    libs = _group(tmp_path, cells, portable_table=False)
    out = tmp_path / "dist"
    selected = {cells[1].library, cells[2].library}
    made = wheels.assemble_dist({libs: selected}, out, matrix=MATRIX, repair=False)
    names = sorted(p.name for p in made if p.name.endswith(".whl"))
    assert names == [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t28.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl",
        "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
    ]
    with zipfile.ZipFile(out / names[1]) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        packed = sorted(e["file"].rsplit("/", 1)[-1] for e in manifest["libraries"])
        assert packed == sorted(selected)  # no portable table: the group's was not selected
        assert cells[0].library not in {n.rsplit("/", 1)[-1] for n in archive.namelist()}
    index = json.loads((out / "torch_c_dlpack_ext-0.2.0-variants.json").read_text("utf-8"))
    assert sorted(index["variants"]) == ["t28"]


def test_a_selected_library_missing_from_the_group_is_an_error(tmp_path: Path) -> None:
    libs = _group(tmp_path, [_cell("linux_x86_64-t28_cpu")])
    with pytest.raises(BuildError, match=r"lists no libtorch_c_dlpack_ext-torch2\.6"):
        wheels.assemble_group(
            libs,
            tmp_path,
            matrix=MATRIX,
            repair=False,
            only={_cell("linux_x86_64-t26_cpu_abi0").library},
        )


def test_free_threaded_group_makes_cp314t_wheels_with_the_same_labels(tmp_path: Path) -> None:
    cells = [_cell("linux_x86_64-t29_cuda-cp314t"), _cell("linux_x86_64-t29_cpu-cp314t")]
    libs = _group(tmp_path, cells)
    out = tmp_path / "dist"
    out.mkdir()
    made = wheels.assemble_group(libs, out, matrix=MATRIX, repair=False)
    assert sorted(p.name for p in made) == [
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-linux_x86_64-t29.whl",
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-linux_x86_64.whl",
    ]
    # The label and properties of the abi3 t29 variant: one entry in the variants file.
    with zipfile.ZipFile(out / sorted(p.name for p in made)[0]) as archive:
        variant = archive.read("torch_c_dlpack_ext-0.2.0.dist-info/variant.json")
    assert variant == variants.variant_json("2.9")
    # Its entries map back to the free-threaded cells, not the abi3 ones (by their ids).
    entry = ManifestEntry(
        file=cells[1].library, torch="2.9", torch_build="2.9.1", backend=cells[1].backend,
        cxx11_abi=True, dlpack="1.3", toolchain="g++", gpu_toolkit=None,
        platform="linux_x86_64", python="3.14t", size=1, sha256="0" * 64,
        cell="linux_x86_64-t29_cpu-cp314t",
    )  # fmt: skip
    assert cell_for_entry(MATRIX.cells(), entry, "m.json").id == "linux_x86_64-t29_cpu-cp314t"
    abi3 = entry._replace(python="abi3", cell="linux_x86_64-t29_cpu")
    assert cell_for_entry(MATRIX.cells(), abi3, "m.json").id == "linux_x86_64-t29_cpu"


def test_variants_index_rejects_conflicting_labels(tmp_path: Path) -> None:
    def wheel(name: str, props: dict[str, Any]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as archive:
            data = {**variants.variant_metadata(["2.8"]), "variants": {"t28": props}}
            archive.writestr("x-1.dist-info/variant.json", json.dumps(data))
        return path

    first = wheel("a.whl", {"abi_dependency": {"torch": ["2.8"]}})
    second = wheel("b.whl", {"abi_dependency": {"torch": ["2.9"]}})
    with pytest.raises(BuildError, match="t28"):
        variants.variants_index([first, second])


def test_entry_outside_the_matrix_is_an_error() -> None:
    cell = _cell("linux_x86_64-t28_cpu")
    entry = ManifestEntry(
        file=cell.library, torch="2.3", torch_build="2.3.0", backend=cell.backend, cxx11_abi=True,
        dlpack="1.3", toolchain="g++", gpu_toolkit=None, platform="linux_x86_64", python="abi3",
        size=1, sha256="0" * 64, cell="linux_x86_64-t23_cpu",
    )  # fmt: skip
    with pytest.raises(MatrixError, match=r"no cell of matrix\.toml"):
        cell_for_entry(MATRIX.cells(), entry, "m.json")
    # A library built for one CPython (a manifest from before abi3, so before cell ids)
    # names no cell either.
    old = entry._replace(torch="2.8", python="3.11", cell=None)
    with pytest.raises(MatrixError, match=r"python 3\.11\) carries no cell id"):
        cell_for_entry(MATRIX.cells(), old, "m.json")


@pytest.mark.parametrize(
    "name",
    [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64-t28.whl",
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-win_amd64-t29.whl",
        "torch_c_dlpack_ext-0.2.0-1-cp39-abi3-win_amd64.whl",
        "torch_c_dlpack_ext-0.2.0-1-cp39-abi3-win_amd64-t26_cpu_abi0.whl",
        "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
    ],
)
def test_variant_names_are_told_apart_as_variantlib_does(name: str) -> None:
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX

    match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(name)
    assert wheelnames.is_variant_name(name) is bool(match and match.group("variant_label"))


def _standin_dist(tmp_path: Path, labels: tuple[str, ...]) -> tuple[Path, Path]:
    """dist/ of stand-in libraries for these linux_x86_64 cells (and their portable
    table), and the group folder it was packed from."""
    libs = _group(tmp_path, [_cell(f"linux_x86_64-{label}") for label in labels])
    files = {e.file for e in load_manifest(libs / "manifest.json")}
    dist = tmp_path / "dist"
    wheels.assemble_dist({libs: files}, dist, matrix=MATRIX, repair=False)
    return dist, libs


def _repack_variant(dist: Path, libs: Path, minor: str, keep: Callable[[str], bool]) -> None:
    """Replace ``minor``'s variant wheel with one holding the group's libraries ``keep``
    accepts (a seeded defect of the layout)."""
    from build_backend._metadata import project_metadata
    from build_backend._wheel import assemble_wheel

    label = variants.variant_label(minor)
    (old,) = dist.glob(f"*-{label}.whl")
    old.unlink()
    entries = [e for e in load_manifest(libs / "manifest.json") if keep(e.file)]
    assemble_wheel(
        dist,
        meta=project_metadata(ROOT),
        libraries=[(e, libs / e.file) for e in entries],
        label=label,
        variant_json=variants.variant_json(minor),
    )


STANDIN = ("t26_cuda_abi0", "t26_cpu_abi0", "t26_cpu_abi1", "t28_cpu", "t28_cuda")


def test_the_variant_invariant_holds_on_the_layout(tmp_path: Path) -> None:
    dist, _ = _standin_dist(tmp_path, STANDIN)
    lines = check_variants(dist)
    assert [line.split(":")[0] for line in lines] == [
        "torch_c_dlpack_ext-0.2.0-variants.json",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t26.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t28.whl",
    ]
    # Every build of the minor was tried: loads (CPU/CUDA), the portable table (ROCm,
    # XPU), unavailable (a torch without _to_dlpack and no library of its own).
    assert "(load, portable, unavailable)" in lines[2]


@pytest.mark.parametrize(
    ("keep", "error"),
    [
        # The old per-cell layout: t28 holding the CPU library alone. A CUDA torch 2.8
        # would get "no bundled cuda library" where the combined wheel loads its own.
        (lambda f: "torch2.8-cpu" in f, r"lacks libs/libtorch_c_dlpack_ext-portable\.so, "
         r"libs/libtorch_c_dlpack_ext-torch2\.8-cuda"),
        # No portable table: a ROCm torch 2.8 would get nothing where the combined wheel
        # serves it the portable table.
        (lambda f: "torch2.8" in f, r"lacks libs/libtorch_c_dlpack_ext-portable\.so of"),
        # Another minor's library in t28.
        (lambda f: "torch2.8" in f or "portable" in f or "torch2.6-cpu-cxx11abi0" in f,
         r"carries libs/libtorch_c_dlpack_ext-torch2\.6-cpu-cxx11abi0\.so beyond what"),
    ],
)  # fmt: skip
def test_a_variant_that_breaks_the_invariant_is_refused(
    tmp_path: Path, keep: Callable[[str], bool], error: str
) -> None:
    dist, libs = _standin_dist(tmp_path, STANDIN)
    _repack_variant(dist, libs, "2.8", keep)
    with pytest.raises(ReleaseError, match=error):
        check_variants(dist)


def test_the_decisions_themselves_are_compared(tmp_path: Path) -> None:
    """Same files, different decision: a variant whose manifest hides the CUDA library
    from a CUDA torch (it claims cpu) is refused by the selector's answer, not by a
    file list."""
    dist, _ = _standin_dist(tmp_path, ("t28_cpu", "t28_cuda"))
    (variant,) = dist.glob("*-t28.whl")
    combined = next(p for p in dist.glob("*abi3-linux_x86_64.whl"))
    ref = {e.file: e for e in read_wheel(combined).libraries}
    assert ref  # the combined wheel's manifest, read back
    tmp = tmp_path / "unpacked"
    with zipfile.ZipFile(variant) as archive:
        archive.extractall(tmp)
    manifest = tmp / "torch_c_dlpack_ext" / "manifest.json"
    data = json.loads(manifest.read_text("utf-8"))
    for entry in data["libraries"]:
        if entry["backend"] == "cuda":
            entry["backend"] = "rocm"
    got, want = decisions(tmp, [manifest, _combined_manifest(combined, tmp_path)],
                          torch_cases("2.8", [((3, 11), False)], abis=[True]))  # fmt: skip
    assert got == want  # the manifest on disk is still the original: same decisions
    manifest.write_text(json.dumps(data), "utf-8")
    got, want = decisions(tmp, [manifest, _combined_manifest(combined, tmp_path)],
                          torch_cases("2.8", [((3, 11), False)], abis=[True]))  # fmt: skip
    assert got != want


def _combined_manifest(wheel: Path, tmp_path: Path) -> Path:
    target = tmp_path / "combined"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target / "torch_c_dlpack_ext" / "manifest.json"


def test_the_sizes_table_is_generated_from_its_record() -> None:
    """docs/building.md's sizes table is docs/variant-sizes.json rendered (edit the record
    through ``python -m devtools variant-sizes``, never the table)."""
    from devtools.base.generated import FILES
    from devtools.build import sizes

    record = json.loads(sizes.RECORD.read_text("utf-8"))
    page = (ROOT / "docs" / "building.md").read_text("utf-8")
    assert "docs/building.md" in FILES  # so nox -s lint checks it
    assert "cog.out(sizes_section())" in page
    assert sizes.render_table(record) in page
    for row in record["rows"]:
        assert row["wheel"] < row["combined_wheel"], row  # what the layout is for


def test_variant_sizes_of_a_dist(tmp_path: Path) -> None:
    from devtools.build import sizes

    dist, _ = _standin_dist(tmp_path, STANDIN)
    rows = sizes.variant_sizes(sorted(dist.iterdir()))
    assert [(r["variant"].rsplit("-", 1)[-1], r["libraries"], r["combined_libraries"])
            for r in rows] == [("t26.whl", 4, 6), ("t28.whl", 3, 6)]  # fmt: skip
    for row in rows:
        assert row["wheel"] == (dist / row["variant"]).stat().st_size
        assert row["installed"] < row["combined_installed"]
    table = sizes.render_table({"measured": "d", "machine": "m", "cells": "c", "rows": rows})
    assert "| `t26` (cp39-abi3) | 4 of 6 |" in table


def test_the_variant_index_serves_every_file_of_the_release(tmp_path: Path) -> None:
    """``python -m devtools variant-index``: a static PEP 503 index of everything (uv
    uses the first index that has the package), served here on 127.0.0.1."""
    from devtools.base import cli
    from devtools.rehearse.indexserver import StaticIndexServer, served_hashes

    dist, _ = _standin_dist(tmp_path, ("t28_cpu", "t28_cuda"))
    assert cli.main(["variant-index", str(dist), str(tmp_path / "site")]) == 0
    with StaticIndexServer(tmp_path / "site") as server:
        served = served_hashes(f"{server.url}/simple")
    assert served == {p.name: sha256_of(p) for p in dist.iterdir()}
    assert "torch_c_dlpack_ext-0.2.0-variants.json" in served
    (dist / "torch_c_dlpack_ext-0.2.0-variants.json").unlink()
    assert cli.main(["variant-index", str(dist), str(tmp_path / "again")]) == ReleaseError.exit_code


def test_the_variant_index_refuses_a_variants_file_that_lacks_a_label(tmp_path: Path) -> None:
    """Published, such an index makes uv install the combined wheel for torch 2.8,
    silently (uv 0.13.10)."""
    from devtools.base import cli

    dist, _ = _standin_dist(tmp_path, ("t26_cpu_abi0", "t28_cpu"))
    _edit_variants_file(dist, lambda v: v["variants"].pop("t28"))
    assert cli.main(["variant-index", str(dist), str(tmp_path / "site")]) == ReleaseError.exit_code
    assert not (tmp_path / "site").exists()


def _rewrite_variant_json(wheel: Path, data: object) -> None:
    """``wheel`` with its ``*.dist-info/variant.json`` replaced by ``data``."""
    old = wheel.read_bytes()
    staged = wheel.with_suffix(".old")
    staged.write_bytes(old)
    with zipfile.ZipFile(staged) as source, zipfile.ZipFile(wheel, "w") as target:
        for info in source.infolist():
            body = source.read(info)
            if info.filename.endswith(".dist-info/variant.json"):
                body = json.dumps(data).encode()
            target.writestr(info, body)
    staged.unlink()


def _edit_variants_file(dist: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    (path,) = dist.glob("*-variants.json")
    data = json.loads(path.read_text("utf-8"))
    edit(data)
    path.write_text(json.dumps(data), "utf-8")


@pytest.mark.parametrize(
    ("seed", "error"),
    [
        # uv installs the combined wheel, silently, for a label the file lacks ...
        (lambda d: _edit_variants_file(d, lambda v: v["variants"].pop("t28")),
         r"lists t26 but the variant wheels are t26, t28 \(extra: none; missing: t28\)"),
        # ... lists a label no wheel has ...
        (lambda d: _edit_variants_file(
            d, lambda v: v["variants"].update(t30={"abi_dependency": {"torch": ["3.0"]}})),
         r"extra: t30; missing: none"),
        # ... or describes otherwise (t28 as torch 2.9: never chosen for a torch 2.8).
        (lambda d: _edit_variants_file(
            d, lambda v: v["variants"].update(t28={"abi_dependency": {"torch": ["2.9"]}})),
         r"differs from the variant wheels' variant\.json"),
        # No variants file: uv ranks no variant at all.
        (lambda d: next(d.glob("*-variants.json")).unlink(), r"0 variants files"),
        # A variants file of another version: uv reads none for this one.
        (lambda d: next(d.glob("*-variants.json")).rename(
            d / "torch_c_dlpack_ext-0.1.9-variants.json"),
         r"0\.1\.9-variants\.json beside wheels of 0\.2\.0"),
        # A stale combined wheel of a newer version: the variants would be held to it.
        (lambda d: shutil.copyfile(next(d.glob("*-cp39-abi3-linux_x86_64.whl")),
                                   d / "torch_c_dlpack_ext-0.2.1-cp39-abi3-linux_x86_64.whl"),
         r"wheels of versions 0\.2\.0, 0\.2\.1; a release is one version"),
        # A malformed one: uv's install fails ("Failed to parse variant metadata").
        (lambda d: next(d.glob("*-variants.json")).write_text("{not json", "utf-8"),
         r"variant metadata: .*Expecting property name"),
        # A variant dropped from the dist (and from the file): not the release built.
        (lambda d: (next(d.glob("*-t28.whl")).unlink(),
                    _edit_variants_file(d, lambda v: v["variants"].pop("t28"))),
         r"holds libraries of torch 2\.8 but the dist has no t28 variant of its tags"),
        # A wheel labelled t28 whose variant.json says torch 2.9.
        (lambda d: _rewrite_variant_json(next(d.glob("*-t28.whl")), {
            **variants.variant_metadata(["2.9"])}),
         r"-t28\.whl: its .*variant\.json describes \{'t29'.*not the variant its file name"),
    ],
)  # fmt: skip
def test_variant_metadata_that_disagrees_with_the_wheels_is_refused(
    tmp_path: Path, seed: Callable[[Path], object], error: str
) -> None:
    """Each seeded dist passed verify before (the invariant held wheel by wheel), yet
    uv (0.13.10, emulated abi_dependency, run by hand) installed the combined wheel
    for torch 2.8 from the first three, and failed the install on the malformed file."""
    dist, _ = _standin_dist(tmp_path, ("t26_cpu_abi0", "t28_cpu"))
    seed(dist)
    with pytest.raises(ReleaseError, match=error):
        check_variants(dist)


def test_the_variants_file_of_the_build_matches_its_wheels(tmp_path: Path) -> None:
    dist, _ = _standin_dist(tmp_path, ("t26_cpu_abi0", "t28_cpu"))
    wheels_read = [read_wheel(p) for p in sorted(dist.glob("*.whl"))]
    from devtools.release.variantcheck import check_variant_metadata

    assert check_variant_metadata(dist, wheels_read) == [
        "torch_c_dlpack_ext-0.2.0-variants.json: lists exactly the 2 variant labels, "
        "as the wheels do"
    ]


@pytest.mark.parametrize(
    "torch",
    ["2.8.0", "2.8.0+cpu", "2.8.0a0+5228986c39.nv25.05", "2.8.0.dev20250601+cu128",
     "2.6.0+debian", "2.9.1+rocm6.4", "2.3.1+cu121", "2.12.0", "2.15.0+xpu"],
)  # fmt: skip
def test_the_emulation_picks_what_variantlibs_resolver_picks(
    torch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install cases emulate an installer that applies ``abi_dependency`` by the
    user's torch minor (``VariantCase.minor``). variantlib 0.2's reference resolver
    derives the values from the installed torch's version (major, major.minor,
    major.minor.micro; local and pre-release parts dropped): over our variants it picks
    the same variant for every torch users have, and none outside the matrix."""
    from devtools.rehearse.variantinstall import VariantCase
    from variantlib.models.variant import VariantDescription, VariantProperty
    from variantlib.resolver import lib

    data = variants.variant_metadata(["2.4", "2.5", "2.6", "2.7", "2.8", "2.9"])
    described = {
        label: VariantDescription(properties=[
            VariantProperty(namespace=ns, feature=feature, value=value)
            for ns, features in props.items()
            for feature, values in features.items()
            for value in values
        ])
        for label, props in data["variants"].items()
    }  # fmt: skip
    monkeypatch.setenv("VARIANT_ABI_DEPENDENCY", f"torch=={torch}")
    supported: list[Any] = []
    priorities: list[str] = []
    lib.inject_abi_dependency(supported, priorities)
    torch_only = [p for p in supported if p.feature == "torch"]
    ranked = lib.sort_and_filter_supported_variants(
        list(described.values()), torch_only, priorities
    )
    picked = [label for r in ranked for label, d in described.items() if d == r]
    minor = VariantCase(torch, "cpu", True, False, "abi_dependency", "index").minor
    emulated = variants.emulate_abi_dependency(data, minor)
    expected = [
        label
        for label, props in emulated["variants"].items()
        if props["abi_dependency"]["torch"]
        == emulated["providers"]["abi_dependency"]["static-properties"]["torch"]
    ]
    assert picked == expected
    assert picked == ([f"t{minor.replace('.', '')}"] if minor in ("2.6", "2.8", "2.9") else [])


def test_a_variant_beside_another_minors_torch_falls_back_to_the_portable_table(
    tmp_path: Path,
) -> None:
    """A variant is chosen for the torch installed at that moment; torch may change minor
    later (``uv pip install -U torch``), or within the same command for an installer that
    reads the environment before it resolves (variantlib's reference resolver does). The
    t28 variant beside a torch 2.9 then serves the portable table for every build that
    has torch's Python DLPack functions, where the combined wheel loads 2.9's library:
    slower, never "unavailable" (docs/building.md says to reinstall)."""
    dist, _ = _standin_dist(tmp_path, ("t28_cpu", "t28_cuda", "t29_cpu", "t29_cuda"))
    (variant,) = dist.glob("*-t28.whl")
    root = tmp_path / "t28"
    with zipfile.ZipFile(variant) as archive:
        archive.extractall(root)
    cases = torch_cases("2.9", [((3, 11), False)], abis=[True, False])
    (got,) = decisions(root, [root / "torch_c_dlpack_ext" / "manifest.json"], cases)
    for case, row in zip(cases, got):
        if case["has_to_dlpack"]:
            assert row[0] == "portable", (case, row)
            assert row[2] == "libs/libtorch_c_dlpack_ext-portable.so", (case, row)
