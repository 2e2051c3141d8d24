"""``python -m devtools check-tag TAG``: the pushed tag names the version in ``version.py``
(``v<version>``); anything else is a ``ReleaseError``."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tag")


def run(args: argparse.Namespace) -> int:
    from devtools.release.publish import check_tag

    check_tag(args.tag)
    return 0
