"""Where this installation came from, read from its installation record (the dist-info
beside the package: PEP 610's ``direct_url.json`` and ``INSTALLER``), and whether the
package sits inside a zip archive. Read only when a message names a command (a remedy
reinstalls from where the copy came from); off the import's common path.
"""

from __future__ import annotations

from pathlib import Path

from _torch_c_dlpack_ext_core.errors import PackageInArchiveError
from _torch_c_dlpack_ext_core.installsource import InstallKind, InstallSource, install_source_of
from _torch_c_dlpack_ext_core.naming import DIST_NAME

from ._library import short_path

__all__ = ["in_archive", "install_source"]


def in_archive(package_dir: Path) -> PackageInArchiveError | None:
    """The error saying the package was imported from inside a zip archive (zipimport),
    if it was: the first existing path above ``package_dir`` is a zip file, not a
    directory."""
    import zipfile

    for path in (package_dir, *package_dir.parents):
        try:
            if path.is_dir():
                return None
            if not path.is_file():
                continue
            archive = zipfile.is_zipfile(path)
        except OSError:
            return None
        if not archive:
            return None
        return PackageInArchiveError(
            f"this torch-c-dlpack-ext is inside the zip archive {short_path(path)} "
            "(imported with zipimport): a package inside a zip cannot load its library "
            "(dlopen loads only files on disk)",
            "install it unzipped (pip installs wheels unzipped), or extract the archive "
            "and put the extracted directory on sys.path instead of the zip",
        )
    return None


def install_source(package_dir: Path) -> InstallSource:
    """Where the installation holding ``package_dir`` came from, as its installation
    record says: the dist-info beside the package, its PEP 610 ``direct_url.json`` and its
    ``INSTALLER`` (read with ``importlib.metadata``, only when a message names a command).
    An index install (the version pinned) only where an installer's record says so; no
    dist-info (a source tree on ``sys.path``), one no installer wrote (an unpacked wheel)
    or one that cannot be read is ``"unrecorded"``: nothing says what it came from."""
    from importlib import metadata

    where = str(package_dir.parent)
    try:
        for dist in metadata.distributions(name=DIST_NAME, path=[where]):
            return install_source_of(
                dist.read_text("direct_url.json"), dist.read_text("INSTALLER"), location=where
            )
    except (OSError, ValueError):  # an unreadable dist-info says nothing
        pass
    return InstallSource(InstallKind.UNRECORDED, where)
