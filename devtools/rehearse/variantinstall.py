"""The variant invariant with a real variant-aware installer: uv with
``--preview-features wheel-variants`` installs ``torch-c-dlpack-ext`` from a dist, and
the selector of what it installed must decide as the combined wheel would (the same
library, or the same defer), for every case of :func:`variant_cases`.

The cases:

- every torch minor the dist's variants cover, and one past them (2.10: torch's own API);
- a CPU and a CUDA torch build, both C++ ABIs where the matrix has both (2.6);
- an NVIDIA driver present or absent (forced through the nvidia provider's variables,
  which uv's built-in copy of that provider reads);
- uv as it is (it skips ``abi_dependency``), and uv as it will be once it applies
  ``abi_dependency`` (emulated: the variants file's ``abi_dependency`` provider rewritten
  as a static list of the user's torch minor:
  :func:`~devtools.build.variants.emulate_abi_dependency`);
- from a PEP 503 index on 127.0.0.1 (:class:`~devtools.rehearse.indexserver.StaticIndexServer`)
  and from a ``--find-links`` folder.

The torch is a stand-in (:func:`write_fake_torch`): what the selector reads (its
version, ``torch.version``, ``compiled_with_cxx11_abi``, ``torch._C._to_dlpack``, the
capsule of a torch with the API) and its distribution metadata, so every build of every
minor can be tried on one machine; a real torch is passed as a ``python`` where one
exists. uv's log must name no unknown metadata schema and skip no provider but
``abi_dependency``. tests/integration/test_variants.py and ``nox -s rehearse`` run it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.files import sha256_of
from _torch_c_dlpack_ext_core.naming import DIST_NAME, ENV_PREFIX, PACKAGE
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ReleaseError
from devtools.base.steps import find_uv
from devtools.build.variants import emulate_abi_dependency, minor_of_label
from devtools.rehearse.indexserver import StaticIndexServer
from devtools.release.distfiles import ReleaseFiles, WheelInfo, collect
from devtools.release.variantindex import write_simple_pages

__all__ = [
    "FORCE_DRIVER",
    "Outcome",
    "VariantCase",
    "outcome_lines",
    "run_variant_cases",
    "variant_cases",
    "variant_rehearsal",
    "write_fake_torch",
]

#: The nvidia provider's variables that make uv see a CUDA 12.8 driver on a Hopper GPU.
FORCE_DRIVER = {
    "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "12.8",
    "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "9.0",
}
#: The two uv modes: as it is, and with ``abi_dependency`` applied (emulated).
MODES = ("uv", "abi_dependency")
SOURCES = ("index", "find-links")
INSTALL_TIMEOUT = 300.0


@dataclasses.dataclass(frozen=True)
class VariantCase:
    """One install and import: the user's torch, the machine, the installer, the source."""

    #: ``torch.__version__`` of the stand-in (``2.8.0``; ``+cu128`` for a CUDA build).
    torch: str
    backend: str
    cxx11_abi: bool
    driver: bool
    mode: str
    source: str

    @property
    def minor(self) -> str:
        return ".".join(self.torch.split("+")[0].split(".")[:2])

    def __str__(self) -> str:
        return (
            f"torch {self.torch} ({self.backend}, cxx11abi{int(self.cxx11_abi)}), "
            f"{'a' if self.driver else 'no'} driver, {self.mode}, {self.source}"
        )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one case gave: the wheel uv installed and the two decisions."""

    case: VariantCase
    #: The installed wheel's variant label (``None``: the combined wheel).
    label: str | None
    #: ``(kind, library file name)`` with what uv installed, and with the combined wheel.
    decided: tuple[str, str | None]
    combined: tuple[str, str | None]
    #: The selector's plan (:data:`Plan`) with what uv installed, and with the combined
    #: wheel: equal too, even where the outcome is "unavailable" on both sides.
    plan: Plan | None = None
    combined_plan: Plan | None = None


def _abis(files: ReleaseFiles, minor: str) -> list[bool]:
    found = {e.cxx11_abi for w in files.wheels for e in w.libraries if e.torch == minor}
    both = sorted(a for a in found if a is not None)
    # PyPI's 2.4-2.6 use the old ABI, 2.7+ the cxx11 one; a minor with both is tried both ways.
    return both or [tuple(int(x) for x in minor.split(".")) >= (2, 7)]


def variant_cases(files: ReleaseFiles) -> list[VariantCase]:
    """Every case for the variants ``files`` holds (see the module's docstring)."""
    minors = sorted(
        {minor_of_label(w.label) for w in files.wheels if w.variant and w.label},
        key=lambda m: tuple(int(x) for x in m.split(".")),
    )
    if not minors:
        raise ReleaseError("the dist holds no variant wheels")
    local = {"cpu": "+cpu", "cuda": "+cu128"}
    return [
        VariantCase(f"{minor}.0{local[backend]}", backend, abi, driver, mode, source)
        for minor in [*minors, "2.10"]
        for backend in ("cpu", "cuda")
        for abi in _abis(files, minor)
        for driver in (False, True)
        for mode in MODES
        for source in SOURCES
    ]


# --- the stand-in torch ---------------------------------------------------------------

_FAKE_TORCH = '''"""A stand-in torch: what torch-c-dlpack-ext's selector reads."""
import ctypes
import types

__version__ = {version!r}
version = types.ModuleType("torch.version")
version.__version__ = __version__
version.cuda = {cuda!r}
version.hip = {hip!r}
version.xpu = {xpu!r}


def compiled_with_cxx11_abi():
    return {abi!r}


class Tensor:
    pass


_C = types.ModuleType("torch._C")


def _to_dlpack(tensor):
    raise RuntimeError("a stand-in torch has no tensors")


_C._to_dlpack = _to_dlpack
if {has_api!r}:
    # torch >= 2.10 publishes its own exchange table as a capsule on Tensor.
    # Only its identity matters: the selector defers to torch's own capsule on sight.
    _TABLE = (ctypes.c_char * 64)()
    _NAME = ctypes.create_string_buffer(b"dlpack_exchange_api")  # lives as the capsule
    _new = ctypes.pythonapi.PyCapsule_New
    _new.restype = ctypes.py_object
    _new.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    _CAPSULE = _new(ctypes.addressof(_TABLE), ctypes.addressof(_NAME), None)
    Tensor.__dlpack_c_exchange_api__ = _CAPSULE
    _C._dlpack_exchange_api = lambda: _CAPSULE
'''


#: ``torch.version``'s (cuda, hip, xpu) of each stand-in build.
_STANDIN_VERSIONS: dict[str, tuple[str | None, str | None, str | None]] = {
    "cpu": (None, None, None),
    "cuda": ("12.8", None, None),
    "rocm": (None, "6.4.43482", None),
    "xpu": (None, None, "20250101"),
}


def write_fake_torch(root: Path, version: str, *, backend: str, cxx11_abi: bool) -> Path:
    """A stand-in torch ``version`` (a ``backend`` build: cpu, cuda, rocm or xpu, told
    apart as torch tells them, by ``torch.version.cuda``/``.hip``/``.xpu``; ``cxx11_abi``)
    under ``root``: the ``torch`` package and its ``.dist-info`` (an installer sees torch
    installed). Returns ``root``, for ``PYTHONPATH``."""
    if backend not in _STANDIN_VERSIONS:
        raise ReleaseError(
            f"a stand-in torch is a {', '.join(_STANDIN_VERSIONS)} build, not {backend!r}"
        )
    major, minor = (int(x) for x in version.split("+", maxsplit=1)[0].split(".")[:2])
    package = root / "torch"
    package.mkdir(parents=True, exist_ok=True)
    cuda, hip, xpu = _STANDIN_VERSIONS[backend]
    source = _FAKE_TORCH.format(
        version=version,
        cuda=cuda,
        hip=hip,
        xpu=xpu,
        abi=cxx11_abi,
        has_api=(major, minor) >= (2, 10),
    )
    (package / "__init__.py").write_text(source, "utf-8")
    info = root / f"torch-{version.split('+', maxsplit=1)[0]}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n", "utf-8"
    )
    (info / "INSTALLER").write_text("stand-in\n", "utf-8")
    (info / "RECORD").write_text("", "utf-8")
    return root


