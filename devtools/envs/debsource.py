"""Where a free-threaded CPython's sources come from: Debian's CPython source packages.

No Debian suite ships a free-threaded (``nogil``) binary package, and PyPI has no CPython
source distribution, so :mod:`devtools.envs.freethreaded` builds the interpreter from CPython's
own release tarball as Debian's source package carries it (the ``.orig.tar.xz``; Debian's
patches are not applied). :func:`fetch_source` downloads it with ``apt-get source
--download-only`` through a PRIVATE apt configuration (a temporary ``sources.list`` with one
``deb-src`` line per suite of the :class:`DebianSource`, its own lists and cache): the
system's apt sources are neither read nor changed, and apt checks the files against the
suite's signed index (:data:`KEYRING`). The versions the suites' indexes name (``apt-cache
madison``) are tried newest first, because an archive's pool can lag its index (a mirror
mid-sync, or a proxy like the one our machines use, which serves ``python3.13`` 3.13.15 and
3.13.5 but none of the 3.14.8-3.14.10 its index names). When none downloads, a
:class:`PinnedRelease` is taken from the pool with apt's own downloader (``apt-helper
download-file``), checked against the pinned SHA-256 of its ``.orig`` tarball (how each pin
was verified is in docs/facts.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version

from _torch_c_dlpack_ext_core.errors import ConfigError
from devtools.base.errors import ProvisionError
from devtools.base.steps import Progress, run_step

__all__ = [
    "DEBIAN_MIRROR",
    "KEYRING",
    "DebianSource",
    "PinnedRelease",
    "apt_sources_list",
    "dsc_version",
    "fetch_source",
    "orig_url",
    "source_candidates",
    "upstream_version",
]

DEBIAN_MIRROR = "http://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: apt's own downloader (same proxy settings as apt; checks a given hash).
_APT_HELPER = "/usr/lib/apt/apt-helper"


@dataclasses.dataclass(frozen=True)
class PinnedRelease:
    """A release taken straight from the archive's pool when no version the indexes name
    downloads, checked against the SHA-256 of its ``.orig`` tarball pinned here (where each
    pin was verified: docs/facts.md)."""

    debian_version: str
    orig_sha256: str


@dataclasses.dataclass(frozen=True)
class DebianSource:
    """Where the CPython of one free-threaded version comes from: a Debian source package,
    the suites whose indexes name its versions (newest tried first), and pinned releases
    tried last."""

    package: str
    suites: tuple[str, ...]
    pinned: tuple[PinnedRelease, ...] = ()


def apt_sources_list(source: DebianSource, mirror: str = DEBIAN_MIRROR) -> str:
    """The private ``sources.list``: one ``deb-src`` line per suite, signed by the archive
    keyring (so apt verifies the indexes as it does for the system's own sources)."""
    mirror = mirror.rstrip("/")
    if not mirror or any(c.isspace() for c in mirror):
        raise ConfigError(f"apt mirror {mirror!r} is not a URL like {DEBIAN_MIRROR!r}")
    return "".join(
        f"deb-src [signed-by={KEYRING}] {mirror} {suite} main\n" for suite in source.suites
    )


def upstream_version(debian_version: str) -> str:
    """The CPython release of a Debian version: ``"3.13.5-2+deb13u5"`` -> ``"3.13.5"``
    (epoch and Debian revision dropped); anything else is a :class:`ProvisionError`."""
    # "~" sorts a Debian pre-release before its release: 3.13.0~rc3 is CPython's 3.13.0rc3.
    version = debian_version.strip().split(":", 1)[-1].rsplit("-", 1)[0].replace("~", "")
    if not re.fullmatch(r"3\.\d+\.\d+((a|b|rc)\d+)?", version):
        raise ProvisionError(f"Debian version {debian_version!r} is not a CPython release")
    return version


def dsc_version(text: str) -> str:
    """The ``Version`` field of a (clear-signed) ``.dsc`` file."""
    body = text.split("-----BEGIN PGP SIGNATURE-----", 1)[0]
    match = re.search(r"^Version:[ \t]*(\S+)[ \t]*$", body, re.MULTILINE)
    if match is None:
        raise ProvisionError("the downloaded .dsc has no Version field")
    return match.group(1)


def orig_url(package: str, debian_version: str, mirror: str = DEBIAN_MIRROR) -> str:
    """The pool URL of the ``.orig.tar.xz`` of ``package`` at ``debian_version``."""
    section = package[:4] if package.startswith("lib") else package[:1]
    upstream = upstream_version(debian_version)
    return f"{mirror.rstrip('/')}/pool/main/{section}/{package}/{package}_{upstream}.orig.tar.xz"


def source_candidates(madison: str, package: str) -> list[tuple[str, str]]:
    """``apt-cache madison`` lines -> [(Debian version, suite)] of CPython releases, newest
    first, each version once. Pre-releases (``3.15.0~a2-1``) are left out."""
    found: dict[str, str] = {}
    for line in madison.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) != 3 or fields[0] != package or not fields[2].endswith(" Sources"):
            continue
        debian_version, where = fields[1], fields[2].split()
        if "~" in debian_version:
            continue
        try:
            upstream_version(debian_version)
        except ProvisionError:
            continue
        found.setdefault(debian_version, where[-2].split("/")[0] if len(where) >= 3 else "?")

    def newest(version: str) -> tuple[Version, str]:
        return Version(upstream_version(version)), version

    return sorted(found.items(), key=lambda item: newest(item[0]), reverse=True)


