"""The one mechanism for generated sections of committed files: cog (``cogapp``).

A generated section is a cog block: the Python that renders it, between ``[[[cog`` and
``]]]`` (inside a Markdown comment, or ``#`` comments in Python), then its output, up to
``[[[end]]]``. In Markdown::

    <!-- [[[cog
    from devtools.docmap import render
    cog.out(render())
    ]]] -->
    ...generated text...
    <!-- [[[end]]] -->

:data:`FILES` lists every file holding such blocks. :func:`regenerate` rewrites their
output (``nox -s map``, and ``nox -s bench`` after it writes results); with ``check=True``
it changes nothing and raises when any file would change (``nox -s lint`` runs that).
Each block sees the global ``results_dir`` (:data:`RESULTS_DIR` unless a benchmark run
renders from another folder), and imports from the checkout (its root and ``python/``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from devtools.base.errors import DevToolError
from devtools.base.paths import ROOT

__all__ = ["FILES", "RESULTS_DIR", "StaleFiles", "regenerate"]

#: Every committed file with a generated section, relative to the root.
FILES = (
    "CONTRIBUTING.md",
    "README.md",
    "docs/benchmarks.md",
    "docs/building.md",
    "docs/test-footprint.md",
    "python/torch_c_dlpack_ext/_costs.py",
)

#: The committed benchmark results the benchmark sections are rendered from.
RESULTS_DIR = ROOT / "benchmarks" / "results"


class StaleFiles(DevToolError):
    """A generated section differs from what its block renders (``check=True``)."""


def regenerate(
    files: Sequence[Path] | None = None,
    *,
    check: bool = False,
    results_dir: Path = RESULTS_DIR,
) -> list[Path]:
    """Re-render the generated sections of ``files`` (default: :data:`FILES`); the files
    whose text changed (or, with ``check``, would change: then nothing is written and
    :class:`StaleFiles` names them). A block that fails raises :class:`DevToolError`
    with cog's message."""
    from cogapp import Cog

    paths = [ROOT / name for name in FILES] if files is None else list(files)
    for path in paths:
        if "[[[cog" not in path.read_text(encoding="utf-8"):
            raise DevToolError(f"{path} has no cog block (no generated section to render)")
    before = {path: path.read_bytes() for path in paths}
    argv = ["cog", "--check" if check else "-r", "--verbosity=1", "-U"]
    argv += ["-I", str(ROOT), "-I", str(ROOT / "python")]
    argv += ["-D", f"results_dir={results_dir}", *map(str, paths)]
    cog = Cog()
    out, err = io.StringIO(), io.StringIO()
    cog.set_output(stdout=out, stderr=err)
    status = cog.main(argv)
    changed = [p for p in paths if p.read_bytes() != before[p]]
    if status == 5:  # cog's "check failed"
        stale = [line.split()[1] for line in out.getvalue().splitlines() if "(changed)" in line]
        raise StaleFiles(
            f"generated sections differ from their sources in {', '.join(stale)}; run `nox -s map`"
        )
    if status:
        raise DevToolError(f"cog failed ({status}): {(err.getvalue() or out.getvalue()).strip()}")
    return changed
