"""A ``TORCH_C_DLPACK_EXT_LIBRARY`` built for another Python ABI is refused before dlopen
(issue 31, item 3): a 3.13t library loaded into CPython 3.13 (or the reverse) crashed the
process, in the import and in ``python -m torch_c_dlpack_ext``. The Python ABI is read from
the build info in the file's bytes, as the torch minor is; the interpreter's comes from its
build (``Py_GIL_DISABLED``).

The stand-in library aborts the process as soon as it is loaded, so a test that passes
proves it was never dlopened."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from tests.helpers import build_fake_library, clean_env, make_package, run_python
from tests.helpers import probe_import as probe

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"
TORCH_MINOR = torch.__version__.split(".")[1]
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: A Python ABI this interpreter is not: its own version's other GIL flavour, and another.
FOREIGN = [
    HERE if FREE_THREADED else f"{HERE}t",
    "3.13" if FREE_THREADED else "3.13t",
    *(["abi3"] if FREE_THREADED else []),
]


def _crashing_library(tmp_path: Path, python: str) -> Path:
    return build_fake_library(
        tmp_path / "lib",
        f"FAKE_TORCH_MINOR={TORCH_MINOR}",
        f"FAKE_PYTHON={python}",
        "FAKE_ABORT_ON_LOAD",
    )


@pytest.mark.parametrize("python", FOREIGN)
def test_a_library_of_another_python_abi_is_refused_before_dlopen(
    tmp_path: Path, python: str
) -> None:
    library = _crashing_library(tmp_path, python)
    root = make_package(tmp_path / "pkg", manifest=False)
    # probe_import fails the test if the process died (the library aborts when loaded).
    result = probe(root, **{P + "FORCE": "1", P + "LIBRARY": str(library)})
    assert result["kind"] == "unavailable", result
    assert not result["replaced"], result
    (warning,) = result["warnings"]
    running = f"a {'free-threaded' if FREE_THREADED else 'GIL'} CPython {HERE}"
    assert f"was built for Python {python}" in warning, warning
    assert f"this is {running}" in warning, warning
    assert f"Point {P}LIBRARY at a library built for this Python" in warning, warning
    assert f"{P}JIT=1" in warning, warning


def test_the_diagnostics_refuse_it_too(tmp_path: Path) -> None:
    library = _crashing_library(tmp_path, FOREIGN[0])
    root = make_package(tmp_path / "pkg", manifest=False)
    env = clean_env(**{P + "FORCE": "1", P + "LIBRARY": str(library)}, PYTHONPATH=str(root))
    proc = subprocess.run(
        [sys.executable, "-m", "torch_c_dlpack_ext", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    report = json.loads(proc.stdout)
    assert report["decision"]["kind"] == "unavailable", report["decision"]
    assert f"was built for Python {FOREIGN[0]}" in report["decision"]["reason"], report


def test_a_library_of_this_python_abi_is_loaded(tmp_path: Path) -> None:
    python = f"{HERE}t" if FREE_THREADED else HERE
    library = build_fake_library(
        tmp_path / "lib", f"FAKE_TORCH_MINOR={TORCH_MINOR}", f"FAKE_PYTHON={python}"
    )
    root = make_package(tmp_path / "pkg", manifest=False)
    result = probe(root, **{P + "FORCE": "1", P + "LIBRARY": str(library)})
    assert result["kind"] == "load", result
    if not FREE_THREADED:
        abi3 = build_fake_library(
            tmp_path / "abi3", f"FAKE_TORCH_MINOR={TORCH_MINOR}", "FAKE_PYTHON=abi3"
        )
        proc = run_python(
            "import torch_c_dlpack_ext as p; print(p.status().kind.value)",
            pythonpath=[root],
            env=clean_env(**{P + "FORCE": "1", P + "LIBRARY": str(abi3)}),
            timeout=120,
        )
        assert proc.stdout.strip() == "load", proc.stderr[-2000:]