#: Imports torch, then the package; prints the outcome (its kind and the loaded
#: library's name), the selector's plan (the decision's kind and the libraries it names:
#: entry, fallbacks, portable table) and where the package was imported from. The plan
#: is what tells two wheels apart when nothing can load (a real library beside a
#: stand-in torch that has no libc10): "unavailable" on both sides proves nothing.
_PROBE = r"""
import json, os, warnings
import torch
warnings.simplefilter("ignore")
import torch_c_dlpack_ext as pkg
status = pkg.status()
library = os.path.basename(str(status.library)) if status.library else None
d = status.decision
name = lambda entry: None if entry is None else entry.file
plan = None if d is None else [d.kind.value, name(d.entry), [name(e) for e in d.fallbacks],
                               name(d.portable)]
print(json.dumps([status.kind.value, library, plan, pkg.__file__]))
"""

#: The selector's plan: ``[kind, entry, fallbacks, portable]`` (library file names).
Plan = list[object]


def _decision(
    python: Path | str, paths: Sequence[Path]
) -> tuple[tuple[str, str | None], Plan | None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    proc = run([python, "-c", _PROBE], env=env, echo=False, timeout=120)
    kind, library, plan, where = json.loads(proc.stdout.strip().splitlines()[-1])
    if not str(where).startswith(str(paths[0])):
        raise ReleaseError(f"the probe imported {where}, not the package under {paths[0]}")
    return (str(kind), library), plan


# --- the two sources ------------------------------------------------------------------


def _source_folder(files: ReleaseFiles, root: Path, minor: str | None) -> Path:
    """A find-links folder of the dist: every file, the variant metadata as uv sees it
    today (``minor`` None) or, in the variants file and in each variant wheel's
    ``variant.json`` (uv checks both), rewritten for a user of torch ``minor``."""
    root.mkdir(parents=True, exist_ok=True)
    for wheel in files.wheels:
        if minor is not None and wheel.variant:
            _emulated_wheel(wheel.path, root / wheel.path.name, minor)
        else:
            shutil.copyfile(wheel.path, root / wheel.path.name)
    for sdist in files.sdists:
        shutil.copyfile(sdist, root / sdist.name)
    if files.variants_index is not None:
        data = json.loads(files.variants_index.read_bytes())
        if minor is not None:
            data = emulate_abi_dependency(data, minor)
        (root / files.variants_index.name).write_text(json.dumps(data, indent=2), "utf-8")
    return root


def _emulated_wheel(source: Path, target: Path, minor: str) -> None:
    """``source`` with its ``variant.json`` rewritten by :func:`emulate_abi_dependency`
    for torch ``minor``, and its RECORD line for that file updated."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        names = old.namelist()
        variant = next(n for n in names if n.endswith(".dist-info/variant.json"))
        data = json.dumps(emulate_abi_dependency(json.loads(old.read(variant)), minor)).encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        for info in old.infolist():
            body = old.read(info)
            if info.filename == variant:
                body = data
            elif info.filename.endswith(".dist-info/RECORD"):
                lines = [
                    f"{variant},sha256={digest},{len(data)}"
                    if line.startswith(f"{variant},")
                    else line
                    for line in body.decode().splitlines()
                ]
                body = ("\n".join(lines) + "\n").encode()
            new.writestr(info, body)


@dataclasses.dataclass
class _Sources:
    """Per variants-file flavour (``None``: as published; a minor: emulated for it), a
    find-links folder and an index URL (one static server serves every flavour)."""

    files: ReleaseFiles
    work: Path
    server: StaticIndexServer
    _made: dict[str | None, Path] = dataclasses.field(default_factory=dict)

    def folder(self, minor: str | None) -> Path:
        if minor not in self._made:
            name = "published" if minor is None else f"torch{minor}"
            folder = _source_folder(self.files, self.work / "links" / name, minor)
            write_simple_pages(sorted(folder.iterdir()), self.server.directory / name)
            self._made[minor] = folder
        return self._made[minor]

    def url(self, minor: str | None) -> str:
        self.folder(minor)
        name = "published" if minor is None else f"torch{minor}"
        return f"{self.server.url}/{name}/simple"


# --- one case -------------------------------------------------------------------------


def _uv_env(driver: bool, cache: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("UV_", ENV_PREFIX, "NV_VARIANT_PROVIDER_"))
    }
    env["UV_CACHE_DIR"] = str(cache)
    if driver:
        env.update(FORCE_DRIVER)
    return env


def _check_log(log: str, case: VariantCase) -> None:
    """uv read our metadata without complaint: no unknown schema, no skipped provider
    but ``abi_dependency`` (which uv 0.13.10 does not implement)."""
    bad = [
        line.strip()
        for line in log.splitlines()
        if "Unknown variant metadata schema" in line
        or ("Skipping" in line and "variant" in line and "abi_dependency" not in line)
        or "Failed to parse" in line
    ]
    if bad:
        raise ReleaseError(f"{case}: uv complained about the variant metadata: {bad[:3]}")


#: What uv 0.13.10 logs (``-v``) when it has read our variant metadata and skips the
#: provider it does not implement.
_SKIPPED = "Skipping unsupported wheel variant provider `abi_dependency`"


def _install(case: VariantCase, sources: _Sources, target: Path, python: Path | str) -> str:
    emulated = case.minor if case.mode == "abi_dependency" else None
    where = (
        ["--index-url", sources.url(emulated)]
        if case.source == "index"
        else ["--no-index", "--find-links", str(sources.folder(emulated))]
    )
    proc = run(
        [find_uv(), "pip", "install", "-v", "--no-config", "--preview-features",
         "wheel-variants", "--python", python, "--target", target, "--no-deps", *where,
         "torch-c-dlpack-ext"],
        env=_uv_env(case.driver, sources.work / "uv-cache"),
        echo=False,
        timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    if "preview features are enabled: wheel-variants" not in log:
        raise ReleaseError(f"{case}: uv's log does not show the wheel-variants preview on")
    _check_log(log, case)
    return log


def _installed_label(target: Path) -> str | None:
    found = list(target.glob(f"{PACKAGE}-*.dist-info/variant.json"))
    if not found:
        return None
    labels = list(json.loads(found[0].read_text("utf-8"))["variants"])
    return str(labels[0])


def _combined_for(files: ReleaseFiles) -> WheelInfo:
    """The abi3 combined wheel (what a GIL CPython installs where no variant is chosen)."""
    for wheel in files.wheels:
        if not wheel.variant and not wheel.universal and any("-abi3-" in t for t in wheel.tags):
            return wheel
    raise ReleaseError("the dist has no abi3 combined wheel")


def _expected_label(files: ReleaseFiles, case: VariantCase) -> set[str | None]:
    minors = {minor_of_label(w.label) for w in files.wheels if w.variant and w.label}
    if case.mode == "abi_dependency" and case.minor in minors:
        return {f"t{case.minor.replace('.', '')}"}
    if case.mode == "abi_dependency":
        return {None}
    # uv as it is: the combined wheel (uv 0.13.10), or this minor's variant once it
    # applies abi_dependency; never another minor's.
    return {None, f"t{case.minor.replace('.', '')}"}


def run_variant_cases(
    dist: Path,
    work: Path,
    *,
    cases: Sequence[VariantCase] | None = None,
    python: Path | str = sys.executable,
    fake_torch: bool = True,
) -> list[Outcome]:
    """Run ``cases`` (default: :func:`variant_cases`) against ``dist`` under ``work``:
    serve it, install with uv per case, import with a stand-in torch (``fake_torch``;
    else ``python``'s own torch, which the cases must describe), and compare with the
    combined wheel's decision. Raises :class:`ReleaseError` on the first case that
    breaks the invariant, or where uv picked a wheel of another minor, or complained."""
    files = collect(dist)
    cases = variant_cases(files) if cases is None else cases
    combined_wheel = _combined_for(files)
    reference_root = work / "combined"
    with zipfile.ZipFile(combined_wheel.path) as archive:
        archive.extractall(reference_root)
    outcomes: list[Outcome] = []
    Probed = tuple[tuple[str, str | None], Plan | None]
    reference: dict[tuple[str, str, bool], Probed] = {}
    seen: dict[tuple[str | None, str, str, bool], Probed] = {}
    with _served(work) as server:
        sources = _Sources(files, work, server)
        for number, case in enumerate(cases):
            torch_paths = (
                [
                    write_fake_torch(
                        work / "torch" / f"{case.torch}-{case.backend}-{int(case.cxx11_abi)}",
                        case.torch,
                        backend=case.backend,
                        cxx11_abi=case.cxx11_abi,
                    )
                ]
                if fake_torch
                else []
            )
            target = work / "installs" / str(number)
            log = _install(case, sources, target, python)
            label = _installed_label(target)
            if label is None and case.mode == "uv" and _SKIPPED not in log:
                # The combined wheel, but not because uv read the variants and skipped
                # abi_dependency: it never saw them, and the case tested nothing.
                raise ReleaseError(
                    f"{case}: uv installed the combined wheel without reading "
                    f"the variant metadata (no {_SKIPPED!r} in its log)"
                )
            if label not in _expected_label(files, case):
                raise ReleaseError(
                    f"{case}: uv installed {label or 'the combined wheel'}, expected "
                    f"{sorted(str(x) for x in _expected_label(files, case))}"
                )
            key = (case.torch, case.backend, case.cxx11_abi)
            if key not in reference:
                reference[key] = _decision(python, [reference_root, *torch_paths])
            seen_key = (label, *key)
            if seen_key not in seen:
                seen[seen_key] = _decision(python, [target, *torch_paths])
            (decided, plan), (combined, combined_plan) = seen[seen_key], reference[key]
            if decided != combined or plan != combined_plan or plan is None:
                raise ReleaseError(
                    f"{case}: with {label or 'the combined wheel'} the selector decided "
                    f"{decided} (plan {plan}), with {combined_wheel.path.name} {combined} "
                    f"(plan {combined_plan})"
                )
            outcomes.append(Outcome(case, label, decided, combined, plan, combined_plan))
            shutil.rmtree(target, ignore_errors=True)
    return outcomes


def _served(work: Path) -> StaticIndexServer:
    root = work / "served"
    root.mkdir(parents=True, exist_ok=True)
    return StaticIndexServer(root)


def outcome_lines(outcomes: Sequence[Outcome]) -> Iterator[str]:
    """One line per case, for logs and the rehearsal's table."""
    for o in outcomes:
        yield (f"{o.case}: {o.label or 'combined'} -> {o.decided[0]} {o.decided[1] or ''}".rstrip())


#: One row of the rehearsal's table: (name, expected, observed, ok, detail), the fields
#: of :class:`devtools.rehearse.indexinstall.Check`.
CheckRow = tuple[str, str, str, bool, str]


def variant_rehearsal(dist: Path, work: Path, *, old_torch: str) -> list[CheckRow]:
    """The rehearsal's variant steps (``nox -s rehearse``): the release's own index
    (``python -m devtools variant-index``) served on 127.0.0.1 serves every
    file of the dist with its sha256; every case of :func:`variant_cases` holds with
    stand-in torches; and with the real ``old_torch`` (PyPI's, a CUDA build, cached env)
    where the dist has its minor's variant: uv installs it (as it is, and with
    ``abi_dependency`` emulated) and the selector loads the same library as from the
    combined wheel."""
    from devtools.rehearse.indexserver import served_hashes
    from devtools.release.variantindex import release_files

    files = collect(dist)
    checks: list[CheckRow] = []
    simple = write_simple_pages(
        release_files([w.path for w in files.wheels], files.sdists, files.variants_index),
        work / "variant-index",
    )
    expected = {p.name: sha256_of(p) for p in simple.joinpath(DIST_NAME).iterdir()}
    expected.pop("index.html")
    with StaticIndexServer(simple.parent) as server:
        served = served_hashes(f"{server.url}/simple")
    checks.append(
        (
            "variant index",
            f"{len(expected)} files (wheels, sdist, variants file) with sha256",
            f"{len(served)} files served",
            served == expected,
            "" if served == expected else f"expected {expected}, served {served}",
        )
    )
    for number, (name, cases, python, fake) in enumerate(_rehearsal_sets(files, old_torch)):
        try:
            # (uv reads a comma in a --find-links path as a list: plain folder names)
            outcomes = run_variant_cases(
                dist, work / f"set{number}", cases=cases, python=python, fake_torch=fake
            )
        except ReleaseError as exc:
            checks.append((name, "every case decides as the combined wheel", "FAILED", False,
                           str(exc)))  # fmt: skip
            continue
        chosen = sorted({o.label or "combined" for o in outcomes})
        checks.append(
            (
                name,
                "every case decides as the combined wheel",
                f"{len(outcomes)} cases hold (uv installed {', '.join(chosen)})",
                True,
                "",
            )
        )
    return checks


def _rehearsal_sets(
    files: ReleaseFiles, old_torch: str
) -> Iterator[tuple[str, list[VariantCase], Path | str, bool]]:
    from devtools.envs.torchenv import EnvKind, torch_env

    yield "variants, stand-in torches", variant_cases(files), sys.executable, True
    minor = ".".join(old_torch.split(".")[:2])
    if any(w.label == f"t{minor.replace('.', '')}" for w in files.wheels if w.variant):
        env = torch_env(old_torch, kind=EnvKind.IMPORTABLE)
        cases = [
            VariantCase(
                old_torch,
                "cuda",
                tuple(int(x) for x in minor.split(".")) >= (2, 7),
                driver,
                mode,
                source,
            )
            for driver in (False, True)
            for mode in MODES
            for source in SOURCES
        ]
        yield f"variants, real torch {old_torch}", cases, env.python, False
