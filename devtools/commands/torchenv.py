"""``python -m devtools torchenv 2.6.0 [--kind importable | compile-only] [--python 3.11]
[--extra REQ]``: create (or reuse) the cached virtual environment holding that torch
release (:func:`devtools.envs.torchenv.torch_env`) and print its path."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from devtools.envs.torchenv import EnvKind

    parser.add_argument("version", help="torch release, e.g. 2.6.0")
    parser.add_argument(
        "--kind",
        choices=[kind.value for kind in EnvKind],
        default=EnvKind.NO_DEPS.value,
        help="no-deps: torch alone (default); importable: make 'import torch' work; "
        "compile-only: only what a build reads (no GPU kernels, nothing kept in uv's cache)",
    )
    parser.add_argument("--python", default=None, help="e.g. 3.11 (default: this interpreter's)")
    parser.add_argument("--extra", action="append", default=[], help="another requirement")


def run(args: argparse.Namespace) -> int:
    from devtools.envs.torchenv import EnvKind, torch_env

    env = torch_env(args.version, kind=EnvKind(args.kind), python=args.python, extra=args.extra)
    print(env.root)
    return 0
