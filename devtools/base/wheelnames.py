"""THE reader of wheel and sdist file names and of platform tags in devtools:
``packaging.utils`` does the parsing of names; added here are PEP 825's variant label,
which packaging does not know yet, and what a platform tag says (family, architecture,
glibc or macOS floor), which packaging computes for a host but does not read back.

A PEP 825 variant wheel's name carries a label after the platform tag
(``torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64-t28_cpu.whl``). PEP 427's
optional build tag also makes a name of six parts, but it sits third and starts with
a digit, so the two are told apart by position (as variantlib's own name pattern
does; a unit test compares them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

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

from devtools.base.errors import ReleaseError

__all__ = [
    "WheelName",
    "combined_platform",
    "dist_name_version",
    "is_variant_name",
    "parse_wheel_name",
    "platform_key",
    "platform_tag",
    "with_platform",
]

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


def is_variant_name(filename: str) -> bool:
    """``filename`` is shaped like a PEP 825 variant wheel's name (a label after the
    platform tag); nothing else of the name is checked."""
    return filename.endswith(".whl") and _split_label(filename)[1] is not None


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


def platform_tag(filename: str) -> str:
    """The platform part of a wheel name's tags, compressed as in the name
    (``manylinux_2_17_x86_64.manylinux2014_x86_64``, sorted)."""
    return ".".join(sorted({tag.platform for tag in parse_wheel_name(filename).tags}))


_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _linux_policy(platform: str) -> tuple[tuple[int, int] | None, str]:
    """``(glibc, arch)`` of a Linux platform tag; glibc ``None`` for plain ``linux_*``."""
    head, _, rest = platform.partition("_")
    if head == "linux":
        return None, rest
    if head in _LEGACY_MANYLINUX:
        return _LEGACY_MANYLINUX[head], rest
    major, minor, arch = rest.split("_", 2)
    return (int(major), int(minor)), arch


def _macos_target(platform: str) -> tuple[int, int]:
    """The deployment target of a ``macosx_<major>_<minor>_<arch>`` tag."""
    _, major, minor, _ = platform.split("_", 3)
    return int(major), int(minor)


def platform_key(platform: str) -> tuple[str, str]:
    """``(family, architecture)`` of a wheel platform tag: the combined-wheel group.

    Tags of one architecture differ between jobs (``manylinux_2_28_x86_64``,
    ``manylinux_2_27_x86_64``, ``linux_x86_64``; ``macosx_11_0_arm64``,
    ``macosx_14_0_arm64``), and they all belong in one combined wheel.
    """
    if platform.startswith(("manylinux", "linux_")):
        return "linux", _linux_policy(platform)[1]
    if platform.startswith("musllinux_"):
        return "musllinux", platform.split("_", 3)[-1]
    if platform.startswith("macosx_"):
        return "macos", platform.split("_", 3)[-1]
    return platform.split("_", 1)[0], platform.split("_", 1)[-1]


def combined_platform(tag_sets: Sequence[frozenset[str]]) -> str:
    """The platform tag of a wheel holding the libraries of wheels tagged ``tag_sets``.

    A wheel tagged with several platforms works on each of them; its libraries need
    at least the oldest one it names. The combined wheel needs what its most
    demanding part needs: the newest of those minimums (glibc for manylinux, the
    deployment target for macOS). A part that was never repaired (``linux_*``)
    makes the whole ``linux_*``. Raises :class:`~devtools.base.errors.ReleaseError` for
    tags of different architectures or families, or ones this function does not know.
    """
    keys = {platform_key(p) for tags in tag_sets for p in tags}
    if len(keys) != 1:
        raise ReleaseError(f"wheels of different platforms cannot be combined: {sorted(keys)}")
    ((family, arch),) = keys
    if family == "linux":
        needs: list[tuple[int, int]] = []
        for tags in tag_sets:
            policies = [_linux_policy(p)[0] for p in tags]
            if any(policy is None for policy in policies):
                return f"linux_{arch}"
            needs.append(min(policy for policy in policies if policy is not None))
        major, minor = max(needs)
        return f"manylinux_{major}_{minor}_{arch}"
    if family == "macos":
        major, minor = max(min(_macos_target(p) for p in tags) for tags in tag_sets)
        return f"macosx_{major}_{minor}_{arch}"
    (only,) = {p for tags in tag_sets for p in tags}
    return only
