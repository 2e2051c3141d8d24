"""The cross toolchain (gnu-aarch64) and `nox -s build -- --platform`: registry entry,
compiler lookup, the ELF-machine audit, cell planning and torch trees of another platform.

No real compiler: fake ``g++`` scripts answer ``--version`` and ``-dumpmachine``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from devtools.base import hostenv
from devtools.build import host as buildhost
from devtools.commands import build as build_command
from devtools.envs import torchenv
from devtools.matrix.reader import load_matrix

from _torch_c_dlpack_ext_core.driver import BuildRequest, plan_build
from _torch_c_dlpack_ext_core.errors import ABIAuditError, CompilerNotFoundError, ConfigError
from _torch_c_dlpack_ext_core.naming import library_filename
from _torch_c_dlpack_ext_core.toolchains import TOOLCHAINS, toolchain_for
from _torch_c_dlpack_ext_core.toolchains.cross import GNU_AARCH64, elf_machine

MATRIX = load_matrix()


def _cell(cell_id: str):  # type: ignore[no-untyped-def]
    (cell,) = MATRIX.select([cell_id])
    return cell


def _fake_gxx(directory: Path, name: str, machine: str) -> Path:
    """A script that answers like g++ targeting ``machine``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  --version) echo "{name} (Debian 12.2.0-14) 12.2.0"; '
        'echo "Copyright (C) 2022 Free Software Foundation, Inc.";;\n'
        f'  -dumpmachine) echo "{machine}";;\n'
        "  *) exit 1;;\n"
        "esac\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _elf_header(machine: int) -> bytes:
    # \x7fELF, 64-bit, little-endian, version 1, padding, e_type ET_DYN, e_machine.
    return (
        b"\x7fELF\x02\x01\x01"
        + b"\0" * 9
        + (3).to_bytes(2, "little")
        + machine.to_bytes(2, "little")
    )


def test_the_cross_target_is_a_registry_entry_like_the_others() -> None:
    toolchain = toolchain_for("linux_aarch64")
    assert toolchain is TOOLCHAINS["gnu-aarch64"] is GNU_AARCH64
    assert toolchain.target_platform == "linux_aarch64"
    assert toolchain.dual_abi is True
    # The same file names and repair list as a native Linux build.
    assert library_filename(2, 8, "cpu", True, platform="linux_aarch64") == library_filename(
        2, 8, "cpu", True, platform="linux"
    )
    assert toolchain.repair_excludes == TOOLCHAINS["gnu"].repair_excludes
    assert [t.target_platform for n, t in TOOLCHAINS.items() if n != "gnu-aarch64"] == [None] * 3


def test_the_cross_compiler_is_the_target_prefixed_gxx_not_cxx(tmp_path: Path) -> None:
    cross = _fake_gxx(tmp_path / "bin", "aarch64-linux-gnu-g++", "aarch64-linux-gnu")
    host = _fake_gxx(tmp_path / "bin", "g++", "x86_64-linux-gnu")
    compiler = GNU_AARCH64.find_compiler(None, {"PATH": str(cross.parent), "CXX": str(host)})
    assert compiler.path == str(cross)
    assert compiler.identity == "g++ 12.2.0 aarch64-linux-gnu"


def test_a_compiler_for_another_target_is_refused(tmp_path: Path) -> None:
    host = _fake_gxx(tmp_path / "bin", "g++", "x86_64-linux-gnu")
    with pytest.raises(CompilerNotFoundError, match="makes code for x86_64-linux-gnu, not aarch64"):
        GNU_AARCH64.find_compiler(str(host), {"PATH": str(host.parent)})


def test_no_cross_compiler_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(CompilerNotFoundError, match="apt-get install g\\+\\+-aarch64-linux-gnu"):
        GNU_AARCH64.find_compiler(None, {"PATH": str(tmp_path)})


def test_elf_machine_reads_the_header(tmp_path: Path) -> None:
    lib = tmp_path / "lib.so"
    lib.write_bytes(_elf_header(183) + b"\0" * 40)
    assert elf_machine(lib) == 183
    lib.write_bytes(b"MZ not an ELF file at all")
    assert elf_machine(lib) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_elf_header(62) + b"\0" * 40, "e_machine 62, not aarch64"),
        (b"garbage", "not a 64-bit little-endian ELF file"),
    ],
)
def test_the_audit_refuses_a_library_of_another_machine(
    tmp_path: Path, content: bytes, message: str
) -> None:
    lib = tmp_path / "lib.so"
    lib.write_bytes(content)
    # The machine is checked before any symbol is read (no nm, no torch needed).
    with pytest.raises(ABIAuditError, match=message):
        GNU_AARCH64.audit(lib, None, "cpu", cxx="unused")  # type: ignore[arg-type]


