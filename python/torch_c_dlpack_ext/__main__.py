"""``python -m torch_c_dlpack_ext [--json]``: a diagnosis to paste into a bug report.

Reports the running torch, the bundled libraries, the selector's decision and why,
the overrides in force, the loaded library's build info, and the result of a
round trip through the published capsule. Exit status 0 means a working exchange
API is published on ``torch.Tensor``; 1 means it is not (including UNAVAILABLE).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from _torch_c_dlpack_ext_core.dlpack_ctypes import (
    CAPSULE_NAME,
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
)

if TYPE_CHECKING:
    from types import ModuleType
    from typing import Protocol

    from _torch_c_dlpack_ext_core.manifest import JSONField

    class _Device(Protocol):
        type: str
        index: int | None

    class _Tensor(Protocol):
        # What the smoke test reads of a torch.Tensor (torch has no type stubs).
        @property
        def shape(self) -> Sequence[int]: ...
        @property
        def device(self) -> _Device: ...
        def data_ptr(self) -> int: ...
        def stride(self) -> tuple[int, ...]: ...


__all__ = ["Report", "SmokeResult", "collect", "main", "smoke_test"]


_GET_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_DECREF = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("Py_DecRef", ctypes.pythonapi))

#: DLPack device type codes by torch device type.
_DL_DEVICE = {"cpu": 1, "cuda": 2}
_DL_FLOAT = 2


@dataclasses.dataclass(frozen=True)
class SmokeResult:
    """Outcome of a round trip through ``torch.Tensor.__dlpack_c_exchange_api__``."""

    ok: bool
    detail: str


class SmokeReport(TypedDict):
    """The smoke test's outcome in the report."""

    ok: bool
    detail: str


class _DecisionReport(TypedDict):
    kind: str
    selected: str | None
    library: str | None
    reason: str
    remedy: str
    warnings: list[str]


class DecisionReport(_DecisionReport, total=False):
    """What the import decided, in the report; ``cost`` only for the portable table."""

    cost: dict[str, object]


class Report(TypedDict, total=False):
    """Everything the diagnosis prints (``--json`` writes it as it is)."""

    package: dict[str, str]
    python: str
    python_abi: str
    #: The running torch's :class:`~._torchinfo.TorchInfo` as JSON; None if not importable.
    torch: dict[str, object] | None
    #: The manifest's entries as JSON, or ``{"error": why}`` where it cannot be read.
    bundled: list[dict[str, JSONField]] | dict[str, str]
    decision: DecisionReport
    overrides: dict[str, str]
    #: The loaded library's build info (JSON), ``{"unparsable": text}``, or None.
    build_info: object
    smoke_test: SmokeReport
    ok: bool


def _table(capsule: object) -> DLPackExchangeAPI:
    from ._torchinfo import check_table

    pointer = _GET_POINTER(capsule, CAPSULE_NAME)
    check_table(int(pointer or 0), "the published capsule")
    return DLPackExchangeAPI.from_address(pointer)


def _check_fields(tensor: _Tensor, dl: DLTensor) -> list[str]:
    problems = []
    shape = [dl.shape[i] for i in range(dl.ndim)]
    if shape != list(tensor.shape):
        problems.append(f"shape {shape} != {list(tensor.shape)}")
    if (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) != (_DL_FLOAT, 32, 1):
        problems.append(f"dtype {(dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)} != float32")
    if (dl.data or 0) + dl.byte_offset != tensor.data_ptr():
        problems.append(f"data {dl.data:#x}+{dl.byte_offset} != {tensor.data_ptr():#x}")
    if dl.strides:
        strides = [dl.strides[i] for i in range(dl.ndim)]
        if strides != list(tensor.stride()):
            problems.append(f"strides {strides} != {list(tensor.stride())}")
    wanted_device = (_DL_DEVICE.get(tensor.device.type, -1), tensor.device.index or 0)
    if (dl.device.device_type, dl.device.device_id) != wanted_device:
        problems.append(f"device {(dl.device.device_type, dl.device.device_id)} != {wanted_device}")
    return problems


