"""Release steps: check and publish ``dist/``, plus the small steps the release
workflow runs between nox sessions.

``nox -s release -- --repository-url URL`` calls :func:`publish`; ``nox -s rehearse``
calls the same function against a local index. Subcommands (``python
devtools/release.py --help``):

- ``upload``: ``twine check --strict``, then ``twine upload`` of the wheels and the
  sdist; the variants index (``{name}-{version}-variants.json``) goes to
  ``--variants-dir`` when given (a directory an index serves), because no
  upload API takes it yet (PyPI's PEP 825 support is pending);
- ``check-tag TAG``: the pushed tag names the version in ``_version.py``;
- ``github-matrix FILE``: turn ``nox -s matrix`` output into ``$GITHUB_OUTPUT`` lines;
- ``split-variants DIST DEST``: move the variant wheels and the variants index out
  of the files PyPI accepts today;
- ``test-installed``: cibuildwheel's test command for one job's wheel;
- ``verify DIST``: install each wheel that fits this interpreter with each torch
  it serves into a fresh environment and check what ``python -m
  torch_c_dlpack_ext --json`` decides.

Credentials come only from the environment (``TWINE_USERNAME`` /
``TWINE_PASSWORD``, or Trusted Publishing in CI) and are never printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import urllib.parse
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Run from a checkout (CI jobs, nox) without installing the package: the package and
# the in-tree build backend (the one pyproject reader) come from the tree.
for _path in (ROOT / "python", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from packaging.specifiers import SpecifierSet  # noqa: E402 - needs the path set above
from packaging.tags import sys_tags  # noqa: E402
from packaging.utils import canonicalize_name, parse_sdist_filename  # noqa: E402
from packaging.version import InvalidVersion, Version  # noqa: E402

from torch_c_dlpack_ext._manifest import (  # noqa: E402
    ManifestEntry,
    atomic_write_bytes,
)
from torch_c_dlpack_ext._naming import DIST_NAME, MANIFEST_NAME, PACKAGE  # noqa: E402
from torch_c_dlpack_ext._run import run  # noqa: E402
from torch_c_dlpack_ext._version import __version__  # noqa: E402
from torch_c_dlpack_ext.errors import (  # noqa: E402
    CommandError,
    ConfigError,
    ReleaseError,
    TorchCDLPackExtError,
)

__all__ = [
    "ReleaseFiles",
    "WheelInfo",
    "check_tag",
    "collect",
    "github_matrix",
    "installs_here",
    "publish",
    "read_wheel",
    "requires_python",
    "split_variants",
    "twine_check",
    "twine_upload",
    "validate_repository_url",
    "variants_index_name",
]

#: Time limits (seconds) so a stuck index or resolver never hangs a release.
TWINE_CHECK_TIMEOUT = 300.0
TWINE_UPLOAD_TIMEOUT = 1800.0
INSTALL_TIMEOUT = 1800.0
DIAGNOSE_TIMEOUT = 300.0


def variants_index_name(version: str = __version__) -> str:
    """``torch_c_dlpack_ext-0.2.0-variants.json``: the PEP 825 index file of a version."""
    return f"{PACKAGE}-{version}-variants.json"


@dataclasses.dataclass(frozen=True)
class WheelInfo:
    """What a release needs to know about one built wheel."""

    path: Path
    #: ``py3-none-any`` style tag triples the wheel's file name declares.
    tags: frozenset[str]
    #: The wheel carries ``*.dist-info/variant.json`` (a PEP 825 variant wheel).
    variant: bool
    #: Libraries its manifest lists (empty for the universal wheel).
    libraries: tuple[ManifestEntry, ...]

    @property
    def universal(self) -> bool:
        return not self.libraries


@dataclasses.dataclass(frozen=True)
class ReleaseFiles:
    """The publishable content of a ``dist/`` folder, validated."""

    version: str
    wheels: tuple[WheelInfo, ...]
    sdists: tuple[Path, ...]
    #: ``{name}-{version}-variants.json``, when the build produced one.
    variants_index: Path | None

    def dists(self, *, variant_wheels: bool = True) -> tuple[Path, ...]:
        """Files ``twine`` uploads: wheels (optionally without variant wheels), then sdists."""
        wheels = tuple(w.path for w in self.wheels if variant_wheels or not w.variant)
        return wheels + self.sdists


def _wheel_tags(name: str) -> frozenset[str]:
    # PEP 825 appends "-{label}" after the platform tag; PEP 427 allows an optional
    # build tag (starting with a digit) after the version. Parse both shapes.
    parts = name[: -len(".whl")].split("-")
    if len(parts) == 6 and not parts[2][:1].isdigit():
        py, abi, plat = parts[2:5]
    elif len(parts) in (5, 6):
        py, abi, plat = parts[-3:]
    else:
        raise ReleaseError(f"{name}: not a wheel file name (dist-version-py-abi-platform.whl)")
    return frozenset(
        f"{p}-{a}-{pl}" for p in py.split(".") for a in abi.split(".") for pl in plat.split(".")
    )


def read_wheel(path: Path) -> WheelInfo:
    """Read a wheel's tags, variant marker and bundled manifest (no extraction)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            variant = any(n.endswith(".dist-info/variant.json") for n in names)
            manifest_name = f"{PACKAGE}/{MANIFEST_NAME}"
            libraries: tuple[ManifestEntry, ...] = ()
            if manifest_name in names:
                data = json.loads(archive.read(manifest_name))
                libraries = tuple(
                    ManifestEntry.from_json(item) for item in data.get("libraries", [])
                )
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path.name}: not a readable wheel ({exc}); rebuild it") from None
    return WheelInfo(path=path, tags=_wheel_tags(path.name), variant=variant, libraries=libraries)


