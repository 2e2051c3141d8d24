"""The variant invariant with real uv (``--preview-features wheel-variants``): whatever
variant uv selects, the selector of what it installed decides as the combined wheel would
(loads the same library, or defers on torch >= 2.10); never "unavailable" where the
combined wheel serves.

- **Stand-ins** (:func:`test_uv_installs_keep_the_invariant`): a dist of every
  linux_x86_64 cell of matrix.toml assembled by ``devtools.build.wheels`` from placeholder
  libraries (the fixture library, which loads without torch), and stand-in torches
  (``devtools.rehearse.variantinstall.write_fake_torch``): every minor x CPU/CUDA build x
  driver present/absent x 2.6's C++ ABIs x uv as it is / with ``abi_dependency``
  emulated x a PEP 503 index on 127.0.0.1 / a ``--find-links`` folder.
- **The old layout fails it** (:func:`test_the_per_cell_layout_breaks_the_invariant`):
  a ``t28`` variant holding the CPU library alone, as the per-cell ``t28_cpu`` was.
- **uv reads our metadata** and would not read variantlib's.
- **One real build** (slow): the t28 cells compiled against PyPI's torch 2.8.0, installed
  by uv with ``abi_dependency`` emulated into that real torch's environment.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import build_fake_library, clean_env, devtools_env

from _torch_c_dlpack_ext_core.files import load_manifest, sha256_of, write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import ANY, portable_library_filename

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("the stand-in cells are linux_x86_64 cells", allow_module_level=True)

from devtools.base.errors import ReleaseError
from devtools.build import variants, wheels
from devtools.matrix.cells import Cell, PortableCell, group_dir, portable_cells
from devtools.matrix.reader import load_matrix
from devtools.rehearse.variantinstall import (
    VariantCase,
    run_variant_cases,
    variant_cases,
)
from devtools.release.distfiles import collect

MATRIX = load_matrix()


def standin_dist(
    work: Path, *, platform_name: str = "linux_x86_64", library: bytes | None = None
) -> Path:
    """dist/ of every cell of ``platform_name`` (abi3 and free-threaded groups, each with
    its portable table), assembled as ``nox -s build`` does, from copies of the fixture
    library (each with its cell id appended, so no two libraries share a sha256), or of
    ``library``'s bytes."""
    if library is None:
        library = build_fake_library(work / "fake").read_bytes()
    groups: dict[Path, list[ManifestEntry]] = {}
    cells = [c for c in MATRIX.cells() if c.platform.name == platform_name]
    every: list[Cell | PortableCell] = [*cells, *portable_cells(cells)]
    for cell in every:
        folder = group_dir(work / "cells", cell)
        folder.mkdir(parents=True, exist_ok=True)
        described: dict[str, Any]
        if isinstance(cell, Cell):
            name = cell.library
            described = {
                "torch": cell.torch.minor, "torch_build": cell.torch.release,
                "backend": cell.backend, "cxx11_abi": cell.cxx11_abi, "gpu_toolkit": cell.toolkit,
            }  # fmt: skip
        else:
            name = portable_library_filename(cell.python)
            described = {"torch": ANY, "torch_build": ANY, "backend": None, "cxx11_abi": None,
                         "gpu_toolkit": None}  # fmt: skip
        path = folder / name
        path.write_bytes(library + cell.id.encode())
        groups.setdefault(folder, []).append(
            ManifestEntry(
                file=name, dlpack="1.3", toolchain="stand-in", platform=platform_name,
                python=cell.python, size=path.stat().st_size, sha256=sha256_of(path),
                cell=cell.id, **described,
            )
        )  # fmt: skip
    for folder, entries in groups.items():
        write_manifest(folder / "manifest.json", entries)
    dist = work / "dist"
    spec = {folder: {e.file for e in entries} for folder, entries in groups.items()}
    wheels.assemble_dist(spec, dist, matrix=MATRIX, repair=False)
    return dist


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return standin_dist(tmp_path_factory.mktemp("standins"))


def test_the_stand_in_dist_has_one_variant_per_minor(standins: Path) -> None:
    names = sorted(p.name for p in standins.glob("*-cp39-abi3-*.whl"))
    assert [n.rsplit("-", 1)[-1] for n in names] == [
        "t24.whl", "t25.whl", "t26.whl", "t27.whl", "t28.whl", "t29.whl", "linux_x86_64.whl",
    ]  # fmt: skip
    # Free-threaded variants share the abi3 labels.
    assert sorted(p.name.rsplit("-", 1)[-1] for p in standins.glob("*cp313t*-t*.whl")) == [
        "t27.whl", "t28.whl", "t29.whl",
    ]  # fmt: skip


