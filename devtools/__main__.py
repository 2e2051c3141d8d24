"""``python -m devtools <command>``: see :mod:`devtools.cli`."""

from __future__ import annotations

import sys

from devtools.cli import main

if __name__ == "__main__":
    sys.exit(main())
