"""THE build identities: what a cell is called, which job builds it, where its library
goes and which variant label its wheel gets; and finding a built library's cell again.

A *cell* is one library: (platform, torch minor, backend, C++ ABI, Python ABI). The
Python ABI is ``abi3`` for every normal cell (compiled once with the limited API, it
serves every CPython with the GIL from 3.9 on: no CPython version is part of its
identity) or a free-threaded CPython (``3.13t``, ``3.14t``). Its identities, spelled
here only:

- cell id ``<platform>-<label>[-cp3XYt]``: ``linux_x86_64-t28_cpu``,
  ``linux_x86_64-t26_cuda_abi0``, ``linux_x86_64-t29_cpu-cp314t``;
- job id ``<platform>-<flavour backend>[<toolkit>][-cp3XYt]``: ``linux_x86_64-cuda``,
  ``linux_x86_64-rocm6.4``, ``linux_x86_64-cuda-cp314t``;
- group folder ``<platform>-<abi3|cp3XYt>`` (one combined wheel each):
  ``build/cells/linux_x86_64-abi3``;
- variant label ``t<major><minor>_<backend>[_abi<0|1>]`` (PEP 825; the rule is
  :func:`~_torch_c_dlpack_ext_core.naming.variant_label`): ``t28_cpu``. The label
  carries no Python: an abi3 and a free-threaded variant wheel of one cell share it,
  their wheel tags (``cp39-abi3``, ``cp314-cp314t``) tell them apart.

The portable table (issue 30) is one more cell per group: :class:`PortableCell`,
torch-agnostic (no torch minor, backend or ABI), id ``<platform>-portable[-cp3XYt]``
(``linux_x86_64-portable``), built by the first job of its group and packed into the
group's combined wheel only (a variant wheel holds one native cell's library).

``nox -s build`` records the cell id in each library's manifest entry
(:attr:`~_torch_c_dlpack_ext_core.manifest.ManifestEntry.cell`), so wheel assembly
and the release's contents find the cell by that id (:func:`cell_for_entry`), never by
comparing the entry's fields with the matrix.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from pathlib import Path

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import (
    ABI3,
    ANY,
    PORTABLE,
    Backend,
    library_filename,
    portable_library_filename,
    python_target_tags,
    variant_label,
)
from devtools.base.errors import MatrixError
from devtools.matrix.tables import Platform, TorchMinor, TorchWheel

__all__ = [
    "Cell",
    "PortableCell",
    "cell_for_entry",
    "group_dir",
    "library_entry",
    "portable_cell_for_entry",
    "portable_cells",
]


class _ServesPython:
    """What a build identity derives from its ``python`` (``"abi3"`` or a free-threaded
    ``"3.14t"``): whether it is free-threaded and its wheel ABI tag."""

    python: str

    @property
    def freethreaded(self) -> bool:
        return self.python != ABI3

    @property
    def python_tag(self) -> str:
        """``abi3``, or the free-threaded interpreter's ``cp314t``."""
        return python_target_tags(self.python)[1]


