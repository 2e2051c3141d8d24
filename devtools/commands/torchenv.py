"""``python -m devtools torchenv 2.6.0 [--importable | --compile-only] [--python 3.11]
[--extra REQ]``: create (or reuse) the cached virtual environment holding that torch
release (:func:`devtools.envs.torchenv.torch_env`) and print its path."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="torch release, e.g. 2.6.0")
    parser.add_argument("--importable", action="store_true", help="make 'import torch' work")
    parser.add_argument(
        "--compile-only",
        action="store_true",
        help="only what a build reads (no GPU kernels, nothing kept in uv's cache)",
    )
    parser.add_argument("--python", default=None, help="e.g. 3.11 (default: this interpreter's)")
    parser.add_argument("--extra", action="append", default=[], help="another requirement")


def run(args: argparse.Namespace) -> int:
    from devtools.envs.torchenv import torch_env

    env = torch_env(
        args.version,
        importable=args.importable,
        python=args.python,
        extra=args.extra,
        compile_only=args.compile_only,
    )
    print(env.root)
    return 0
