"""One abi3 wheel for every CPython: the combined wheel ``nox -s build`` makes, installed
the way CONTRIBUTING.md's Quick start says
(``pip install --no-index --find-links dist torch-c-dlpack-ext``)
into environments of several real CPythons, each with a real torch release and the
real apache-tvm-ffi from PyPI.

Each environment must get the ``cp39-abi3`` combined wheel, load the library of its
torch (the build ran once, on this interpreter), publish the exchange API, let
tvm-ffi round-trip a tensor through it, and ``python -m torch_c_dlpack_ext`` must exit
0. The interpreters are the CPythons this machine has (found by version; a missing
one skips its case, saying so); torch environments are cached under the dev cache,
their downloads shared through uv's cache. The free-threaded ``cp314t`` wheel gets the
same check on free-threaded CPython 3.14 (from ``devtools.envs.freethreaded``, which builds
and caches it; skipped with the reason where it cannot).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from devtools.base.hostenv import find_cpython
from devtools.envs.torchenv import EnvObserver
from tests.helpers import clean_env, devtools_env, run_python

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux x86_64 cells"),
]

ROOT = Path(__file__).resolve().parents[2]

#: (CPython, torch release): the oldest and newest CPythons against old and new torch.
CASES = [("3.9", "2.4.1"), ("3.10", "2.8.0"), ("3.12", "2.6.0"), ("3.13", "2.8.0")]
#: The cells the dist holds: CPU and CUDA libraries of each torch above (the selector
#: gives a torch the library of its backend; both are there, whatever it decides).
CELLS = [
    f"linux_x86_64-{label}"
    for label in ("t24_cpu", "t24_cuda", "t26_cpu_abi0", "t26_cuda_abi0", "t28_cpu", "t28_cuda")
]


@pytest.fixture(scope="module")
def abi3_dist(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Path:
    """dist/ as ``nox -s build`` writes it, for the cells of :data:`CELLS` (the
    libraries are compiled once, on this interpreter, and cached)."""
    out = tmp_path_factory.mktemp("abi3") / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "build", "--cells", ",".join(CELLS), "--out", str(out),
         "--build-dir", str(build_cache / "cells")],
        cwd=ROOT, env=devtools_env(), capture_output=True, text=True, timeout=3600,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out


def test_dist_holds_one_abi3_combined_wheel(abi3_dist: Path) -> None:
    names = sorted(p.name for p in abi3_dist.glob("*.whl"))
    combined = [n for n in names if n.count("-") == 4 and "-py3-none-any" not in n]
    assert len(combined) == 1, combined
    assert "-cp39-abi3-manylinux_" in combined[0]
    variants = [n for n in names if n.count("-") == 5]
    # One variant per torch minor, carrying every cell of that minor (docs/building.md).
    minors = sorted({cell.split("-")[1].split("_")[0] for cell in CELLS})
    assert sorted(n[: -len(".whl")].rsplit("-", 1)[-1] for n in variants) == minors, variants
    assert all("-cp39-abi3-manylinux_" in n for n in variants), variants


def _combined_platform(dist: Path) -> str:
    (combined,) = [p for p in dist.glob("*-cp39-abi3-*.whl") if p.name.count("-") == 4]
    return combined.name[: -len(".whl")].rsplit("-", 1)[-1]


RESOLVED = ["3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15", "3.14t"]


@pytest.mark.parametrize("python", RESOLVED)
def test_pip_and_uv_pick_the_abi3_wheel_for_every_cpython(
    abi3_dist: Path, tmp_path: Path, python: str
) -> None:
    """Resolution only (no interpreter of that version needed): every CPython >= 3.9
    with the GIL, 3.14 and a future 3.15 included, gets the one abi3 wheel; a
    free-threaded one, for which this dist has no wheel, the universal wheel."""
    from devtools.base.steps import find_uv

    platform = _combined_platform(abi3_dist)
    version = python.removesuffix("t")
    abi = "cp" + version.replace(".", "") + ("t" if python.endswith("t") else "")
    want = "-py3-none-any.whl" if python.endswith("t") else f"-cp39-abi3-{platform}.whl"
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
         "--no-index", "--find-links", str(abi3_dist), "--only-binary", ":all:",
         "--python-version", version, "--implementation", "cp", "--abi", abi,
         "--platform", platform, "--target", str(tmp_path / "t"), "--report", str(report),
         "torch-c-dlpack-ext"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (chosen,) = json.loads(report.read_text(encoding="utf-8"))["install"]
    assert chosen["download_info"]["url"].endswith(want), chosen["download_info"]["url"]
    if python.endswith("t"):
        return  # uv's --python-version has no free-threaded spelling
    uv_platform = "x86_64-" + platform.rsplit("_", 2)[0]  # manylinux_2_34_x86_64
    log = subprocess.run(
        [find_uv(), "pip", "install", "--dry-run", "-v", "--target", str(tmp_path / "u"),
         "--python-version", version, "--python-platform", uv_platform, "--no-index",
         "--find-links", str(abi3_dist), "--no-deps", "torch-c-dlpack-ext"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert log.returncode == 0, log.stderr[-3000:]
    selected = [line for line in log.stderr.splitlines() if "Selecting: torch-c-dlpack-ext" in line]
    assert selected, log.stderr[-3000:]
    assert selected[-1].rstrip(")").endswith(want), selected[-1]


ROUND_TRIP = r"""
import json, sys
import torch
import tvm_ffi
import torch_c_dlpack_ext as ext
status = ext.status()
assert status.kind.value == "load", status
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
t = tvm_ffi.from_dlpack(x)
assert tuple(t.shape) == (3, 3), t.shape
y = torch.from_dlpack(t)
assert torch.equal(x, y) and y.data_ptr() == x.data_ptr()
print(json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
                  "library": str(status.library), "tvm_ffi": getattr(tvm_ffi, "__version__", "")}))
