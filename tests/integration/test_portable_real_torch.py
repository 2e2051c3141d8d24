"""The portable table on real torches that no native library serves (issue 30, item 5).

* Debian 13 (trixie)'s own ``python3-torch`` (2.6.0+debian, cxx11 ABI, CPU, CPython 3.13)
  in a cached debootstrap root (:mod:`devtools.envs.distro`): a fresh ``python3 -m venv
  --system-site-packages`` venv per test, apache-tvm-ffi installed there by the root's
  pip (from a wheelhouse the root's pip downloaded once from PyPI).
* PyPI's torch 2.3.1 (a CUDA 12.1 build, older than the matrix; on this GPU-less host it
  runs CPU tensors) in a cached CPython 3.11 env (:func:`devtools.envs.torchenv.torch_env`,
  uv with the shared cache), with apache-tvm-ffi.

In each, ``fixtures/portable_proof.py`` runs in a fresh process and reports; the tests
judge the report (:func:`judge`): the table is the portable one; the import printed
nothing, warned nothing, started no process (an audit hook) and ran no compiler (``cc``,
``c++``, ``gcc``, ``g++``, ``clang`` and ``$CC``/``$CXX`` are spies that log and fail;
the trixie root has no compiler at all) and asked CUDA nothing; ``import tvm_ffi`` kept
our table and JIT-compiled nothing; tvm-ffi's ``from_dlpack`` and ``testing.echo`` of torch
tensors go through the table (``Tensor.__dlpack__`` is never called) and share memory;
tvm-ffi's EnvTensorAllocator is the table's allocator and allocates; the CPU stream is
NULL; the allocator, the stream and deleters are called without the GIL from 8 threads.

The wheel under test is this project's combined abi3 wheel holding the portable library
(:func:`portable_wheel`): ``dist/``'s when ``nox -s build`` made it, else one made from
the checkout by ``nox -s build``'s own steps with the portable cell alone (compiled by
the driver, assembled and repaired into a manylinux wheel, as released). ``import
torch_c_dlpack_ext`` must select the portable table there by itself: nothing forces it.

Cost (2 cores, 2026-12-03): warm 10-30 s for both, the load deciding; cold, the trixie
root 2-4 min (~1.5 GB under the dev cache) and the torch 2.3.1 env 1-1.5 min on an empty
uv cache (which grows by ~4.9 GB, hard-linked into the env): 5 min 54 s for the module,
cold, at a load average of ~5.

Skips, each with its reason: not Linux, not root, or no debootstrap that apt-get can
install (the trixie test); a CPython other than 3.11 (the torch 2.3.1 test).
"""

from __future__ import annotations

import json
import stat
import subprocess
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import OLD_TORCH, ROOT, TVM_FFI, clean_env

pytestmark = pytest.mark.slow

PROOF = Path(__file__).parent / "fixtures" / "portable_proof.py"
#: What the proof's threads do (``--threads``, ``--iterations``).
THREADS = 8
ITERATIONS = 300
#: Names a compiler goes by; each is a spy on the proofs' PATH.
COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++")
_SPY = '#!/bin/sh\necho "$0 $*" >> "$(dirname "$0")/calls.log"\nexit 1\n'


