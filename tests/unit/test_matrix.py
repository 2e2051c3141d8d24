"""matrix.toml and its one reader: pinned facts, derived cells, validation, CI's job matrix."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from devtools.errors import MatrixError
from devtools.matrix import load_matrix, parse_matrix
from tests.helpers import devtools_env

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import Backend

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "matrix"
MATRIX = load_matrix()


def _minor(name: str):  # type: ignore[no-untyped-def]
    return next(m for m in MATRIX.torch if m.minor == name)


def _cell(cell_id: str):  # type: ignore[no-untyped-def]
    (cell,) = MATRIX.select([cell_id])
    return cell


def test_torch_minors_and_releases_built_against() -> None:
    releases = {m.minor: m.release for m in MATRIX.torch}
    assert releases == {
        "2.4": "2.4.1",
        "2.5": "2.5.1",
        "2.6": "2.6.0",
        "2.7": "2.7.1",
        "2.8": "2.8.0",
        "2.9": "2.9.1",
    }


@pytest.mark.parametrize(
    ("minor", "pythons"),
    [
        # torch 2.4.1 also has cp38 wheels; requires-python >= 3.9 leaves 3.8 out.
        ("2.4", ("3.9", "3.10", "3.11", "3.12")),
        ("2.5", ("3.9", "3.10", "3.11", "3.12", "3.13")),
        ("2.6", ("3.9", "3.10", "3.11", "3.12", "3.13")),
        ("2.7", ("3.9", "3.10", "3.11", "3.12", "3.13")),
        ("2.8", ("3.9", "3.10", "3.11", "3.12", "3.13")),
        ("2.9", ("3.10", "3.11", "3.12", "3.13", "3.14")),
    ],
)
def test_pythons_per_torch_minor(minor: str, pythons: tuple[str, ...]) -> None:
    assert _minor(minor).python == pythons


def test_torch_29_has_no_cp39_and_24_no_cp313() -> None:
    assert not [c for c in MATRIX.cells() if c.torch.minor == "2.9" and c.python == "3.9"]
    assert not [c for c in MATRIX.cells() if c.torch.minor == "2.4" and c.python == "3.13"]


def test_torch_25_cp313_only_on_linux_x86_64() -> None:
    platforms = {
        c.platform.name for c in MATRIX.cells() if c.torch.minor == "2.5" and c.python == "3.13"
    }
    assert platforms == {"linux_x86_64"}


@pytest.mark.parametrize(
    ("cell_id", "abi"),
    [
        ("cp311-linux_x86_64-t24_cuda", False),
        ("cp311-linux_x86_64-t25_cpu", False),
        ("cp311-linux_x86_64-t26_cuda_abi0", False),
        ("cp311-linux_x86_64-t26_cuda_abi1", True),
        ("cp311-linux_x86_64-t27_cuda", True),
        ("cp311-linux_x86_64-t28_cpu", True),
        ("cp311-linux_x86_64-t29_cuda", True),
        ("cp311-linux_aarch64-t24_cpu", True),
        ("cp311-win_amd64-t28_cpu", None),
        ("cp311-macosx_11_0_arm64-t28_cpu", None),
    ],
)
def test_cxx11_abi_facts(cell_id: str, abi: bool | None) -> None:
    assert _cell(cell_id).cxx11_abi is abi


def test_pypi_26_is_pre_cxx11_and_comes_from_pypi() -> None:
    cell = _cell("cp311-linux_x86_64-t26_cuda_abi0")
    assert cell.wheel.index == "pypi"
    assert cell.toolkit == "12.4"
    assert cell.library == "libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi0.so"
    # The cxx11 flavour of 2.6 is PyTorch's own cu126 index, not PyPI.
    assert _cell("cp311-linux_x86_64-t26_cuda_abi1").wheel.index == "pytorch-cu126"


@pytest.mark.parametrize(
    ("minor", "cuda"),
    [
        ("2.4", "12.1"),
        ("2.5", "12.4"),
        ("2.6", "12.4"),
        ("2.7", "12.6"),
        ("2.8", "12.8"),
        ("2.9", "12.8"),
    ],
)
def test_pypi_cuda_version_per_torch(minor: str, cuda: str) -> None:
    wheel = next(w for w in _minor(minor).wheels if w.index == "pypi" and w.backend is Backend.CUDA)
    assert wheel.toolkit == cuda
    assert any(
        r.startswith(f"nvidia-cuda-runtime-cu12=={cuda}.") for r in wheel.toolkit_requirements
    )


def test_cpu_only_platforms_have_no_gpu_cells() -> None:
    for cell in MATRIX.cells():
        if cell.platform.name in ("win_amd64", "macosx_11_0_arm64"):
            assert cell.backend is Backend.CPU, cell.id
        if cell.backend is Backend.ROCM:
            assert cell.platform.name == "linux_x86_64"
            assert cell.wheel.index_url.startswith("https://download.pytorch.org/whl/rocm")


def test_gpu_flavours_also_yield_their_cpu_library() -> None:
    ids = {c.id for c in MATRIX.cells()}
    for cell in MATRIX.cells():
        if cell.backend is not Backend.CPU:
            assert cell.id.replace(f"_{cell.backend.value}", "_cpu") in ids


def test_cell_ids_unique_and_labels_valid() -> None:
    cells = MATRIX.cells()
    assert len({c.id for c in cells}) == len(cells)
    label_re = re.compile(r"[0-9a-z._]{1,16}")  # PEP 825: charset and at most 16 characters
    for cell in cells:
        assert label_re.fullmatch(cell.label), cell.label
        assert cell.label != "null"


def test_abi_suffix_only_where_a_minor_has_both_abis() -> None:
    labels = {c.label for c in MATRIX.select(python=["3.11"], platform=["linux_x86_64"])}
    assert "t26_cuda_abi0" in labels
    assert "t26_cuda_abi1" in labels
    assert "t28_cuda" in labels
    assert not any(label.startswith("t28_cuda_") for label in labels)


def test_default_selection_for_python_and_platform() -> None:
    cells = MATRIX.select(python=["3.11"], platform=["linux_x86_64"])
    assert {c.platform.name for c in cells} == {"linux_x86_64"}
    assert {c.python for c in cells} == {"3.11"}
    assert {c.torch.minor for c in cells} == {"2.4", "2.5", "2.6", "2.7", "2.8", "2.9"}


def test_select_patterns_and_typos() -> None:
    assert [c.id for c in MATRIX.select(["cp311-linux_x86_64-t2[45]_cpu"])] == [
        "cp311-linux_x86_64-t24_cpu",
        "cp311-linux_x86_64-t25_cpu",
    ]
    job = MATRIX.select(["cp312-win_amd64-cpu"])
    assert {c.job_id for c in job} == {"cp312-win_amd64-cpu"}
    assert len(job) == 6
    with pytest.raises(
        ConfigError, match=r"no matrix cell matches 'cp311-linux_x86_64-t28_cdua'.*did you mean"
    ) as typo:
        MATRIX.select(["cp311-linux_x86_64-t28_cdua"])
    message = str(typo.value)
    # A few close matches and how to list all, never the whole matrix on one line.
    assert "'cp311-linux_x86_64-t28_cuda'" in message
    assert "nox -s matrix -- --list" in message
    assert 1 <= message.count("'cp") - 1 <= 5
    assert len(message) < 400
    with pytest.raises(ConfigError) as nonsense:
        MATRIX.select(["nonsense" * 1000])
    assert "did you mean" not in str(nonsense.value)
    assert len(str(nonsense.value)) < 200
    with pytest.raises(ConfigError, match=r"python '3\.7'"):
        MATRIX.select(python=["3.7"])
    with pytest.raises(ConfigError, match="did you mean 'linux_x86_64'"):
        MATRIX.select(platform=["linux_x86-64"])


def test_jobs_group_cells_by_python_platform_backend() -> None:
    jobs = MATRIX.jobs()
    by_id = {job["id"]: job for job in jobs}
    assert len(by_id) == len(jobs)
    job = by_id["cp311-linux_x86_64-cuda"]
    assert job["runner"] == "ubuntu-24.04"
    assert job["arch"] == "x86_64"
    assert job["cibw_build"] == "cp311-*"
    assert "cp311-linux_x86_64-t28_cuda" in job["cells"]
    assert "cp311-linux_x86_64-t28_cpu" in job["cells"]
    assert by_id["cp311-linux_x86_64-rocm6.4"]["image"].startswith("rocm/")
    assert job["allow_failure"] == ""
    assert by_id["cp311-linux_x86_64-rocm6.4"]["allow_failure"]
    covered = [cell for job in jobs for cell in job["cells"]]
    assert sorted(covered) == sorted(c.id for c in MATRIX.cells())


def test_nox_matrix_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from devtools.matrix import main

    assert main(["--only", "cp311-linux_x86_64-*"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {job["id"] for job in data["include"]} == {
        "cp311-linux_x86_64-cuda",
        "cp311-linux_x86_64-rocm6.1",
        "cp311-linux_x86_64-rocm6.2",
        "cp311-linux_x86_64-rocm6.2.4",
        "cp311-linux_x86_64-rocm6.3",
        "cp311-linux_x86_64-rocm6.4",
    }
    out = tmp_path / "m.json"
    assert main(["--only", "cp39-macosx_11_0_arm64-cpu", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["include"][0]["runner"] == "macos-14"
    assert main(["--only", "nope"]) == 2


def test_no_cell_for_a_python_outside_requires_python() -> None:
    # The real matrix: every cell's Python is allowed by pyproject's requires-python.
    from packaging.specifiers import SpecifierSet

    assert MATRIX.requires_python is not None
    allowed = SpecifierSet(MATRIX.requires_python)
    assert all(f"{c.python}.0" in allowed for c in MATRIX.cells())
    # A matrix listing a Python the project does not support yields no cell for it.
    data = _fixture()
    data["torch"][0]["python"] = ["3.8", "3.11"]
    assert {c.python for c in parse_matrix(data).cells()} == {"3.8", "3.11"}
    matrix = parse_matrix(data, requires_python=">=3.9")
    assert {c.python for c in matrix.cells()} == {"3.11"}
    assert matrix.pythons() == ("3.11",)
    assert {job["python"] for job in matrix.jobs()} == {"3.11"}
    with pytest.raises(ConfigError, match=r"python '3\.8' is outside requires-python '>=3\.9'"):
        matrix.select(python=["3.8"])
    with pytest.raises(ConfigError, match=r"Python 3\.8 is outside requires-python '>=3\.9'"):
        matrix.select(["cp38-linux_x86_64-t26_cpu_abi0"])
    with pytest.raises(ConfigError, match="outside requires-python"):
        MATRIX.select(["cp38-linux_x86_64-t24_cpu"])


def test_rocm_builder_image_per_declared_rocm_version() -> None:
    # D9: each ROCm library is built in an image of the ROCm version it is labelled
    # with (matrix toolkit -> variant property amd :: rocm_version), one job per image.
    rocm = [c for c in MATRIX.cells() if c.backend is Backend.ROCM]
    assert rocm
    for cell in rocm:
        assert cell.image is not None
        assert f"rocm{cell.toolkit}-" in cell.image, (cell.id, cell.image)
        assert cell.job_id.endswith(f"-rocm{cell.toolkit}")
        assert cell.allow_failure
    jobs = MATRIX.jobs()
    for job in jobs:
        images = {c.image for c in MATRIX.select(job["cells"])}
        assert images == {job["image"] or None}, job["id"]


def test_every_job_image_is_pinned_and_from_the_matrix() -> None:
    for job in MATRIX.jobs():
        platform = MATRIX.platforms[job["platform"]]
        if platform.os != "linux":
            assert job["image"] == ""
        elif job["backend"] != "rocm":
            assert job["image"] == platform.image
            assert re.search(r":\d{4}\.\d{2}\.\d{2}-\d+$", job["image"]), job["image"]


# --- validation -----------------------------------------------------------------


def _fixture() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((FIXTURES / "minimal.toml").read_text(encoding="utf-8"))


def test_fixture_matrix_parses() -> None:
    matrix = parse_matrix(_fixture())
    assert [c.id for c in matrix.cells() if c.python == "3.11"] == [
        "cp311-linux_x86_64-t26_cuda_abi0",
        "cp311-linux_x86_64-t26_cpu_abi0",
        "cp311-linux_x86_64-t26_cuda_abi1",
        "cp311-linux_x86_64-t26_cpu_abi1",
    ]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d.update(schem=1),
            r"unknown key 'schem' in the top level \(did you mean 'schema'\?\)",
        ),
        (
            lambda d: d["torch"][0]["wheel"][0].update(index="pypy"),
            r"index = 'pypy' is not known \(did you mean 'pypi'\?\)",
        ),
        (lambda d: d["torch"][0]["wheel"][0].update(backend="cdua"), "unknown backend 'cdua'"),
        (
            lambda d: d["torch"][0]["wheel"][0].update(platforms=["linux_x86-64"]),
            "did you mean 'linux_x86_64'",
        ),
        (lambda d: d["torch"][0]["wheel"][0].pop("cxx11_abi"), "does not say its C\\+\\+ ABI"),
        (lambda d: d["torch"][0]["wheel"][0].pop("toolkit"), "needs toolkit"),
        (lambda d: d["torch"][0].update(release="2.7.0"), "is not a 2.6.x release"),
        (lambda d: d["torch"][0].update(pyhton=["3.11"]), "did you mean 'python'"),
        (lambda d: d["torch"].append(dict(d["torch"][0])), "listed twice"),
        (lambda d: d["platforms"]["linux_x86_64"].update(os="linnux"), "did you mean 'linux'"),
        (lambda d: d["indexes"].update(pypi="http://pypi.org/simple"), "must be an https:// URL"),
        (lambda d: d.update(schema=2), "schema 2"),
        (
            lambda d: d.update(backends={"cuda": {"images": {"12.4": "img:1"}}}),
            r"torch 2\.6 cuda 12\.6 \(other\) has no builder image",
        ),
        (lambda d: d.update(backends={"cuda": {"images": {"12.4": ""}}}), "must be a table"),
        (lambda d: d.update(backends={"cuda": {"image": "x"}}), "did you mean 'images'"),
    ],
)
def test_validation_errors(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = _fixture()
    mutate(data)
    with pytest.raises(MatrixError, match=message):
        parse_matrix(data)


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="cannot read"):
        load_matrix(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("schema = [", encoding="utf-8")
    with pytest.raises(MatrixError, match="not valid TOML"):
        load_matrix(bad)


def test_devtools_matrix_is_the_only_reader() -> None:
    root = Path(__file__).resolve().parents[2]
    readers = []
    for folder in ("python", "devtools", "build_backend", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            # A path to matrix.toml being built (messages may name the file freely).
            if re.search(r"""/\s*["']matrix\.toml["']|Path\(\s*["'][^"']*matrix\.toml""", text):
                readers.append(path.relative_to(root).as_posix())
    assert readers == ["devtools/matrix.py"]


def test_nox_matrix_runs_without_importing_the_package() -> None:
    # `nox -s matrix` in CI (python -m devtools.matrix, PYTHONPATH=python): the package
    # is never imported (no selection, no warning about a checkout with nothing to load),
    # and neither is torch.
    import subprocess

    root = Path(__file__).resolve().parents[2]
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['matrix', '--only', 'cp311-win_amd64-t28_cpu', '--list']\n"
        "try:\n"
        "    runpy.run_module('devtools.matrix', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", probe + "print('torch' in sys.modules, "
         "any(m.split('.')[0] == 'torch_c_dlpack_ext' for m in sys.modules))"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
        env=devtools_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cp311-win_amd64-t28_cpu", "False", "False"]
    assert proc.stderr == ""
