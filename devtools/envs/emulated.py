"""Our aarch64 wheel on real aarch64 CPython and real aarch64 torch, under qemu-user, per
torch minor of the matrix (``python -m devtools emulated``, ``nox -s emulated``; how the
host emulates and the Debian root: :mod:`devtools.envs.emulation`).

What it provisions inside the root (from PyPI only), cached:

* per torch minor, a folder inside that root with PyPI's aarch64 wheels of the matrix's
  torch release and what the checks need (numpy, pytest, hypothesis and, where PyPI has
  an aarch64 wheel of it for CPython 3.11, apache-tvm-ffi), installed from this host by
  uv for the target platform (``--python-platform``: nothing is resolved under qemu);
* per run, the aarch64 combined wheel of ``dist/`` (``nox -s build -- --platform
  linux_aarch64`` makes it first when it is missing), installed ``--no-deps``.

Per minor, inside the root (``chroot``, ``/proc`` mounted for the run):

1. ``python -m torch_c_dlpack_ext --json``: the decision must be ``load`` of the bundled
   library of that torch minor (CPU, the torch's C++ ABI), and its round trip through the
   published capsule must hold;
2. ``import tvm_ffi`` (which imports us), then ``tvm_ffi.testing.echo`` of torch tensors
   (float32 2x3, a strided view, float16 (512,)): the result shares the data and equals
   the input (skipped, and said so, where no aarch64 tvm-ffi wheel exists);
3. the conformance suite's invariant half (``tests/conformance/test_diff_*.py``: torch
   2.4-2.9 have no table of their own to compare with) against the installed library,
   with a derandomized profile of ``--examples`` examples per property sized to fit a
   few minutes a minor under emulation.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from devtools.base.errors import HANDLED, ProvisionError
from devtools.base.paths import ROOT
from devtools.base.steps import find_uv
from devtools.envs.emulation import STEP_TIMEOUT_S, Emulation, capture, in_root, last_lines, log
from devtools.matrix.cells import Cell
from devtools.matrix.model import Matrix

__all__ = [
    "DEFAULT_EXAMPLES",
    "RUNS",
    "MinorResult",
    "check_minor",
    "combined_wheel",
    "ensure_wheel",
    "minor_env",
    "select_minors",
    "stage_suite",
]


#: Inside the root.
_ENVS = Path("opt/tcde/envs")
RUNS = Path("opt/tcde/runs")
#: What every per-minor folder holds besides torch (pure Python, or aarch64 wheels).
CHECK_REQUIREMENTS = ("numpy", "pytest", "hypothesis", "packaging", "filelock")
TVM_FFI = "apache-tvm-ffi"
#: Examples per conformance property under emulation (the CI profile runs 150 natively).
DEFAULT_EXAMPLES = 40
_PROFILE_PLUGIN = "tcde_emulated_profile"
_PROFILE_SOURCE = """\
from hypothesis import HealthCheck, settings

settings.register_profile(
    "emulated", max_examples={examples}, derandomize=True, database=None, deadline=None,
    suppress_health_check=list(HealthCheck), print_blob=True,
)
"""
#: tvm-ffi's echo of torch tensors: the exchange API in both directions through tvm-ffi.
_ECHO = r"""
import sys
import torch
import tvm_ffi
import tvm_ffi.testing
assert "torch_c_dlpack_ext" in sys.modules, "import tvm_ffi did not import torch_c_dlpack_ext"
import torch_c_dlpack_ext as ext
status = ext.status()
assert status.kind.value == "load", f"decision {status.kind.value}: {status.reason}"
cases = [
    torch.arange(6, dtype=torch.float32).reshape(2, 3),
    torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:],
    torch.ones(512, dtype=torch.float16),
]
for x in cases:
    y = tvm_ffi.testing.echo(x)
    assert isinstance(y, torch.Tensor), type(y)
    assert y.data_ptr() == x.data_ptr(), "echo did not share the data"
    assert y.shape == x.shape and y.stride() == x.stride() and y.dtype == x.dtype
    assert torch.equal(x, y)