def write_compiler_spies(folder: Path) -> Path:
    """``folder`` with a logging, failing stand-in for every compiler name."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in COMPILERS:
        spy = folder / name
        spy.write_text(_SPY)
        spy.chmod(stat.S_IRWXU)
    return folder


def compiler_calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.is_file() else []


def spied_environment(spies: str) -> dict[str, str]:
    """PATH with the compiler spies first, and ``$CC``/``$CXX`` naming them."""
    return {
        "PATH": f"{spies}:/usr/bin:/bin",
        "CC": f"{spies}/cc",
        "CXX": f"{spies}/c++",
    }


def judge(report: dict[str, Any], *, mode: str, calls: list[str]) -> None:
    """Every property the proofs promise (module docstring), with the report quoted."""
    shown = json.dumps(report, indent=1, default=str)[-6000:]
    assert report["ok"], report.get("error", shown)
    assert report["mode"] == mode, shown
    assert report["torch"]["own_table"] is False, shown
    imported = report["import"]
    assert imported["output"] == "", f"the import printed: {imported['output']!r}"
    assert imported["warnings"] == [], imported
    assert imported["spawned"] == [], f"the import started processes: {imported['spawned']}"
    assert imported["cuda_calls"] == [], f"the import asked CUDA: {imported['cuda_calls']}"
    assert calls == [], f"a compiler ran: {calls}"
    if mode == "direct":
        info = report["published"]["build_info"]
    else:
        package = report["package"]
        info = package["build_info"]
        assert package["warnings"] == [], package
        assert package["kind"] == "portable", package
        assert package["overrides"] == {}, "no setting may force it here"
        assert package["portable"] is True, package
        assert "portable" in package["status"], package["status"]
    assert info is not None, shown
    assert info["table"] == "portable", info
    assert report["table"]["legacy_int_matches"], report["table"]
    tvm = report["tvm_ffi_import"]
    assert tvm["spawned"] == [], f"import tvm_ffi started processes: {tvm['spawned']}"
    assert not any("JIT" in w or "torch_c_dlpack_ext" in w for w in tvm["warnings"]), tvm
    assert report["tvm_ffi_kept_our_table"], shown
    assert report["tvm_ffi_addons"] == [], report["tvm_ffi_addons"]
    trip = report["round_trip"]
    assert len(trip["exported"]) == 5, trip
    assert trip["dunder_dlpack_calls"] == 0, "tvm-ffi went through Tensor.__dlpack__"
    # Strides as torch reports them, also where no element is addressed (torch 2.3-2.8's
    # own exporter normalizes those; the portable table exports the tensor's own).
    assert trip["notes"] == [], trip["notes"]
    assert trip["env_allocator_is_table"], trip
    assert trip["env_alloc"]["rc"] == 0, trip
    assert trip["env_alloc"]["tensor"] == [[3, 4], [2, 32, 1], 1, True], trip
    assert (trip["stream_rc"], trip["stream"]) == (0, None), trip
    assert trip["table_round_trip"], trip
    threads = report["without_gil"]
    assert threads["complete"], threads
    assert threads["failures"] == [], threads
    assert threads["set_error"] == [], threads
    assert threads["calls"] == THREADS * ITERATIONS * 3, threads
    assert report["deleters_without_gil"]["failures"] == [], report["deleters_without_gil"]
    assert report["cuda_initialized"] is False, shown


def figures(report: dict[str, Any]) -> str:
    """The report's numbers, for the progress line."""
    threads = report["without_gil"]
    return (
        f"import {report['import']['ms']} ms (spied), "
        f"import tvm_ffi {report['tvm_ffi_import']['ms']} ms, "
        f"{threads['calls']} calls from {threads['threads']} threads without the GIL in "
        f"{threads['seconds']} s"
    )


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-4000:]}"
    assert lines, f"no report: {proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    return report


# --- the wheel under test ---------------------------------------------------------------


@pytest.fixture(scope="module")
def portable_wheel(
    tmp_path_factory: pytest.TempPathFactory, progress: Callable[[str], None]
) -> Path:
    """This project's combined abi3 wheel for this platform holding the portable library:
    ``dist/``'s (``nox -s build``) when it holds it, else one ``nox -s build``'s own steps
    make from the checkout with the portable cell alone (``build_portable_cells``, then
    ``assemble_dist`` with the auditwheel repair: a manylinux wheel, as released)."""
    from devtools.base.wheelnames import parse_wheel_name
    from devtools.build import cellbuild as build
    from devtools.build import wheels
    from devtools.envs.emulated import combined_wheel
    from devtools.matrix.cells import group_dir, portable_cells
    from devtools.matrix.reader import load_matrix

    from _torch_c_dlpack_ext_core.naming import ANY, MANIFEST_NAME, PACKAGE
    from _torch_c_dlpack_ext_core.version import __version__

    platform = "linux_x86_64"
    dist = ROOT / "dist"
    found = combined_wheel(dist, platform) if dist.is_dir() else None
    if found is not None and str(parse_wheel_name(found.name).version) == __version__:
        with zipfile.ZipFile(found) as wheel:
            entries = json.loads(wheel.read(f"{PACKAGE}/{MANIFEST_NAME}"))["libraries"]
        if any(entry.get("torch") == ANY for entry in entries):
            progress(f"wheel under test: {found} (dist/)")
            return found
    matrix = load_matrix()
    (cell,) = [p for p in portable_cells(matrix.cells()) if p.id == f"{platform}-portable"]
    work = tmp_path_factory.mktemp("portable-wheel")
    (result,) = build.build_portable_cells([cell], work / "cells")
    assert result.entry is not None, result
    groups = {group_dir(work / "cells", cell): {result.entry.file}}
    made = wheels.assemble_dist(groups, work / "dist", matrix=matrix, repair=True)
    wheel = combined_wheel(work / "dist", platform)
    assert wheel is not None, made
    progress(f"wheel under test: {wheel.name}, built from the checkout with the portable "
             "cell alone (dist/ holds none with the portable library)")  # fmt: skip
    return wheel


# --- Debian trixie's python3-torch ----------------------------------------------------


def runtime_requirements() -> list[str]:
    """The wheel's own requirements (``[project] dependencies``): the root's venv installs
    offline, so its wheelhouse must hold them."""
    from build_backend._metadata import load_pyproject

    return [str(r) for r in load_pyproject(ROOT)["project"]["dependencies"]]


