"""Publishing a release: ``twine check --strict`` and ``twine upload`` of ``dist/``
(``nox -s release``; ``nox -s rehearse`` runs the same against a local index), the
tag check and the release workflow's publish guard.

Credentials come only from the environment (``TWINE_USERNAME`` /
``TWINE_PASSWORD``, or Trusted Publishing in CI) and are never printed.
"""

from __future__ import annotations

import dataclasses
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.naming import DIST_NAME
from _torch_c_dlpack_ext_core.run import run
from _torch_c_dlpack_ext_core.version import __version__
from devtools.base.errors import ReleaseError
from devtools.release.distfiles import VERSION_FILE, ReleaseFiles, collect

__all__ = [
    "PublishTarget",
    "check_tag",
    "publish",
    "publish_target",
    "twine_check",
    "twine_upload",
    "validate_repository_url",
]

#: Time limits (seconds) so a stuck index never hangs a release.
TWINE_CHECK_TIMEOUT = 300.0
TWINE_UPLOAD_TIMEOUT = 1800.0


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
    """The release tag must be ``v`` + the version in ``version.py``."""
    if tag != f"v{version}":
        raise ReleaseError(
            f"tag {tag!r} does not match {VERSION_FILE} ({version!r}); "
            f"tag v{version}, or bump the version and CHANGELOG.md first"
        )


@dataclasses.dataclass(frozen=True)
class PublishTarget:
    """Where a release workflow run may upload (``index`` ``"none"``: nowhere)."""

    index: str
    repository_url: str = ""
    project_url: str = ""

    def output_lines(self) -> list[str]:
        return [
            f"index={self.index}",
            f"repository_url={self.repository_url}",
            f"project_url={self.project_url}",
        ]


def publish_target(
    event: str, ref: str, publish: bool, *, version: str = __version__
) -> PublishTarget:
    """The publish guard: PyPI only from a pushed tag ``v<version>`` (every cell of
    matrix.toml: a tag push has no ``cells`` input), TestPyPI at most from a manual
    run (``publish`` true), nothing otherwise. A file name burned on PyPI can never
    be uploaded again, so a partial or untagged build must never reach it."""
    if event == "push":
        if not ref.startswith("refs/tags/"):
            raise ReleaseError(f"push of {ref!r} is not a tag push; only tags v<version> publish")
        check_tag(ref.removeprefix("refs/tags/"), version)
        return PublishTarget(
            index="pypi",
            repository_url="https://upload.pypi.org/legacy/",
            project_url=f"https://pypi.org/project/{DIST_NAME}/{version}/",
        )
    if event == "workflow_dispatch":
        if not publish:
            return PublishTarget(index="none")
        return PublishTarget(
            index="testpypi",
            repository_url="https://test.pypi.org/legacy/",
            project_url=f"https://test.pypi.org/project/{DIST_NAME}/{version}/",
        )
    raise ReleaseError(f"event {event!r} never publishes; expected push or workflow_dispatch")