print("echo ok", len(cases), "tensors, tvm-ffi", getattr(tvm_ffi, "__version__", "?"))
"""


@dataclasses.dataclass
class MinorResult:
    """What happened to one torch minor."""

    minor: str
    torch: str
    ok: bool = False
    seconds: float = 0.0
    #: ``ok`` details (cases run, echo) or the cause of the failure.
    detail: str = ""
    steps: dict[str, str] = dataclasses.field(default_factory=dict)


def _uv_install(emulation: Emulation, target: Path | str, *args: str) -> list[str]:
    """``uv pip install`` into ``target`` for ``emulation``'s CPython and platform (the
    wheels a foreign interpreter would take, chosen on this host)."""
    return [
        find_uv(),
        "pip",
        "install",
        "--target",
        str(target),
        "--python",
        sys.executable,
        "--python-version",
        emulation.python,
        "--python-platform",
        emulation.uv_platform,
        *args,
    ]


def _uv_target(target: Path, emulation: Emulation, *requirements: str) -> None:
    proc = capture(_uv_install(emulation, target, "--quiet", *requirements), timeout=3600)
    if proc.returncode != 0:
        raise ProvisionError(f"uv pip install {' '.join(requirements)} failed: {last_lines(proc)}")


def has_wheel(requirement: str, emulation: Emulation) -> bool:
    """Whether PyPI has a wheel of ``requirement`` that installs in ``emulation``'s root
    (a dry run: nothing is downloaded but metadata)."""
    with tempfile.TemporaryDirectory(prefix="tcde-probe-") as tmp:
        cmd = _uv_install(
            emulation, tmp, "--dry-run", "--no-deps", "--only-binary", ":all:", requirement
        )
        return capture(cmd, timeout=120).returncode == 0


def minor_env(root: Path, cell: Cell, emulation: Emulation) -> tuple[Path, bool]:
    """The cached folder (inside ``root``) holding ``cell``'s torch release for the
    emulated CPython and what the checks need; and whether it holds apache-tvm-ffi."""
    from filelock import FileLock

    release = cell.torch.release
    env = root / _ENVS / f"py{emulation.python}-torch{release}"
    marker = env / ".tcde-env-complete.json"
    with FileLock(str(env) + ".lock", timeout=3600):
        if not marker.is_file():
            shutil.rmtree(env, ignore_errors=True)
            started = time.monotonic()
            platform = cell.platform.name
            tvm = has_wheel(TVM_FFI, emulation)
            extra = [TVM_FFI] if tvm else []
            log(
                f"installing torch=={release} {' '.join([*CHECK_REQUIREMENTS, *extra])} "
                f"({platform} wheels) into {env}"
            )
            try:
                _uv_target(env, emulation, f"torch=={release}", *CHECK_REQUIREMENTS, *extra)
            except BaseException:
                shutil.rmtree(env, ignore_errors=True)
                raise
            record = {
                "torch": release,
                "tvm_ffi": tvm,
                "seconds": round(time.monotonic() - started, 1),
            }
            atomic_write_bytes(marker, (json.dumps(record) + "\n").encode())
        tvm = bool(json.loads(marker.read_text())["tvm_ffi"])
    return env, tvm


def combined_wheel(dist: Path, platform: str) -> Path | None:
    """The combined abi3 wheel of ``platform`` in ``dist`` (not a variant wheel), if any."""
    from devtools.base.wheelnames import parse_wheel_name, platform_key

    # A matrix platform's name is a wheel platform tag: its (family, architecture) is the
    # group of every tag a repair may give that platform's wheel.
    wanted = platform_key(platform)
    found = []
    for path in sorted(dist.glob("*.whl")):
        wheel = parse_wheel_name(path.name)
        if wheel.label is None and any(
            t.abi == "abi3" and platform_key(t.platform) == wanted for t in wheel.tags
        ):
            found.append(path)
    return found[-1] if found else None


def ensure_wheel(dist: Path, platform: str) -> Path:
    """The combined wheel of ``platform`` in ``dist``; built first when missing."""
    wheel = combined_wheel(dist, platform)
    if wheel is not None:
        return wheel
    from devtools.base import cli

    log(f"no {platform} combined wheel in {dist}: nox -s build -- --platform {platform}")
    code = cli.main(["build", "--platform", platform, "--out", str(dist)])
    wheel = combined_wheel(dist, platform)
    if wheel is None:
        raise ProvisionError(
            f"the build for {platform} (exit {code}) put no combined wheel into {dist}"
        )
    return wheel


def _check_decision(
    root: Path, paths: Sequence[Path], cell: Cell, result: MinorResult, causes: list[str]
) -> str:
    """``python -m torch_c_dlpack_ext --json``: our library of this torch minor and ABI is
    loaded and its round trip holds. Returns the loaded library's path in the root."""
    diag = in_root(root, paths, ["-m", "torch_c_dlpack_ext", "--json"], env={})
    library = ""
    try:
        # Read unchecked: a missing or mistyped field is caught below as a failed check.
        report = json.loads(diag.stdout)
        decision = report["decision"]
        library = str(decision.get("library") or "")
        info = report.get("build_info") or {}
        expected = f"{cell.torch.minor}"
        if decision["kind"] != "load":
            causes.append(f"decision {decision['kind']}: {decision.get('reason')}")
        elif f"{info.get('torch_major')}.{info.get('torch_minor')}" != expected:
            causes.append(
                f"loaded a library for torch {info.get('torch_major')}."
                f"{info.get('torch_minor')}, not {expected}"
            )
        elif bool(info.get("cxx11_abi")) != bool(cell.cxx11_abi):
            causes.append(f"loaded cxx11_abi={info.get('cxx11_abi')}, torch uses {cell.cxx11_abi}")
        if not report["smoke_test"]["ok"]:
            causes.append(f"round trip: {report['smoke_test']['detail']}")
        result.steps["decision"] = f"{decision['kind']} {Path(library).name}"
        result.steps["round trip"] = "ok" if report["smoke_test"]["ok"] else "failed"
    except (ValueError, KeyError, TypeError):
        causes.append(f"python -m torch_c_dlpack_ext --json: {last_lines(diag)}")

    return library


