"""The package imported from a zip archive (issue 31, item 9): it cannot load its library
from there, and used to say "Reinstall". Name the cause (a package inside a zip cannot
load its library) and the fix (install it unzipped), JIT or not."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from tests.helpers import clean_env, make_package, run_python

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"

PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch_c_dlpack_ext as pkg
status = pkg.status()
print(json.dumps({"file": pkg.__file__, "kind": status.kind.value, "reason": status.reason,
                  "remedy": status.remedy, "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.parametrize(
    ("jit", "portable"),
    [(False, False), (True, False), (True, True)],
    ids=["plain", "jit", "portable+jit"],
)
def test_a_zipped_package_names_the_zip_and_the_fix(
    tmp_path: Path, jit: bool, portable: bool
) -> None:
    root = make_package(tmp_path / "pkg")
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, path.relative_to(root).as_posix())
    env = {P + "FORCE": "1", P + "CACHE_DIR": str(tmp_path / "cache")}
    if jit:
        env[P + "JIT"] = "1"
    if portable:  # issue 36 item 6: PORTABLE is read before the manifest, the zip first
        env[P + "PORTABLE"] = "1"
    proc = run_python(PROBE, pythonpath=[archive], env=clean_env(**env), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(archive)), result
    assert result["kind"] == "unavailable", result
    assert f"inside the zip archive {archive}" in result["reason"], result
    assert "a package inside a zip cannot load its library" in result["reason"], result
    assert result["remedy"].startswith("install it unzipped"), result
    (warning,) = [w for w in result["warnings"] if w.startswith("torch-c-dlpack-ext: ")]
    assert "Reinstall" not in warning, warning
    assert "not readable" not in warning, warning
    assert f"{P}JIT=1" not in warning, warning
    assert not (tmp_path / "cache").exists(), "a JIT build was attempted"
