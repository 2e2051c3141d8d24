"""In-tree PEP 517 / PEP 660 build backend of torch-c-dlpack-ext: only the hooks live here,
and the backend only packs (the build environment's torch compiled now, prebuilt
``libs-dir=`` libraries, or ``universal``); it never imports devtools.

Only the hooks live here. Each runs inside the ONE error boundary
(:func:`._boundary.error_boundary`: our errors become one paragraph and a non-zero
exit, no traceback unless ``TORCH_C_DLPACK_EXT_BUILD_TRACEBACK=1``), imports its
implementation lazily (so a frontend asking for requirements loads nothing) and
delegates to one function per artifact: :mod:`._wheel` (wheels, editable wheels,
metadata) and :mod:`._sdist`. The backend only packs: prebuilt libraries
(``libs-dir=``), the build environment's torch, or universal. Settings: see
:mod:`._options`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ._options import BackendOptions, ConfigSettings

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


def _errors_translated() -> AbstractContextManager[None]:
    from ._boundary import error_boundary

    return error_boundary()


def _settings_of(config_settings: ConfigSettings | None) -> BackendOptions:
    """The hook's settings: ``config_settings`` read once, into the frozen options."""
    from ._options import hook_options

    return hook_options(config_settings)


def get_requires_for_build_wheel(config_settings: ConfigSettings | None = None) -> list[str]:
    """Nothing beyond ``[build-system] requires`` (torch itself must already be in the
    build environment); a bad setting fails here, before any build."""
    with _errors_translated():
        from ._wheel import wheel_requirements

        return wheel_requirements(_settings_of(config_settings))


def get_requires_for_build_sdist(config_settings: ConfigSettings | None = None) -> list[str]:
    """Nothing beyond ``[build-system] requires``."""
    with _errors_translated():
        return []


def get_requires_for_build_editable(config_settings: ConfigSettings | None = None) -> list[str]:
    """Nothing beyond ``[build-system] requires``."""
    with _errors_translated():
        return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: ConfigSettings | None = None
) -> str:
    """Write ``<name>-<version>.dist-info/METADATA`` without building anything."""
    with _errors_translated():
        from ._wheel import metadata_impl

        return metadata_impl(metadata_directory)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: ConfigSettings | None = None
) -> str:
    """As :func:`prepare_metadata_for_build_wheel`."""
    return prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Build a wheel (prebuilt libraries, the build env's torch, or universal)."""
    with _errors_translated():
        from ._wheel import build_wheel_impl

        return build_wheel_impl(wheel_directory, _settings_of(config_settings))


def build_editable(
    wheel_directory: str,
    config_settings: ConfigSettings | None = None,
    metadata_directory: str | None = None,
) -> str:
    """Build an editable wheel: the package from the source tree, no library."""
    with _errors_translated():
        from ._wheel import build_editable_impl

        return build_editable_impl(wheel_directory, _settings_of(config_settings))


def build_sdist(sdist_directory: str, config_settings: ConfigSettings | None = None) -> str:
    """Build the sdist (what a source build uses: sources, the package, the backend)."""
    with _errors_translated():
        from ._sdist import build_sdist_impl

        _settings_of(config_settings)  # a bad setting fails here too, though the sdist has none
        return build_sdist_impl(sdist_directory)
