"""``python -m devtools freethreaded 3.14t``: build (once) and print a cached free-threaded
CPython (:func:`devtools.envs.freethreaded.free_threaded_python`: from Debian's CPython sources,
into the dev cache); prints its executable's path."""

from __future__ import annotations

import argparse

from devtools.envs.debsource import DEBIAN_MIRROR
from devtools.envs.freethreaded import SOURCES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help=f"one of {', '.join(SOURCES)}")
    parser.add_argument("--jobs", type=int, default=None, help="parallel make jobs")
    parser.add_argument("--mirror", default=DEBIAN_MIRROR, help="Debian archive URL")
    parser.add_argument(
        "--install-build-deps",
        action="store_true",
        help="apt-get install missing build dependencies (root) instead of failing",
    )


def run(args: argparse.Namespace) -> int:
    from devtools.envs.freethreaded import free_threaded_python

    found = free_threaded_python(
        args.version, jobs=args.jobs, mirror=args.mirror, install_build_deps=args.install_build_deps
    )
    print(found.executable)
    return 0
