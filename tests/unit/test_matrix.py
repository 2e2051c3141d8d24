"""matrix.toml and its one reader: pinned facts, derived cells, validation, CI's job matrix."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from devtools.base.errors import MatrixError
from devtools.matrix.reader import load_matrix, parse_matrix
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


def test_no_cpython_version_in_a_cell() -> None:
    # One abi3 library per (platform, torch minor, backend, ABI) serves every CPython
    # with the GIL; the torch minor's CPythons only bound it.
    for cell in MATRIX.cells():
        assert not re.search(r"(^|-)cp3\d+-", cell.id), cell.id
        if not cell.freethreaded:
            assert cell.python == "abi3"
            assert not cell.id.endswith("t")
    assert _cell("linux_x86_64-t29_cpu").pythons == ("3.10", "3.11", "3.12", "3.13", "3.14")
    assert _cell("linux_x86_64-t24_cpu").pythons == ("3.9", "3.10", "3.11", "3.12")
    # torch 2.5.1 has cp313 wheels for Linux x86_64 only.
    assert "3.13" in _cell("linux_x86_64-t25_cpu").pythons
    assert "3.13" not in _cell("linux_aarch64-t25_cpu").pythons


def test_one_abi3_cell_per_platform_minor_backend_abi() -> None:
    keys = [
        (c.platform.name, c.torch.minor, c.backend, c.cxx11_abi)
        for c in MATRIX.cells()
        if not c.freethreaded
    ]
    assert len(keys) == len(set(keys))
    linux = [c.id for c in MATRIX.select(python=["abi3"], platform=["linux_x86_64"])]
    assert len(linux) == 20  # 2.4-2.9: cuda + cpu (2.6 twice: both ABIs) + one rocm each


@pytest.mark.parametrize(
    ("platform", "freethreaded"),
    [
        # Checked against PyPI's wheel tags (matrix.toml's provenance).
        ("linux_x86_64", {"2.7": ["3.13t"], "2.8": ["3.13t"], "2.9": ["3.13t", "3.14t"]}),
        ("linux_aarch64", {"2.7": ["3.13t"], "2.8": ["3.13t"], "2.9": ["3.13t", "3.14t"]}),
        ("win_amd64", {"2.7": ["3.13t"], "2.8": ["3.13t"], "2.9": ["3.13t", "3.14t"]}),
        (
            "macosx_11_0_arm64",
            {"2.6": ["3.13t"], "2.7": ["3.13t"], "2.8": ["3.13t"], "2.9": ["3.13t", "3.14t"]},
        ),
    ],
)
def test_free_threaded_cells_where_torch_ships_free_threaded_wheels(
    platform: str, freethreaded: dict[str, list[str]]
) -> None:
    found: dict[str, set[str]] = {}
    for cell in MATRIX.select(platform=[platform]):
        if cell.freethreaded:
            found.setdefault(cell.torch.minor, set()).add(cell.python)
            assert cell.id.endswith(f"-cp{cell.python.replace('.', '')}")
            assert cell.wheel.index == "pypi", cell.id  # other indexes: not checked
    assert found == {minor: set(values) for minor, values in freethreaded.items()}


def test_free_threaded_cell_identity() -> None:
    cell = _cell("linux_x86_64-t29_cpu-cp314t")
    assert cell.python == "3.14t"
    assert cell.python_tag == "cp314t"
    assert cell.label == "t29_cpu"  # the label carries no Python: the wheel tags do
    assert cell.job_id == "linux_x86_64-cuda-cp314t"
    assert cell.library == _cell("linux_x86_64-t29_cpu").library


@pytest.mark.parametrize(
    ("cell_id", "abi"),
    [
        ("linux_x86_64-t24_cuda", False),
        ("linux_x86_64-t25_cpu", False),
        ("linux_x86_64-t26_cuda_abi0", False),
        ("linux_x86_64-t26_cuda_abi1", True),
        ("linux_x86_64-t27_cuda", True),
        ("linux_x86_64-t28_cpu", True),
        ("linux_x86_64-t29_cuda", True),
        ("linux_x86_64-t29_cuda-cp314t", True),
        # Read from PyPI's aarch64 wheels (TorchConfig.cmake, libc10.so): 2.4.1 and 2.5.1
        # are pre-cxx11 builds, 2.6.0 on cxx11 (docs/facts.md, "aarch64").
        ("linux_aarch64-t24_cpu", False),
        ("linux_aarch64-t25_cpu", False),
        ("linux_aarch64-t26_cpu", True),
        ("win_amd64-t28_cpu", None),
        ("macosx_11_0_arm64-t28_cpu", None),
    ],
)
def test_cxx11_abi_facts(cell_id: str, abi: bool | None) -> None:
    assert _cell(cell_id).cxx11_abi is abi


def test_pypi_26_is_pre_cxx11_and_comes_from_pypi() -> None:
    cell = _cell("linux_x86_64-t26_cuda_abi0")
    assert cell.wheel.index == "pypi"
    assert cell.toolkit == "12.4"
    assert cell.library == "libtorch_c_dlpack_ext-torch2.6-cuda-cxx11abi0.so"
    # The cxx11 flavour of 2.6 is PyTorch's own cu126 index, not PyPI.
    assert _cell("linux_x86_64-t26_cuda_abi1").wheel.index == "pytorch-cu126"


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
    labels = {c.label for c in MATRIX.select(platform=["linux_x86_64"])}
    assert "t26_cuda_abi0" in labels
    assert "t26_cuda_abi1" in labels
    assert "t28_cuda" in labels
    assert not any(label.startswith("t28_cuda_") for label in labels)


def test_platform_selection_holds_every_torch_minor_and_python_abi() -> None:
    cells = MATRIX.select(platform=["linux_x86_64"])
    assert {c.platform.name for c in cells} == {"linux_x86_64"}
    assert {c.python for c in cells} == {"abi3", "3.13t", "3.14t"}
    assert {c.torch.minor for c in cells} == {"2.4", "2.5", "2.6", "2.7", "2.8", "2.9"}
    assert {c.python for c in MATRIX.select(python=["3.14t"])} == {"3.14t"}


def test_select_patterns_and_typos() -> None:
    assert [c.id for c in MATRIX.select(["linux_x86_64-t2[45]_cpu"])] == [
        "linux_x86_64-t24_cpu",
        "linux_x86_64-t25_cpu",
    ]
    job = MATRIX.select(["win_amd64-cpu"])
    assert {c.job_id for c in job} == {"win_amd64-cpu"}
    assert len(job) == 6
    assert {c.id for c in MATRIX.select(["*-cp314t"])} == {
        c.id for c in MATRIX.cells() if c.python == "3.14t"
    }
    with pytest.raises(
        ConfigError, match=r"no matrix cell matches 'linux_x86_64-t28_cdua'.*did you mean"
    ) as typo:
        MATRIX.select(["linux_x86_64-t28_cdua"])
    message = str(typo.value)
    # A few close matches and how to list all, never the whole matrix on one line.
    assert "'linux_x86_64-t28_cuda'" in message
    assert "nox -s matrix -- --list" in message
    assert 1 <= message.count("'linux") - 1 <= 5
    assert len(message) < 400
    with pytest.raises(ConfigError) as nonsense:
        MATRIX.select(["nonsense" * 1000])
    assert "did you mean" not in str(nonsense.value)
    assert len(str(nonsense.value)) < 200
    # The ids before abi3 named a CPython: say why they match nothing now.
    with pytest.raises(ConfigError, match=r"carry no CPython version any more"):
        MATRIX.select(["cp311-linux_x86_64-t28_cpu"])
    with pytest.raises(ConfigError, match=r"python '3\.11' is no Python ABI"):
        MATRIX.select(python=["3.11"])
    with pytest.raises(ConfigError, match="did you mean 'linux_x86_64'"):
        MATRIX.select(platform=["linux_x86-64"])


def test_jobs_one_per_platform_and_flavour_plus_free_threaded() -> None:
    jobs = MATRIX.jobs()
    by_id = {job["id"]: job for job in jobs}
    assert len(by_id) == len(jobs)
    assert sorted(by_id) == [
        "linux_aarch64-cpu",
        "linux_aarch64-cpu-cp314t",
        "linux_aarch64-cuda",
        "linux_x86_64-cuda",
        "linux_x86_64-cuda-cp314t",
        "linux_x86_64-rocm6.1",
        "linux_x86_64-rocm6.2",
        "linux_x86_64-rocm6.2.4",
        "linux_x86_64-rocm6.3",
        "linux_x86_64-rocm6.4",
        "macosx_11_0_arm64-cpu",
        "macosx_11_0_arm64-cpu-cp314t",
        "win_amd64-cpu",
        "win_amd64-cpu-cp314t",
    ]
    job = by_id["linux_x86_64-cuda"]
    assert job["runner"] == "ubuntu-24.04"
    assert job["arch"] == "x86_64"
    # The newest CPython every torch minor of the job supports (2.4: <= 3.12; 2.9: >= 3.10).
    assert job["python"] == "3.12"
    assert job["cibw_build"] == "cp312-*"
    assert "linux_x86_64-t28_cuda" in job["cells"]
    assert "linux_x86_64-t28_cpu" in job["cells"]
    assert job["torch"]["2.4"] == ["3.9", "3.10", "3.11", "3.12"]
    assert job["torch"]["2.9"] == ["3.10", "3.11", "3.12", "3.13", "3.14"]
    free = by_id["linux_x86_64-cuda-cp314t"]
    assert free["python"] == "3.14t"
    assert free["cibw_build"] == "cp314t-*"
    assert free["cells"] == ["linux_x86_64-t29_cuda-cp314t", "linux_x86_64-t29_cpu-cp314t"]
    assert free["torch"] == {"2.9": ["3.14t"]}
    assert by_id["linux_x86_64-rocm6.4"]["image"].startswith("rocm/")
    assert job["allow_failure"] == ""
    assert by_id["linux_x86_64-rocm6.4"]["allow_failure"]
    # Every cell is in one job, except those the release does not build (3.13t).
    covered = [cell for job in jobs for cell in job["cells"]]
    assert len(covered) == len(set(covered))
    assert sorted(covered) == sorted(c.id for c in MATRIX.cells() if c.python != "3.13t")


def test_cells_the_release_does_not_build_say_why() -> None:
    cell = _cell("linux_x86_64-t28_cpu-cp313t")
    assert "cibuildwheel" in cell.not_released
    assert not _cell("linux_x86_64-t29_cpu-cp314t").not_released
    assert MATRIX.jobs([cell]) == []


def test_nox_matrix_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from devtools.base.cli import main as devtools

    def main(argv: list[str]) -> int:
        return devtools(["matrix", *argv])

    assert main(["--only", "linux_x86_64-*"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {job["id"] for job in data["include"]} == {
        "linux_x86_64-cuda",
        "linux_x86_64-cuda-cp314t",
        "linux_x86_64-rocm6.1",
        "linux_x86_64-rocm6.2",
        "linux_x86_64-rocm6.2.4",
        "linux_x86_64-rocm6.3",
        "linux_x86_64-rocm6.4",
    }
    out = tmp_path / "m.json"
    assert main(["--only", "macosx_11_0_arm64-cpu", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["include"][0]["runner"] == "macos-14"
    assert main(["--only", "nope"]) == 2
    capsys.readouterr()
    # Cells only `nox -s build` makes: the job matrix says so instead of being empty.
    assert main(["--only", "*-cp313t"]) == MatrixError.exit_code
    assert "the release builds none of the 16 selected cell(s): cibuildwheel" in (
        capsys.readouterr().err
    )


def test_no_cell_for_a_python_outside_requires_python() -> None:
    # The real matrix: every Python it lists is allowed by pyproject's requires-python.
    from packaging.specifiers import SpecifierSet

    assert MATRIX.requires_python is not None
    allowed = SpecifierSet(MATRIX.requires_python)
    assert all(f"{p}.0" in allowed for c in MATRIX.cells() for p in c.pythons)
    # A matrix listing a Python the project does not support leaves it out of the cells'
    # Pythons (the abi3 floor); a torch minor with no supported Python yields no cell.
    data = _fixture()
    data["torch"][0]["python"] = ["3.8", "3.11"]
    assert {p for c in parse_matrix(data).cells() for p in c.pythons} == {"3.8", "3.11"}
    matrix = parse_matrix(data, requires_python=">=3.9")
    assert {p for c in matrix.cells() for p in c.pythons} == {"3.11"}
    assert matrix.pythons() == ("3.11",)
    assert {job["python"] for job in matrix.jobs()} == {"3.11"}
    data["torch"][0]["python"] = ["3.8"]
    assert parse_matrix(data, requires_python=">=3.9").cells() == ()


def test_rocm_builder_image_per_declared_rocm_version() -> None:
    # D9: each ROCm library is built in an image of the ROCm version it is labelled
    # with (matrix toolkit -> the manifest's gpu_toolkit), one job per image.
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
    assert [c.id for c in matrix.cells()] == [
        "linux_x86_64-t26_cuda_abi0",
        "linux_x86_64-t26_cpu_abi0",
        "linux_x86_64-t26_cuda_abi1",
        "linux_x86_64-t26_cpu_abi1",
    ]


def test_fixture_free_threaded_cells_and_release_table() -> None:
    data = _fixture()
    data["torch"][0]["freethreaded"] = ["3.14t"]
    data["torch"][0]["wheel"][1]["freethreaded"] = False
    data["freethreaded"] = {"3.14t": {"release": False, "reason": "not yet"}}
    matrix = parse_matrix(data)
    free = [c for c in matrix.cells() if c.freethreaded]
    # Only the flavour whose index ships them (the second one opted out).
    assert [c.id for c in free] == [
        "linux_x86_64-t26_cuda_abi0-cp314t",
        "linux_x86_64-t26_cpu_abi0-cp314t",
    ]
    assert {c.not_released for c in free} == {"not yet"}
    assert all("cp314t" not in job["id"] for job in matrix.jobs())


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
        (lambda d: d.update(backends={"cuda": 3}), r"\[backends\.cuda\] must be a table"),
        (
            lambda d: d["platforms"].update(linux_x86_64="x"),
            r"\[platforms\.linux_x86_64\] must be a table",
        ),
        # Not a table where one is expected: an error naming it, never a crash.
        (lambda d: d.update(platforms=["linux_x86_64"]), r"\[platforms\] must be a table"),
        (lambda d: d.update(indexes="pypi"), r"\[indexes\] must be a table"),
        (lambda d: d.update(backends=3), r"\[backends\] must be a table"),
        (lambda d: d["torch"][0].update(freethreaded=["3.14"]), "free-threaded CPythons"),
        (lambda d: d["torch"][0].update(freethreaded="3.14t"), "free-threaded CPythons"),
        (lambda d: d["torch"][0]["wheel"][0].update(freethreaded="no"), "true or false"),
        (
            lambda d: d.update(freethreaded={"3.13t": {"release": True}}),
            r"\[freethreaded\.\"3\.13t\"\] name = '3\.13t' is not known",
        ),
        (
            lambda d: (
                d["torch"][0].update(freethreaded=["3.13t"]),
                d.update(freethreaded={"3.13t": {"release": False}}),
            ),
            "needs reason",
        ),
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
    assert readers == ["devtools/matrix/reader.py"]


def test_nox_matrix_runs_without_importing_the_package() -> None:
    # `nox -s matrix` in CI (python -m devtools matrix, PYTHONPATH=python): the package
    # is never imported (no selection, no warning about a checkout with nothing to load),
    # and neither is torch.
    import subprocess

    root = Path(__file__).resolve().parents[2]
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['devtools', 'matrix', '--only', 'win_amd64-t28_cpu', '--list']\n"
        "try:\n"
        "    runpy.run_module('devtools', run_name='__main__')\n"
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
    assert proc.stdout.split() == ["win_amd64-t28_cpu", "False", "False"]
    assert proc.stderr == ""


@pytest.mark.parametrize(
    ("python", "requires", "inside"),
    [
        ("3.9", ">=3.9", True),
        ("3.8", ">=3.9", False),
        ("3.14t", ">=3.9", True),  # a free-threaded Python as its GIL twin
        ("3.13t", ">=3.9,<3.13", False),
        ("3.8", None, True),  # no requires-python: no bound
    ],
)
def test_python_within_requires_python(python: str, requires: str | None, inside: bool) -> None:
    from devtools.matrix.tables import python_within

    assert python_within(python, requires) is inside
    # The matrix asks the same question of the project's requires-python (>=3.9).
    assert load_matrix().supports_python(python) is python_within(python, ">=3.9")
