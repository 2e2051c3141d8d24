"""Size: each library on disk and compressed inside a wheel, each wheel; vs 0.1.5.

Compressed sizes come from the wheels in ``dist/`` when there are any (``ZipInfo``'s
``compress_size``, exactly what a download costs). Libraries that are only built, not
packed yet, are deflated the way a wheel stores them and marked as estimates. The
"if stripped" column is a what-if for our libraries: the same deflate after
``strip --strip-unneeded``, to show how much of the size is symbol table. The pybind11
column says how much of the machine code is pybind11 instantiated from torch's Python
headers rather than the exchange code itself.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import CommandError, TorchCDLPackExtError
from _torch_c_dlpack_ext_core.run import run

from .report import Table, format_bytes
from .stats import Target
from .subjects import ROOT, BenchContext, fetch_legacy_release

__all__ = ["LibrarySize", "deflated_size", "libraries_in_wheel", "run_size"]

#: The compressed-size goal per library, in bytes.
LIBRARY_LIMIT = 50 * 1000


@dataclasses.dataclass(frozen=True, kw_only=True)
class LibrarySize:
    owner: str
    name: str
    size: int
    compressed: int
    #: Where the compressed number comes from: a wheel's file name, or "estimate".
    source: str
    #: Compressed size after ``strip --strip-unneeded`` (a what-if; ``None`` if not taken).
    stripped_compressed: int | None = None
    #: Bytes of machine code in named functions, and the part of it that is pybind11's
    #: (instantiated from torch's Python headers), from ``nm``; ``None`` without symbols.
    code: int | None = None
    pybind11_code: int | None = None

    def row(self) -> tuple[str, ...]:
        return (
            self.owner,
            self.name,
            format_bytes(self.size),
            format_bytes(self.compressed),
            "wheel" if self.source.endswith(".whl") else self.source,
            format_bytes(self.stripped_compressed),
            "n/a" if not self.code else f"{100 * (self.pybind11_code or 0) / self.code:.0f}%",
        )


def deflated_size(data: bytes) -> int:
    """Bytes ``data`` takes in a zip written with ZIP_DEFLATED, as wheels are."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("member", data)
        info = archive.getinfo("member")
    return info.compress_size


def stripped_deflated_size(data: bytes) -> int | None:
    """:func:`deflated_size` of ``data`` after ``strip --strip-unneeded`` (the symbol
    table a library does not need to load), or ``None`` without binutils' strip."""
    strip = shutil.which("strip")
    if strip is None:
        return None
    with tempfile.TemporaryDirectory(prefix="tcde-strip-") as tmp:
        path = Path(tmp) / "library.so"
        path.write_bytes(data)
        run([strip, "--strip-unneeded", path], echo=False)
        return deflated_size(path.read_bytes())


def code_breakdown(data: bytes) -> tuple[int, int] | None:
    """(bytes of function code, of which pybind11's) from the library's symbol table, or
    ``None`` when ``nm`` is missing or the library is stripped."""
    nm = shutil.which("nm")
    if nm is None:
        return None
    with tempfile.TemporaryDirectory(prefix="tcde-nm-") as tmp:
        path = Path(tmp) / "library.so"
        path.write_bytes(data)
        try:
            listing = run([nm, "-C", "-S", "-t", "d", "--defined-only", path], echo=False).stdout
        except CommandError:
            # Not an object file nm understands (or no symbols): nothing to attribute.
            return None
    total = pybind11 = 0
    for line in listing.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2] in ("t", "T", "w", "W"):
            size = int(parts[1])
            total += size
            if "pybind11" in parts[3]:
                pybind11 += size
    return (total, pybind11) if total else None


def _measured(data: bytes, **fields: Any) -> LibrarySize:
    breakdown = code_breakdown(data)
    return LibrarySize(
        **fields,
        code=None if breakdown is None else breakdown[0],
        pybind11_code=None if breakdown is None else breakdown[1],
    )


