"""``python -m devtools <command>``: see :mod:`devtools.base.cli`.

Run from a checkout's root, the tools import the building blocks of THAT checkout: its
``python/`` (``_torch_c_dlpack_ext_core``) goes first on ``sys.path``. So the documented
command needs no ``PYTHONPATH``, and an installed torch-c-dlpack-ext, whose wheel carries
a copy of the core (maybe of another version), is never used in its place.
"""

from __future__ import annotations

import sys
from pathlib import Path

from devtools.base.paths import ROOT


def _checkout_core_first() -> None:
    core = ROOT / "python"
    if not (core / "_torch_c_dlpack_ext_core").is_dir():
        return
    entries = [entry for entry in sys.path if entry and Path(entry).resolve() == core]
    for entry in entries:
        sys.path.remove(entry)
    sys.path.insert(0, str(core))


if __name__ == "__main__":
    _checkout_core_first()
    from devtools.base.cli import main

    sys.exit(main())