def test_uv_installs_keep_the_invariant(standins: Path, tmp_path: Path) -> None:
    """Every case of ``variant_cases``: each runs uv once and imports the package with the
    stand-in torch; ``run_variant_cases`` raises on the first broken case."""
    cases = variant_cases(collect(standins))
    # 6 minors + 2.10, cpu and cuda, 2.6 with both ABIs, 2 drivers, 2 modes, 2 sources.
    assert len(cases) == (7 + 1) * 2 * 2 * 2 * 2
    outcomes = run_variant_cases(standins, tmp_path, cases=cases)
    assert len(outcomes) == len(cases)
    by_mode: dict[str, set[str | None]] = {}
    for outcome in outcomes:
        by_mode.setdefault(outcome.case.mode, set()).add(outcome.label)
        kind, library = outcome.decided
        assert outcome.decided == outcome.combined, outcome
        if outcome.case.minor == "2.10":
            assert kind == "defer", outcome  # torch's own API
        else:
            # The library of the torch's own build and ABI, from the variant uv chose.
            abi = int(outcome.case.cxx11_abi)
            want = f"torch{outcome.case.minor}-{outcome.case.backend}-cxx11abi{abi}.so"
            assert kind == "load", outcome
            assert str(library).endswith(want), outcome
    # uv 0.13.10 skips abi_dependency: the combined wheel; emulated: the minor's variant.
    assert by_mode["uv"] <= {None, "t24", "t25", "t26", "t27", "t28", "t29"}
    assert by_mode["abi_dependency"] == {None, "t24", "t25", "t26", "t27", "t28", "t29"}


def _repack(dist: Path, minor: str, keep: Callable[[str], bool], work: Path) -> None:
    """Replace ``minor``'s abi3 variant with one holding only the libraries ``keep``
    accepts (unpack, drop, re-pack through the backend's one writer)."""
    from build_backend._metadata import project_metadata
    from build_backend._wheel import assemble_wheel
    from devtools.base.paths import ROOT

    (old,) = dist.glob(f"*-cp39-abi3-*-{variants.variant_label(minor)}.whl")
    unpacked = work / "unpacked"
    with zipfile.ZipFile(old) as archive:
        archive.extractall(unpacked)
    package = unpacked / "torch_c_dlpack_ext"
    entries = [e for e in load_manifest(package / "manifest.json") if keep(e.file)]
    old.unlink()
    assemble_wheel(
        dist,
        meta=project_metadata(ROOT),
        libraries=[(e, package / e.file) for e in entries],
        label=variants.variant_label(minor),
        variant_json=variants.variant_json(minor),
    )


def test_the_per_cell_layout_breaks_the_invariant(tmp_path: Path) -> None:
    """The seeded defect: the layout before issue 44 gave torch 2.8 a ``t28_cpu`` variant
    with the CPU library alone. Labelled ``t28`` so uv can select it with
    ``abi_dependency`` applied, a CUDA torch 2.8 gets "unavailable" (no bundled CUDA
    library) where the combined wheel loads the CUDA library: the run must say so."""
    dist = standin_dist(tmp_path / "work")
    _repack(dist, "2.8", lambda f: "torch2.8-cpu" in f, tmp_path)
    case = VariantCase("2.8.0+cu128", "cuda", True, False, "abi_dependency", "find-links")
    with pytest.raises(ReleaseError, match=r"with t28 the selector decided \('unavailable'"):
        run_variant_cases(dist, tmp_path / "cases", cases=[case])
    # uv as it is installs the combined wheel: the defect stays hidden there.
    hidden = VariantCase("2.8.0+cu128", "cuda", True, False, "uv", "find-links")
    (outcome,) = run_variant_cases(dist, tmp_path / "hidden", cases=[hidden])
    assert outcome.label is None
    assert outcome.decided[0] == "load"