def _round_trip(torch: ModuleType, device: str) -> str:
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError
    from _torch_c_dlpack_ext_core.naming import CAPSULE_ATTR

    capsule = getattr(torch.Tensor, CAPSULE_ATTR, None)
    if capsule is None:
        raise LibraryLoadError(f"torch.Tensor.{CAPSULE_ATTR} is not set")
    table = _table(capsule)
    from_py = table.managed_tensor_from_py_object_no_sync
    to_py = table.managed_tensor_to_py_object_no_sync
    tensor = torch.arange(6, dtype=torch.float32, device=device).reshape(2, 3)
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    if from_py(tensor, ctypes.byref(out)) != 0 or not out:
        raise LibraryLoadError("managed_tensor_from_py_object_no_sync failed")
    problems = _check_fields(tensor, out.contents.dl_tensor)
    if out.contents.deleter:
        out.contents.deleter(out)
    else:
        problems.append("exported tensor has no deleter")
    if problems:
        raise LibraryLoadError("; ".join(problems))
    if from_py(tensor, ctypes.byref(out)) != 0 or not out:
        raise LibraryLoadError("second managed_tensor_from_py_object_no_sync failed")
    raw = ctypes.c_void_p()
    if to_py(out, ctypes.byref(raw)) != 0 or not raw.value:
        raise LibraryLoadError("managed_tensor_to_py_object_no_sync failed")
    back = ctypes.cast(raw, ctypes.py_object).value
    _DECREF(raw)  # the producer returned a new reference; ``back`` holds its own
    if back.data_ptr() != tensor.data_ptr() or not torch.equal(back, tensor):
        raise LibraryLoadError("tensor converted back does not share the original's data")
    return f"round trip of a 2x3 float32 {device} tensor: metadata, deleter, to_py ok"


def smoke_test(torch: ModuleType, device: str = "cpu") -> SmokeResult:
    """Export a small float32 tensor through the published capsule, check its DLPack
    metadata (shape, dtype, strides, device, data pointer), release it through its
    deleter, then convert a second export back to a tensor that must share memory."""
    try:
        return SmokeResult(True, _round_trip(torch, device))
    except Exception as exc:  # the diagnosis reports any failure instead of dying
        return SmokeResult(False, f"{type(exc).__name__}: {exc}")


def collect(device: str = "cpu") -> Report:
    """Everything the diagnosis prints, as JSON-ready data."""
    import torch_c_dlpack_ext as package
    from _torch_c_dlpack_ext_core.errors import ManifestError
    from _torch_c_dlpack_ext_core.files import load_manifest
    from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, python_tag

    from ._library import loaded_library

    status = package.status()
    report: Report = {
        "package": {"version": package.__version__, "path": str(Path(package.__file__).parent)},
        "python": sys.version.split()[0],
        # The ABI as built (a 3.13t with PYTHON_GIL=1 is still cp313t), not the GIL state.
        "python_abi": python_tag(),
        "torch": status.torch._asdict() if status.torch else None,
    }
    if report["torch"] is not None:
        report["torch"]["backend"] = str(report["torch"]["backend"])
    package_dir = Path(package.__file__).parent
    try:
        entries = load_manifest(package_dir / MANIFEST_NAME)
        report["bundled"] = [e.to_json() for e in entries]
    except ManifestError as exc:
        # The fix for how this copy was installed (the core's check cannot know it).
        from _torch_c_dlpack_ext_core.remedies import reinstall_remedy

        from ._install import install_source

        remedy = reinstall_remedy(install_source(package_dir))
        report["bundled"] = {"error": f"{exc.cause}; {remedy}"}
    report["decision"] = {
        "kind": status.kind.value,
        "selected": status.decision.kind.value if status.decision else None,
        "library": str(status.library) if status.library else None,
        "reason": status.reason,
        "remedy": status.remedy,
        "warnings": list(status.warnings),
    }
    if status.portable:
        from ._costs import MEASURED_ON, PORTABLE_COST
        from ._wording import cost_line

        native = status.native_speed
        report["decision"]["cost"] = {
            **PORTABLE_COST,
            "measured_on": MEASURED_ON,
            "native_speed": native,
            "summary": cost_line(native),
        }
    report["overrides"] = dict(status.settings.in_force) if status.settings else {}
    loaded = loaded_library(status.library) if status.library else None
    info = loaded.build_info() if loaded else None
    try:
        report["build_info"] = json.loads(info) if info else None
    except json.JSONDecodeError:
        report["build_info"] = {"unparsable": info}
    if status.torch is None:
        report["smoke_test"] = {"ok": False, "detail": "torch is not importable"}
    else:
        import torch

        result = smoke_test(torch, device)
        report["smoke_test"] = {"ok": result.ok, "detail": result.detail}
    report["ok"] = status.kind.value != "unavailable" and report["smoke_test"]["ok"]
    return report


#: Longest value the table prints (``--json`` keeps everything).
_VALUE_WIDTH = 400
#: Longest file name the table prints.
_FILE_WIDTH = 100


