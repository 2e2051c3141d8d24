"""The variant invariant, checked on a dist: whatever variant wheel an installer that
follows PEPs 825/850 selects for a torch, the runtime selector decides with it exactly
what it decides with the combined wheel of the same tags (the same library loaded, the
same fallbacks, the same portable table; or the same defer). So no variant can leave a
user "unavailable" where the combined wheel would have served.

A variant's only property is ``abi_dependency :: torch :: X.Y``, so an installer selects
it for torch X.Y.* of any build (CPU, CUDA, ROCm, XPU; either C++ ABI; with or without a
driver): the check runs the wheel's own selector (``decide``, its pure policy) over all of
those torches, for each Python the wheel serves, against both manifests. It runs in a
child interpreter with the unpacked variant wheel on ``sys.path`` (developer tools never
import the package), torch blocked, through the project's one ``run()`` helper.

``python -m devtools verify`` runs it on every dist (:func:`check_variants`), and
tests/integration/test_variants.py runs it after real uv installs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.naming import ENV_PREFIX
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ReleaseError
from devtools.base.wheelnames import dist_name_version
from devtools.build.variants import (
    check_metadata,
    minor_of_label,
    variant_label,
    variant_metadata,
    variants_index,
)
from devtools.release.distfiles import WheelInfo, read_wheel, variants_index_name

__all__ = [
    "TORCH_BUILDS",
    "check_variant_metadata",
    "check_variants",
    "decisions",
    "torch_cases",
]

#: The torch builds a variant's torch minor can come in: (backend, torch.version.cuda,
#: torch.version.hip). An XPU torch is told by ``torch.version.xpu``: the probe sets it.
TORCH_BUILDS = (
    ("cpu", None, None),
    ("cuda", "12.8", None),
    ("rocm", None, "6.4"),
    ("xpu", None, None),
)

#: Run by a child interpreter whose ``sys.path`` starts with an unpacked wheel:
#: argv[1] a JSON list of cases, argv[2:] manifests; prints, per manifest, each case's
#: decision as ``[kind, backend, entry, fallbacks, portable]`` (library file names).
#: torch is blocked, so importing the package decides nothing (its warning is ignored).
PROBE = r"""
import json, sys, warnings
sys.modules["torch"] = None
warnings.simplefilter("ignore")
from _torch_c_dlpack_ext_core.files import load_manifest
from torch_c_dlpack_ext._decide import Settings, decide
from torch_c_dlpack_ext._torchinfo import TorchInfo
from _torch_c_dlpack_ext_core.naming import Backend

def name(entry):
    return None if entry is None else entry.file

cases = json.loads(sys.argv[1])
out = []
for path in sys.argv[2:]:
    manifest = load_manifest(__import__("pathlib").Path(path))
    rows = []
    for case in cases:
        info = TorchInfo(
            version=case["version"], backend=Backend(case["backend"]),
            cxx11_abi=case["cxx11_abi"], cuda_version=case["cuda"], hip_version=case["hip"],
            has_capsule=case["has_capsule"], has_legacy_int=False,
            has_to_dlpack=case["has_to_dlpack"],
            python=(tuple(case["python"][0]), case["python"][1]),
        )
        d = decide(info, manifest, Settings())
        rows.append([d.kind.value, None if d.backend is None else d.backend.value,
                     name(d.entry), [name(e) for e in d.fallbacks], name(d.portable)])
    out.append(rows)
