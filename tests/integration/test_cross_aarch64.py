"""`nox -s build -- --platform linux_aarch64` on a Linux host of another architecture: one
real aarch64 cell cross-compiled against PyPI's aarch64 torch wheel, audited and packed.

The cell is torch 2.4 (``linux_aarch64-t24_cpu``): PyPI's aarch64 2.4.1 is a pre-cxx11
build, which ``matrix.toml`` once had wrong, so this cell fails loudly on a wrong ABI fact.
The cross compiler comes from Debian (``g++-aarch64-linux-gnu``); where it is missing the
test installs it with apt-get when it can (root, apt-get), and skips saying so otherwise.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.toolchains.cross import ELF_MACHINES, elf_machine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or platform.machine() == "aarch64",
        reason="cross-compiling to aarch64 is checked on Linux hosts of another architecture",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
CROSS_CXX = "aarch64-linux-gnu-g++"
PACKAGE = "g++-aarch64-linux-gnu"
CELL = "linux_aarch64-t24_cpu"


def _install_cross_compiler() -> str | None:
    """Why the cross compiler cannot be had here (``None``: it is on PATH now)."""
    if shutil.which(CROSS_CXX):
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return f"{CROSS_CXX} is not on PATH and cannot be installed here (needs root and apt-get)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", PACKAGE]):
        proc = subprocess.run(
            cmd, check=False, capture_output=True, text=True, env=env, timeout=900
        )
        if proc.returncode != 0 and cmd[1] == "install":
            tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
            return f"apt-get install {PACKAGE} failed: {tail}"
    return None if shutil.which(CROSS_CXX) else f"{PACKAGE} installed no {CROSS_CXX}"


@pytest.fixture(scope="module")
def cross_compiler() -> None:
    reason = _install_cross_compiler()
    if reason is not None:
        pytest.skip(reason)
    # Debian's own CPython (multiarch headers) needs the target's pyconfig.h installed.
    import sysconfig

    from _torch_c_dlpack_ext_core.errors import BuildError
    from _torch_c_dlpack_ext_core.headers import check_target_pyconfig

    try:
        check_target_pyconfig(Path(sysconfig.get_paths()["include"]), "aarch64-linux-gnu")
    except BuildError as exc:
        pytest.skip(str(exc))


def test_cross_build_of_one_aarch64_cell(
    cross_compiler: None, tmp_path: Path, build_cache: Path
) -> None:
    build_dir = build_cache / "cross-cells"
    out = tmp_path / "dist"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "build", "--platform", "linux_aarch64",
         "--cells", CELL, "--build-dir", str(build_dir), "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    report = json.loads((tmp_path / "build-report.json").read_text())
    results = {r["cell"]: r for r in report["cells"]}
    # The cell, and its group's portable table (cross-built too: one C file, no torch).
    assert set(results) == {CELL, "linux_aarch64-portable"}, results
    result = results[CELL]
    assert result["status"] in ("built", "cached"), result
    portable = results["linux_aarch64-portable"]
    assert portable["status"] in ("built", "cached"), portable
    assert portable["entry"]["platform"] == "linux_aarch64"
    assert (
        elf_machine(build_dir / "linux_aarch64-abi3" / portable["entry"]["file"])
        == (ELF_MACHINES["aarch64"])
    )
    entry = result["entry"]
    assert entry["platform"] == "linux_aarch64"
    assert entry["cxx11_abi"] is False
    assert entry["python"] == "abi3"
    assert entry["toolchain"].endswith("aarch64-linux-gnu")
    library = build_dir / "linux_aarch64-abi3" / entry["file"]
    assert elf_machine(library) == ELF_MACHINES["aarch64"]
    # Both audits ran on the cross-built library (their lines are the driver's, unless cached).
    if result["status"] == "built":
        assert f"stable ABI audit of {entry['file']}: abi3 3.9" in output
    wheels = sorted(p.name for p in out.glob("*.whl"))
    combined = [n for n in wheels if n.endswith("_aarch64.whl") and "-cp39-abi3-" in n]
    assert len(combined) == 1, wheels
    assert any(n.endswith("_aarch64-t24.whl") for n in wheels), wheels  # the minor's variant
    with zipfile.ZipFile(out / combined[0]) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        names = archive.namelist()
    libs = manifest["libraries"] if isinstance(manifest, dict) else manifest
    assert sorted(e["file"] for e in libs) == sorted(
        [f"libs/{entry['file']}", f"libs/{portable['entry']['file']}"]
    )
    assert f"torch_c_dlpack_ext/libs/{entry['file']}" in names