def test_plan_for_the_cross_target_uses_the_cross_toolchain(
    tmp_path: Path, fake_torch: Any, dlpack_include: Path
) -> None:
    cross = _fake_gxx(tmp_path / "bin", "aarch64-linux-gnu-g++", "aarch64-linux-gnu")
    prefix = fake_torch("2.4.1", abi=False, cuda=None)
    sources = tmp_path / "csrc"
    sources.mkdir()
    (sources / "a.cc").write_text("int f() { return 0; }\n")
    plan = plan_build(
        BuildRequest(
            torch=prefix,
            backend="cpu",
            output_dir=tmp_path / "out",
            dlpack_include=dlpack_include,
            source_dir=sources,
            environ={"PATH": f"{cross.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
            platform="linux_aarch64",
        )
    )
    assert plan.platform_toolchain is GNU_AARCH64
    assert plan.cxx == str(cross)
    assert plan.filename == "libtorch_c_dlpack_ext-torch2.4-cpu-cxx11abi0.so"
    assert "-D_GLIBCXX_USE_CXX11_ABI=0" in plan.command("out.so")


def test_other_platform_cells_name_the_cross_option() -> None:
    reason = buildhost.skip_reason(_cell("linux_aarch64-t28_cpu"), "linux_x86_64")
    assert reason == (
        "builds on linux_aarch64, this host is linux_x86_64 "
        "(--platform linux_aarch64 cross-compiles it)"
    )
    # No cross toolchain for Windows: no hint.
    assert buildhost.skip_reason(_cell("win_amd64-t28_cpu"), "linux_x86_64") == (
        "builds on win_amd64, this host is linux_x86_64"
    )


def test_cross_cells_are_built_when_the_compiler_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cell = _cell("linux_aarch64-t24_cpu")
    monkeypatch.setattr(buildhost, "index_unreachable", lambda url, timeout=5.0: None)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    reason = buildhost.skip_reason(cell, "linux_x86_64", "linux_aarch64")
    assert reason is not None
    assert "apt-get install g++-aarch64-linux-gnu" in reason
    _fake_gxx(tmp_path / "bin", "aarch64-linux-gnu-g++", "aarch64-linux-gnu")
    assert buildhost.skip_reason(cell, "linux_x86_64", "linux_aarch64") is None
    assert buildhost.cross_target(cell, "linux_x86_64", "linux_aarch64") == "linux_aarch64"
    # On an aarch64 host the same cell is a native build.
    assert buildhost.cross_target(cell, "linux_aarch64", "linux_aarch64") is None


def test_free_threaded_cells_are_not_cross_compiled() -> None:
    cell = _cell("linux_aarch64-t29_cpu-cp314t")
    reason = buildhost.skip_reason(cell, "linux_x86_64", "linux_aarch64")
    assert reason is not None
    assert reason.startswith("a cross build makes abi3 libraries only")


def test_platform_selects_that_platforms_cells() -> None:
    cells = build_command.select_cells(MATRIX, None, "linux_aarch64")
    assert cells
    assert {c.platform.name for c in cells} == {"linux_aarch64"}
    assert {c.id for c in cells} >= {f"linux_aarch64-t2{m}_cpu" for m in range(4, 10)}
    both = build_command.select_cells(MATRIX, "*-t28_cpu", "linux_aarch64")
    assert [c.id for c in both] == ["linux_aarch64-t28_cpu"]
    with pytest.raises(ConfigError, match="--platform 'linux_arm' is no platform"):
        build_command.select_cells(MATRIX, None, "linux_arm")


def test_torch_tree_of_another_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setenv(hostenv.DEV_CACHE_VAR, str(tmp_path))
    monkeypatch.setattr(torchenv, "find_uv", lambda: "uv")
    monkeypatch.setattr(torchenv, "_uv", lambda uv, *args: calls.append(args))
    tree = torchenv.torch_tree("2.4.1", python="3.11", platform="linux_aarch64")
    assert tree.root.name == "tree-linux_aarch64-py3.11-torch2.4.1"
    (args,) = calls
    assert args[args.index("--python-platform") + 1] == "aarch64-manylinux_2_28"
    assert args[-1] == "torch==2.4.1"
    assert "--no-deps" in args
    record = json.loads((tree.root / ".torchenv-complete.json").read_text())
    assert record["platform"] == "linux_aarch64"
    # The host's own tree is another folder.
    calls.clear()
    assert torchenv.torch_tree("2.4.1", python="3.11").root.name == "tree-py3.11-torch2.4.1"
    assert "--python-platform" not in calls[0]
    with pytest.raises(ConfigError, match="no torch tree for platform 'win_arm64'"):
        torchenv.torch_tree("2.4.1", python="3.11", platform="win_arm64")
