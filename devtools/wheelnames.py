"""THE reader of wheel and sdist file names in devtools: ``packaging.utils`` does the
parsing; the only thing added here is PEP 825's variant label, which packaging does
not know yet.

A PEP 825 variant wheel's name carries a label after the platform tag
(``torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64-t28_cpu.whl``). PEP 427's
optional build tag also makes a name of six parts, but it sits third and starts with
a digit, so the two are told apart by position (as variantlib's own name pattern
does; a unit test compares them).
"""

from __future__ import annotations

import dataclasses
import re

from packaging.tags import Tag
from packaging.utils import (
    BuildTag,
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from devtools.errors import ReleaseError

__all__ = ["WheelName", "dist_name_version", "parse_wheel_name", "with_platform"]

#: PEP 825's variant label alphabet (variantlib's ``VALIDATION_VARIANT_LABEL_REGEX``).
_LABEL = re.compile(r"[0-9a-z._]+")


@dataclasses.dataclass(frozen=True)
class WheelName:
    """A wheel file name, read."""

    name: NormalizedName
    version: Version
    build: BuildTag
    tags: frozenset[Tag]
    #: The PEP 825 variant label (``None``: not a variant wheel).
    label: str | None

    @property
    def tag_strings(self) -> frozenset[str]:
        """``cp39-abi3-manylinux_2_28_x86_64`` style triples, one per tag."""
        return frozenset(str(tag) for tag in self.tags)


def _split_label(filename: str) -> tuple[str, str | None]:
    """``(the name without its variant label, the label or None)``."""
    stem = filename.removesuffix(".whl")
    parts = stem.split("-")
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
        base, _, label = stem.rpartition("-")
        return f"{base}.whl", label
    return filename, None


def parse_wheel_name(filename: str) -> WheelName:
    """Read ``filename`` (a wheel's base name) with ``packaging.utils``; raise
    :class:`ReleaseError` naming the file when it is not a wheel name."""
    base, label = _split_label(filename)
    if label is not None and not _LABEL.fullmatch(label):
        raise ReleaseError(
            f"{filename}: variant label {label!r} is not PEP 825's [0-9a-z._]+; rebuild the wheel"
        )
    try:
        name, version, build, tags = parse_wheel_filename(base)
    except InvalidWheelFilename as exc:
        raise ReleaseError(
            f"{filename}: not a wheel file name "
            f"(dist-version[-build]-python-abi-platform[-label].whl): {exc}"
        ) from None
    return WheelName(name, version, build, frozenset(tags), label)


def dist_name_version(filename: str) -> tuple[NormalizedName, Version]:
    """The project name and version of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        wheel = parse_wheel_name(filename)
        return wheel.name, wheel.version
    try:
        return parse_sdist_filename(filename)
    except InvalidSdistFilename as exc:
        raise ReleaseError(f"{filename}: not an sdist file name: {exc}") from None


def with_platform(filename: str, platform: str) -> str:
    """``filename`` (a wheel without a variant label) with its platform tag replaced by
    ``platform``, the rest spelled as it was."""
    wheel = parse_wheel_name(filename)
    if wheel.label is not None:
        raise ReleaseError(f"{filename}: a variant wheel; its platform tag is not replaced")
    head, _, _ = filename.removesuffix(".whl").rpartition("-")
    return f"{head}-{platform}.whl"
