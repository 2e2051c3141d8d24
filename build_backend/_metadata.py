"""Core metadata (METADATA) from pyproject.toml's ``[project]`` table.

pyproject-metadata validates the table (PEP 621 / PEP 639) and writes the
RFC 822 form; the one dynamic field, ``version``, comes from
``python/_torch_c_dlpack_ext_core/version.py`` (the one source of the version), read
without importing the package.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import ConfigError

if TYPE_CHECKING:
    from pyproject_metadata import StandardMetadata

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ProjectMetadata", "load_pyproject", "project_metadata", "read_version", "toml_table"]


def load_pyproject(root: Path) -> dict[str, object]:
    """Parsed ``pyproject.toml`` of ``root``. Raises :class:`ConfigError`.

    Its values are ``object``: a TOML document's tables hold any TOML value, and the
    readers (this module, :mod:`._options`, the devtools) check what they take."""
    path = root / "pyproject.toml"
    try:
        data: dict[str, object] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return data


def toml_table(document: Mapping[str, object], *keys: str) -> dict[str, object]:
    """The table at ``keys`` (``"tool", "cibuildwheel"``) of a parsed pyproject.toml; an
    absent key gives an empty table, and a value there that is not a table is a
    :class:`ConfigError` naming it."""
    table: Mapping[str, object] = document
    for depth, key in enumerate(keys):
        value = table.get(key, {})
        if not isinstance(value, Mapping):
            name = ".".join(keys[: depth + 1])
            raise ConfigError(
                f"pyproject.toml: [{name}] must be a table, not {type(value).__name__}"
            )
        table = value
    return {str(key): value for key, value in table.items()}


def read_version(version_file: Path) -> str:
    """``__version__`` assigned in ``version_file``, read with :mod:`ast` (never imported)."""
    from packaging.version import InvalidVersion, Version

    tree = ast.parse(version_file.read_text(encoding="utf-8"), str(version_file))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            try:
                return str(Version(node.value.value))
            except InvalidVersion:
                raise ConfigError(
                    f"{version_file}: __version__ = {node.value.value!r} is not a PEP 440 version"
                ) from None
    raise ConfigError(f"{version_file} assigns no string __version__")


class ProjectMetadata:
    """Validated metadata of the project: name, version, METADATA bytes, license files."""

    def __init__(self, standard: StandardMetadata, root: Path) -> None:
        self._standard = standard
        self.root = root

    @property
    def name(self) -> str:
        """Normalized distribution name for file names (``torch_c_dlpack_ext``)."""
        return str(self._standard.canonical_name).replace("-", "_")

    @property
    def version(self) -> str:
        return str(self._standard.version)

    @property
    def dist_info(self) -> str:
        return f"{self.name}-{self.version}.dist-info"

    def metadata_bytes(self) -> bytes:
        return bytes(self._standard.as_rfc822())

    def license_files(self) -> list[Path]:
        return [self.root / p for p in self._standard.license_files or []]

    @property
    def requires_python(self) -> str | None:
        spec = self._standard.requires_python
        return None if spec is None else str(spec)


def project_metadata(root: Path, pyproject: Mapping[str, object] | None = None) -> ProjectMetadata:
    """Validate ``[project]`` and fill the dynamic version. Raises :class:`ConfigError`."""
    import pyproject_metadata
    from packaging.version import Version

    data = dict(load_pyproject(root) if pyproject is None else pyproject)
    project = toml_table(data, "project")
    listed = project.get("dynamic", [])
    dynamic = list(listed) if isinstance(listed, (list, tuple)) else [listed]
    unsupported = [field for field in dynamic if field != "version"]
    if unsupported:
        raise ConfigError(
            f"pyproject.toml [project] dynamic = {unsupported}: the in-tree backend fills only "
            "'version' (from python/_torch_c_dlpack_ext_core/version.py); make the others static"
        )
    version = read_version(root / "python" / "_torch_c_dlpack_ext_core" / "version.py")
    if "version" in project and "version" in dynamic:
        raise ConfigError("pyproject.toml: 'version' is both static and dynamic; keep it dynamic")
    project["version"] = version
    project["dynamic"] = []
    data["project"] = project
    try:
        standard = pyproject_metadata.StandardMetadata.from_pyproject(
            data, project_dir=root, metadata_version="2.4"
        )
    except pyproject_metadata.ConfigurationError as exc:
        raise ConfigError(f"pyproject.toml [project] is invalid: {exc}") from None
    standard.version = Version(version)
    return ProjectMetadata(standard, root)