def libraries_in_wheel(wheel: Path, owner: str, *, stripped: bool = False) -> list[LibrarySize]:
    """Every shared library a wheel holds, with its stored (compressed) size; with
    ``stripped``, also what it would take stripped."""
    with zipfile.ZipFile(wheel) as archive:
        return [
            _measured(
                archive.read(info),
                owner=owner,
                name=Path(info.filename).name,
                size=info.file_size,
                compressed=info.compress_size,
                source=wheel.name,
                stripped_compressed=(
                    stripped_deflated_size(archive.read(info)) if stripped else None
                ),
            )
            for info in archive.infolist()
            if info.filename.endswith((".so", ".dylib", ".dll"))
        ]


def _built_libraries(paths: Iterable[Path], owner: str) -> list[LibrarySize]:
    return [
        _measured(
            path.read_bytes(),
            owner=owner,
            name=path.name,
            size=path.stat().st_size,
            compressed=deflated_size(path.read_bytes()),
            source="estimate",
            stripped_compressed=stripped_deflated_size(path.read_bytes()),
        )
        for path in sorted(paths)
    ]


def run_size(ctx: BenchContext) -> tuple[dict[str, Any], list[Table], list[Target]]:
    """Measure our wheels in ``dist/`` (or, without any, our built libraries) and 0.1.5's."""
    errors: dict[str, str] = {}
    wheels = sorted((ROOT / "dist").glob("*.whl"))
    ours: list[LibrarySize] = []
    for wheel in wheels:
        ours += libraries_in_wheel(wheel, "ours", stripped=True)
    if not ours:
        # No wheel yet: the libraries of the last `nox -s build`, else those the driver
        # built for the other benchmarks.
        for folder in (ROOT / "build" / "cells", ctx.work_dir / "libs"):
            built = [p for p in folder.rglob("*.so") if not p.name.startswith(".")]
            if built:
                ctx.progress(f"size: no wheels in dist/; estimating from the libraries in {folder}")
                ours = _built_libraries(built, "ours")
                break
    legacy_libs: list[LibrarySize] = []
    legacy_wheel: dict[str, Any] = {}
    try:
        legacy = fetch_legacy_release(ctx.work_dir)
    except TorchCDLPackExtError as exc:
        errors["legacy"] = f"{type(exc).__name__}: {exc}"
    else:
        legacy_libs = libraries_in_wheel(legacy.wheel, legacy.version)
        legacy_wheel = {"name": legacy.wheel.name, "size": legacy.wheel.stat().st_size}

    library_table = Table(
        title="Library size (on disk and compressed in the wheel)",
        headers=(
            "package",
            "library",
            "size",
            "compressed",
            "compressed from",
            "compressed if stripped",
            "pybind11 share of code",
        ),
        rows=tuple(item.row() for item in ours + legacy_libs),
    )
    wheel_rows = [(w.name, format_bytes(w.stat().st_size)) for w in wheels]
    if legacy_wheel:
        wheel_rows.append((legacy_wheel["name"], format_bytes(legacy_wheel["size"])))
    wheel_table = Table(title="Wheel size", headers=("wheel", "size"), rows=tuple(wheel_rows))
    largest = max((item.compressed for item in ours), default=None)
    targets = [
        Target(
            description="largest library, compressed in the wheel (KB)",
            value=None if largest is None else largest / 1000,
            limit=LIBRARY_LIMIT / 1000,
            comparison="<=",
            unit=" KB",
        )
    ]
    data = {
        "ours": [dataclasses.asdict(item) for item in ours],
        "legacy": [dataclasses.asdict(item) for item in legacy_libs],
        "wheels": [{"name": w.name, "size": w.stat().st_size} for w in wheels],
        "legacy_wheel": legacy_wheel,
        "errors": errors,
    }
    return data, [library_table, wheel_table], targets
