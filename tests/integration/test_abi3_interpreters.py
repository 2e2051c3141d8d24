"""One abi3 wheel for every CPython: the combined wheel ``nox -s build`` makes, installed
the way README says (``pip install --no-index --find-links dist torch-c-dlpack-ext``)
into environments of several real CPythons, each with a real torch release and the
real apache-tvm-ffi from PyPI.

Each environment must get the ``cp39-abi3`` combined wheel, load the library of its
torch (the build ran once, on this interpreter), publish the exchange API, let
tvm-ffi round-trip a tensor through it, and ``python -m torch_c_dlpack_ext`` must exit
0. The interpreters are the CPythons this machine has (found by version; a missing
one skips its case, saying so); torch environments are cached under the dev cache,
their downloads shared through uv's cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
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


def find_interpreter(version: str) -> Path | None:
    """A CPython ``version`` (``"3.9"``) of this machine: this one, one uv finds, or one
    pyenv installed (its shims hide the others from uv)."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version and not sysconfig.get_config_var(
        "Py_GIL_DISABLED"
    ):
        return Path(sys.executable)
    uv = shutil.which("uv")
    if uv:
        proc = subprocess.run(
            [uv, "python", "find", "--no-python-downloads", version],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if proc.returncode == 0 and proc.stdout.strip():
            return Path(proc.stdout.strip())
    pyenv = shutil.which("pyenv")
    if pyenv:
        proc = subprocess.run(
            [pyenv, "root"], capture_output=True, text=True, timeout=60, check=False
        )
        versions = Path(proc.stdout.strip()) / "versions"
        found = sorted(versions.glob(f"{version}.*/bin/python{version}"))
        if proc.returncode == 0 and found:
            return found[-1]
    return None


@pytest.fixture(scope="module")
def abi3_dist(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Path:
    """dist/ as ``nox -s build`` writes it, for the cells of :data:`CELLS` (the
    libraries are compiled once, on this interpreter, and cached)."""
    out = tmp_path_factory.mktemp("abi3") / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.build", "--cells", ",".join(CELLS), "--out", str(out),
         "--build-dir", str(build_cache / "abi3-cells")],
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
    assert len(variants) == len(CELLS)
    assert all("-cp39-abi3-manylinux_" in n for n in variants), variants


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


def _pip_target(python: Path, site: Path, *args: str, report: Path | None = None) -> None:
    """``pip install --target`` for ``python``'s CPython, with this machine's pip settings
    switched off (only the named sources count)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-cache-dir",
           "--target", str(site), *args]  # fmt: skip
    if report is not None:
        cmd += ["--report", str(report)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.parametrize(("python", "torch"), CASES, ids=[f"py{p}-torch{t}" for p, t in CASES])
def test_abi3_wheel_loads_and_round_trips_through_tvm_ffi(
    abi3_dist: Path, tmp_path: Path, python: str, torch: str
) -> None:
    from devtools.torchenv import torch_env

    interpreter = find_interpreter(python)
    if interpreter is None:
        pytest.skip(f"no CPython {python} on this machine (uv python find, pyenv)")
    env = torch_env(
        torch, importable=True, python=python, interpreter=interpreter, extra=["apache-tvm-ffi"]
    )
    site = tmp_path / "site"
    # README: the two dependencies first, then the package from dist/ only.
    _pip_target(env.python, site, "--index-url", "https://pypi.org/simple",
                "packaging>=24", "filelock>=3.12")  # fmt: skip
    report_file = tmp_path / "pip-report.json"
    _pip_target(env.python, site, "--no-deps", "--no-index", "--find-links", str(abi3_dist),
                "torch-c-dlpack-ext", report=report_file)  # fmt: skip
    report: dict[str, Any] = json.loads(report_file.read_text(encoding="utf-8"))
    (installed,) = report["install"]
    wheel = installed["download_info"]["url"].rsplit("/", 1)[-1]
    assert "-cp39-abi3-" in wheel, wheel
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
