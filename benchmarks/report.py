"""Tables, machine description, result files and the generated results section.

Each benchmark kind writes ``benchmarks/results/<kind>.json`` holding the machine it ran
on, the raw measurements, its tables and its targets. The printed tables and the section
of docs/benchmarks.md (its cog block calls ``benchmarks/pages.py``) are rendered from those
same objects, so the three never disagree.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.run import run

from .stats import Target

__all__ = [
    "Progress",
    "Table",
    "describe_machine",
    "format_bytes",
    "format_ns",
    "format_ratio",
    "read_result",
    "render_results_section",
    "targets_table",
    "write_result",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Table:
    """A titled table of already formatted cells."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(
                    f"table {self.title!r}: row {row!r} has {len(row)} cells, "
                    f"expected {len(self.headers)}"
                )

    def to_text(self) -> str:
        """Aligned plain text for the terminal: text left, numbers right."""
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
        numeric = [
            bool(self.rows) and all(_looks_numeric(row[i]) for row in self.rows)
            for i in range(len(self.headers))
        ]

        def line(cells: Sequence[str]) -> str:
            parts = [
                cell.rjust(w) if num else cell.ljust(w)
                for cell, w, num in zip(cells, widths, numeric)
            ]
            return "  ".join(parts).rstrip()

        rule = "  ".join("-" * w for w in widths)
        body = [line(row) for row in self.rows]
        return "\n".join([self.title, line(self.headers), rule, *body])

    def to_markdown(self) -> str:
        """A GitHub-flavoured markdown table under a bold title."""
        numeric = [
            bool(self.rows) and all(_looks_numeric(row[i]) for row in self.rows)
            for i in range(len(self.headers))
        ]
        align = ["---:" if num else "---" for num in numeric]

        def line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(_escape_markdown(c) for c in cells) + " |"

        return "\n".join(
            [f"**{self.title}**", "", line(self.headers), line(align)]
            + [line(row) for row in self.rows]
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "headers": list(self.headers),
            "rows": [list(r) for r in self.rows],
        }

    @classmethod
    def from_json(cls, data: Any) -> Table:
        try:
            return cls(
                title=str(data["title"]),
                headers=tuple(str(h) for h in data["headers"]),
                rows=tuple(tuple(str(c) for c in row) for row in data["rows"]),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a benchmark table: {exc!r}") from None


def _escape_markdown(cell: str) -> str:
    # `__dlpack__()` would otherwise render as bold "dlpack"; a pipe would end the cell.
    for char in ("\\", "|", "_", "*"):
        cell = cell.replace(char, "\\" + char)
    return cell


def _looks_numeric(cell: str) -> bool:
    text = cell.strip().rstrip("x%").split(" ")[0].replace(",", "")
    if text in ("", "-", "n/a"):
        return cell.strip() in ("-", "n/a")
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_ns(value: float | None) -> str:
    """Nanoseconds with a precision that suits their size (``12.3``, ``1,234``)."""
    if value is None:
        return "n/a"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def format_ratio(value: float | None) -> str:
    """A ratio such as ``0.97x`` or ``35x``."""
    if value is None:
        return "n/a"
    if value >= 10:
        return f"{value:.0f}x"
    return f"{value:.2f}x"


def format_bytes(value: int | None) -> str:
    """Bytes in KiB / MiB (``48.2 KiB``)."""
    if value is None:
        return "n/a"
    if value < 1024:
        return f"{value} B"
    if value < 1024 * 1024:
        return f"{value / 1024:.1f} KiB"
    return f"{value / (1024 * 1024):.1f} MiB"


class Progress:
    """Progress lines on stderr, stamped with the seconds since the run started."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def __call__(self, message: str) -> None:
        print(
            f"[bench {time.monotonic() - self._start:7.1f}s] {message}", file=sys.stderr, flush=True
        )


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or "unknown"
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or "unknown"


def _compiler(cc: str) -> str:
    try:
        return run([cc, "--version"], echo=False).stdout.splitlines()[0].strip()
    except (CommandError, IndexError):
        return f"{cc} (version unknown)"


def describe_machine(*, cc: str = "cc") -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPU, cores, load, Python, compiler."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "load_average_1_5_15": load,
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "compiler": _compiler(cc),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_result(
    results_dir: Path,
    kind: str,
    *,
    machine: dict[str, Any],
    options: dict[str, Any],
    data: dict[str, Any],
    tables: Iterable[Table],
    targets: Iterable[Target],
) -> Path:
    """Write ``<results_dir>/<kind>.json`` atomically and return its path."""
    try:
        load_after = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load_after = []
    document = {
        "kind": kind,
        "machine": machine,
        "load_average_after": load_after,
        "options": options,
        "data": data,
        "tables": [t.to_json() for t in tables],
        "targets": [t.to_json() for t in targets],
    }
    path = results_dir / f"{kind}.json"
    atomic_write_bytes(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())
    return path


def read_result(path: Path) -> dict[str, Any]:
    """Load a result file written by :func:`write_result`."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read benchmark result {path}: {exc}") from None
    if not isinstance(document, dict) or "kind" not in document or "tables" not in document:
        raise ConfigError(f"{path} is not a benchmark result (no 'kind' / 'tables')")
    return document


def targets_table(targets: Iterable[dict[str, Any]]) -> Table:
    """A table of targets in their JSON form (:meth:`Target.to_json`)."""
    rows = tuple(
        (
            target["target"],
            "n/a" if target["value"] is None else f"{target['value']:.3g}",
            target["limit"],
            target["status"],
        )
        for target in targets
    )
    return Table(title="Targets", headers=("target", "measured", "goal", "status"), rows=rows)


def _machine_line(machine: dict[str, Any], load_after: Any) -> str:
    load = machine.get("load_average_1_5_15") or []
    load_text = f"load {load[0]:.2f}" if load else "load unknown"
    if load_after:
        load_text += f" -> {load_after[0]:.2f}"
    return (
        f"{machine.get('cpu_model')}, {machine.get('cores')} cores ({load_text}), "
        f"{machine.get('os')}, {machine.get('python')}, {machine.get('compiler')}, "
        f"{machine.get('date_utc')}"
    )


def render_results_section(documents: Sequence[dict[str, Any]]) -> str:
    """Markdown for docs/benchmarks.md from result documents (in the order given)."""
    lines: list[str] = []
    for document in documents:
        lines.append(
            f"*{document['kind']}*: "
            + _machine_line(document.get("machine", {}), document.get("load_average_after"))
        )
        torch_versions = document.get("data", {}).get("torch_versions")
        if torch_versions:
            lines[-1] += "; torch " + ", ".join(sorted(torch_versions))
        lines.append("")
        for table in document["tables"]:
            lines += [Table.from_json(table).to_markdown(), ""]
    targets = targets_table(t for document in documents for t in document.get("targets", []))
    if targets.rows:
        lines += [targets.to_markdown(), ""]
    return "\n".join(lines[:-1]) + "\n"
