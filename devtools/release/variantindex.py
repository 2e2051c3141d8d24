"""The release's own PEP 503 index for variant-aware installers (PyPI takes no variant
wheels and no variants file).

uv uses the first index that has a package, so this index carries everything of the
version: the combined, free-threaded and universal wheels, the variant wheels, the sdist
and ``{name}-{version}-variants.json``. :func:`write_index` writes it as static files
(``simple/index.html``, ``simple/<project>/index.html`` with sha256 fragments, the files
beside it) that any static host serves: GitHub Pages, an object store, ``python -m
http.server``. ``python -m devtools variant-index DIST OUT`` runs it (docs/releasing.md).
"""

from __future__ import annotations

import html
import shutil
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.files import atomic_write_bytes, sha256_of
from _torch_c_dlpack_ext_core.naming import DIST_NAME
from devtools.base.errors import ReleaseError
from devtools.release.distfiles import collect

__all__ = ["write_index", "write_simple_pages"]


def write_simple_pages(files: Sequence[Path], root: Path, project: str = DIST_NAME) -> Path:
    """Copy ``files`` into ``root/simple/<project>/`` and write the PEP 503 pages that
    list them (each link with its ``#sha256=``). Returns ``root/simple``, the index URL's
    path."""
    simple = root / "simple"
    folder = simple / project
    folder.mkdir(parents=True, exist_ok=True)
    links = []
    for path in sorted(files, key=lambda p: p.name):
        target = folder / path.name
        if target.exists() and sha256_of(target) != sha256_of(path):
            raise ReleaseError(f"{target}: already there with other bytes; use an empty folder")
        shutil.copyfile(path, target)
        target.chmod(0o644)
        name = html.escape(path.name)
        links.append(f'<a href="{name}#sha256={sha256_of(target)}">{name}</a><br/>')
    page = (
        f"<!DOCTYPE html>\n<html><head><title>Links for {project}</title></head><body>\n"
        + "\n".join(links)
        + "\n</body></html>\n"
    )
    atomic_write_bytes(folder / "index.html", page.encode())
    root_page = (
        f'<!DOCTYPE html>\n<html><body>\n<a href="{project}/">{project}</a>\n</body></html>\n'
    )
    atomic_write_bytes(simple / "index.html", root_page.encode())
    return simple


def write_index(dist: Path, root: Path) -> Path:
    """The release's variant index of ``dist`` (checked by
    :func:`devtools.release.distfiles.collect`: one version, this project) under
    ``root``: every wheel, the sdist and the variants file. Refuses a dist without the
    variants file (a variant-aware installer would then see variant wheels it cannot
    rank). Returns the ``simple`` folder."""
    files = collect(dist)
    if files.variants_index is None:
        raise ReleaseError(f"{dist}: no variants file; the variant index needs one")
    everything = [w.path for w in files.wheels] + list(files.sdists) + [files.variants_index]
    return write_simple_pages(everything, root)
