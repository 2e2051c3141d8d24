"""``python -m devtools <command>``: the developer tools' one command line.

The command table (:data:`COMMANDS`) names each command, the module that implements it
(``devtools/commands/<name>.py``: ``add_arguments(parser)`` and ``run(args) -> int``) and
its one-line help. Only the chosen command's module is imported, so a command whose
optional dependency is missing (twine, PyYAML, pypiserver) breaks neither the others nor
``--help``.

Errors are reported once, here (cibuildwheel's ``__main__`` model): an error of the
shipped code or of the dev tools (:data:`devtools.base.errors.HANDLED`) prints
``error: <Class>: <message>`` on stderr and exits with the error's stable exit code
(1-8: ``_torch_c_dlpack_ext_core.errors``, 9-14: :mod:`devtools.base.errors`); ``--traceback``
adds the traceback; on GitHub Actions an ``::error`` annotation follows
(:mod:`devtools.base.ghactions`). Any other exception is a bug: its traceback, then one
line, and exit code :data:`devtools.base.errors.UNEXPECTED_EXIT_CODE`. Usage errors are
argparse's (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn, Protocol, cast

from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError
from devtools.base.errors import HANDLED, UNEXPECTED_EXIT_CODE, DevToolError, MatrixError

__all__ = ["COMMANDS", "Command", "main", "report"]

PROG = "python -m devtools"


class CommandModule(Protocol):
    """What a module of ``devtools/commands/`` provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: its name on the command line, its module, its one-line help."""

    name: str
    module: str
    help: str

    def load(self) -> CommandModule:
        """Import the command's module (only now: its imports are its own)."""
        return cast(CommandModule, importlib.import_module(self.module))


def _command(name: str, help: str, module: str | None = None) -> Command:
    return Command(name, f"devtools.commands.{module or name.replace('-', '_')}", help)


#: Every command, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    _command("build", "compile the cells this host can build, assemble dist/"),
    _command("matrix", "CI's job matrix as JSON, from matrix.toml"),
    _command("emulated", "the aarch64 wheel under qemu-user, per torch minor"),
    _command("rehearse", "the release rehearsal against a local package index"),
    _command("rehearse-dataflow", "the release workflow's data flow, on this machine"),
    _command("torchenv", "a cached venv holding a torch release (its path)"),
    _command("freethreaded", "a cached free-threaded CPython, built once (its path)"),
    _command("gpu-carry", "gather the wheels the offline GPU machine lacks"),
    _command("upload", "twine check --strict, then twine upload of dist/"),
    _command("check-tag", "the pushed tag is v<version of version.py>"),
    _command("publish-target", "where this run may publish: $GITHUB_OUTPUT lines"),
    _command("check-repaired", "no wheel in DIR holds libraries a repair grafted in"),
    _command("assemble", "the assemble job: job wheels to dist/, notes, checks"),
    _command("contents", "the release cell by cell, and its release notes"),
    _command("split-variants", "move variant wheels and variants.json out of dist/"),
    _command("variant-index", "the release's own PEP 503 index, variants included"),
    _command("variant-sizes", "the variant sizes table of docs/building.md"),
    _command("verify", "every cell is there; each wheel works with its torch"),
    _command("test-installed", "cibuildwheel's test command for one job's wheel", "cibw_test"),
    _command("map", "CONTRIBUTING.md's code map, from the docstrings"),
    _command("footprint", "the tests' footprint tables, from shard runs"),
)
_BY_NAME = {command.name: command for command in COMMANDS}


def report(error: TorchCDLPackExtError | DevToolError) -> int:
    """Print ``error`` as the one error line (``error: <Class>: <message>``; a message's
    further lines, such as a failed tool's last lines, follow it) on stderr; return its
    exit code. On GitHub Actions also an ``::error`` annotation (unless the failing step
    annotated it already, with its file): the run's page then shows it."""
    from devtools.base import ghactions

    print(f"error: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    if not ghactions.was_annotated(error):
        # matrix.toml's reader names the file first (it knows no line numbers).
        of_matrix = isinstance(error, MatrixError) and str(error).startswith("matrix.toml:")
        # Else a compiler's error line in a failed tool's last lines, if any.
        where = ("matrix.toml", None) if of_matrix else ghactions.compiler_location(str(error))
        file, line = where if where is not None else (None, None)
        ghactions.error(str(error), file=file, line=line, title=type(error).__name__)
    return error.exit_code


def _chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is no option (the top level's
    options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _parser(chosen: Command | None) -> argparse.ArgumentParser:
    """The top-level parser; only ``chosen``'s module is imported (for its options)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The developer tools of torch-c-dlpack-ext (run from the checkout's "
        "root; they use the checkout's python/, never an installed copy).",
        epilog=f"`{PROG} <command> --help` shows a command's options.",
    )
    parser.add_argument("--traceback", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for command in COMMANDS:
        if command is not chosen:
            sub.add_parser(command.name, help=command.help)
            continue
        module = command.load()
        own = sub.add_parser(
            command.name,
            help=command.help,
            description=(getattr(module, "__doc__", None) or command.help).strip(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # Also after the command; SUPPRESS keeps a --traceback given before it.
        own.add_argument(
            "--traceback", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        module.add_arguments(own)
    return parser


def _unknown(parser: argparse.ArgumentParser, name: str) -> NoReturn:
    import difflib

    close = difflib.get_close_matches(name, list(_BY_NAME), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    parser.error(f"unknown command {name!r}{hint}; `{PROG} --help` lists the commands")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command (``argv``: default ``sys.argv[1:]``); its exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    name = _chosen(words)
    chosen = _BY_NAME.get(name) if name is not None else None
    parser = _parser(chosen)
    if name is not None and chosen is None:
        _unknown(parser, name)
    args = parser.parse_args(words)
    assert chosen is not None  # argparse requires a command; an unknown one failed above
    try:
        return chosen.load().run(args)
    except HANDLED as exc:
        if args.traceback:
            import traceback

            traceback.print_exc()
        return report(exc)
    except Exception:
        import traceback

        # A bug, not a failure the tools foresaw: the traceback (which names the exception)
        # is the report, and one line says so.
        traceback.print_exc()
        print(
            f"error: `{PROG} {chosen.name}` failed unexpectedly (a bug in devtools; the "
            "traceback above says where)",
            file=sys.stderr,
            flush=True,
        )
        return UNEXPECTED_EXIT_CODE