print(json.dumps(out))
"""


def _pythons(wheel: WheelInfo) -> list[tuple[tuple[int, int], bool]]:
    """The interpreters a wheel installs on, by its tags: the oldest and a newer GIL
    CPython for abi3, the one free-threaded CPython of a ``cp314t`` wheel."""
    pythons: set[tuple[tuple[int, int], bool]] = set()
    for tag in wheel.tags:
        interpreter, abi, _ = tag.split("-")
        if abi == "abi3":
            floor = (3, int(interpreter[3:]))
            pythons |= {(floor, False), ((3, 13), False)}
        elif abi.endswith("t") and abi.startswith("cp"):
            pythons.add(((3, int(abi[3:-1])), True))
        elif abi.startswith("cp"):
            pythons.add(((3, int(abi[3:])), False))
    return sorted(pythons)


def torch_cases(
    minor: str, pythons: Sequence[tuple[tuple[int, int], bool]], *, abis: Sequence[bool | None]
) -> list[dict[str, object]]:
    """Every torch of ``minor`` an installer may pair with its variant: each build
    (:data:`TORCH_BUILDS`), each C++ ABI in ``abis``, a release and a local/dev version,
    with and without ``torch._C._to_dlpack``, on each of ``pythons``."""
    major, minor_number = (int(x) for x in minor.split("."))
    has_api = (major, minor_number) >= (2, 10)
    return [
        {
            "version": version, "backend": backend, "cxx11_abi": abi, "cuda": cuda,
            "hip": hip, "has_capsule": has_api, "has_to_dlpack": to_dlpack,
            "python": [list(python[0]), python[1]],
        }
        for backend, cuda, hip in TORCH_BUILDS
        for abi in abis
        for version in (f"{minor}.0", f"{minor}.0a0+gitabc")
        for to_dlpack in (True, False)
        for python in pythons
    ]  # fmt: skip


def decisions(
    package_root: Path, manifests: Sequence[Path], cases: Sequence[dict[str, object]]
) -> list[list[list[object]]]:
    """The selector of the package at ``package_root`` (a folder holding
    ``torch_c_dlpack_ext``): per manifest, each case's decision (see :data:`PROBE`)."""
    env = {**os.environ, "PYTHONPATH": str(package_root), "PYTHONNOUSERSITE": "1"}
    env = {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX)}
    proc = run(
        [sys.executable, "-c", PROBE, json.dumps(cases), *manifests],
        env=env,
        echo=False,
        timeout=300,
    )
    result: list[list[list[object]]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _unpack(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into)
    return into


def _labels_text(labels: set[str]) -> str:
    return ", ".join(sorted(labels)) or "none"


def _check_own_metadata(wheel: WheelInfo) -> None:
    """``wheel``'s ``variant.json`` is the variant its file name labels."""
    if wheel.label is None:
        raise ReleaseError(f"{wheel.path.name}: a variant wheel without a label")
    minor = minor_of_label(wheel.label)
    with zipfile.ZipFile(wheel.path) as archive:
        name = next((n for n in archive.namelist() if n.endswith(".dist-info/variant.json")), None)
        if name is None:
            raise ReleaseError(f"{wheel.path.name}: no *.dist-info/variant.json")
        own = check_metadata(json.loads(archive.read(name)), f"{wheel.path.name}: {name}")
    if own != variant_metadata([minor]):
        raise ReleaseError(
            f"{wheel.path.name}: its {name} describes {dict(own['variants'])}, "
            f"not the variant its file name labels ({wheel.label}: torch {minor} only)"
        )


def _check_complete(wheels: Sequence[WheelInfo]) -> None:
    """Every torch minor a combined wheel holds a library of has its variant of the
    same tags."""
    variant_tags = {(w.tags, w.label) for w in wheels if w.variant}
    for wheel in wheels:
        if wheel.variant or wheel.universal:
            continue
        for minor in sorted({e.torch for e in wheel.libraries if not e.portable}):
            if (wheel.tags, variant_label(minor)) not in variant_tags:
                raise ReleaseError(
                    f"{wheel.path.name} holds libraries of torch {minor} but the dist has "
                    f"no {variant_label(minor)} variant of its tags; rebuild the dist "
                    "(nox -s build, or nox -s assemble) rather than dropping wheels"
                )


def check_variant_metadata(dist: Path, wheels: Sequence[WheelInfo]) -> list[str]:
    """What an installer reads before it picks a variant, checked against the wheels:

    - each variant wheel's ``variant.json`` describes exactly the variant its file name
      labels (``t28``: only ``abi_dependency :: torch :: 2.8``);
    - the dist's ``{name}-{version}-variants.json`` lists exactly the labels of the
      variant wheels, with their properties (uv 0.13.10 installs the combined wheel, with
      no word, for a label the file lacks or describes otherwise, and for every label
      when the file is missing);
    - every torch minor a combined wheel holds a library of has its variant of the same
      tags (a missing one would fall back to the combined wheel: no harm, but not the
      release that was built).

    All of one version (a stale wheel of another would be paired with a variant, and
    served beside it). Returns one line; raises :class:`ReleaseError` naming the file and
    the fault."""
    versions = sorted({str(dist_name_version(w.path.name)[1]) for w in wheels})
    if len(versions) > 1:
        # A variant would be held to (and an installer would pick from) another version.
        raise ReleaseError(
            f"{dist}: wheels of versions {', '.join(versions)}; a release is one version "
            "(remove the stale wheels)"
        )
    variant_wheels = [w for w in wheels if w.variant]
    files = sorted(dist.glob("*-variants.json"))
    if not variant_wheels and not files:
        return [f"{dist}: no variant wheels and no variants file"]
    if len(files) != 1:
        raise ReleaseError(
            f"{dist}: {len(files)} variants files ({', '.join(f.name for f in files)}) "
            "beside variant wheels; a release has exactly one, written by nox -s build"
        )
    (variants_file,) = files
    if versions and variants_file.name != variants_index_name(versions[0]):
        raise ReleaseError(
            f"{variants_file.name} beside wheels of {versions[0]}: an installer reads "
            f"{variants_index_name(versions[0])} only; write it again from the wheels"
        )
    try:
        for wheel in variant_wheels:
            _check_own_metadata(wheel)
        want = variants_index([w.path for w in variant_wheels]) if variant_wheels else None
        published = check_metadata(json.loads(variants_file.read_bytes()), variants_file.name)
    except (BuildError, ValueError) as exc:
        raise ReleaseError(f"{dist}: variant metadata: {exc}") from exc
    have = set(published["variants"])
    wanted = set() if want is None else set(want["variants"])
    if have != wanted:
        raise ReleaseError(
            f"{variants_file.name} lists {_labels_text(have)} but the variant wheels are "
            f"{_labels_text(wanted)} (extra: {_labels_text(have - wanted)}; missing: "
            f"{_labels_text(wanted - have)}); an installer never picks a variant the file "
            "lacks: write it again from the wheels (nox -s build, or assemble)"
        )
    if want is not None and published != want:
        raise ReleaseError(
            f"{variants_file.name} differs from the variant wheels' variant.json "
            f"(file: {json.dumps(published, sort_keys=True)}; wheels: "
            f"{json.dumps(want, sort_keys=True)})"
        )
    _check_complete(wheels)
    return [
        f"{variants_file.name}: lists exactly the {len(wanted)} variant labels, as the wheels do"
    ]


def check_variants(dist: Path) -> list[str]:
    """Check every variant wheel of ``dist`` against the combined wheel of its tags:
    the same bytes for each library of its minor and the portable table, no library of
    another minor, and the same decision for every torch of its minor
    (:func:`torch_cases`); first the variant metadata (:func:`check_variant_metadata`).
    Returns one line per variant; raises :class:`ReleaseError`
    naming the wheel, the torch and both decisions on the first difference."""
    wheels = [read_wheel(p) for p in sorted(dist.glob("*.whl"))]
    combined = {w.tags: w for w in wheels if not w.variant and not w.universal}
    lines: list[str] = check_variant_metadata(dist, wheels)
    for variant in (w for w in wheels if w.variant):
        if variant.label is None:
            raise ReleaseError(f"{variant.path.name}: a variant wheel without a label")
        minor = minor_of_label(variant.label)
        partner = combined.get(variant.tags)
        if partner is None:
            raise ReleaseError(f"{variant.path.name}: no combined wheel of the same tags")
        want = {(e.file, e.sha256) for e in partner.libraries if e.portable or e.torch == minor}
        have = {(e.file, e.sha256) for e in variant.libraries}
        if have != want:
            extra, lacking = sorted(f for f, _ in have - want), sorted(f for f, _ in want - have)
            faults = ([f"carries {', '.join(extra)} beyond"] if extra else []) + (
                [f"lacks {', '.join(lacking)} of"] if lacking else []
            )
            raise ReleaseError(
                f"{variant.path.name}: {' and '.join(faults)} what {partner.path.name} holds "
                f"for torch {minor} (its libraries of that minor and its portable table)"
            )
        # Linux torches come with either C++ ABI; elsewhere the manifest says None.
        linux = any(e.cxx11_abi is not None for e in partner.libraries)
        abis: list[bool | None] = [True, False] if linux else [None]
        cases = torch_cases(minor, _pythons(variant), abis=abis)
        with tempfile.TemporaryDirectory(prefix="tcde-variant-") as tmp:
            root = _unpack(variant.path, Path(tmp) / "variant")
            other = _unpack(partner.path, Path(tmp) / "combined")
            manifest = "torch_c_dlpack_ext/manifest.json"
            got, ref = decisions(root, [root / manifest, other / manifest], cases)
        for case, mine, theirs in zip(cases, got, ref):
            if mine != theirs:
                raise ReleaseError(
                    f"{variant.path.name}: for torch {case['version']} ({case['backend']}, "
                    f"cxx11abi {case['cxx11_abi']}, python {case['python']}) the selector "
                    f"decides {mine} where {partner.path.name} decides {theirs}"
                )
        kinds = sorted({row[0] for row in got if isinstance(row[0], str)})
        lines.append(
            f"{variant.path.name}: {len(cases)} torches of {minor} decide as with "
            f"{partner.path.name} ({', '.join(kinds)})"
        )
    return lines
