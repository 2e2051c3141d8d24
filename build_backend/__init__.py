"""In-tree PEP 517 / PEP 660 build backend of torch-c-dlpack-ext.

Only the hooks live here; each imports its implementation lazily (so a frontend
asking for requirements loads nothing) and delegates to one function per
artifact: :mod:`._wheel` (wheels, editable wheels, metadata) and :mod:`._sdist`.
Settings: see :mod:`._options`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def _prepare() -> None:
    from ._source import install_error_boundary

    install_error_boundary()


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """``uv`` when building matrix cells (it provisions each cell's torch), else nothing:
    torch itself must already be in the build environment."""
    _prepare()
    from ._wheel import wheel_requirements

    return wheel_requirements(config_settings)


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    """Nothing beyond ``[build-system] requires``."""
    return []


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    """Nothing beyond ``[build-system] requires``."""
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    """Write ``<name>-<version>.dist-info/METADATA`` without building anything."""
    _prepare()
    from ._wheel import metadata_impl

    return metadata_impl(metadata_directory)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    """As :func:`prepare_metadata_for_build_wheel`."""
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Build a wheel (prebuilt libraries, matrix cells, the build env's torch, or universal)."""
    _prepare()
    from ._wheel import build_wheel_impl

    return build_wheel_impl(wheel_directory, config_settings)


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Build an editable wheel: the package from the source tree, no library."""
    _prepare()
    from ._wheel import build_editable_impl

    return build_editable_impl(wheel_directory, config_settings)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """Build the sdist (sources, backend, matrix)."""
    _prepare()
    from ._sdist import build_sdist_impl

    return build_sdist_impl(sdist_directory, config_settings)
