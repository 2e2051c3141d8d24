"""The build matrix as objects: :class:`Matrix` derives the cells from ``matrix.toml``'s
tables, selects cells by id or pattern and groups them into CI's jobs.

Each ``[[torch.wheel]]`` flavour yields its own backend's library and the CPU library of
the same ABI; when two flavours yield the same cell the first listed wins. A torch
minor's ``python`` list (its CPythons with the GIL) only bounds the abi3 cells: the
oldest entry inside the project's ``requires-python`` is the floor, and the release's
``verify`` installs the abi3 wheel on the oldest and the newest of them. The cells'
identities (ids, job ids, labels) are :mod:`devtools.matrix.cells`'.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import ABI3, Backend, python_target_tags
from devtools.matrix.cells import Cell, portable_cells
from devtools.matrix.jobs import Job
from devtools.matrix.tables import (
    FreeThreaded,
    Platform,
    TorchMinor,
    python_sort_key,
    python_within,
)

__all__ = ["Matrix", "choice_hint"]


#: How many close matches an unknown cell id is answered with.
_CLOSE_MATCHES = 5


def choice_hint(value: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)``, or the choices when none is close."""
    choices = list(choices)
    close = difflib.get_close_matches(value, choices, n=1)
    listed = ", ".join(choices)
    return f" (did you mean {close[0]!r}?)" if close else f" (expected one of: {listed})"


