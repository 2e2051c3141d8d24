"""`nox -s build`'s artifacts with real installers: pip picks and installs the right wheel,
and the installed package makes the right decision in real torch environments.

CI cost is bounded: two CPU cells (torch 2.8, cxx11 ABI; torch 2.6, pre-cxx11) are
compiled, once, into the test build cache (the driver's cache key makes re-runs
no-ops); dist/ is assembled twice to check byte-for-byte reproducibility.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import ROOT, clean_env, devtools_env

pytestmark = pytest.mark.slow

PLATFORM = "linux_x86_64"
#: Two C++ ABIs, each with its CPU and CUDA library (a CUDA torch is served by the one
#: of its backend, whichever rule the selector applies).
LABELS = ("t28_cpu", "t26_cpu_abi0", "t28_cuda", "t26_cuda_abi0")
CELLS = tuple(f"{PLATFORM}-{label}" for label in LABELS)
EPOCH = "1700000000"
#: variantlib's command line (the package has no ``__main__``).
VARIANTLIB = [sys.executable, "-c", "import sys; from variantlib.commands.main import main; main()"]

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("the test cells are linux_x86_64 cells", allow_module_level=True)


def _run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        cmd,
        env=env or clean_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _build(out: Path, build_dir: Path) -> None:
    _run(
        [sys.executable, "-m", "devtools", "build", "--cells", ",".join(CELLS), "--out", str(out),
         "--build-dir", str(build_dir)],
        env=devtools_env(SOURCE_DATE_EPOCH=EPOCH),
        cwd=ROOT,
    )  # fmt: skip


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> tuple[Path, Path]:
    """dist/ built twice from the same libraries (the second build compiles nothing)."""
    first = tmp_path_factory.mktemp("dist-a")
    second = tmp_path_factory.mktemp("dist-b")
    _build(first, build_cache / "cells")
    _build(second, build_cache / "cells")
    return first, second


@pytest.fixture(scope="module")
def dist(dists: tuple[Path, Path]) -> Path:
    return dists[0]


def _combined(dist: Path) -> Path:
    (path,) = [p for p in dist.glob("*-cp39-abi3-manylinux_*.whl") if p.stem.endswith("x86_64")]
    return path


@pytest.fixture(scope="module")
def deps_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's runtime requirements as wheels, so installs can use --no-index."""
    house = tmp_path_factory.mktemp("wheelhouse")
    _run([sys.executable, "-m", "pip", "download", "--isolated", "--only-binary", ":all:",
          "-d", str(house), "packaging>=24", "filelock>=3.12"])  # fmt: skip
    return house


def _pip_install(target: Path, *args: str) -> None:
    # --isolated: the machine-wide pip settings (extra indexes, find-links) must not apply.
    _run([sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--target",
          str(target), *args])  # fmt: skip


