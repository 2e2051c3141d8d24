"""The steps the release workflow runs through ``python -m devtools``: validating
``dist/``, the GitHub matrix from ``nox -s matrix``, the tag check, splitting the
variants index off the uploadable files."""

from __future__ import annotations

import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib
from devtools.base import cli, hostenv
from devtools.base.errors import MatrixError, ReleaseError
from devtools.release import cisteps, diagnose, distfiles, publish, verify
from tests.helpers import devtools_env

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry, dump_manifest
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.version import __version__

V = __version__


def _entry(torch: str, backend: Backend) -> ManifestEntry:
    return ManifestEntry(
        file=f"libs/libtorch_c_dlpack_ext-torch{torch}-{backend.value}-cxx11abi1.so",
        torch=torch,
        torch_build=f"{torch}.0",
        backend=backend,
        cxx11_abi=True,
        dlpack="1.3",
        toolchain="g++ 12.2.0",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python="abi3",
        size=1,
        sha256="0" * 64,
    )


def make_wheel(
    directory: Path,
    tag: str,
    *,
    version: str = V,
    entries: tuple[ManifestEntry, ...] = (),
    label: str | None = None,
) -> Path:
    name = f"torch_c_dlpack_ext-{version}-{tag}" + (f"-{label}" if label else "") + ".whl"
    path = directory / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch_c_dlpack_ext/__init__.py", "")
        if entries:
            archive.writestr("torch_c_dlpack_ext/manifest.json", dump_manifest(entries))
        if label:
            archive.writestr(f"torch_c_dlpack_ext-{version}.dist-info/variant.json", "{}")
    return path


def make_sdist(directory: Path, version: str = V) -> Path:
    path = directory / f"torch_c_dlpack_ext-{version}.tar.gz"
    with tarfile.open(path, "w:gz"):
        pass
    return path


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    cpu = _entry("2.8", Backend.CPU)
    make_wheel(tmp_path, "cp39-abi3-linux_x86_64", entries=(cpu, _entry("2.8", Backend.CUDA)))
    make_wheel(tmp_path, "cp39-abi3-linux_x86_64", entries=(cpu,), label="t28_cpu")
    make_wheel(tmp_path, "py3-none-any")
    make_sdist(tmp_path)
    (tmp_path / distfiles.variants_index_name()).write_text("{}")
    (tmp_path / f".{distfiles.variants_index_name()}.tmp").write_text("")  # half-written
    return tmp_path


def test_collect_classifies_every_file(dist: Path) -> None:
    files = distfiles.collect(dist)
    kinds = sorted(("universal" if w.universal else "variant" if w.variant else "combined")
                   for w in files.wheels)  # fmt: skip
    assert kinds == ["combined", "universal", "variant"]
    assert [p.name for p in files.sdists] == [f"torch_c_dlpack_ext-{V}.tar.gz"]
    assert files.variants_index == dist / distfiles.variants_index_name()
    combined = next(w for w in files.wheels if len(w.libraries) == 2)
    assert "cp39-abi3-linux_x86_64" in combined.tags
    assert combined.label is None
    (variant,) = [w for w in files.wheels if w.variant]
    assert variant.label == "t28_cpu"
    assert len(files.dists()) == 4
    without = files.dists(variant_wheels=False)
    assert len(without) == 3
    assert not any("t28_cpu" in p.name for p in without)


def test_stale_version_is_refused(dist: Path) -> None:
    make_wheel(dist, "py3-none-any", version="0.1.5")
    with pytest.raises(
        ReleaseError, match=r"version 0\.1\.5, but python/_torch_c_dlpack_ext_core/version\.py says"
    ):
        distfiles.collect(dist)


def test_foreign_files_are_refused(dist: Path) -> None:
    (dist / "notes.txt").write_text("x")
    with pytest.raises(ReleaseError, match=r"notes\.txt: not a wheel"):
        distfiles.collect(dist)


def test_variants_index_of_another_version_is_refused(dist: Path) -> None:
    (dist / "torch_c_dlpack_ext-0.1.5-variants.json").write_text("{}")
    with pytest.raises(ReleaseError, match="variants index of another version"):
        distfiles.collect(dist)