def _name_version(filename: str) -> tuple[str, str]:
    if filename.endswith(".whl"):
        name, version = filename.split("-")[:2]
        return name, version
    name, parsed = parse_sdist_filename(filename)
    return name, str(parsed)


def _check_dist_file(path: Path, version: str) -> None:
    if not path.name.endswith((".whl", ".tar.gz")):
        raise ReleaseError(
            f"{path}: not a wheel, sdist or variants index; "
            "remove it, dist/ is published as a whole"
        )
    try:
        dist_name, file_version = _name_version(path.name)
        parsed_version = Version(file_version)
    except (ValueError, InvalidVersion):
        raise ReleaseError(f"{path}: cannot read name and version") from None
    if canonicalize_name(dist_name) != canonicalize_name(DIST_NAME):
        raise ReleaseError(f"{path}: belongs to {dist_name!r}, not {DIST_NAME!r}")
    if parsed_version != Version(version):
        raise ReleaseError(
            f"{path}: version {parsed_version}, but _version.py says {version}; "
            "remove stale files from dist/ and rebuild"
        )


def collect(dist: Path, *, version: str = __version__, require_sdist: bool = True) -> ReleaseFiles:
    """Validate ``dist`` and return what a release of ``version`` publishes.

    Every wheel and sdist must be of this project and of ``version``: a stale
    file from an earlier build would otherwise be published under the wrong
    version. Raises :class:`ReleaseError` naming the offending file.
    """
    if not dist.is_dir():
        raise ConfigError(f"{dist}: no such directory; run `nox -s build` first")
    wheels: list[WheelInfo] = []
    sdists: list[Path] = []
    index: Path | None = None
    for path in sorted(dist.iterdir()):
        if path.name.startswith(".") or path.is_dir():
            continue  # temp files of an atomic write, caches
        if path.name.endswith("-variants.json"):
            if path.name != variants_index_name(version):
                raise ReleaseError(
                    f"{path}: variants index of another version; "
                    f"expected {variants_index_name(version)} (remove stale files)"
                )
            index = path
            continue
        _check_dist_file(path, version)
        if path.name.endswith(".whl"):
            wheels.append(read_wheel(path))
        else:
            sdists.append(path)
    if not wheels:
        raise ReleaseError(f"{dist}: no wheels of {DIST_NAME} {version}; run `nox -s build`")
    if require_sdist and not sdists:
        raise ReleaseError(f"{dist}: no sdist of {DIST_NAME} {version}; run `nox -s build`")
    if not any(w.universal for w in wheels):
        raise ReleaseError(
            f"{dist}: no universal (py3-none-any) wheel; without it platforms with no "
            "combined wheel cannot install the package"
        )
    return ReleaseFiles(
        version=version, wheels=tuple(wheels), sdists=tuple(sdists), variants_index=index
    )


