"""THE reader of wheel and sdist file names and of platform tags in devtools:
``packaging.utils`` does the parsing of names; added here are PEP 825's variant label,
which packaging does not know yet, and what a platform tag says (family, architecture,
glibc or macOS floor), which packaging computes for a host but does not read back.

A PEP 825 variant wheel's name carries a label after the platform tag
(``torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64-t28_cpu.whl``). PEP 427's
optional build tag also makes a name of six parts, but it sits third and starts with
a digit, so the two are told apart by position. variantlib's name pattern is the rule
where variantlib is installed (Python >= 3.10); on 3.9, which devtools also serves,
:func:`_split_by_position` reads names by the same rule (a property test holds the two
to the same answers).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Optional

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


#: ``(the name without its variant label, the label or None)``; ``None``: not a wheel
#: name by PEP 825's rule.
_Split = Optional[tuple[str, Optional[str]]]


def _variantlib_rule() -> re.Pattern[str] | None:
    """variantlib's wheel-name pattern, or ``None`` where variantlib is not installed
    (it needs Python >= 3.10: see the ``build`` dependency group)."""
    try:
        from variantlib.constants import VALIDATION_WHEEL_NAME_REGEX
    except ImportError:
        return None
    rule: object = VALIDATION_WHEEL_NAME_REGEX
    return rule if isinstance(rule, re.Pattern) else None


def _split_by_rule(rule: re.Pattern[str], filename: str) -> _Split:
    """Split ``filename`` by variantlib's pattern ``rule``."""
    match = rule.fullmatch(filename)
    if match is None:
        return None
    label = match.group("variant_label")
    return f"{match.group('base_wheel_name')}.whl", label if isinstance(label, str) else None


def _split_by_position(filename: str) -> _Split:
    """Split ``filename`` by the positions of its ``-``-separated fields (the path where
    variantlib is missing): five fields; six, the third a build tag (it starts with a
    digit) or else the sixth a label; seven, a build tag and a label. No field is
    empty but the version; none holds white space but the build tag; a label is
    PEP 825's ``[0-9a-z._]+``."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[: -len(".whl")].split("-")
    build = len(parts) > 2 and parts[2][:1].isdecimal()
    labelled = len(parts) == 7 or (len(parts) == 6 and not build)
    if len(parts) not in {5, 6, 7} or (len(parts) == 7 and not build):
        return None
    fields = parts[:-1] if labelled else parts
    label = parts[-1] if labelled else None
    plain = [field for at, field in enumerate(fields) if not (at == 2 and len(fields) == 6)]
    if any(not field for at, field in enumerate(fields) if at != 1):
        return None
    if any(char.isspace() for field in plain for char in field):
        return None
    if label is not None and not _LABEL.fullmatch(label):
        return None
    return "-".join(fields) + ".whl", label


def _split_label(filename: str) -> _Split:
    """``filename`` split by variantlib's rule where it is installed, else by
    :func:`_split_by_position`."""
    rule = _variantlib_rule()
    return _split_by_position(filename) if rule is None else _split_by_rule(rule, filename)


def is_variant_name(filename: str) -> bool:
    """``filename`` is shaped like a PEP 825 variant wheel's name (a label after the
    platform tag); nothing else of the name is checked."""
    split = _split_label(filename)
    return split is not None and split[1] is not None


def parse_wheel_name(filename: str) -> WheelName:
    """Read ``filename`` (a wheel's base name) with ``packaging.utils``; raise
    :class:`ReleaseError` naming the file when it is not a wheel name."""
    split = _split_label(filename)
    try:
        if split is None:
            raise InvalidWheelFilename("its fields are not those of PEP 427 and PEP 825")
        base, label = split
        name, version, build, tags = parse_wheel_filename(base)
    except InvalidWheelFilename as exc:
        raise ReleaseError(
            f"{filename}: not a wheel file name (dist-version[-build]-python-abi-platform"
            f"[-label].whl, a label of PEP 825's [0-9a-z._]+): {exc}"
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
