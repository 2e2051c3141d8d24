"""A ``TORCH_C_DLPACK_EXT_LIBRARY`` that is no file (issue 31, item 10): ``/dev/null``, a
FIFO, a directory is named by what it is, in the import's warning and in the diagnostics,
and a FIFO is never opened in a way that blocks (the runs have a time limit: a blocking
open would hang them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import clean_env, make_package
from tests.helpers import probe_import as probe

P = "TORCH_C_DLPACK_EXT_"


def _special(tmp_path: Path, kind: str) -> Path:
    if kind == "dev-null":
        return Path(os.devnull)
    path = tmp_path / "lib.so"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


SAYS = {
    "fifo": "is a FIFO (not a library file)",
    "dev-null": "is a character device (not a library file)",
    "directory": "is a directory (not a library file)",
}


@pytest.mark.parametrize("kind", list(SAYS))
def test_the_import_names_what_the_library_path_is(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("torch")
    path = _special(tmp_path, kind)
    root = make_package(tmp_path / "pkg", manifest=False)
    result = probe(root, timeout=60, **{P + "FORCE": "1", P + "LIBRARY": str(path)})
    assert result["kind"] == "unavailable", result
    (warning,) = result["warnings"]
    assert SAYS[kind] in warning, warning
    assert "not an existing file" not in warning, warning


@pytest.mark.parametrize("kind", ["fifo", "dev-null"])
def test_the_diagnostics_name_it_without_blocking(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("torch")
    path = _special(tmp_path, kind)
    root = make_package(tmp_path / "pkg", manifest=False)
    env = clean_env(**{P + "FORCE": "1", P + "LIBRARY": str(path)}, PYTHONPATH=str(root))
    proc = subprocess.run(
        [sys.executable, "-m", "torch_c_dlpack_ext"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert SAYS[kind] in " ".join(proc.stdout.split()), proc.stdout  # the table wraps