def check_minor(
    root: Path, cell: Cell, wheel: Path, emulation: Emulation, *, examples: int, run_dir: Path
) -> MinorResult:
    """Install ``wheel`` beside ``cell``'s torch in ``root`` and run the three checks."""
    started = time.monotonic()
    result = MinorResult(minor=cell.torch.minor, torch=cell.torch.release)
    pkg = run_dir / f"pkg-{cell.torch.minor}"
    try:
        env, tvm = minor_env(root, cell, emulation)
        _uv_target(pkg, emulation, "--no-deps", str(wheel))
    except HANDLED as exc:
        result.detail = f"provisioning: {exc}"
        result.seconds = round(time.monotonic() - started, 1)
        return result
    paths = [pkg, env]
    causes: list[str] = []

    library = _check_decision(root, paths, cell, result, causes)

    if tvm:
        echo = in_root(root, paths, ["-c", _ECHO], env={"TVM_FFI_CACHE_DIR": "/tmp/tvm-ffi"})
        result.steps["tvm-ffi echo"] = "ok" if echo.returncode == 0 else "failed"
        if echo.returncode != 0:
            causes.append(f"tvm-ffi echo: {last_lines(echo)}")
    else:
        result.steps["tvm-ffi echo"] = f"not run: no {TVM_FFI} wheel for this platform"

    if library and examples > 0:
        suite = run_dir / "src"
        inside_lib = library
        conf = in_root(
            root,
            [suite, suite / "tests", *paths],
            [
                "-m",
                "pytest",
                *sorted(
                    f"tests/conformance/{p.name}"
                    for p in (suite / "tests" / "conformance").glob("test_diff_*.py")
                ),
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                _PROFILE_PLUGIN,
                "--confcutdir",
                "tests/conformance",
                "--hypothesis-profile=emulated",
            ],
            env={"TCDE_TEST_LIBRARY": inside_lib},
            cwd=f"/{suite.relative_to(root)}",
            timeout=STEP_TIMEOUT_S * 2,
        )
        lines = (conf.stdout + conf.stderr).splitlines()
        summary = next((ln for ln in lines if ln.startswith("conformance: ") and "cases" in ln), "")
        result.steps["conformance"] = summary.removeprefix("conformance: ") or "no summary"
        cases = summary.split()[1] if len(summary.split()) > 1 else "0"
        if conf.returncode != 0:
            failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))][:3]
            causes.append(
                f"conformance exit {conf.returncode}: {' | '.join(failed) or last_lines(conf)}"
            )
        elif not cases.isdigit() or int(cases) == 0:
            # Every property skipped (no hypothesis, no library): nothing was checked.
            causes.append(f"conformance ran no case: {last_lines(conf)}")
    result.ok = not causes
    result.detail = (
        "; ".join(causes) if causes else "; ".join(f"{k}: {v}" for k, v in result.steps.items())
    )
    result.seconds = round(time.monotonic() - started, 1)
    return result


def stage_suite(run_dir: Path, examples: int) -> None:
    """Copy the conformance suite (and what it imports) into the run folder."""
    tests = run_dir / "src" / "tests"
    tests.mkdir(parents=True)
    for name in ("conformance", "exchange_suite"):
        shutil.copytree(
            ROOT / "tests" / name, tests / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    plugin = run_dir / "src" / f"{_PROFILE_PLUGIN}.py"
    plugin.write_text(_PROFILE_SOURCE.format(examples=examples))


def select_minors(matrix: Matrix, platform: str, minors: Sequence[str] | None) -> list[Cell]:
    """One CPU abi3 cell per torch minor of ``platform`` (``minors``: only those)."""
    cells = [
        c
        for c in matrix.select(platform=[platform])
        if c.backend.value == "cpu" and not c.freethreaded
    ]
    by_minor = {c.torch.minor: c for c in cells}
    if minors:
        unknown = sorted(set(minors) - set(by_minor))
        if unknown:
            raise ConfigError(
                f"--torch {','.join(unknown)}: no CPU cell of {platform} in matrix.toml "
                f"(it has {', '.join(by_minor)})"
            )
        return [by_minor[m] for m in minors]
    return list(by_minor.values())
