"""The release's own PEP 503 index for variant-aware installers (PyPI takes no variant
wheels and no variants file).

uv uses the first index that has a package, so this index carries everything of the
version: the combined, free-threaded and universal wheels, the variant wheels, the sdist
and ``{name}-{version}-variants.json``. :func:`write_simple_pages` writes it as static files
(``simple/index.html``, ``simple/<project>/index.html`` with sha256 fragments, the files
beside it) that any static host serves: GitHub Pages, an object store, ``python -m
http.server``. ``python -m devtools variant-index DIST OUT`` writes it (docs/releasing.md).
"""

from __future__ import annotations

import html
import shutil
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.files import atomic_write_bytes, sha256_of
from _torch_c_dlpack_ext_core.naming import DIST_NAME
from devtools.base.errors import ReleaseError

__all__ = ["release_files", "write_simple_pages"]


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


def release_files(
    wheels: Sequence[Path], sdists: Sequence[Path], variants_file: Path | None
) -> list[Path]:
    """What the variant index of a release carries (the parts of a
    :class:`devtools.release.distfiles.ReleaseFiles`): every wheel, the sdist and the
    variants file. Refuses a release without the variants file: a variant-aware installer
    would then see variant wheels it cannot rank."""
    if variants_file is None:
        raise ReleaseError("no variants file in the dist; the variant index needs one")
    return [*wheels, *sdists, variants_file]
