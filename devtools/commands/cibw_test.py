"""``python -m devtools test-installed``: cibuildwheel's test command for one job's wheel
(``[tool.cibuildwheel] test-command``, in the environment the wheel is installed in):
install the newest torch minor the wheel bundles and check the selector's decision (on
GitHub's runners the build's caches are freed first). The verify job covers every minor."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devtools.base import ghactions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options: cibuildwheel's environment says which job this is


def run(args: argparse.Namespace) -> int:
    from devtools.release.cisteps import check_installed_job

    with ghactions.group("test-installed: the job's wheel with its newest torch"):
        print(check_installed_job(Path(sys.executable)))
    return 0