def _diagnose(python: Path | str, target: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [str(python), "-m", "torch_c_dlpack_ext", "--json"],
        env=clean_env(PYTHONPATH=str(target)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    assert Path(report["package"]["path"]).is_relative_to(target), report["package"]
    return report


def test_dist_holds_every_artifact(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    version = "0.2.0"
    assert f"torch_c_dlpack_ext-{version}-py3-none-any.whl" in names
    assert f"torch_c_dlpack_ext-{version}.tar.gz" in names
    assert f"torch_c_dlpack_ext-{version}-variants.json" in names
    # One variant per torch minor (issue 44), each with all of its minor's libraries.
    variants = sorted(n for n in names if n.endswith(("-t26.whl", "-t28.whl")))
    assert len(variants) == 2
    # One wheel for every CPython >= 3.9: abi3, never one CPython's tag.
    assert all("-cp39-abi3-manylinux_" in n for n in variants), variants
    with zipfile.ZipFile(_combined(dist)) as archive:
        top = {n.split("/")[0] for n in archive.namelist()}
        # The package and, beside it, its building blocks (no import side effects).
        assert top == {
            "torch_c_dlpack_ext",
            "_torch_c_dlpack_ext_core",
            f"torch_c_dlpack_ext-{version}.dist-info",
        }
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        assert sorted(e["file"] for e in manifest["libraries"]) == [
            "libs/libtorch_c_dlpack_ext-portable.so",
            "libs/libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi0.so",
            "libs/libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi0.so",
            "libs/libtorch_c_dlpack_ext-torch2.8-cpu-cxx11abi1.so",
            "libs/libtorch_c_dlpack_ext-torch2.8-cuda-cxx11abi1.so",
        ]
        assert {e["python"] for e in manifest["libraries"]} == {"abi3"}
        assert "torch_c_dlpack_ext/csrc/exchange_api.cc" in archive.namelist()
        assert (
            "Root-Is-Purelib: false"
            in archive.read(f"torch_c_dlpack_ext-{version}.dist-info/WHEEL").decode()
        )


def test_reproducible_byte_for_byte(dists: tuple[Path, Path]) -> None:
    def digests(directory: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}

    first, second = dists
    assert digests(first) == digests(second)
    # combined, universal, two variants (t26, t28), the variants file, the sdist
    assert len(digests(first)) == 6


def test_twine_and_check_wheel_contents(dist: Path) -> None:
    plain = [str(p) for p in dist.glob("*.whl") if p.stem.count("-") == 4]
    assert len(plain) == 2  # combined + universal; variant names are not PEP 427 names
    _run(
        [
            sys.executable,
            "-m",
            "twine",
            "check",
            "--strict",
            *plain,
            *map(str, dist.glob("*.tar.gz")),
        ]
    )
    # pyproject's [tool.check-wheel-contents] applies (run from the project root).
    _run([sys.executable, "-m", "check_wheel_contents", *plain], cwd=ROOT)


def test_variant_wheels_hold_the_invariant(dist: Path) -> None:
    """Real libraries: each variant is its minor's part of the combined wheel, and the
    selector decides with it as with the combined wheel (``verify``'s variant check)."""
    from devtools.build.variants import check_metadata
    from devtools.release.variantcheck import check_variants

    lines = check_variants(dist)
    # The variants file (it lists exactly the wheels' labels), then t26 and t28.
    assert len(lines) == 3, lines
    assert lines[0].endswith("lists exactly the 2 variant labels, as the wheels do"), lines
    for wheel in dist.glob("*-t2*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith("variant.json"))
            data = check_metadata(json.loads(archive.read(name)), wheel.name)
        torch = "2.8" if wheel.name.endswith("-t28.whl") else "2.6"
        assert data["variants"] == {f"t{torch.replace('.', '')}": {
            "abi_dependency": {"torch": [torch]}}}  # fmt: skip


def test_pip_ignores_variant_wheels(dist: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    _run([sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--find-links",
          str(dist), "--dry-run", "--ignore-installed", "--no-deps", "--report", str(report),
          "torch-c-dlpack-ext"])  # fmt: skip
    (chosen,) = json.loads(report.read_text())["install"]
    assert chosen["download_info"]["url"].endswith(_combined(dist).name)


@pytest.mark.parametrize(
    "case",
    [("2.8.0", "torch2.8", "cxx11abi1"), ("2.6.0", "torch2.6", "cxx11abi0")],
    ids=["torch2.8", "torch2.6"],
)
def test_combined_wheel_loads_in_old_torch(
    dist: Path,
    deps_wheelhouse: Path,
    tmp_path: Path,
    old_torch_env: Callable[[str], Any],
    case: tuple[str, str, str],
) -> None:
    torch, minor, abi = case
    env = old_torch_env(torch)
    target = tmp_path / "site"
    _pip_install(target, "--find-links", str(dist), "--find-links", str(deps_wheelhouse),
                 "torch-c-dlpack-ext")  # fmt: skip
    assert not list(target.glob("*.dist-info/variant.json"))
    report = _diagnose(env.python, target)
    assert report["decision"]["kind"] == "load", report["decision"]
    # The library of the backend the selector describes this torch with (PyPI's torch is
    # a CUDA build), of its minor and C++ ABI.
    backend = report["torch"]["backend"]
    library = f"libtorch_c_dlpack_ext-{minor}-{backend}-{abi}.so"
    assert Path(report["decision"]["library"]).name == library


def test_combined_wheel_defers_on_torch_213(
    dist: Path, deps_wheelhouse: Path, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    target = tmp_path / "site"
    _pip_install(target, "--no-deps", "--find-links", str(dist), "torch-c-dlpack-ext")
    assert _diagnose(sys.executable, target)["decision"]["kind"] == "defer"


def _install_universal(dist: Path, deps_wheelhouse: Path, target: Path) -> None:
    (universal,) = dist.glob("*-py3-none-any.whl")
    _pip_install(target, "--find-links", str(deps_wheelhouse), str(universal))
    manifest = json.loads((target / "torch_c_dlpack_ext" / "manifest.json").read_text())
    assert manifest["libraries"] == []


def test_universal_wheel_explains_on_old_torch(
    dist: Path, deps_wheelhouse: Path, tmp_path: Path, old_torch_env: Callable[[str], Any]
) -> None:
    _install_universal(dist, deps_wheelhouse, tmp_path / "site")
    report = _diagnose(old_torch_env("2.8.0").python, tmp_path / "site")
    assert report["decision"]["kind"] == "unavailable", report["decision"]
    assert report["decision"]["reason"]
    assert report["decision"]["remedy"]


def test_universal_wheel_defers_on_torch_213(
    dist: Path, deps_wheelhouse: Path, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    _install_universal(dist, deps_wheelhouse, tmp_path / "site")
    assert _diagnose(sys.executable, tmp_path / "site")["decision"]["kind"] == "defer"


def test_assemble_from_job_wheels_reproduces_dist(dist: Path, tmp_path: Path) -> None:
    """CI's assemble step (`nox -s build -- --assemble-from DIR`) merges job wheels into
    the same artifacts `nox -s build` writes locally."""
    jobs = tmp_path / "cells"
    jobs.mkdir()
    # One job wheel per torch minor (as cibuildwheel jobs would upload): a variant's
    # libraries (both backends and the portable table; the two jobs' copies of the
    # portable table are byte-identical, as the assemble step requires).
    combined = _combined(dist)
    for variant in sorted(dist.glob("*-t2*.whl")):
        job_dir = jobs / variant.name.rsplit("-", 1)[-1].removesuffix(".whl")
        job_dir.mkdir()
        (job_dir / combined.name).write_bytes(_strip_variant(variant))
    out = tmp_path / "out"
    assemble = [sys.executable, "-m", "devtools", "build", "--assemble-from", str(jobs)]
    _run(
        [*assemble, "--out", str(out)],
        env=devtools_env(SOURCE_DATE_EPOCH=EPOCH),
        cwd=ROOT,
    )
    for name in [p.name for p in dist.iterdir()]:
        assert (out / name).read_bytes() == (dist / name).read_bytes(), name


def _strip_variant(wheel: Path) -> bytes:
    """A job wheel: the variant wheel's content without its variant.json."""
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(buffer, "w") as target:
        for info in source.infolist():
            if info.filename.endswith("variant.json"):
                continue
            data = source.read(info)
            if info.filename.endswith("RECORD"):
                data = b"".join(
                    line + b"\n" for line in data.splitlines() if b"variant.json" not in line
                )
            target.writestr(info, data)
    return buffer.getvalue()