def validate_repository_url(url: str) -> str:
    """Accept an http(s) upload URL without embedded credentials."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"--repository-url {url!r} is not an http(s) URL "
            "(e.g. https://upload.pypi.org/legacy/ or http://127.0.0.1:8080/)"
        )
    if parsed.username or parsed.password:
        raise ConfigError(
            "--repository-url must not carry credentials (they would be echoed); "
            "set TWINE_USERNAME and TWINE_PASSWORD in the environment instead"
        )
    return url


def _twine() -> list[str]:
    return [sys.executable, "-m", "twine"]


def twine_check(files: Sequence[Path]) -> None:
    """``twine check --strict``: metadata renders and nothing is merely warned about."""
    run([*_twine(), "check", "--strict", *files], timeout=TWINE_CHECK_TIMEOUT)


def twine_upload(files: Sequence[Path], repository_url: str, *, skip_existing: bool) -> None:
    """Upload ``files`` with twine; credentials come from the environment only."""
    cmd = [*_twine(), "upload", "--non-interactive", "--disable-progress-bar"]
    cmd += ["--repository-url", validate_repository_url(repository_url)]
    if skip_existing:
        cmd.append("--skip-existing")
    run([*cmd, *files], timeout=TWINE_UPLOAD_TIMEOUT)


def publish(
    dist: Path,
    *,
    repository_url: str | None,
    skip_existing: bool = False,
    variants_dir: Path | None = None,
    variant_wheels: bool = True,
    check_only: bool = False,
) -> ReleaseFiles:
    """Check, then upload, one release from ``dist``.

    ``variants_dir``: a directory the target index serves files from; the
    variants index is copied there (atomically). Without it the variants index
    is reported and left in ``dist`` (no index's upload API accepts it yet).
    ``variant_wheels=False`` leaves PEP 825 variant wheels out (for indexes that
    reject their file names).
    """
    if not check_only:
        # Bad arguments fail before any work is done.
        if repository_url is None:
            raise ConfigError("--repository-url is required to upload (or pass --check-only)")
        validate_repository_url(repository_url)
    files = collect(dist)
    dists = files.dists(variant_wheels=variant_wheels)
    print(f"release {files.version}: {len(dists)} file(s) from {dist}", file=sys.stderr)
    twine_check(dists)
    if check_only or repository_url is None:
        return files
    twine_upload(dists, repository_url, skip_existing=skip_existing)
    if files.variants_index is not None:
        if variants_dir is not None:
            atomic_write_bytes(
                variants_dir / files.variants_index.name, files.variants_index.read_bytes()
            )
            print(f"placed {files.variants_index.name} into {variants_dir}", file=sys.stderr)
        else:
            print(
                f"note: {files.variants_index.name} was not uploaded: index upload APIs "
                "do not accept it yet (PEP 825 support pending); it stays in "
                f"{dist} and in the release workflow's attested artifacts",
                file=sys.stderr,
            )
    return files


def check_tag(tag: str, version: str = __version__) -> None:
    """The release tag must be ``v`` + the version in ``_version.py``."""
    if tag != f"v{version}":
        raise ReleaseError(
            f"tag {tag!r} does not match python/torch_c_dlpack_ext/_version.py "
            f"({version!r}); tag v{version}, or bump _version.py and CHANGELOG.md first"
        )


def github_matrix(matrix: Any, *, requires_python: str | None = None) -> dict[str, Any]:
    """From ``nox -s matrix`` JSON, the build matrix and the verify matrix.

    The build matrix keeps the jobs as they are (``{"include": [jobs]}``), less
    jobs for a Python outside ``requires_python``: cibuildwheel selects nothing
    for them and fails the run. Each dropped job is announced on stderr. The
    verify matrix has one entry per (runner, Python) the jobs build for: a
    combined wheel serves one Python on one platform, and a runner can only
    install wheels of its own platform.
    """
    if not isinstance(matrix, dict) or not isinstance(matrix.get("include"), list):
        raise ConfigError('matrix JSON must be an object with an "include" list of jobs')
    jobs = matrix["include"]
    bad = [
        job for job in jobs if not isinstance(job, dict) or not {"runner", "python"} <= job.keys()
    ]
    if bad:
        raise ConfigError(f"matrix job lacks 'runner' or 'python': {bad[0]!r}")
    if requires_python is not None:
        allowed = SpecifierSet(requires_python)
        for job in jobs:
            if Version(str(job["python"])) not in allowed:
                print(
                    f"warning: dropping job {job.get('id')!r}: Python {job['python']} is outside "
                    f"requires-python {requires_python!r} (remove it from matrix.toml)",
                    file=sys.stderr,
                )
        jobs = [job for job in jobs if Version(str(job["python"])) in allowed]
    if not jobs:
        raise ConfigError("the matrix selects no jobs; check --only against matrix.toml")
    pairs = {(str(job["runner"]), str(job["python"])) for job in jobs}
    ordered = sorted(pairs, key=lambda pair: (pair[0], Version(pair[1])))
    verify = {"include": [{"runner": r, "python": p} for r, p in ordered]}
    return {"cells": {**matrix, "include": jobs}, "verify": verify}


def requires_python(pyproject: Path = ROOT / "pyproject.toml") -> str | None:
    """``[project] requires-python`` of the project."""
    from build_backend._metadata import load_pyproject

    value = load_pyproject(pyproject.parent).get("project", {}).get("requires-python")
    return str(value) if value is not None else None


def split_variants(dist: Path, dest: Path) -> list[Path]:
    """Move the PEP 825 variant wheels and the variants index from ``dist`` to
    ``dest``, so ``dist`` holds only what PyPI accepts today (combined and
    universal wheels, sdist). Returns the moved files' new paths."""
    index = dist / variants_index_name()
    if not index.is_file():
        raise ReleaseError(f"{index}: missing; `nox -s build` writes it next to the wheels")
    moving = [index] + [p for p in sorted(dist.glob("*.whl")) if read_wheel(p).variant]
    dest.mkdir(parents=True, exist_ok=True)
    moved = []
    for source in moving:
        target = dest / source.name
        atomic_write_bytes(target, source.read_bytes())
        source.unlink()
        moved.append(target)
    return moved


def installs_here(wheel: WheelInfo) -> bool:
    """The wheel's tags include one this interpreter supports."""
    supported = {str(tag) for tag in sys_tags()}
    return bool(wheel.tags & supported)


def diagnose(
    python: Path, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> dict[str, Any]:
    """Run ``python -m torch_c_dlpack_ext --json`` and return its JSON report.

    Exit status 1 means "no working API published" (the report says why), which
    is the expected outcome in some checks, so only the JSON decides.
    """
    try:
        cmd: list[str | os.PathLike[str]] = [python, "-m", PACKAGE, "--json"]
        stdout = run(cmd, env=env, cwd=cwd, timeout=DIAGNOSE_TIMEOUT).stdout
    except CommandError as exc:
        if exc.returncode != 1:
            raise
        stdout = exc.stdout
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        raise ReleaseError(
            f"`{python} -m {PACKAGE} --json` printed no JSON:\n{stdout[-2000:]}"
        ) from None
    if not isinstance(data, dict):
        raise ReleaseError(f"`{python} -m {PACKAGE} --json` printed {type(data).__name__}")
    return data


def decision_of(report: dict[str, Any]) -> tuple[str, str | None]:
    """``(kind, library file)`` from a diagnostics report."""
    decision = report.get("decision")
    if isinstance(decision, dict):
        kind = decision.get("kind")
        library = decision.get("library") or decision.get("file")
    else:
        kind, library = decision, report.get("library")
    if not isinstance(kind, str):
        raise ReleaseError(f"diagnostics report has no decision: {json.dumps(report)[:500]}")
    if isinstance(library, dict):
        library = library.get("file")
    return kind, (str(library) if library else None)


def expected_library(
    entries: Sequence[ManifestEntry], torch: str, cxx11_abi: bool | None
) -> ManifestEntry | None:
    """The CPU library the selector must load for a torch ``major.minor`` with that
    C++ ABI (runners have no GPU, so a GPU torch is served by the CPU library)."""
    for entry in entries:
        if entry.backend.value == "cpu" and entry.torch == torch and entry.cxx11_abi == cxx11_abi:
            return entry
    return None


def check_against_torch(python: Path, entries: Sequence[ManifestEntry], torch: str) -> str:
    """Diagnose the environment of ``python`` (torch ``torch`` and the package are
    installed) and check the decision against the bundled ``entries``: load the
    CPU library of that torch and ABI if there is one, else explain."""
    report = diagnose(python)
    kind, library = decision_of(report)
    abi = (report.get("torch") or {}).get("cxx11_abi")
    want = expected_library(entries, torch, abi)
    if want is not None:
        if kind != "load" or Path(library or "").name != Path(want.file).name:
            raise ReleaseError(
                f"torch {torch} (cxx11_abi={abi}): expected to load {want.file}, "
                f"the selector decided {kind} ({library})"
            )
        if not (report.get("smoke_test") or {}).get("ok"):
            raise ReleaseError(f"torch {torch}: smoke test failed: {report.get('smoke_test')}")
    elif kind != "unavailable" or not (report.get("decision") or {}).get("remedy"):
        raise ReleaseError(
            f"torch {torch} (cxx11_abi={abi}): no bundled library fits, so the selector "
            f"must explain (unavailable with a remedy); it decided {kind}"
        )
    return f"torch {torch} cxx11_abi={abi} -> {kind} {Path(library).name if library else ''}"


def _venv(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    run(["uv", "venv", "--python", sys.executable, root], timeout=INSTALL_TIMEOUT)
    return root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _same_libraries(variant: WheelInfo, combined: Sequence[WheelInfo]) -> None:
    # A variant wheel carries one cell; its bytes must be the combined wheel's.
    known = {(e.file, e.sha256) for w in combined for e in w.libraries}
    for entry in variant.libraries:
        if (entry.file, entry.sha256) not in known:
            raise ReleaseError(
                f"{variant.path.name}: {entry.file} (sha256 {entry.sha256[:12]}...) is in "
                "no combined wheel; variant and combined wheels must come from one build"
            )


def verify(dist: Path) -> list[str]:
    """Install every combined wheel that fits this interpreter into a fresh
    environment once per torch minor it bundles (torch from PyPI) and check the
    selector's decision; the universal wheel must explain without torch.

    Variant wheels are not installable by pip; their libraries are checked to be
    byte-identical to the combined wheels' (which were just exercised). GPU
    libraries cannot be selected on a GPU-less runner; the runtime checks their
    size and sha256 before any load.
    """
    results: list[str] = []
    wheels = [read_wheel(path) for path in sorted(dist.glob("*.whl"))]
    combined = [w for w in wheels if not w.universal and not w.variant]
    with tempfile.TemporaryDirectory(prefix="tcde-verify-") as tmp:
        for wheel in combined:
            if not installs_here(wheel):
                continue
            for torch in sorted({e.torch for e in wheel.libraries}):
                python = _venv(Path(tmp) / f"torch{torch}")
                run(
                    ["uv", "pip", "install", "--python", python, f"torch=={torch}.*", wheel.path],
                    timeout=INSTALL_TIMEOUT,
                )
                line = check_against_torch(python, wheel.libraries, torch)
                results.append(f"{wheel.path.name}: {line}")
                shutil.rmtree(python.parent.parent, ignore_errors=True)
        for wheel in wheels:
            if wheel.universal:
                python = _venv(Path(tmp) / "universal")
                run(
                    ["uv", "pip", "install", "--python", python, wheel.path],
                    timeout=INSTALL_TIMEOUT,
                )
                kind, _ = decision_of(diagnose(python))
                if kind != "unavailable":
                    raise ReleaseError(f"{wheel.path.name} without torch: decided {kind}")
                results.append(f"{wheel.path.name}: no torch -> {kind}")
            elif wheel.variant:
                _same_libraries(wheel, combined)
                results.append(f"{wheel.path.name}: libraries match the combined wheels")
    if not any(" -> load " in line for line in results):
        raise ReleaseError(f"{dist}: no wheel with a CPU library was exercised on this runner")
    for line in results:
        print(line)
    return results


def _installed_manifest(python: Path) -> tuple[ManifestEntry, ...]:
    # Locate the installed package without importing it (importing would run the
    # selector before the matching torch is installed).
    probe = (
        "import importlib.util, sys; "
        f"spec = importlib.util.find_spec({PACKAGE!r}); "
        "sys.stdout.write(spec.submodule_search_locations[0])"
    )
    package_dir = Path(run([python, "-c", probe], timeout=DIAGNOSE_TIMEOUT).stdout.strip())
    path = package_dir / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path}: installed wheel has no readable manifest ({exc})") from None
    return tuple(ManifestEntry.from_json(item) for item in data.get("libraries", []))


def check_installed_job(python: Path) -> str:
    """cibuildwheel's test command. The job's wheel is installed in ``python``'s
    environment: install the newest torch minor it bundles (from the index, as a
    user would) and check the decision. The verify job covers every minor."""
    entries = _installed_manifest(python)
    if not entries:
        raise ReleaseError("the job's wheel bundles no library; check TORCH_C_DLPACK_EXT_CELLS")
    torch = max({e.torch for e in entries}, key=lambda v: tuple(int(p) for p in v.split(".")))
    run([python, "-m", "pip", "install", f"torch=={torch}.*"], timeout=INSTALL_TIMEOUT)
    return check_against_torch(python, entries, torch)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--traceback", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    upload = sub.add_parser("upload", help="twine check --strict, then twine upload")
    upload.add_argument("--dist", type=Path, default=ROOT / "dist")
    upload.add_argument("--repository-url", help="upload endpoint of the index")
    upload.add_argument("--check-only", action="store_true", help="run twine check only")
    upload.add_argument(
        "--skip-existing", action="store_true", help="skip files the index already has"
    )
    upload.add_argument(
        "--variants-dir", type=Path, help="directory the index serves; gets variants.json"
    )
    upload.add_argument(
        "--no-variant-wheels",
        dest="variant_wheels",
        action="store_false",
        help="leave PEP 825 variant wheels out (indexes that reject their names)",
    )

    tag = sub.add_parser("check-tag", help="the tag is v<version of _version.py>")
    tag.add_argument("tag")

    gh = sub.add_parser("github-matrix", help="nox -s matrix JSON -> $GITHUB_OUTPUT lines")
    gh.add_argument("matrix", type=Path)

    split = sub.add_parser(
        "split-variants", help="move variant wheels and variants.json out of dist/"
    )
    split.add_argument("dist", type=Path)
    split.add_argument("dest", type=Path)

    ver = sub.add_parser("verify", help="install each wheel with its torch; check the selector")
    ver.add_argument("dist", type=Path)

    sub.add_parser(
        "test-installed", help="cibuildwheel test: install the cell's torch, run diagnostics"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; errors become one line and a stable exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "upload":
            publish(
                args.dist,
                repository_url=args.repository_url,
                skip_existing=args.skip_existing,
                variants_dir=args.variants_dir,
                variant_wheels=args.variant_wheels,
                check_only=args.check_only,
            )
        elif args.command == "check-tag":
            check_tag(args.tag)
        elif args.command == "github-matrix":
            try:
                data = json.loads(args.matrix.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(f"{args.matrix}: not readable JSON ({exc})") from None
            for key, value in github_matrix(data, requires_python=requires_python()).items():
                print(f"{key}={json.dumps(value, separators=(',', ':'))}")
        elif args.command == "split-variants":
            for path in split_variants(args.dist, args.dest):
                print(path)
        elif args.command == "verify":
            verify(args.dist)
        elif args.command == "test-installed":
            print(check_installed_job(Path(sys.executable)))
    except TorchCDLPackExtError as exc:
        if args.traceback:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
