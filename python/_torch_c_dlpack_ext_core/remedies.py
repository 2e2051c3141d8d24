"""The commands remedies name, for this version: reinstalling
(:func:`reinstall_remedy`, :func:`reinstall_command`; from where the installation came
from, :class:`~.installsource.InstallSource`) and building from source
(:func:`build_from_source_command`, with the build requirements a build without isolation
needs, :data:`BUILD_REQUIREMENTS`).
"""

from __future__ import annotations

from .installsource import InstallKind, InstallSource, pinned_requirement
from .version import __version__

__all__ = [
    "BUILD_REQUIREMENTS",
    "build_from_source_command",
    "build_requirements_command",
    "reinstall_command",
    "reinstall_remedy",
]


#: What a source build needs besides torch, by the module each provides: pyproject.toml's
#: ``[build-system] requires`` (a unit test keeps the two equal). A build without isolation
#: (the only kind that sees the user's torch) installs none of them itself.
BUILD_REQUIREMENTS = {
    "packaging": "packaging>=24",
    "filelock": "filelock>=3.12",
    "tvm_ffi": "apache-tvm-ffi>=0.1.6",
    "pyproject_metadata": "pyproject-metadata>=0.9",
    "tomli": "tomli>=1.1; python_version < '3.11'",
}


def reinstall_command(source: InstallSource | None = None) -> str:
    """The pip command that reinstalls this version's wheel (a damaged installation), from
    where ``source`` says it came from (default: the index, version pinned; a placeholder
    for the origin where nothing records it)."""
    requirement = (source or InstallSource()).requirement()
    return f"pip install --force-reinstall --no-deps {requirement}"


def reinstall_remedy(source: InstallSource | None = None) -> str:
    """How to repair this installation, as a message says it: how the copy was installed
    (:meth:`InstallSource.describe`) and the command that reinstalls it from there
    (:func:`reinstall_command`; default ``source``: the index)."""
    source = source or InstallSource()
    command = reinstall_command(source)
    if source.kind == InstallKind.UNRECORDED:  # whatever put it on sys.path would shadow a new one
        command += ", then take this copy off sys.path"
    return f"reinstall torch-c-dlpack-ext ({source.describe()}): {command}"


def build_requirements_command(python: tuple[int, int] | None = None) -> str:
    """``pip install "packaging>=24" ...``: the build requirements a source build without
    isolation needs in the environment. ``python``: the target's ``(major, minor)``,
    default this one (``tomli`` is needed below 3.11)."""
    import sys

    major_minor = sys.version_info[:2] if python is None else python
    needed = [
        requirement.split(";")[0].strip()
        for module, requirement in BUILD_REQUIREMENTS.items()
        if module != "tomli" or major_minor < (3, 11)
    ]
    return "pip install " + " ".join(f'"{req}"' for req in needed)


def build_from_source_command(
    python: tuple[int, int] | None = None, source: InstallSource | None = None
) -> str:
    """The pip commands that build this version from its sdist against the torch already
    installed: the build requirements first (:func:`build_requirements_command`), then the
    build itself, without isolation (only that build sees the user's torch). ``source``:
    where this installation came from (default: the index, version pinned); a local
    directory, an sdist or a checkout is built from there, a wheel from its sources."""
    source = source or InstallSource()
    if source.kind == InstallKind.INDEX:
        target = f"--no-binary torch-c-dlpack-ext {pinned_requirement()}"
    elif source.is_wheel:
        # A wheel cannot be built from: its sources can (named, as a placeholder).
        target = (
            f"<a checkout or the sdist of torch-c-dlpack-ext {__version__}, the sources of "
            f"{source.location}>"
        )
    elif source.kind == InstallKind.UNRECORDED:
        target = f"<a checkout or the sdist of torch-c-dlpack-ext {__version__}>"
    else:
        target = source.requirement()
    return (
        f"{build_requirements_command(python)} && pip install --force-reinstall --no-deps "
        f"--no-build-isolation {target}"
    )