def test_libraries_that_cannot_load_here_still_tell_variants_apart(tmp_path: Path) -> None:
    """The seeded defect of the per-cell layout again, in a dist whose libraries cannot
    load beside a stand-in torch (as a real build's cannot: no libc10 there, which is
    what the rehearsal's stand-in cases run on). Both wheels end "unavailable"; the
    selector's plans differ (the combined wheel's names the CUDA library, the variant's
    none), and the run must say so rather than count "unavailable" equal to itself."""
    dist = standin_dist(tmp_path / "work", library=b"\x7fELF cannot be loaded")
    _repack(dist, "2.8", lambda f: "torch2.8-cpu" in f, tmp_path)
    case = VariantCase("2.8.0+cu128", "cuda", True, False, "abi_dependency", "find-links")
    with pytest.raises(
        ReleaseError,
        match=r"with t28 the selector decided \('unavailable', None\) \(plan \['unavailable'.*"
        r"\('unavailable', None\) \(plan \['load', 'libs/libtorch_c_dlpack_ext-torch2\.8-cuda",
    ):
        run_variant_cases(dist, tmp_path / "cases", cases=[case])


def _uv_dry_run(links: Path, venv_python: Path) -> str:
    from devtools.base.steps import find_uv

    proc = subprocess.run(
        [find_uv(), "pip", "install", "-v", "--no-config", "--preview-features",
         "wheel-variants", "--python", str(venv_python), "--no-index", "--find-links",
         str(links), "--no-deps", "--dry-run", "torch-c-dlpack-ext"],
        env=clean_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_uv_reads_our_metadata_and_not_variantlibs(standins: Path, tmp_path: Path) -> None:
    """Our variants file: fetched and parsed (uv names the provider it skips), no unknown
    schema. The same file with variantlib 0.2.2's ``$schema``: uv says it does not know
    it (what every install logged before issue 44)."""
    links = tmp_path / "links"
    shutil.copytree(standins, links)
    index = next(links.glob("*-variants.json"))
    log = _uv_dry_run(links, Path(sys.executable))
    assert "Unknown variant metadata schema" not in log
    assert "Skipping unsupported wheel variant provider `abi_dependency`" in log
    data = json.loads(index.read_text("utf-8"))
    data["$schema"] = "https://variants-schema.wheelnext.dev/v0.2.0.json"
    index.write_text(json.dumps(data), "utf-8")
    assert "Unknown variant metadata schema" in _uv_dry_run(links, Path(sys.executable))


@pytest.mark.slow
def test_real_build_real_torch_28(
    tmp_path: Path, old_torch_env: Callable[[str], Any], build_cache: Path
) -> None:
    """The t28 cells compiled for real against PyPI's torch 2.8.0 (a CUDA 12.8 build),
    installed by uv into that torch's environment as it is and with ``abi_dependency``
    emulated, with and without a driver: the CUDA library loads from the variant."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "devtools", "build", "--cells",
         "linux_x86_64-t28_cpu,linux_x86_64-t28_cuda", "--no-freethreaded", "--out",
         str(dist), "--build-dir", str(build_cache / "cells")],
        env=devtools_env(), check=True, timeout=3600,
    )  # fmt: skip
    env = old_torch_env("2.8.0")
    cases = [
        VariantCase("2.8.0", "cuda", True, driver, mode, source)
        for driver in (False, True)
        for mode in ("uv", "abi_dependency")
        for source in ("index", "find-links")
    ]
    outcomes = run_variant_cases(dist, tmp_path / "cases", cases=cases, python=env.python,
                                 fake_torch=False)  # fmt: skip
    for outcome in outcomes:
        assert outcome.decided == ("load", "libtorch_c_dlpack_ext-torch2.8-cuda-cxx11abi1.so")
    assert {o.label for o in outcomes if o.case.mode == "abi_dependency"} == {"t28"}


def _documented_install() -> list[str]:
    """The uv command docs/releasing.md gives users of the release's own index."""
    import re
    import shlex

    from devtools.base.paths import ROOT

    text = (ROOT / "docs" / "releasing.md").read_text("utf-8")
    (line,) = re.findall(r"^uv pip install --preview-features wheel-variants .+$", text, re.M)
    return shlex.split(line)


def test_the_documented_install_command_reaches_the_variants(
    standins: Path, tmp_path: Path
) -> None:
    """docs/releasing.md's command, with the release's index on 127.0.0.1 (its variant
    metadata emulated for torch 2.8) and a PyPI stand-in holding the package's plain
    wheels, installs t28 however the user also reaches PyPI: as the default index, as
    an ``--extra-index-url`` for torch, or as the ``--index-url``. uv takes the package
    from the first index that has it and tries ``--extra-index-url`` first: the command
    once said ``--index-url <host>/simple`` (torch via ``--extra-index-url``), which gets
    PyPI's combined wheel (checked below too)."""
    from devtools.base.steps import find_uv
    from devtools.rehearse.indexserver import StaticIndexServer
    from devtools.rehearse.variantinstall import _source_folder
    from devtools.release.variantindex import write_simple_pages

    files = collect(standins)
    ours = _source_folder(files, tmp_path / "ours", "2.8")
    pypi = [w.path for w in files.wheels if not w.variant] + list(files.sdists)
    write_simple_pages(sorted(ours.iterdir()), tmp_path / "served" / "ours")
    write_simple_pages(pypi, tmp_path / "served" / "pypi")
    command = _documented_install()
    assert command[:3] == ["uv", "pip", "install"], command
    assert "<host>/simple" in command, command

    def label(default: str, *args: str) -> str | None:
        target = tmp_path / f"t{len(list(tmp_path.glob('t*')))}"
        proc = subprocess.run(
            [find_uv(), "pip", "install", "-v", "--no-config", "--python", sys.executable,
             "--target", str(target), "--no-deps", *args],
            env={**{k: v for k, v in clean_env().items() if not k.startswith("UV_")},
                 "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_DEFAULT_INDEX": default},
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "preview features are enabled: wheel-variants" in proc.stderr
        found = list(target.glob("*.dist-info/variant.json"))
        return next(iter(json.loads(found[0].read_text("utf-8"))["variants"])) if found else None

    with StaticIndexServer(tmp_path / "served") as server:
        url, index = f"{server.url}/ours/simple", f"{server.url}/pypi/simple"
        documented = [url if a == "<host>/simple" else a for a in command[3:]]
        assert label(index, *documented) == "t28"  # PyPI as the default index
        # torch's index added after the documented command's options ...
        assert label(index, *documented, "--extra-index-url", index) == "t28"
        assert label(index, *documented, "--index-url", index) == "t28"
        # ... and what the old advice gave: PyPI's combined wheel, no variant read.
        old = ["--preview-features", "wheel-variants", "--index-url", url,
               "--extra-index-url", index, "torch-c-dlpack-ext"]  # fmt: skip
        assert label(index, *old) is None


def test_torches_users_have_keep_the_invariant(standins: Path, tmp_path: Path) -> None:
    """Torches outside the CPU/CUDA release grid, as uv users have them: ROCm and XPU
    builds (told apart by ``torch.version.hip``/``.xpu``), local and dev versions
    (NVIDIA's containers, Debian, nightlies), minors outside the matrix (2.3, 2.12).
    Each is installed by uv as it is and with ``abi_dependency`` emulated; a matrix
    minor gets its variant, any other the combined wheel; the same decision either way."""
    torches = [
        ("2.9.1+rocm6.4", "rocm", True), ("2.6.0+rocm6.2.4", "rocm", False),
        ("2.8.0+xpu", "xpu", True), ("2.8.0a0+5228986c39.nv25.05", "cuda", True),
        ("2.8.0.dev20250601+cu128", "cuda", True), ("2.6.0+debian", "cpu", True),
        ("2.3.1+cu121", "cuda", False), ("2.12.0+cpu", "cpu", True),
    ]  # fmt: skip
    cases = [
        VariantCase(torch, backend, abi, False, mode, "find-links")
        for torch, backend, abi in torches
        for mode in ("uv", "abi_dependency")
    ]
    outcomes = {(o.case.torch, o.case.mode): o for o in run_variant_cases(
        standins, tmp_path, cases=cases)}  # fmt: skip
    emulated = {torch: outcomes[torch, "abi_dependency"] for torch, _, _ in torches}
    assert {t: o.label for t, o in emulated.items()} == {
        "2.9.1+rocm6.4": "t29", "2.6.0+rocm6.2.4": "t26", "2.8.0+xpu": "t28",
        "2.8.0a0+5228986c39.nv25.05": "t28", "2.8.0.dev20250601+cu128": "t28",
        "2.6.0+debian": "t26", "2.3.1+cu121": None, "2.12.0+cpu": None,
    }  # fmt: skip
    # A ROCm torch loads its minor's ROCm library from the variant, as from the
    # combined wheel; 2.12 defers to torch's own API.
    assert emulated["2.9.1+rocm6.4"].decided[0] == "load"
    assert str(emulated["2.9.1+rocm6.4"].decided[1]).endswith("torch2.9-rocm-cxx11abi1.so")
    assert emulated["2.12.0+cpu"].decided == ("defer", None)
    for outcome in outcomes.values():
        assert outcome.decided == outcome.combined, outcome
        assert outcome.plan == outcome.combined_plan, outcome