@dataclasses.dataclass(frozen=True)
class Matrix:
    """The whole build matrix."""

    #: The file it was read from (``None``: parsed from data, not from a file).
    path: Path | None
    platforms: Mapping[str, Platform]
    indexes: Mapping[str, str]
    #: Builder image per toolkit version (``[backends.X.images]``), per backend.
    backend_images: Mapping[Backend, Mapping[str, str]]
    torch: tuple[TorchMinor, ...]
    #: ``[project] requires-python``: Pythons outside it yield no cell.
    requires_python: str | None = None
    #: ``[backends.X] allow_failure``: why that backend's jobs may fail.
    allow_failure: Mapping[Backend, str] = dataclasses.field(default_factory=dict)
    #: ``[freethreaded."3.Xt"]``: which free-threaded Pythons the release builds.
    freethreaded: Mapping[str, FreeThreaded] = dataclasses.field(default_factory=dict)

    def supports_python(self, python: str) -> bool:
        """``python`` (``"3.11"``, ``"3.14t"``) is inside the project's ``requires-python``."""
        return python_within(python, self.requires_python)

    def cells(self) -> tuple[Cell, ...]:
        """Every cell, in matrix order (torch minor, flavour, platform, Python ABI, backend):
        per platform the abi3 cell, then one per free-threaded Python torch ships there."""
        seen: dict[tuple[str, str, Backend, bool | None, str], Cell] = {}
        for minor in self.torch:
            abis: dict[str, set[bool]] = {}
            for wheel in minor.wheels:
                for plat, abi in wheel.cxx11_abi.items():
                    abis.setdefault(plat, set()).add(abi)
            for wheel in minor.wheels:
                backends = [wheel.backend] + (
                    [Backend.CPU] if wheel.backend is not Backend.CPU else []
                )
                images = self.backend_images.get(wheel.backend, {})
                for plat_name in wheel.platforms:
                    platform = self.platforms[plat_name]
                    cell_abi = wheel.cxx11_abi.get(plat_name) if platform.dual_abi else None
                    pythons = tuple(
                        p for p in minor.pythons_for(plat_name) if self.supports_python(p)
                    )
                    targets = [ABI3] if pythons else []
                    if wheel.freethreaded:
                        targets += [
                            p for p in minor.freethreaded_for(plat_name) if self.supports_python(p)
                        ]
                    for python in targets:
                        for backend in backends:
                            key = (plat_name, minor.minor, backend, cell_abi, python)
                            if key in seen:
                                continue
                            released = self.freethreaded.get(python)
                            seen[key] = Cell(
                                platform=platform,
                                torch=minor,
                                backend=backend,
                                cxx11_abi=cell_abi,
                                wheel=wheel,
                                abi_ambiguous=len(abis.get(plat_name, ())) > 1,
                                python=python,
                                pythons=pythons,
                                image=images.get(wheel.toolkit or "", platform.image),
                                job_toolkit=wheel.toolkit if images else None,
                                allow_failure=self.allow_failure.get(wheel.backend, ""),
                                not_released=(
                                    released.reason
                                    if released is not None and not released.release
                                    else ""
                                ),
                            )
        return tuple(seen.values())

    def pythons(self) -> tuple[str, ...]:
        """Every CPython with the GIL of the matrix inside ``requires-python``, oldest first."""
        found = {p for minor in self.torch for p in minor.python if self.supports_python(p)}
        return tuple(sorted(found, key=python_sort_key))

    def python_abis(self) -> tuple[str, ...]:
        """The Python ABIs of the cells: ``abi3`` and the free-threaded Pythons."""
        free = {p for minor in self.torch for p in minor.freethreaded if self.supports_python(p)}
        return (ABI3, *sorted(free, key=python_sort_key))

    def select(
        self,
        patterns: Sequence[str] = (),
        *,
        python: Sequence[str] = (),
        platform: Sequence[str] = (),
    ) -> tuple[Cell, ...]:
        """Cells matching every filter given.

        ``patterns``: cell ids, job ids or ``fnmatch`` patterns of either
        (``*-t26_*``). A pattern that matches nothing is an error with a hint, so
        a typo in CI's ``--only`` never silently builds nothing. ``python``: Python
        ABIs (``abi3``, ``3.14t``).
        """
        cells = self.cells()
        for value in python:
            known = self.python_abis()
            if value not in known:
                raise ConfigError(
                    f"python {value!r} is no Python ABI of the matrix{choice_hint(value, known)}"
                )
        for value in platform:
            if value not in self.platforms:
                raise ConfigError(
                    f"platform {value!r} is not known{choice_hint(value, self.platforms)}"
                )
        if python:
            cells = tuple(c for c in cells if c.python in python)
        if platform:
            cells = tuple(c for c in cells if c.platform.name in platform)
        patterns = [p.strip() for p in patterns if p.strip()]
        if not patterns:
            return cells
        chosen: list[Cell] = []
        for pattern in patterns:
            hits = [
                c
                for c in cells
                if fnmatch.fnmatchcase(c.id, pattern) or fnmatch.fnmatchcase(c.job_id, pattern)
            ]
            if not hits:
                raise ConfigError(
                    f"no matrix cell matches {pattern[:80]!r}{_pattern_hint(pattern, cells)}; "
                    "`nox -s matrix -- --list` prints every cell id"
                )
            chosen.extend(c for c in hits if c not in chosen)
        return tuple(chosen)

    def job_python(self, cells: Sequence[Cell]) -> str:
        """The CPython a job's cibuildwheel builds with: the free-threaded Python of
        free-threaded cells; for abi3 cells the newest CPython every one of the job's
        torch minors supports on the platform (its test step installs the newest of
        them), else the newest any of them supports."""
        if cells[0].freethreaded:
            return cells[0].python
        common = set(cells[0].pythons).intersection(*(c.pythons for c in cells[1:]))
        return max(common or {p for c in cells for p in c.pythons}, key=python_sort_key)

    def jobs(self, cells: Sequence[Cell] | None = None) -> list[Job]:
        """CI's job matrix: one entry per cibuildwheel job (platform x torch flavour, and
        per free-threaded Python). Cells the release does not build (``[freethreaded]``
        ``release = false``) get no job."""
        grouped: dict[str, list[Cell]] = {}
        for cell in self.cells() if cells is None else cells:
            if not cell.not_released:
                grouped.setdefault(cell.job_id, []).append(cell)
        # The portable table of each group, built by the group's first job in matrix order,
        # as `devtools build --libs-dir` builds it (one library per combined wheel; verify
        # and the release notes expect it there).
        portable: dict[str, list[str]] = {}
        for table in portable_cells(self.cells()):
            if table.job_id in grouped:
                portable.setdefault(table.job_id, []).append(table.id)
        jobs: list[Job] = []
        for job_id, members in grouped.items():
            first = members[0]
            python = self.job_python(members)
            jobs.append(
                {
                    "id": job_id,
                    "python": python,
                    "platform": first.platform.name,
                    "backend": first.wheel.backend.value,
                    "runner": first.platform.runner,
                    "cibw_build": f"{python_target_tags(python)[1]}-*",
                    "arch": first.platform.cibw_arch,
                    "image": first.image or "",
                    "toolkit": first.job_toolkit or "",
                    "allow_failure": first.allow_failure,
                    "cells": [c.id for c in members],
                    "portable": portable.get(job_id, []),
                    # The CPythons each torch minor of the job serves (for verify).
                    "torch": {
                        c.torch.minor: [c.python] if c.freethreaded else list(c.pythons)
                        for c in members
                    },
                }
            )
        return jobs


def _pattern_hint(pattern: str, cells: Sequence[Cell]) -> str:
    """What a pattern that matches no cell may have meant."""
    if re.match(r"cp3\d+-", pattern):
        return (
            " (cells carry no CPython version any more: one abi3 library serves "
            "every CPython >= 3.9; only free-threaded cells end in -cp3XYt)"
        )
    names = sorted({c.id for c in cells} | {c.job_id for c in cells})
    close = difflib.get_close_matches(pattern, names, n=_CLOSE_MATCHES, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
