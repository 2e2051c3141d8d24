"""A compile request loads only what it uses: the driver imports neither the portable
plan (re-exported on first use) nor the toolchains of other platforms (the registry
imports each on first use), and the public compile request runs no selector."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.toolchains import TOOLCHAINS
loaded = lambda: sorted(m for m in sys.modules if m.startswith("_torch_c_dlpack_ext_core"))
before = loaded()
gnu = TOOLCHAINS["gnu"]
plan = driver.plan_portable
after = loaded()
msvc = TOOLCHAINS["msvc"]
print(json.dumps({"before": before, "after": after, "names": list(TOOLCHAINS),
                  "msvc": msvc.name, "gnu": gnu.name, "plan": plan.__module__,
                  "last": loaded()}))
"""


def _probe() -> dict[str, list[str] | str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True, text=True, check=True, timeout=120,
        env={"PYTHONPATH": str(ROOT / "python"), "PATH": ""},
    )  # fmt: skip
    result: dict[str, list[str] | str] = json.loads(proc.stdout)
    return result


def test_the_driver_loads_no_other_platforms_toolchain_and_no_portable_plan() -> None:
    result = _probe()
    core = "_torch_c_dlpack_ext_core."
    for module in ("toolchains.msvc", "toolchains.darwin", "toolchains.cross", "portableplan"):
        assert core + module not in result["before"], module
    # On first use: the portable names resolve through the driver, a toolchain by name.
    assert core + "portableplan" in result["after"]
    assert result["plan"] == core + "portableplan"
    assert core + "toolchains.msvc" in result["last"]
    assert (result["gnu"], result["msvc"]) == ("gnu", "msvc")
    assert result["names"] == ["gnu", "darwin", "msvc", "gnu-aarch64"]


def test_the_compile_request_runs_no_selector() -> None:
    """build_for_current_torch is _compile's: it imports neither the policy nor the
    selector's actions (read from the source, as the import graph is)."""
    import ast

    source = ROOT / "python" / "torch_c_dlpack_ext" / "_compile.py"
    imported = {
        node.module
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & {"_apply", "_decide", "_wording"}, imported
