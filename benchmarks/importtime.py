"""Import overhead: ``import torch_c_dlpack_ext`` after ``import torch``, in fresh processes.

* defer path: the running torch 2.13 already has the API, so the package loads nothing;
  against an EMPTY package of the same name (what any import costs at all);
* load path: torch 2.8 with our library packaged (package dir + the manifest of the
  release's combined wheel, twenty native entries and the portable table's on Linux
  x86_64, all checked on every import), against
  torch-c-dlpack-ext 0.1.5 on the same torch. PyPI's torch 2.8.0 is a CUDA 12.8 build, so
  ours loads its CUDA library (the backend is the build flavour; no device is asked);
  0.1.5 asks ``torch.cuda.is_available()`` and, on a host without a GPU, loads its CPU
  library.

0.1.5's import is mostly the import of ``packaging.version`` (about three fifths of it:
compiling its version regex, CPU-bound Python), ours mostly the dynamic loader, system
calls and unmarshalling, so the ratio moves with the kind of machine: the same code
measured 0.53-0.55 on an Intel Xeon machine and 0.42-0.46 on an AMD EPYC one (2026-12-02),
then 0.53 on a faster AMD EPYC machine whose 0.1.5 run loaded packaging 26.4 (2026-12-03;
every variant took about half the time, 0.1.5's a little more than half; our import's own
code measured the same as the day before's, A/B in one interleaved run).
Each variant records the ``packaging`` its import left loaded (newer releases import
faster: 24.2 ~5.0 ms, 25.0 ~4.7 ms, 26.4 ~3.9 ms on the AMD machine without torch).

The targets are ratios within one run (rounds interleave the variants, each round starting
at the next one, so machine load and the order hit all of them alike): defer path median <=
3 x the empty package's, load path median <= 0.5 x 0.1.5's (the aim is 0.4). Each sample
also records the thread's CPU time around the import (``time.thread_time_ns``), which a
loaded machine inflates less than the wall clock; the same ratios of CPU time are reported
beside them.

Each sample is taken inside its own subprocess with ``time.perf_counter_ns`` around the
import statement alone, so interpreter start-up and ``import torch`` are excluded. An
untimed warm-up round first writes bytecode (under a private ``PYTHONPYCACHEPREFIX``), so
every variant is measured as an installed package with its ``.pyc`` files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchCDLPackExtError
from _torch_c_dlpack_ext_core.files import write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import CORE_PACKAGE, LIBS_DIR, MANIFEST_NAME, PACKAGE, Backend
from _torch_c_dlpack_ext_core.run import run

from .report import Table
from .stats import Target, summarize
from .subjects import (
    OLD_TORCH,
    ROOT,
    BenchContext,
    BuiltLibrary,
    OldTorchEnv,
    build_our_library,
    fetch_legacy_release,
    old_torch_env,
    subprocess_env,
)

__all__ = ["PROBE", "ImportVariant", "empty_package", "package_with_library", "run_import"]

#: Names of the variants the targets compare.
DEFER = "defer (torch 2.13, ours)"
EMPTY = "defer (torch 2.13, empty package)"
LOAD = f"load (torch {OLD_TORCH}, ours)"
#: The same path of the ``--baseline`` checkout (the tree a change is measured against).
BASELINE_LOAD = f"load (torch {OLD_TORCH}, baseline tree)"
#: The targets: ours / reference, medians of the same run.
DEFER_LIMIT = 3.0
LOAD_LIMIT = 0.5
#: What the CUDA library of torch 2.8.0+cu128 compiles against (the runtime and crt headers).
CUDA_HEADERS = ("nvidia-cuda-runtime-cu12==12.8.*", "nvidia-cuda-nvcc-cu12==12.8.*")

#: Runs in the measured process; prints what it measured and whether the API is now set.
PROBE = """
import json, sys, time
import torch
start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
import torch_c_dlpack_ext
cpu, elapsed = time.thread_time_ns() - cpu_start, time.perf_counter_ns() - start
print(json.dumps({
    "ns": elapsed,
    "cpu_ns": cpu,
    "torch": torch.__version__,
    "capsule": hasattr(torch.Tensor, "__dlpack_c_exchange_api__"),
    "module": torch_c_dlpack_ext.__file__,
    "packaging": getattr(sys.modules.get("packaging"), "__version__", None),
}))
"""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportVariant:
    """One way of importing the package: which interpreter, and what is on its path."""

    name: str
    python: Path
    pythonpath: tuple[Path, ...]
    #: Where the imported module must come from, to catch a stray installed copy.
    expected_root: Path


def package_with_library(
    library: BuiltLibrary, destination: Path, *, source: Path = ROOT / "python"
) -> Path:
    """A copy of the package source (under ``source``: this checkout's ``python/``, or a
    baseline's) with ``library`` bundled and listed in its manifest, the layout a wheel
    installs. Returns the directory to put on ``PYTHONPATH``."""
    if destination.exists():
        shutil.rmtree(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".pkg.", dir=destination.parent))
    try:
        package = staging / PACKAGE
        for name in (PACKAGE, CORE_PACKAGE):  # the wheel installs both
            shutil.copytree(
                source / name, staging / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        relative = f"{LIBS_DIR}/{library.path.name}"
        (package / LIBS_DIR).mkdir(exist_ok=True)
        shutil.copy2(library.path, package / relative)
        entry = library.entry._replace(file=relative)
        write_manifest(package / MANIFEST_NAME, [*release_neighbours(entry), entry])
        os.replace(staging, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


def release_neighbours(entry: ManifestEntry) -> list[ManifestEntry]:
    """The other entries of the combined wheel that would carry ``entry`` (the release's
    cells of its platform and Python ABI, from matrix.toml, and the group's portable
    table), so the import reads and checks a manifest of the size users install: every
    entry is validated on every import, and the release's abi3 wheel for Linux x86_64
    lists twenty native libraries and the portable one. Their files are not bundled (only
    the matching entry's library is ever read)."""
    from devtools.matrix.cells import library_entry, portable_cells
    from devtools.matrix.reader import load_matrix

    cells = load_matrix().cells()
    neighbours = [
        library_entry(
            portable,
            file=f"{LIBS_DIR}/{portable.library}",
            size=entry.size,
            sha256=entry.sha256,
            toolchain=entry.toolchain,
            dlpack=entry.dlpack,
        )
        for portable in portable_cells(cells)
        if (portable.platform.name, portable.python) == (entry.platform, entry.python)
    ]
    for cell in cells:
        if cell.platform.name != entry.platform or cell.python != entry.python:
            continue
        if (cell.torch.minor, cell.backend, cell.cxx11_abi) == (
            entry.torch,
            entry.backend,
            entry.cxx11_abi,
        ):
            continue
        neighbours.append(
            entry._replace(
                file=f"{LIBS_DIR}/{cell.library}",
                torch=cell.torch.minor,
                torch_build=cell.torch.release,
                backend=cell.backend,
                cxx11_abi=cell.cxx11_abi,
                gpu_toolkit=cell.toolkit,
                cell=cell.id,
            )
        )
    return neighbours


def empty_package(destination: Path) -> Path:
    """A package named like ours whose ``__init__.py`` is empty: the floor of any import.
    Returns the directory to put on ``PYTHONPATH``."""
    package = destination / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    return destination


def _sample(variant: ImportVariant, pycache: Path) -> dict[str, Any]:
    env = subprocess_env(pythonpath=variant.pythonpath, PYTHONPYCACHEPREFIX=str(pycache))
    # Installed packages come with bytecode (pip compiles it at install time); a
    # developer's PYTHONDONTWRITEBYTECODE would make every sample compile from source.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = run([variant.python, "-c", PROBE], env=env, cwd=variant.expected_root, echo=False)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    module = Path(result["module"]).resolve()
    if variant.expected_root.resolve() not in module.parents:
        raise ConfigError(
            f"import variant {variant.name!r} imported {module}, not the copy under "
            f"{variant.expected_root}; uninstall torch-c-dlpack-ext from {variant.python}'s "
            "environment"
        )
    return result


def _variants(ctx: BenchContext, errors: dict[str, str]) -> list[ImportVariant]:
    source = ROOT / "python"
    empty = empty_package(ctx.work_dir / "import" / "empty")
    variants = [
        ImportVariant(
            name=DEFER, python=Path(sys.executable), pythonpath=(source,), expected_root=source
        ),
        ImportVariant(
            name=EMPTY, python=Path(sys.executable), pythonpath=(empty,), expected_root=empty
        ),
    ]
    try:
        ctx.progress(f"import: provisioning an importable torch {OLD_TORCH} environment (cached)")
        env = old_torch_env(OLD_TORCH)
        legacy = fetch_legacy_release(ctx.work_dir)
        headers = _with_cuda_headers()
    except (TorchCDLPackExtError, ImportError) as exc:
        errors["old"] = f"{type(exc).__name__}: {exc}"
        return variants
    try:
        ctx.progress(f"import: packaging our library for torch {OLD_TORCH}")
        ours = build_our_library(
            headers.torch_dir,
            ctx.work_dir / "libs" / f"torch{OLD_TORCH}-cuda",
            python=env.python,
            backend=Backend.CUDA,
        )
        package_root = package_with_library(ours, ctx.work_dir / "import" / f"ours-{OLD_TORCH}")
        variants.append(
            ImportVariant(
                name=LOAD,
                python=env.python,
                pythonpath=(package_root,),
                expected_root=package_root,
            )
        )
        if ctx.baseline is not None:
            baseline_root = package_with_library(
                ours, ctx.work_dir / "import" / "baseline", source=ctx.baseline / "python"
            )
            variants.append(
                ImportVariant(
                    name=BASELINE_LOAD,
                    python=env.python,
                    pythonpath=(baseline_root,),
                    expected_root=baseline_root,
                )
            )
    except (TorchCDLPackExtError, ImportError) as exc:
        errors["ours"] = f"{type(exc).__name__}: {exc}"
        ctx.progress(f"import: our load path is unavailable: {errors['ours']}")
    variants.append(
        ImportVariant(
            name=f"load (torch {OLD_TORCH}, {legacy.version})",
            python=env.python,
            pythonpath=(legacy.root,),
            expected_root=legacy.root,
        )
    )
    return variants


def _with_cuda_headers() -> OldTorchEnv:
    """The same torch with the CUDA headers, to compile the CUDA library against (cached)."""
    from devtools.envs.torchenv import EnvKind, torch_env

    env = torch_env(OLD_TORCH, kind=EnvKind.NO_DEPS, extra=CUDA_HEADERS)
    return OldTorchEnv(python=Path(env.python), torch_dir=Path(env.torch_dir), version=env.version)


def run_import(ctx: BenchContext) -> tuple[dict[str, Any], list[Table], list[Target]]:
    """Time the import in fresh processes, rounds interleaving the variants."""
    repeats = 8 if ctx.quick else 30
    errors: dict[str, str] = {}
    variants = _variants(ctx, errors)
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    cpu_samples: dict[str, list[float]] = {v.name: [] for v in variants}
    details: dict[str, dict[str, Any]] = {}
    pycache = ctx.work_dir / "import" / "pycache"
    ctx.progress("import: warm-up round (writes bytecode, fills the page cache)")
    for variant in variants:
        _sample(variant, pycache)
    for round_number in range(repeats):
        ctx.progress(f"import: round {round_number + 1}/{repeats}")
        # Each round starts at another variant: on a loaded machine the process that runs
        # after another torch's measured 10 % slower or faster than the next one (the same
        # files A/B, 2026-12-08), so a fixed order would bias every ratio.
        shift = round_number % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            result = _sample(variant, pycache)
            samples[variant.name].append(result["ns"] / 1e6)
            cpu_samples[variant.name].append(result["cpu_ns"] / 1e6)
            details[variant.name] = {
                "torch": result["torch"],
                "capsule_set": result["capsule"],
                # What the import left imported of `packaging` (None: nothing): 0.1.5's
                # import is mostly `packaging.version`'s, compiling its version regex.
                "packaging": result.get("packaging"),
            }
    summaries = {name: summarize(values) for name, values in samples.items()}
    cpu_summaries = {name: summarize(values) for name, values in cpu_samples.items()}
    rows = tuple(
        (
            name,
            details[name]["torch"],
            "yes" if details[name]["capsule_set"] else "NO",
            f"{summaries[name].median:.2f}",
            f"{summaries[name].p90:.2f}",
            f"{cpu_summaries[name].median:.2f}",
        )
        for name in samples
    )
    table = Table(
        title=f"Import overhead of `import torch_c_dlpack_ext` after `import torch` "
        f"(ms, {repeats} fresh processes each)",
        headers=("variant", "torch", "API set", "median ms", "p90 ms", "median CPU ms"),
        rows=rows,
    )

    def median_of(name: str, *, published: bool = True, cpu: bool = False) -> float | None:
        summary = (cpu_summaries if cpu else summaries).get(name)
        if summary is None or (published and not details[name]["capsule_set"]):
            return None
        return summary.median

    def ratio(name: str, reference: str, *, published: bool, cpu: bool = False) -> float | None:
        ours = median_of(name, cpu=cpu)
        base = median_of(reference, published=published, cpu=cpu)
        return None if ours is None or not base else round(ours / base, 2)

    legacy = next((n for n in samples if n.startswith(f"load (torch {OLD_TORCH}, 0.")), "")
    targets = [
        Target(
            description=f"import, defer path (torch 2.13): median / the empty package's "
            f"({_ms(median_of(DEFER))} / {_ms(median_of(EMPTY, published=False))})",
            value=ratio(DEFER, EMPTY, published=False),
            limit=DEFER_LIMIT,
            comparison="<=",
            unit=" x",
        ),
        Target(
            description=f"import, load path (torch {OLD_TORCH}): median / {legacy or '0.1.5'}'s "
            f"({_ms(median_of(LOAD))} / {_ms(median_of(legacy))})",
            value=ratio(LOAD, legacy, published=True) if legacy else None,
            limit=LOAD_LIMIT,
            comparison="<=",
            unit=" x",
        ),
        Target(
            description="import, defer path, CPU time: median / the empty package's "
            f"({_ms(median_of(DEFER, cpu=True))} / "
            f"{_ms(median_of(EMPTY, published=False, cpu=True))})",
            value=ratio(DEFER, EMPTY, published=False, cpu=True),
            limit=DEFER_LIMIT,
            comparison="<=",
            unit=" x",
        ),
        Target(
            description=f"import, load path, CPU time: median / {legacy or '0.1.5'}'s "
            f"({_ms(median_of(LOAD, cpu=True))} / {_ms(median_of(legacy, cpu=True))})",
            value=ratio(LOAD, legacy, published=True, cpu=True) if legacy else None,
            limit=LOAD_LIMIT,
            comparison="<=",
            unit=" x",
        ),
    ]
    data = {
        "repeats": repeats,
        "torch_versions": sorted({d["torch"] for d in details.values()}),
        "variants": {
            name: {
                **details[name],
                "ms": summaries[name].to_json(),
                "samples_ms": samples[name],
                "cpu_ms": cpu_summaries[name].to_json(),
                "cpu_samples_ms": cpu_samples[name],
            }
            for name in samples
        },
        "errors": errors,
    }
    if BASELINE_LOAD in samples and LOAD in samples:
        # This tree's load path against the baseline's, wall and CPU time (no target: a
        # refactor must not be slower, which these say).
        data["against_baseline"] = {
            "baseline": str(ctx.baseline),
            "wall": ratio(LOAD, BASELINE_LOAD, published=True),
            "cpu": ratio(LOAD, BASELINE_LOAD, published=True, cpu=True),
            "baseline_vs_legacy_wall": ratio(BASELINE_LOAD, legacy, published=True)
            if legacy
            else None,
            "baseline_vs_legacy_cpu": ratio(BASELINE_LOAD, legacy, published=True, cpu=True)
            if legacy
            else None,
        }
        ctx.progress(f"import: this tree / the baseline's, load path: {data['against_baseline']}")
    return data, [table], targets


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"