def test_universal_wheel_and_sdist_are_required(tmp_path: Path) -> None:
    make_wheel(tmp_path, "cp39-abi3-linux_x86_64", entries=(_entry("2.8", Backend.CPU),))
    make_sdist(tmp_path)
    with pytest.raises(ReleaseError, match="no universal"):
        distfiles.collect(tmp_path)
    (tmp_path / f"torch_c_dlpack_ext-{V}.tar.gz").unlink()
    make_wheel(tmp_path, "py3-none-any")
    with pytest.raises(ReleaseError, match="no sdist"):
        distfiles.collect(tmp_path)
    assert len(distfiles.collect(tmp_path, require_sdist=False).wheels) == 2


def test_missing_dist_dir_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match="nox -s build"):
        distfiles.collect(tmp_path / "nope")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.org/", "not an http"),
        ("upload.pypi.org/legacy/", "not an http"),
        ("https://__token__:pypi-secret@upload.pypi.org/legacy/", "must not carry credentials"),
    ],
)
def test_repository_url_validation(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        publish.validate_repository_url(url)


def test_repository_url_accepted() -> None:
    url = "https://upload.pypi.org/legacy/"
    assert publish.validate_repository_url(url) == url


def test_publish_without_url_is_a_config_error(dist: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish, "twine_check", lambda files: None)
    with pytest.raises(ConfigError, match="--repository-url is required"):
        publish.publish(dist, repository_url=None)


def test_github_matrix() -> None:
    old = ["3.9", "3.10", "3.11", "3.12"]
    new = ["3.10", "3.11", "3.12", "3.13", "3.14"]
    cells = {
        "include": [
            {"id": "a", "runner": "ubuntu-24.04", "python": "3.12",
             "torch": {"2.4": old, "2.9": new}},
            {"id": "b", "runner": "ubuntu-24.04", "python": "3.13", "torch": {"2.9": new}},
            {"id": "c", "runner": "ubuntu-24.04", "python": "3.14t", "torch": {"2.9": ["3.14t"]}},
            {"id": "d", "runner": "windows-2022", "python": "3.12", "torch": {"2.4": old}},
        ]
    }  # fmt: skip
    out = cisteps.github_matrix(cells)
    assert out["cells"] == cells
    # Each torch minor on the oldest and the newest CPython it supports, per runner; the
    # free-threaded wheel on its own Python.
    assert out["verify"] == {
        "include": [
            {"runner": "ubuntu-24.04", "python": "3.9", "torch": "2.4"},
            {"runner": "ubuntu-24.04", "python": "3.10", "torch": "2.9"},
            {"runner": "ubuntu-24.04", "python": "3.12", "torch": "2.4"},
            {"runner": "ubuntu-24.04", "python": "3.14", "torch": "2.9"},
            {"runner": "ubuntu-24.04", "python": "3.14t", "torch": "2.9"},
            {"runner": "windows-2022", "python": "3.9", "torch": "2.4"},
            {"runner": "windows-2022", "python": "3.12", "torch": "2.4"},
        ]
    }


def test_verify_matrix_of_the_real_matrix() -> None:
    from devtools.matrix.reader import load_matrix

    verify = cisteps.verify_matrix(load_matrix().jobs())
    linux = {e["python"]: e["torch"] for e in verify if e["runner"] == "ubuntu-24.04"}
    assert linux == {
        "3.9": "2.4,2.5,2.6,2.7,2.8",
        "3.10": "2.9",
        "3.12": "2.4",
        "3.13": "2.5,2.6,2.7,2.8",
        "3.14": "2.9",
        "3.14t": "2.9",
    }
    # Every torch minor of every platform is installed on its oldest and newest CPython.
    for runner in {e["runner"] for e in verify}:
        minors = [m for e in verify if e["runner"] == runner for m in e["torch"].split(",")]
        assert all(minors.count(m) >= 2 for m in set(minors) if m != "2.9"), runner


def test_github_matrix_refuses_pythons_outside_requires_python() -> None:
    # The matrix yields no such job (test_matrix); a hand-made file is refused.
    jobs = [
        {"id": "x-cuda", "runner": "ubuntu-24.04", "python": "3.8", "torch": {"2.4": ["3.8"]}},
        {"id": "y-cuda", "runner": "ubuntu-24.04", "python": "3.9", "torch": {"2.4": ["3.9"]}},
    ]
    with pytest.raises(MatrixError, match=r"job 'x-cuda': Python 3\.8 is outside"):
        cisteps.github_matrix({"include": jobs}, requires_python=">=3.9")
    out = cisteps.github_matrix({"include": jobs[1:]}, requires_python=">=3.9")
    assert out["verify"] == {
        "include": [{"runner": "ubuntu-24.04", "python": "3.9", "torch": "2.4"}]
    }
    # A free-threaded job's Python is compared without its "t".
    free = {"id": "z", "runner": "r", "python": "3.14t", "torch": {"2.9": ["3.14t"]}}
    assert cisteps.github_matrix({"include": [free]}, requires_python=">=3.9")["verify"]
    # Jobs that do not say their torch minors' CPythons (a file from before abi3).
    with pytest.raises(MatrixError, match="regenerate the file"):
        cisteps.github_matrix({"include": [{"id": "old", "runner": "r", "python": "3.11"}]})


def test_release_module_does_not_import_the_package() -> None:
    # Run as CI runs it (python -m devtools, PYTHONPATH=python): no import-time
    # library selection, no torch, no warning.
    import subprocess
    import sys

    root = Path(cli.__file__).resolve().parents[2]
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['devtools', 'check-tag', sys.argv[1]]\n"
        "try:\n"
        "    runpy.run_module('devtools', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "package = any(m.split('.')[0] == 'torch_c_dlpack_ext' for m in sys.modules)\n"
        "print(code, 'torch' in sys.modules, package)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", probe, f"v{V}"], cwd=root, capture_output=True,
        text=True, timeout=120, check=False,
        env=devtools_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "False", "False"]
    assert proc.stderr == ""


