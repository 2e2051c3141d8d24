"""What a variant wheel saves against the combined wheel per install, read from a dist:
per variant, its download (the wheel file) and what it puts on disk (the uncompressed
members), beside the combined wheel of the same tags. ``nox -s build`` writes it into the
build report (``variant_sizes``); ``python -m devtools variant-sizes REPORT`` copies a
report's figures into the record ``docs/variant-sizes.json`` (with the date and machine)
and re-renders docs/building.md's table from that record, a cog block
(:mod:`devtools.base.generated`) that calls :func:`sizes_section`: the table is never
typed by hand, and ``nox -s lint`` fails when page and record differ.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from devtools.base.wheelnames import is_variant_name, parse_wheel_name

__all__ = [
    "RECORD",
    "SizeRow",
    "render_table",
    "sizes_section",
    "variant_sizes",
    "write_record",
]

#: The committed record docs/building.md's sizes table is rendered from.
RECORD = Path(__file__).resolve().parents[2] / "docs" / "variant-sizes.json"


class SizeRow(TypedDict):
    """One variant wheel beside the combined wheel of its tags (bytes)."""

    variant: str
    combined: str
    libraries: int
    combined_libraries: int
    wheel: int
    installed: int
    combined_wheel: int
    combined_installed: int


def _installed(path: Path) -> tuple[int, int]:
    """(uncompressed bytes of the members, libraries in the manifest)."""
    with zipfile.ZipFile(path) as archive:
        size = sum(info.file_size for info in archive.infolist())
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
    return size, len(manifest["libraries"])


def variant_sizes(files: Sequence[Path]) -> list[SizeRow]:
    """A row per variant wheel among ``files`` (a dist's), against the combined wheel of
    its tags."""
    wheels = sorted(p for p in files if p.name.endswith(".whl"))
    combined = {
        parse_wheel_name(p.name).tag_strings: p
        for p in wheels
        if not is_variant_name(p.name) and "-none-any" not in p.name
    }
    rows: list[SizeRow] = []
    for path in (p for p in wheels if is_variant_name(p.name)):
        partner = combined.get(parse_wheel_name(path.name).tag_strings)
        if partner is None:
            raise BuildError(f"{path.name}: no combined wheel of the same tags beside it")
        installed, libraries = _installed(path)
        combined_installed, combined_libraries = _installed(partner)
        rows.append(
            {
                "variant": path.name,
                "combined": partner.name,
                "libraries": libraries,
                "combined_libraries": combined_libraries,
                "wheel": path.stat().st_size,
                "installed": installed,
                "combined_wheel": partner.stat().st_size,
                "combined_installed": combined_installed,
            }
        )
    return rows


def _kb(size: int) -> str:
    return f"{size / 1000:.0f} KB"


def render_table(record: Mapping[str, object]) -> str:
    """The markdown table for a record: ``measured`` (date), ``machine``, ``cells`` (what
    the dist was built from) and ``rows``."""
    rows: Sequence[SizeRow] = record["rows"]  # type: ignore[assignment]  # the record's own
    lines = [
        f"Measured {record['measured']} on {record['machine']}, from a `nox -s build` dist of "
        f"{record['cells']}.",
        "",
        "| variant | libraries | download | installed | combined wheel: download / "
        "installed | saved per install: download / installed |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        label = parse_wheel_name(row["variant"]).label
        tags = "-".join(row["variant"].split("-")[2:4])
        lines.append(
            f"| `{label}` ({tags}) | {row['libraries']} of {row['combined_libraries']} | "
            f"{_kb(row['wheel'])} | {_kb(row['installed'])} | "
            f"{_kb(row['combined_wheel'])} / {_kb(row['combined_installed'])} | "
            f"{_kb(row['combined_wheel'] - row['wheel'])} "
            f"({100 * (row['combined_wheel'] - row['wheel']) / row['combined_wheel']:.0f} %) / "
            f"{_kb(row['combined_installed'] - row['installed'])} |"
        )
    return "\n".join(lines) + "\n"


def sizes_section(record: Path = RECORD) -> str:
    """docs/building.md's generated table: :func:`render_table` of the record file."""
    return render_table(json.loads(record.read_text("utf-8")))


def write_record(report: Path, record: Path, *, measured: str, machine: str) -> dict[str, object]:
    """Copy ``report``'s ``variant_sizes`` (a ``nox -s build`` report) into ``record``
    with the date, the machine and the cells built; returns the record."""
    data = json.loads(report.read_text("utf-8"))
    rows = data.get("variant_sizes")
    if not rows:
        raise BuildError(f"{report}: no variant_sizes (a build that assembled variant wheels?)")
    built = [c["cell"] for c in data.get("cells", []) if c.get("status") in ("built", "cached")]
    result: dict[str, object] = {
        "measured": measured,
        "machine": machine,
        "cells": f"{len(built)} cells ({', '.join(built)})" if built else "its cells",
        "rows": rows,
    }
    atomic_write_bytes(record, (json.dumps(result, indent=2) + "\n").encode())
    return result