@dataclasses.dataclass(frozen=True)
class Cell(_ServesPython):
    """One library to build: (platform, torch minor, backend, C++ ABI, Python ABI)."""

    platform: Platform
    torch: TorchMinor
    backend: Backend
    cxx11_abi: bool | None
    #: The torch flavour compiled against.
    wheel: TorchWheel
    #: The torch minor ships with both ABIs on this platform (labels must tell them apart).
    abi_ambiguous: bool
    #: ``"abi3"`` (every CPython >= 3.9 with the GIL) or a free-threaded ``"3.14t"``: the
    #: library's manifest ``python``.
    python: str = ABI3
    #: The CPythons with the GIL this torch minor supports on the platform (inside
    #: ``requires-python``), oldest first: the interpreters an abi3 library of the cell
    #: serves, and which the release's verify installs it on (the oldest and the newest).
    pythons: tuple[str, ...] = ()
    #: Builder image of the cell's job (``None``: the platform's default image, if any).
    image: str | None = None
    #: The flavour's toolkit when its backend has one builder image per toolkit version
    #: (ROCm): jobs are split by it, since one job runs in one image.
    job_toolkit: str | None = None
    #: Why the cell's job may fail without failing the release (``""``: it may not).
    allow_failure: str = ""
    #: Why the release builds no job for the cell (``""``: it does).
    not_released: str = ""

    @property
    def _python_suffix(self) -> str:
        # Only free-threaded identities name their Python: an abi3 library serves them all.
        return f"-{self.python_tag}" if self.freethreaded else ""

    @property
    def label(self) -> str:
        """PEP 825 variant label (``t26_cuda`` or ``t26_cuda_abi0``); no Python in it."""
        major, minor = self.torch.version
        return variant_label(
            major, minor, self.backend, self.cxx11_abi, with_abi=self.abi_ambiguous
        )

    @property
    def id(self) -> str:
        """``linux_x86_64-t26_cuda_abi0`` or ``linux_x86_64-t29_cpu-cp314t``: unique in
        the matrix, stable across runs."""
        return f"{self.platform.name}-{self.label}{self._python_suffix}"

    @property
    def job_id(self) -> str:
        """The cibuildwheel job building this cell: ``linux_x86_64-cuda`` (every Python),
        ``linux_x86_64-cuda-cp314t`` (the free-threaded cells).

        A GPU flavour's job also builds its CPU libraries, so CPU cells of a
        platform that has GPU flavours belong to the first GPU group that
        yields them; CPU-only platforms have one ``cpu`` job. A backend with
        one builder image per toolkit version has one job per version
        (``linux_x86_64-rocm6.1``): a job runs in one image.
        """
        toolkit = self.job_toolkit or ""
        return f"{self.platform.name}-{self.wheel.backend.value}{toolkit}{self._python_suffix}"

    @property
    def group(self) -> str:
        """The group folder's name (``linux_x86_64-abi3``, ``linux_x86_64-cp314t``): one
        per platform and Python ABI, packed into one combined wheel."""
        return f"{self.platform.name}-{self.python_tag}"

    @property
    def library(self) -> str:
        major, minor = self.torch.version
        return library_filename(
            major, minor, self.backend, self.cxx11_abi, platform=self.platform.sys_platform
        )

    @property
    def toolkit(self) -> str | None:
        return self.wheel.toolkit if self.backend is not Backend.CPU else None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "job": self.job_id,
            "python": self.python,
            "pythons": list(self.pythons),
            "platform": self.platform.name,
            "torch": self.torch.minor,
            "torch_release": self.torch.release,
            "backend": self.backend.value,
            "cxx11_abi": self.cxx11_abi,
            "index": self.wheel.index,
            "index_url": self.wheel.index_url,
            "toolkit": self.toolkit,
            "label": self.label,
            "library": self.library,
        }


@dataclasses.dataclass(frozen=True)
class PortableCell(_ServesPython):
    """The portable table of one group (platform x Python ABI): torch-agnostic, so it
    has no torch, backend, ABI or variant label; one library per combined wheel."""

    platform: Platform
    #: ``"abi3"`` or a free-threaded ``"3.14t"``, as the group's cells.
    python: str = ABI3
    #: The job that builds it: the first job of its group in matrix order (one job per
    #: library, so the job wheels never carry two builds of it).
    job_id: str = ""
    not_released: str = ""

    @property
    def id(self) -> str:
        """``linux_x86_64-portable`` or ``linux_x86_64-portable-cp314t``."""
        suffix = f"-{self.python_tag}" if self.freethreaded else ""
        return f"{self.platform.name}-{PORTABLE}{suffix}"

    @property
    def group(self) -> str:
        return f"{self.platform.name}-{self.python_tag}"

    @property
    def library(self) -> str:
        return portable_library_filename(self.python, platform=self.platform.sys_platform)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "job": self.job_id,
            "python": self.python,
            "platform": self.platform.name,
            "torch": "any",
            "backend": "any",
            "library": self.library,
        }


def portable_cells(cells: Iterable[Cell]) -> tuple[PortableCell, ...]:
    """The portable cell of each group ``cells`` touch, in their order, built by the
    group's first job."""
    found: dict[tuple[str, str], PortableCell] = {}
    for cell in cells:
        key = (cell.platform.name, cell.python)
        if key not in found:
            found[key] = PortableCell(
                platform=cell.platform,
                python=cell.python,
                job_id=cell.job_id,
                not_released=cell.not_released,
            )
    return tuple(found.values())