def test_requires_python_is_read_from_pyproject() -> None:
    from packaging.specifiers import SpecifierSet

    value = hostenv.requires_python()
    assert value is not None
    assert "3.11" in SpecifierSet(value)


@pytest.mark.parametrize("matrix", [{"include": []}, {"cells": []}, [], {"include": [{"id": "x"}]}])
def test_github_matrix_rejects_bad_input(matrix: object) -> None:
    with pytest.raises(MatrixError):
        cisteps.github_matrix(matrix)


def test_matrix_command_appends_the_workflows_job_outputs(tmp_path: Path) -> None:
    # The matrix job's one call: the matrix JSON for the later jobs and, appended to
    # $GITHUB_OUTPUT (which holds the publish guard's lines already), its two outputs.
    output = tmp_path / "github-output"
    output.write_text("index=none\n", encoding="utf-8")
    argv = ["matrix", "--only", "linux_x86_64-t28_cpu,win_amd64-t28_cpu"]
    argv += ["--output", str(tmp_path / "matrix.json"), "--github-output", str(output)]
    assert cli.main(argv) == 0
    lines = output.read_text(encoding="utf-8").splitlines()
    assert [line.split("=", 1)[0] for line in lines] == ["index", "cells", "verify"]
    jobs = json.loads((tmp_path / "matrix.json").read_text(encoding="utf-8"))
    assert json.loads(lines[1].split("=", 1)[1]) == jobs
    assert [j["cells"] for j in jobs["include"]] == [
        ["linux_x86_64-t28_cpu"],
        ["win_amd64-t28_cpu"],
    ]
    verify = json.loads(lines[2].split("=", 1)[1])
    assert verify == {"include": cisteps.verify_matrix(jobs["include"])}


def test_split_variants_leaves_what_pypi_accepts(dist: Path, tmp_path: Path) -> None:
    moved = distfiles.split_variants(dist, tmp_path / "variants")
    assert sorted(p.name for p in moved) == sorted(
        [
            distfiles.variants_index_name(),
            f"torch_c_dlpack_ext-{V}-cp39-abi3-linux_x86_64-t28_cpu.whl",
        ]
    )
    left = distfiles.collect(dist)
    assert not any(w.variant for w in left.wheels)
    assert left.variants_index is None
    assert len(left.wheels) == 2
    with pytest.raises(ReleaseError, match="missing"):
        distfiles.split_variants(dist, tmp_path / "variants")


