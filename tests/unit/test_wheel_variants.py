"""Variant metadata (PEP 825) of the wheels devtools/build/wheels.py assembles
(devtools/build/variants.py writes it), checked with variantlib.

No compiler here: libraries are stand-in bytes; what is under test is the
metadata, the labels, the index file and how variantlib ranks the labels.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import pytest
from devtools.matrix.cells import Cell, cell_for_entry
from devtools.matrix.reader import load_matrix

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.files import sha256_of, write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry

variantlib = pytest.importorskip("variantlib", reason="variantlib is in the test dependency group")

from devtools.base import wheelnames  # noqa: E402
from devtools.base.errors import MatrixError  # noqa: E402
from devtools.build import variants, wheels  # noqa: E402

MATRIX = load_matrix()
PROPERTY_RE = re.compile(r"^[a-z0-9_]+ :: [a-z0-9_]+ :: [a-z0-9_.]+$")


def _cell(cell_id: str) -> Cell:
    (cell,) = MATRIX.select([cell_id])
    return cell


@pytest.mark.parametrize(
    ("cell_id", "expected"),
    [
        ("linux_x86_64-t28_cpu", ["abi_dependency :: torch :: 2.8"]),
        (
            "linux_x86_64-t26_cuda_abi0",
            ["abi_dependency :: torch :: 2.6", "nvidia :: cuda_version_lower_bound :: 12.4"],
        ),
        (
            "linux_x86_64-t29_rocm",
            ["abi_dependency :: torch :: 2.9", "amd :: rocm_version :: 6.4"],
        ),
    ],
)
def test_variant_properties(cell_id: str, expected: list[str]) -> None:
    props = variants.variant_properties(_cell(cell_id))
    assert props == expected
    assert all(PROPERTY_RE.match(p) for p in props)


def test_variant_json_is_variantlib_valid() -> None:
    from variantlib.variants_json import VariantsJson

    data = json.loads(variants.variant_json(_cell("linux_x86_64-t26_cuda_abi0")))
    assert data["variants"] == {
        "t26_cuda_abi0": {
            "abi_dependency": {"torch": ["2.6"]},
            "nvidia": {"cuda_version_lower_bound": ["12.4"]},
        }
    }
    assert data["providers"]["nvidia"]["plugin-api"].startswith("nvidia_variant_provider")
    # variantlib leaves abi_dependency undeclared (and then rejects its own file): fixed up.
    assert data["providers"]["abi_dependency"] == {"builtin": "abi_dependency"}
    assert data["default-priorities"]["namespace"][-1] == "abi_dependency"
    parsed = VariantsJson(data)  # raises on anything variantlib considers invalid
    assert list(parsed.variants) == ["t26_cuda_abi0"]
    _check_pep825(data)


def _check_pep825(data: dict[str, Any]) -> None:
    """The rules PEP 825 states for variant metadata (variantlib does not ship the schema)."""
    assert data["$schema"].startswith("https://")
    namespaces = data["default-priorities"]["namespace"]
    assert namespaces
    assert len(set(namespaces)) == len(namespaces)
    assert all(re.fullmatch(r"[a-z0-9_]+", ns) for ns in namespaces)
    for label, props in data["variants"].items():
        assert re.fullmatch(r"[0-9a-z._]{1,16}", label)
        assert label != "null"
        for namespace, features in props.items():
            assert re.fullmatch(r"[a-z0-9_]+", namespace)
            # Every namespace but the installer-derived abi_dependency names its provider.
            assert namespace == "abi_dependency" or namespace in data["providers"]
            for feature, values in features.items():
                assert re.fullmatch(r"[a-z0-9_]+", feature)
                assert values
                assert all(re.fullmatch(r"[a-z0-9_.]+", v) for v in values)


def _group(tmp_path: Path, cells: list[Cell]) -> Path:
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
    write_manifest(libs / "manifest.json", entries)
    return libs


def test_assemble_group_combined_and_variant_wheels(tmp_path: Path) -> None:
    cells = [
        _cell(f"linux_x86_64-{label}") for label in ("t26_cuda_abi0", "t26_cpu_abi0", "t28_cpu")
    ]
    libs = _group(tmp_path, cells)
    out = tmp_path / "dist"
    out.mkdir()
    made = wheels.assemble_group(libs, out, matrix=MATRIX, repair=False)
    names = sorted(p.name for p in made)
    # One abi3 wheel for every CPython >= 3.9 with the GIL, and a variant wheel per cell.
    assert names == [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t26_cpu_abi0.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t26_cuda_abi0.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t28_cpu.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl",
    ]
    with zipfile.ZipFile(out / names[1]) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        # The CUDA variant carries its own library only: a CUDA torch gets the CUDA
        # library (which serves CPU tensors too), never a CPU copy.
        assert [e["file"] for e in manifest["libraries"]] == [
            "libs/libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi0.so",
        ]
        variant = json.loads(archive.read("torch_c_dlpack_ext-0.2.0.dist-info/variant.json"))
        assert list(variant["variants"]) == ["t26_cuda_abi0"]
    with zipfile.ZipFile(out / names[3]) as archive:
        assert not [n for n in archive.namelist() if n.endswith("variant.json")]
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        assert len(manifest["libraries"]) == 3
    index = variants.variants_index([p for p in made if p.name != names[3]])
    assert sorted(index["variants"]) == ["t26_cpu_abi0", "t26_cuda_abi0", "t28_cpu"]
    _check_pep825(index)


def test_dist_holds_the_selected_cells_only(tmp_path: Path) -> None:
    """The group directory is a cache: a library an earlier run built there (torch 2.4
    here) stays out of a dist/ assembled for other cells."""
    cells = [_cell(f"linux_x86_64-{label}") for label in ("t24_cpu", "t28_cpu", "t28_cuda")]
    libs = _group(tmp_path, cells)
    out = tmp_path / "dist"
    selected = {cells[1].library, cells[2].library}
    made = wheels.assemble_dist({libs: selected}, out, matrix=MATRIX, repair=False)
    names = sorted(p.name for p in made if p.name.endswith(".whl"))
    assert names == [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t28_cpu.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64-t28_cuda.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl",
        "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
    ]
    with zipfile.ZipFile(out / names[2]) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        packed = sorted(e["file"].rsplit("/", 1)[-1] for e in manifest["libraries"])
        assert packed == sorted(selected)
        assert cells[0].library not in {n.rsplit("/", 1)[-1] for n in archive.namelist()}
    index = json.loads((out / "torch_c_dlpack_ext-0.2.0-variants.json").read_text("utf-8"))
    assert sorted(index["variants"]) == ["t28_cpu", "t28_cuda"]


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
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-linux_x86_64-t29_cpu.whl",
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-linux_x86_64-t29_cuda.whl",
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-linux_x86_64.whl",
    ]
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
            archive.writestr(
                "x-1.dist-info/variant.json", json.dumps({"variants": {"t28_cpu": props}})
            )
        return path

    first = wheel("a.whl", {"abi_dependency": {"torch": ["2.8"]}})
    second = wheel("b.whl", {"abi_dependency": {"torch": ["2.9"]}})
    with pytest.raises(BuildError, match="t28_cpu"):
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


def _rank(
    index: dict[str, Any], supported: list[str], monkeypatch: pytest.MonkeyPatch, torch: str
) -> list[str]:
    from variantlib.models.variant import VariantProperty
    from variantlib.resolver.lib import sort_and_filter_supported_variants
    from variantlib.variants_json import VariantsJson

    # variantlib's documented override of the installed packages' versions.
    monkeypatch.setenv("VARIANT_ABI_DEPENDENCY", f"torch=={torch}")
    parsed = VariantsJson(index)
    ranked = sort_and_filter_supported_variants(
        list(parsed.variants.values()),
        [VariantProperty.from_str(p) for p in supported],
        namespace_priorities=list(parsed.namespace_priorities),
        filter_values=True,
    )
    return [v.label for v in ranked]


def _index_for(labels: list[str]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for label in labels:
        data = json.loads(variants.variant_json(_cell(f"linux_x86_64-{label}")))
        merged.setdefault("variants", {}).update(data.pop("variants"))
        merged.update(data)
    return merged


def test_variantlib_ranks_the_label_of_the_installed_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    index = _index_for(["t26_cuda_abi0", "t26_cpu_abi0", "t28_cuda", "t28_cpu", "t29_cpu"])
    # No GPU provider answers: only CPU variants of the installed torch qualify.
    assert _rank(index, [], monkeypatch, "2.8.0")[:1] == ["t28_cpu"]
    # A CUDA 12.8-capable driver (what the nvidia provider would report): the CUDA
    # variant of torch 2.8 first, then its CPU variant; nothing built for 2.6 or 2.9.
    cuda = [f"nvidia :: cuda_version_lower_bound :: 12.{m}" for m in range(9)]
    ranked = _rank(index, cuda, monkeypatch, "2.8.0")
    assert ranked[:2] == ["t28_cuda", "t28_cpu"]
    assert not [label for label in ranked if label.startswith(("t26", "t29"))]
    assert _rank(index, cuda, monkeypatch, "2.6.0")[:2] == ["t26_cuda_abi0", "t26_cpu_abi0"]
    # A driver too old for CUDA 12.4 (lower bounds up to 12.2 supported): CPU only.
    old = [f"nvidia :: cuda_version_lower_bound :: 12.{m}" for m in range(3)]
    assert _rank(index, old, monkeypatch, "2.6.0")[:1] == ["t26_cpu_abi0"]


def test_indistinct_labels_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    index = _index_for(["t26_cpu_abi0", "t26_cpu_abi1", "t28_cpu"])
    variants._warn_indistinct(index["variants"])
    err = capsys.readouterr().err
    assert "'t26_cpu_abi0' and 't26_cpu_abi1' declare the same properties" in err
    assert "t28_cpu" not in err


def test_variant_json_without_variantlib_is_what_variantlib_writes() -> None:
    # Python 3.9 (variantlib needs 3.10) writes variant.json itself: the same document.
    for cell in MATRIX.cells():
        written = variants._variant_dist_info_without_variantlib(cell)
        data = variants._declare_abi_dependency(written)
        assert data == json.loads(variants.variant_json(cell)), cell.id


@pytest.mark.parametrize(
    "name",
    [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64-t28_cpu.whl",
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-win_amd64-t29_cpu.whl",
        "torch_c_dlpack_ext-0.2.0-1-cp39-abi3-win_amd64.whl",
        "torch_c_dlpack_ext-0.2.0-1-cp39-abi3-win_amd64-t26_cpu_abi0.whl",
        "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
    ],
)
def test_variant_names_are_told_apart_as_variantlib_does(name: str) -> None:
    from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX

    match = VALIDATION_WHEEL_NAME_REGEX.fullmatch(name)
    assert wheelnames.is_variant_name(name) is bool(match and match.group("variant_label"))