def _private_apt(source: DebianSource, mirror: str, apt: Path) -> list[str]:
    """apt's options for a private configuration in ``apt`` (its ``sources.list``: the
    deb-src lines of ``source``; its own lists and cache)."""
    for folder in ("lists/partial", "cache/archives/partial", "sources.list.d"):
        (apt / folder).mkdir(parents=True)
    (apt / "sources.list").write_text(apt_sources_list(source, mirror), encoding="utf-8")
    return [
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        f"-oDir::Etc::SourceParts={apt / 'sources.list.d'}",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        # The private folders are root's; apt's download sandbox user could not write them.
        "-oAPT::Sandbox::User=root",
    ]


def fetch_source(
    source: DebianSource, mirror: str, work: Path, progress: Progress
) -> tuple[Path, str]:
    """Download ``source`` into ``work`` with a private apt configuration: the newest
    version the indexes name that downloads, else a pinned release from the pool. Returns
    (the orig tarball, its provenance: ``"python3.14 3.14.10-1 (sid)"``)."""
    options = _private_apt(source, mirror, work / "apt")
    suites = ", ".join(source.suites)
    with progress.step(f"reading Debian's source indexes ({suites}) from {mirror}"):
        run_step(
            f"apt-get update of a private deb-src list ({suites} at {mirror}; is it reachable?)",
            ["apt-get", *options, "--error-on=any", "update"],
            timeout=900,
        )
    madison = run_step(
        f"apt-cache madison {source.package}",
        ["apt-cache", *options, "madison", source.package],
        echo=False,
    )
    candidates = source_candidates(madison, source.package)
    if not candidates and not source.pinned:
        raise ProvisionError(
            f"no CPython release of {source.package} in {suites} at {mirror}:\n{madison.strip()}"
        )
    progress.log("candidates, newest first: " + ", ".join(f"{v} ({s})" for v, s in candidates))
    failures: list[str] = []
    found = _from_index(source, candidates, options, work, progress=progress, failures=failures)
    found = found or _from_pool(source, mirror, work, progress=progress, failures=failures)
    if found is None:
        raise ProvisionError(
            f"no version of {source.package} downloads from {mirror}; the last attempt:\n"
            + (failures[-1] if failures else "(none: the indexes name no release)")
        )
    return found


def _from_index(
    source: DebianSource,
    candidates: Sequence[tuple[str, str]],
    options: Sequence[str],
    work: Path,
    *,
    progress: Progress,
    failures: list[str],
) -> tuple[Path, str] | None:
    """``apt-get source`` of the newest candidate that downloads (an index can name a
    version its pool does not serve yet: a mirror mid-sync, a proxy behind the index)."""
    for debian_version, suite in candidates:
        download = work / f"download-{len(failures)}"
        download.mkdir()
        wanted = f"{source.package}={debian_version}"
        try:
            with progress.step(
                f"downloading {source.package} {debian_version} ({suite}) with apt-get source"
            ):
                run_step(
                    f"apt-get source {wanted}",
                    ["apt-get", *options, "source", "--download-only", wanted],
                    cwd=download,
                    timeout=1800,
                )
        except ProvisionError as exc:
            progress.log(f"  {debian_version} did not download; trying an older one")
            failures.append(str(exc))
            continue
        dscs = sorted(download.glob(f"{source.package}_*.dsc"))
        if len(dscs) != 1 or dsc_version(dscs[0].read_text(encoding="utf-8")) != debian_version:
            raise ProvisionError(f"apt-get source left no .dsc of {debian_version} in {download}")
        origs = [
            path
            for path in sorted(download.glob(f"{source.package}_*.orig.tar.*"))
            if path.suffix != ".asc"  # upstream's signature, shipped beside the tarball
        ]
        if len(origs) != 1:
            raise ProvisionError(f"apt-get source left no single .orig tarball in {download}")
        return origs[0], f"{source.package} {debian_version} ({suite})"
    return None


def _from_pool(
    source: DebianSource, mirror: str, work: Path, *, progress: Progress, failures: list[str]
) -> tuple[Path, str] | None:
    """The first pinned release of ``source`` that downloads from the pool, its SHA-256
    checked by apt's downloader."""
    for pin in source.pinned:
        url = orig_url(source.package, pin.debian_version, mirror)
        target = work / url.rsplit("/", 1)[1]
        helper = [_APT_HELPER, "-oAPT::Sandbox::User=root", "download-file", url, str(target)]
        try:
            with progress.step(
                f"downloading the pinned {source.package} {pin.debian_version} from the pool"
            ):
                run_step(
                    f"downloading {url} (SHA-256 {pin.orig_sha256})",
                    [*helper, f"SHA256:{pin.orig_sha256}"],
                    timeout=1800,
                )
        except ProvisionError as exc:
            failures.append(str(exc))
            continue
        return target, f"{source.package} {pin.debian_version} (pool, pinned SHA-256)"
    return None