def portable_cell_for_entry(
    cells: Iterable[Cell], entry: ManifestEntry, source: str | Path
) -> PortableCell:
    """The portable cell ``entry`` (a portable library listed in ``source``) was built
    for: the one its ``cell`` id names among the matrix's groups. Raises
    :class:`~devtools.base.errors.MatrixError` as :func:`cell_for_entry` does."""
    by_id = {cell.id: cell for cell in portable_cells(cells)}
    cell = by_id.get(entry.cell or "")
    if cell is None or entry.python != cell.python:
        raise MatrixError(
            f"{source}: {entry.file} is a portable table (python {entry.python}) of cell "
            f"{entry.cell!r}, which is no portable cell of matrix.toml (expected one of "
            f"{', '.join(sorted(by_id)) or 'none'}); rebuild it with `nox -s build`"
        )
    return cell


def group_dir(build_dir: Path, cell: Cell | PortableCell) -> Path:
    """Where a cell's library goes under ``build_dir`` (``build/cells``): its group
    folder (:attr:`Cell.group`)."""
    return build_dir / cell.group


def library_entry(
    cell: Cell | PortableCell, *, file: str, size: int, sha256: str, toolchain: str, dlpack: str
) -> ManifestEntry:
    """The manifest entry of ``file``, a library built for ``cell``: the cell's torch,
    backend, ABI, toolkit, platform and Python, and its id (what :func:`cell_for_entry`
    reads back); a portable cell's says ``any`` for the torch and backend."""
    if isinstance(cell, PortableCell):
        return ManifestEntry(
            file=file,
            torch=ANY,
            torch_build=ANY,
            backend=None,
            cxx11_abi=None,
            dlpack=dlpack,
            toolchain=toolchain,
            gpu_toolkit=None,
            platform=cell.platform.name,
            python=cell.python,
            size=size,
            sha256=sha256,
            cell=cell.id,
        )
    return ManifestEntry(
        file=file,
        torch=cell.torch.minor,
        torch_build=cell.torch.release,
        backend=cell.backend,
        cxx11_abi=cell.cxx11_abi,
        dlpack=dlpack,
        toolchain=toolchain,
        gpu_toolkit=cell.toolkit,
        platform=cell.platform.name,
        python=cell.python,
        size=size,
        sha256=sha256,
        cell=cell.id,
    )


def cell_for_entry(cells: Iterable[Cell], entry: ManifestEntry, source: str | Path) -> Cell:
    """The cell among ``cells`` (the matrix's) that ``entry``, a library listed in
    ``source`` (a manifest or a wheel), was built for: the one its ``cell`` id names.

    Raises :class:`~devtools.base.errors.MatrixError` naming ``source`` when the entry has no
    cell id (a manifest written before cell ids), names a cell the matrix does not have,
    or describes another library than that cell's (the cell's id now means something
    else): in each case the library must be rebuilt.
    """
    by_id = {cell.id: cell for cell in cells}
    described = (
        f"torch {entry.torch}, {entry.backend or 'any'}, cxx11_abi={entry.cxx11_abi}, "
        f"python {entry.python}"
    )
    if entry.portable:
        raise MatrixError(
            f"{source}: {entry.file} is the portable table, no native cell's library "
            "(portable_cell_for_entry reads its cell)"
        )
    if entry.cell is None:
        raise MatrixError(
            f"{source}: {entry.file} ({described}) carries no cell id (it was built before "
            "manifests recorded their cells); rebuild that cell with `nox -s build -- --cells "
            "<its cell id>` (`nox -s matrix -- --list` lists them)"
        )
    cell = by_id.get(entry.cell)
    if cell is None:
        close = difflib.get_close_matches(entry.cell, list(by_id), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MatrixError(
            f"{source}: {entry.file} was built for cell {entry.cell!r}, which is no cell of "
            f"matrix.toml{hint}; rebuild it or fix the matrix"
        )
    if (entry.torch, entry.backend, entry.cxx11_abi, entry.python) != (
        cell.torch.minor,
        cell.backend,
        cell.cxx11_abi,
        cell.python,
    ):
        raise MatrixError(
            f"{source}: {entry.file} ({described}) is not a library of cell {cell.id} "
            f"(torch {cell.torch.minor}, {cell.backend.value}, cxx11_abi={cell.cxx11_abi}, "
            f"python {cell.python}): matrix.toml changed since it was built; rebuild "
            f"it with `nox -s build -- --cells {cell.id}`"
        )
    return cell