def test_check_tag_command_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-tag", f"v{V}"]) == 0
    assert cli.main(["check-tag", "v9.9.9"]) == ReleaseError.exit_code
    assert "does not match" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        ({"decision": {"kind": "load", "library": "/x/libs/lib.so"}}, ("load", "/x/libs/lib.so")),
        ({"decision": {"kind": "defer", "library": None}}, ("defer", None)),
    ],
)
def test_decision_of(report: dict[str, object], expected: tuple[str, str | None]) -> None:
    assert diagnose.decision_of(report) == expected


@pytest.mark.parametrize(
    "report", [{"ok": True}, {"decision": "load"}, {"decision": {"library": "/x/lib.so"}}]
)
def test_decision_of_rejects_a_report_without_decision(report: dict[str, object]) -> None:
    with pytest.raises(ReleaseError, match="no decision"):
        diagnose.decision_of(report)


def test_expected_library_matches_torch_minor_and_abi() -> None:
    abi1 = _entry("2.6", Backend.CPU)
    abi0 = abi1._replace(file="libs/abi0.so", cxx11_abi=False)
    gpu = _entry("2.6", Backend.CUDA)
    entries = (gpu, abi1, abi0)
    assert diagnose.expected_library(entries, "2.6", False) is abi0
    assert diagnose.expected_library(entries, "2.6", True) is abi1
    assert diagnose.expected_library(entries, "2.7", True) is None
    assert diagnose.expected_library((gpu,), "2.6", True) is None
    # The backend the diagnostics report for the installed torch (its build flavour):
    # PyPI's CUDA torch gets the CUDA library, also on a runner without a GPU.
    assert diagnose.expected_library(entries, "2.6", True, "cuda") is gpu
    assert diagnose.expected_library((abi1,), "2.6", True, "cuda") is None


def test_verify_torch_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(tmp_path), "--torch", " , "]) == ConfigError.exit_code
    assert "--torch ' , ' names no torch minor" in capsys.readouterr().err


def _subcommands() -> set[str]:
    return {command.name for command in cli.COMMANDS}


def test_workflow_and_cibuildwheel_call_existing_subcommands() -> None:
    root = Path(cli.__file__).resolve().parents[2]
    text = (root / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    used = set(re.findall(r"\$DEVTOOLS ([a-z-]+)", text))
    cibw = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    used |= set(re.findall(r"-m devtools ([a-z-]+)", cibw["cibuildwheel"]["test-command"]))
    # contents and split-variants run inside `nox -s assemble` (the assemble command),
    # the matrices' $GITHUB_OUTPUT lines come from `nox -s matrix -- --github-output`.
    assert used >= {"publish-target", "check-repaired", "verify", "test-installed"}
    assert used <= _subcommands()
    sessions = set(re.findall(r"uvx nox -s ([a-z_]+)", text))
    assert sessions == {"matrix", "assemble"}
    noxfile = (root / "noxfile.py").read_text(encoding="utf-8")
    assert all(f"\ndef {session}(session: nox.Session)" in noxfile for session in sessions)


def test_verify_installs_into_a_fresh_venv_of_this_python(tmp_path: Path) -> None:
    # verify's environments: uv (found as everywhere in devtools) makes a venv of the
    # running Python, and the interpreter path is the venv's own on this platform.
    import sys

    from _torch_c_dlpack_ext_core.run import run

    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "stale").write_text("from an earlier run")
    python = verify._venv(tmp_path / "env")
    assert not (tmp_path / "env" / "stale").exists()
    probe = "import sys; print(sys.prefix); print(sys.version_info[:2])"
    prefix, version = run([python, "-c", probe]).stdout.splitlines()
    assert Path(prefix).resolve() == (tmp_path / "env").resolve()
    assert version == str(sys.version_info[:2])
