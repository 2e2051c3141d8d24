"""The sdist: what a source build uses (sources, the package, the in-tree backend);
a reproducible tar.gz.

Building a wheel from it compiles csrc/ against the torch of the build
environment (see README "Installing from source"). The build matrix and the dev
tools stay in the repository: a source build never reads them.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
from pathlib import Path

from ._source import ROOT

__all__ = ["SDIST_PATHS", "build_sdist_impl", "sdist_files"]

#: What the sdist carries, relative to the project root (directories recursively).
SDIST_PATHS = (
    "csrc",
    "python/torch_c_dlpack_ext",
    "python/_torch_c_dlpack_ext_core",
    "build_backend",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
)
_SKIP_PARTS = ("__pycache__", "libs")
#: Without SOURCE_DATE_EPOCH: 1980-01-01, the wheels' default too.
_DEFAULT_MTIME = 315532800
_SKIP_SUFFIXES = (".pyc", ".so", ".dylib", ".dll", ".o", ".tmp", ".lock")


def sdist_files(root: Path = ROOT) -> list[Path]:
    """Files of the sdist, sorted (relative paths)."""
    found: list[Path] = []
    for rel in SDIST_PATHS:
        path = root / rel
        if path.is_file():
            found.append(Path(rel))
        elif path.is_dir():
            for item in sorted(path.rglob("*")):
                relative = item.relative_to(root)
                if (
                    item.is_file()
                    and not any(part in _SKIP_PARTS for part in relative.parts)
                    and item.suffix not in _SKIP_SUFFIXES
                    and item.name != "manifest.json"
                ):
                    found.append(relative)
    return sorted(set(found))


def build_sdist_impl(sdist_directory: str) -> str:
    """PEP 517 ``build_sdist``: a deterministic ``.tar.gz`` with PKG-INFO. No setting
    changes an sdist (the hook still reads them, so a bad one fails)."""
    from ._metadata import project_metadata
    from ._options import source_date_epoch

    meta = project_metadata(ROOT)
    base = f"{meta.name}-{meta.version}"
    epoch = source_date_epoch()
    mtime = _DEFAULT_MTIME if epoch is None else epoch
    buffer = io.BytesIO()

    def add(name: str, data: bytes, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(f"{base}/{name}")
        info.size = len(data)
        info.mtime = mtime
        info.mode = mode
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = {rel.as_posix(): (ROOT / rel) for rel in sdist_files()}
        entries["PKG-INFO"] = Path()
        for name in sorted(entries):
            if name == "PKG-INFO":
                add(name, meta.metadata_bytes())
            else:
                path = entries[name]
                add(name, path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644)
    out_dir = Path(sdist_directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{base}.tar.gz"
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=out_dir)
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz,
        ):
            gz.write(buffer.getvalue())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a published file is world-readable
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target.name
