"""The stable ABI audit (``abi3audit``): an ``abi3`` library uses only what the limited C
API of CPython 3.9 gives (``Py_LIMITED_API`` = :data:`.naming.LIMITED_API_VERSION`).

Compiling with ``Py_LIMITED_API`` hides most of what is outside the limited API, but not
everything (torch's own headers include ``Python.h`` too, and a declaration written by
hand would slip through), so the linked library is checked with ``abi3audit`` (PyPI, by
Trail of Bits): it reads the symbols the library imports from Python and compares them
with CPython's own list of stable ABI symbols per version (``abi3info``). Any symbol
outside the stable ABI, or newer than 3.9, fails the build before the library is
published.

abi3audit reads ELF, Mach-O and PE files, so this audit runs on every platform. It is a
dependency of the developer tools (``[dependency-groups] build`` and ``cells``); where it
is not installed (a user's source build or JIT, which serve one interpreter anyway) the
driver runs it only when asked to require it.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from .errors import ABIAuditError, BuildError, CommandError
from .naming import ABI3_FLOOR
from .run import run

__all__ = ["abi3audit_available", "audit_stable_abi"]

#: Seconds one abi3audit run may take (it reads one small library).
_TIMEOUT_S = 300.0


def abi3audit_available() -> bool:
    """abi3audit is importable by this interpreter."""
    import importlib.util

    return importlib.util.find_spec("abi3audit") is not None


def _violations(report: object) -> tuple[list[str], str | None]:
    """``(symbols outside the stable ABI of 3.9, the newest abi3 version it needs)`` from
    abi3audit's JSON report of one shared object."""
    found: list[str] = []
    needs: str | None = None
    if not isinstance(report, dict):
        return found, needs
    for spec in report.get("specs", {}).values():
        objects = (spec.get("wheel") or [spec.get("object")]) if isinstance(spec, dict) else []
        for item in objects or []:
            if not isinstance(item, dict):
                continue
            result = item.get("result") or {}
            found.extend(str(violation) for violation in result.get("non_abi3_symbols") or [])
            computed = result.get("computed")
            if computed:
                needs = str(computed)
            floor = f"{ABI3_FLOOR[0]}.{ABI3_FLOOR[1]}"
            found.extend(
                f"{symbol} (newer than {floor})"
                for symbol in result.get("future_abi3_objects") or []
            )
    return sorted(set(found)), needs


def audit_stable_abi(
    library: Path, *, name: str | None = None, required: bool | None = None
) -> bool:
    """Check with abi3audit that ``library`` uses only the stable ABI of CPython 3.9.

    ``name``: the library's file name, if ``library`` is a temporary one (it says
    which binary format to read: ``.dll`` is PE). ``required``: ``True`` fails
    (:class:`BuildError`) when abi3audit is not installed;
    ``None`` skips the audit then (saying so on stderr); ``False`` never runs it.
    Returns whether the audit ran. Raises :class:`ABIAuditError` naming the symbols
    outside the stable ABI.
    """
    if required is False:
        return False
    name = name or library.name
    if not abi3audit_available():
        if required:
            raise BuildError(
                f"the stable ABI audit of {name} needs abi3audit, which is not "
                f"installed in {sys.prefix}; pip install abi3audit"
            )
        print(
            f"stable ABI audit of {name}: skipped (abi3audit is not installed)",
            file=sys.stderr,
            flush=True,
        )
        return False
    floor = f"{ABI3_FLOOR[0]}.{ABI3_FLOOR[1]}"
    with tempfile.TemporaryDirectory(prefix="tcde-abi3audit-") as tmp:
        # abi3audit tells a stable ABI extension by its name (``*.abi3.so``, ``*.pyd``);
        # the copy carries such a name, the library keeps its own.
        suffix = ".pyd" if name.lower().endswith(".dll") else ".abi3.so"
        probe = Path(tmp) / f"{Path(name).stem.replace('.', '_')}{suffix}"
        shutil.copyfile(library, probe)
        command = [
            sys.executable, "-m", "abi3audit", "--strict", "--report",
            "--assume-minimum-abi3", floor, str(probe),
        ]  # fmt: skip
        try:
            proc = run(command, echo=False, timeout=_TIMEOUT_S)
            output = proc.stdout
        except CommandError as exc:
            # Exit 1 with a report: violations; anything else is a failed run.
            output = exc.stdout
            if not output.strip().startswith("{"):
                what = f"the stable ABI audit of {name} (abi3audit) failed to run"
                raise BuildError.from_command(what, exc, tail=2000) from None
    try:
        report = json.loads(output)
    except json.JSONDecodeError:
        raise BuildError(
            f"abi3audit printed no JSON report for {name}:\n{output[-2000:]}"
        ) from None
    violations, needs = _violations(report)
    if violations:
        listing = "\n".join(f"  {name}" for name in violations[:20])
        raise ABIAuditError(
            f"{name} is built for the stable ABI of CPython {floor} (abi3), but "
            f"uses {len(violations)} symbol(s) outside it:\n{listing}\n"
            "only the limited C API may be used (csrc/ compiles with Py_LIMITED_API)",
            tuple(violations),
        )
    print(
        f"stable ABI audit of {name}: abi3 {needs or floor} (abi3audit)",
        file=sys.stderr,
        flush=True,
    )
    return True