@pytest.fixture(scope="module")
def trixie(progress: Callable[[str], None]) -> tuple[Path, Path]:
    """The cached trixie root and its wheelhouse (made on first use)."""
    from devtools.base.errors import EmulationUnavailableError
    from devtools.envs import distro

    try:
        distro.check_host()
    except EmulationUnavailableError as exc:
        pytest.skip(f"no Debian root on this host: {exc}")
    started = time.monotonic()
    root = distro.provision_root(distro.TRIXIE)
    record = distro.root_record(root)
    # The compiler spies are the proof; that the root has no compiler at all is the
    # stronger setting (a distribution's torch without the toolchain to build anything).
    assert record["compilers"] == [], record
    house = distro.wheelhouse(root, [TVM_FFI, *runtime_requirements()])
    progress(f"trixie root and wheelhouse ready in {time.monotonic() - started:.1f} s")
    return root, house


@pytest.mark.needs_root  # debootstrap, chroot, mount /proc
def test_trixie_python3_torch(
    trixie: tuple[Path, Path], portable_wheel: Path, progress: Callable[[str], None]
) -> None:
    """Debian's own torch 2.6.0 (cxx11 ABI, CPython 3.13), our wheel and apache-tvm-ffi
    installed by the root's pip into a ``--system-site-packages`` venv: the import selects
    the portable table, and the full proof holds."""
    from devtools.envs import distro

    root, house = trixie
    started = time.monotonic()
    run, _ = distro.fresh_venv(root, house, [TVM_FFI], wheel=portable_wheel)
    try:
        installed = time.monotonic()
        spies = write_compiler_spies(run.folder / "spies")
        script = run.copy_in(PROOF)
        proc = distro.run_in_venv(
            run,
            [script, f"--threads={THREADS}", f"--iterations={ITERATIONS}"],
            env={
                **spied_environment(run.inside(spies)),
                "TVM_FFI_CACHE_DIR": run.inside(run.folder / "tvm-ffi"),
            },
        )
        report = last_json(proc)
        judge(report, mode="package", calls=compiler_calls(spies))
        assert report["package"]["package"].startswith(run.inside(run.venv)), report["package"]
    finally:
        run.remove()
    assert report["torch"]["version"].endswith("+debian"), report["torch"]
    assert report["torch"]["cxx11_abi"] is True
    assert report["python"].startswith("3.13."), report["python"]
    progress(
        f"trixie: venv and install {installed - started:.1f} s, proof "
        f"{time.monotonic() - installed:.1f} s; {figures(report)}"
    )


# --- PyPI's torch 2.3.1 ---------------------------------------------------------------


def test_pypi_torch_231(
    tmp_path: Path, torch23_env: Any, portable_wheel: Path, progress: Callable[[str], None]
) -> None:
    """PyPI's torch 2.3.1+cu121 (pre-cxx11 ABI; below the matrix) on CPython 3.11: our
    wheel installed by uv into a fresh venv that sees the cached torch env (a ``.pth``,
    as ``--system-site-packages`` sees a distribution's torch): the import selects the
    portable table, and the full proof holds."""
    from devtools.base.hostenv import venv_python
    from devtools.base.steps import find_uv

    started = time.monotonic()
    venv = tmp_path / "venv"
    uv = find_uv()
    subprocess.run([uv, "venv", "--quiet", "--python", str(torch23_env.python), str(venv)],
                   check=True, timeout=300)  # fmt: skip
    python = venv_python(venv)
    (site,) = venv.glob("lib/python3.*/site-packages")
    (site / "torch-env.pth").write_text(f"{torch23_env.site_packages}\n")
    # --compile-bytecode: as pip installs (the import then reads .pyc files, as a user's does).
    install = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python)]
    subprocess.run([*install, str(portable_wheel)], check=True, timeout=600)
    installed = time.monotonic()
    spies = write_compiler_spies(tmp_path / "spies")
    proc = subprocess.run(
        [str(python), str(PROOF), f"--threads={THREADS}", f"--iterations={ITERATIONS}"],
        env={
            **clean_env(),
            **spied_environment(str(spies)),
            "TVM_FFI_CACHE_DIR": str(tmp_path / "tvm-ffi"),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    report = last_json(proc)
    judge(report, mode="package", calls=compiler_calls(spies))
    assert report["package"]["package"].startswith(str(venv)), report["package"]
    assert report["torch"]["version"].startswith(OLD_TORCH), report["torch"]
    assert report["torch"]["cuda"] == "12.1", report["torch"]
    assert report["torch"]["cxx11_abi"] is False
    progress(
        f"torch {OLD_TORCH}: venv and install {installed - started:.1f} s, proof "
        f"{time.monotonic() - installed:.1f} s; {figures(report)}"
    )
