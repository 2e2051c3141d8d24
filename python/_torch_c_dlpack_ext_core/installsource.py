"""Where an installation came from (:class:`InstallSource`), read from its installation
record: PEP 610's ``direct_url.json`` and the dist-info's ``INSTALLER``
(:func:`install_source_of`). A remedy reinstalls from there: a version pinned on an index
(:func:`pinned_requirement`) is right only for an index install. The commands that use it
are :mod:`.remedies`'.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from .version import __version__

__all__ = ["InstallKind", "InstallSource", "install_source_of", "pinned_requirement"]


class InstallKind(str, enum.Enum):
    """What an installation record says the copy was installed from."""

    #: An installer's record (``INSTALLER``) without PEP 610's ``direct_url.json``: a
    #: release from a package index.
    INDEX = "index"
    #: A local directory.
    DIR = "dir"
    #: A wheel or sdist, a file or a URL.
    ARCHIVE = "archive"
    #: A VCS checkout.
    VCS = "vcs"
    #: No installation record: a source tree or an unpacked wheel on ``sys.path``, where
    #: nothing says what it came from.
    UNRECORDED = "unrecorded"

    def __str__(self) -> str:
        return self.value


#: What a command names where this copy's origin is not recorded.
_ITS_ORIGIN = "<its wheel, sdist or checkout>"


class InstallSource(NamedTuple):
    """Where an installation came from, as its installation record says, so that a remedy
    reinstalls from there: a version pinned on an index is right only for a release the
    index has (PyPI has no 0.2.0 while it is a local wheel).

    ``kind``: an :class:`InstallKind`. ``location``: what pip installs it from again (a
    path for a ``file://`` URL, else the URL; ``git+<url>@<commit>`` for a checkout); for
    ``UNRECORDED``, the directory holding the copy. ``installer``: the record's
    ``INSTALLER`` (``pip``, ``uv``), where there is one."""

    kind: InstallKind = InstallKind.INDEX
    location: str = ""
    installer: str = ""

    @property
    def is_wheel(self) -> bool:
        """Installed from a wheel file: a build from source needs its sdist or a checkout."""
        return self.kind == InstallKind.ARCHIVE and self.location.endswith(".whl")

    def requirement(self) -> str:
        """What ``pip install`` takes to install it again from there (shell-quoted); a
        placeholder naming what to give it where that is not recorded."""
        if self.kind == InstallKind.UNRECORDED:
            return _ITS_ORIGIN
        if self.kind == InstallKind.INDEX or not self.location:
            return pinned_requirement()
        import shlex

        return shlex.quote(self.location)

    def describe(self) -> str:
        """How this copy was installed, for a message: ``installed by pip from a package
        index``, ``installed from the directory /src/x``, or, without a record, where the
        copy is and that nothing says where it came from."""
        by = f" by {self.installer}" if self.installer else ""
        if self.kind == InstallKind.UNRECORDED:
            return (
                f"no installation record for this copy at {self.location or 'an unknown place'}: "
                "a source tree or an unpacked wheel?"
            )
        if self.kind == InstallKind.INDEX:
            return f"installed{by} from a package index"
        if self.kind == InstallKind.DIR:
            return f"installed{by} from the directory {self.location}"
        if self.kind == InstallKind.VCS:
            return f"installed{by} from the checkout {self.location}"
        return f"installed{by} from {self.location}"


def install_source_of(
    direct_url_json: str | None, installer: str | None = "", *, location: str = ""
) -> InstallSource:
    """The :class:`InstallSource` an installation record describes: PEP 610's
    ``direct_url.json`` text and the dist-info's ``INSTALLER`` text (``None``: the
    dist-info has no such file). A ``direct_url.json`` names where the copy came from;
    without one (or one that cannot be read), an installer's record means an index
    install, and no ``INSTALLER`` means no record at all (an unpacked wheel): then
    ``UNRECORDED``, with ``location``, the directory holding the copy."""
    import json

    # Its first line only, printable and short: it is quoted in messages.
    first = (installer or "").strip().partition("\n")[0]
    name = "".join(c for c in first if c.isprintable())[:40]
    try:
        record = json.loads(direct_url_json) if direct_url_json else None
    except (ValueError, RecursionError):
        record = None
    url = record.get("url") if isinstance(record, dict) else None
    if not isinstance(record, dict) or not isinstance(url, str) or not url:
        if installer is None:
            return InstallSource(InstallKind.UNRECORDED, location)
        return InstallSource(installer=name)
    vcs = record.get("vcs_info")
    if isinstance(vcs, dict):
        commit = vcs.get("commit_id")
        location = f"{vcs.get('vcs', 'git')}+{url}" + (f"@{commit}" if commit else "")
        return InstallSource(InstallKind.VCS, location, name)
    if url.startswith("file:"):
        from urllib.parse import unquote, urlsplit
        from urllib.request import url2pathname

        url = url2pathname(unquote(urlsplit(url).path))
    kind = InstallKind.DIR if isinstance(record.get("dir_info"), dict) else InstallKind.ARCHIVE
    return InstallSource(kind, url, name)


def pinned_requirement() -> str:
    """``torch-c-dlpack-ext==<this version>``: what every remedy installs. Unpinned, pip
    picks whatever the index has (PyPI's 0.1.5 sdist before this version is published)."""
    return f"torch-c-dlpack-ext=={__version__}"