"""


def _install_target(python: Path, site: Path, *args: str) -> None:
    """Install into ``site`` for ``python``'s CPython with uv (pip itself no longer runs
    for 3.9), its configuration files off: only the named sources count."""
    from devtools.base.steps import find_uv

    cmd = [find_uv(), "pip", "install", "--no-config", "--python", str(python), "--target",
           str(site), *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.parametrize(("python", "torch"), CASES, ids=[f"py{p}-torch{t}" for p, t in CASES])
def test_abi3_wheel_loads_and_round_trips_through_tvm_ffi(
    abi3_dist: Path, tmp_path: Path, python: str, torch: str, env_observer: EnvObserver
) -> None:
    from devtools.envs.torchenv import EnvKind, torch_env

    interpreter = find_cpython(python)
    if interpreter is None:
        pytest.skip(f"no CPython {python} on this machine (uv python find, pyenv)")
    env = torch_env(
        torch,
        kind=EnvKind.IMPORTABLE,
        python=python,
        interpreter=interpreter,
        extra=["apache-tvm-ffi"],
        observer=env_observer,
    )
    site = tmp_path / "site"
    # The Quick start: the two dependencies first, then the package from dist/ only.
    _install_target(env.python, site, "--index-url", "https://pypi.org/simple",
                    "packaging>=24", "filelock>=3.12")  # fmt: skip
    _install_target(env.python, site, "--no-deps", "--no-index", "--find-links",
                    str(abi3_dist), "torch-c-dlpack-ext")  # fmt: skip
    (wheel_file,) = site.glob("torch_c_dlpack_ext-*.dist-info/WHEEL")
    tags = [line for line in wheel_file.read_text().splitlines() if line.startswith("Tag:")]
    assert tags, wheel_file
    assert all("cp39-abi3-" in tag for tag in tags), tags
    environ = clean_env(TVM_FFI_CACHE_DIR=str(tmp_path / "tvm-cache"))
    proc = run_python(ROUND_TRIP, pythonpath=[site], env=environ, python=env.python, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["python"].startswith(f"{python}.")
    assert seen["torch"].startswith(torch)
    minor = ".".join(torch.split(".")[:2])
    # The library of this torch minor, from the abi3 wheel just installed.
    assert f"-torch{minor}-" in Path(seen["library"]).name
    assert Path(seen["library"]).resolve().is_relative_to(site.resolve())
    # tvm-ffi used our table: its own JIT fallback never built anything.
    assert not list((tmp_path / "tvm-cache").rglob("*.so"))
    diagnose = subprocess.run(
        [str(env.python), "-m", "torch_c_dlpack_ext"],
        env={**environ, "PYTHONPATH": str(site)}, cwd=tmp_path, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    assert diagnose.returncode == 0, diagnose.stdout[-3000:] + diagnose.stderr[-3000:]


FREE_THREADED_CELLS = ["linux_x86_64-t29_cpu-cp314t", "linux_x86_64-t29_cuda-cp314t"]


def test_free_threaded_wheel_loads_and_round_trips_through_tvm_ffi(
    tmp_path: Path, build_cache: Path, env_observer: EnvObserver
) -> None:
    """The cp314t wheel: its libraries compiled against free-threaded CPython 3.14's
    headers and torch 2.9.1's cp314t wheel, run there with the GIL off."""
    from devtools.build.host import freethreaded_python
    from devtools.envs.torchenv import EnvKind, torch_env

    found = freethreaded_python("3.14t")
    if isinstance(found, str):
        pytest.skip(found)
    dist = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "build", "--cells", ",".join(FREE_THREADED_CELLS),
         "--out", str(dist), "--build-dir", str(build_cache / "cells")],
        cwd=ROOT, env=devtools_env(), capture_output=True, text=True, timeout=3600,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    combined = [p.name for p in dist.glob("*.whl") if p.name.count("-") == 4]
    assert [n for n in combined if "-cp314-cp314t-" in n], combined
    env = torch_env(
        "2.9.1",
        kind=EnvKind.IMPORTABLE,
        python="3.14t",
        interpreter=found.executable,
        extra=["apache-tvm-ffi"],
        observer=env_observer,
    )
    site = tmp_path / "site"
    _install_target(env.python, site, "--index-url", "https://pypi.org/simple",
                    "packaging>=24", "filelock>=3.12")  # fmt: skip
    _install_target(env.python, site, "--no-deps", "--no-index", "--find-links", str(dist),
                    "torch-c-dlpack-ext")  # fmt: skip
    (wheel_file,) = site.glob("torch_c_dlpack_ext-*.dist-info/WHEEL")
    assert "Tag: cp314-cp314t-" in wheel_file.read_text()
    manifest = json.loads((site / "torch_c_dlpack_ext" / "manifest.json").read_text())
    assert {e["python"] for e in manifest["libraries"]} == {"3.14t"}
    environ = clean_env(TVM_FFI_CACHE_DIR=str(tmp_path / "tvm-cache"))
    code = ROUND_TRIP.replace(
        "import json, sys", "import json, sys\nassert not sys._is_gil_enabled()"
    )
    proc2 = run_python(code, pythonpath=[site], env=environ, python=env.python, timeout=600)
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr[-4000:]
    seen = json.loads(proc2.stdout.strip().splitlines()[-1])
    assert seen["python"].startswith("3.14.")
    assert "-torch2.9-" in Path(seen["library"]).name
    assert not list((tmp_path / "tvm-cache").rglob("*.so"))
    diagnose = subprocess.run(
        [str(env.python), "-m", "torch_c_dlpack_ext"],
        env={**environ, "PYTHONPATH": str(site)}, cwd=tmp_path, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip
    assert diagnose.returncode == 0, diagnose.stdout[-3000:] + diagnose.stderr[-3000:]
    assert '"python": "3.14t"' in diagnose.stdout