def _clip(text: object, width: int = _VALUE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _describe(item: Mapping[str, object]) -> str:
    if item["backend"] == "any":
        return f"portable table ({item['python']})"
    abi = "" if item["cxx11_abi"] is None else f" cxx11abi{item['cxx11_abi']:d}"
    return f"torch {item['torch']} {item['backend']}{abi}"


def _without_restatements(text: str, listed: Sequence[str]) -> str:
    """``text`` less the sentences that only repeat the bundled list the table shows."""
    if not listed:
        return text
    sentences = [s for s in text.split(". ") if not all(name in s for name in listed)]
    return ". ".join(sentences)


def _rows(report: Report) -> list[tuple[str, str]]:
    """The table's rows: each fact once (the bundled list, the reason, the fix), long
    values clipped; ``--json`` has the unabridged report."""
    rows: list[tuple[str, str]] = [
        ("torch-c-dlpack-ext", f"{report['package']['version']} ({report['package']['path']})"),
        ("python", f"{report['python']} ({report['python_abi']})"),
    ]
    torch = report["torch"]
    if torch is None:
        rows.append(("torch", "not importable"))
    else:
        rows.append(
            (
                "torch",
                f"{torch['version']} backend={torch['backend']} cxx11_abi={torch['cxx11_abi']} "
                f"cuda={torch['cuda_version']} hip={torch['hip_version']} "
                f"has_api={torch['has_capsule']}",
            )
        )
    bundled = report["bundled"]
    listed: list[str] = []
    if isinstance(bundled, dict):
        rows.append(("bundled", _clip(bundled["error"])))
    elif not bundled:
        rows.append(("bundled", "none (universal wheel)"))
    for item in bundled if isinstance(bundled, list) else []:
        listed.append(_describe(item))
        rows.append(("bundled", f"{listed[-1]}: {_clip(item['file'], _FILE_WIDTH)}"))
    decision = report["decision"]
    rows.append(("decision", decision["kind"]))
    # The reason, the remedy and the warnings are whole (the table wraps them): they end
    # in a fix, often a command, which is never cut.
    rows.append(("reason", decision["reason"]))
    remedy = _without_restatements(decision["remedy"], listed)
    if remedy:
        rows.append(("remedy", remedy))
    if decision["library"]:
        rows.append(("library", _clip(decision["library"])))
    if decision.get("cost"):
        # Whole (wrapped): it ends in how to get native speed, or why it is out of reach.
        rows.append(("cost", str(decision["cost"]["summary"])))
    # The last warning of a failed selection restates the reason and the remedy.
    said = decision["reason"].casefold()
    rows.extend(("warning", w) for w in decision["warnings"] if not (said and said in w.casefold()))
    rows.extend(("override", _clip(f"{k}={v}")) for k, v in report["overrides"].items())
    if report["build_info"] is not None:
        rows.append(("build info", json.dumps(report["build_info"], sort_keys=True)))
    smoke = report["smoke_test"]
    rows.append(("smoke test", ("ok: " if smoke["ok"] else "FAILED: ") + _clip(smoke["detail"])))
    return rows


#: The table's width: the reason, the remedy, the warnings and the cost are wrapped to it
#: at word boundaries, never cut (they end in a fix, often a command); other rows are
#: clipped.
_TABLE_WIDTH = 100
_WRAPPED_ROWS = frozenset({"reason", "remedy", "warning", "cost"})


def _print_table(report: Report) -> None:
    import textwrap

    rows = _rows(report)
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        if key not in _WRAPPED_ROWS:
            print(f"{key:<{width}}  {value}")
            continue
        lines = textwrap.wrap(
            " ".join(_shorten_words(str(value))),
            width=_TABLE_WIDTH - width - 2,
            break_long_words=False,
            break_on_hyphens=False,
        )
        print(f"{key:<{width}}  " + ("\n" + " " * (width + 2)).join(lines))


def _shorten_words(text: str, longest: int = 200) -> list[str]:
    """The words of ``text``, each longer than ``longest`` (a runaway path or value, never a
    command's word) shortened to its start and end (``--json`` keeps it whole)."""
    return [
        word if len(word) <= longest else f"{word[:60]}...{word[-60:]} ({len(word)} characters)"
        for word in text.split()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the diagnosis; return 0 if a working API is published, else 1."""
    parser = argparse.ArgumentParser(
        prog="python -m torch_c_dlpack_ext",
        description="Show what torch-c-dlpack-ext selected, why, and test the result.",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--device", default="cpu", help="device of the smoke-test tensor (default: cpu)"
    )
    args = parser.parse_args(argv)
    report = collect(args.device)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        _print_table(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
