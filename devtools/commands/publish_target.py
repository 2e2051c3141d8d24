"""``python -m devtools publish-target --event E --ref R --publish BOOL``: where this run
may publish (the publish guard), as ``$GITHUB_OUTPUT`` lines.

PyPI only from a pushed tag ``v<version>``, TestPyPI at most from a manual run, nothing
otherwise.
"""

from __future__ import annotations

import argparse

from _torch_c_dlpack_ext_core.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--event", required=True, help="github.event_name")
    parser.add_argument("--ref", required=True, help="github.ref")
    parser.add_argument("--publish", default="false", help="the dispatch input (true/false)")


def run(args: argparse.Namespace) -> int:
    from devtools.release.publish import publish_target

    flag = args.publish.strip().lower()
    if flag not in ("true", "false", ""):
        raise ConfigError(f"--publish {args.publish!r}: expected true or false")
    for line in publish_target(args.event, args.ref, flag == "true").output_lines():
        print(line)
    return 0
