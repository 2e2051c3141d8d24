"""``python -m devtools``: one command line for every developer tool. ``--help`` lists
each command, only the chosen command's module is imported, an unknown command gets a
hint, and errors are reported once, in one format, with their stable exit codes."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from collections.abc import Callable

import pytest
from devtools.base import cli
from devtools.base.errors import UNEXPECTED_EXIT_CODE, ReleaseError
from tests.helpers import ROOT, devtools_env

COMMANDS = ROOT / "devtools" / "commands"


def _python(*argv: str) -> subprocess.CompletedProcess[str]:
    """The checkout's developer tools' interpreter run as the nox sessions run it."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env=devtools_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _devtools(*argv: str) -> subprocess.CompletedProcess[str]:
    return _python("-m", "devtools", *argv)


def test_help_lists_every_command_with_its_one_line_help() -> None:
    proc = _devtools("--help")
    assert proc.returncode == 0, proc.stderr
    listed = {}
    for line in proc.stdout.splitlines():
        words = line.split(maxsplit=1)
        if len(words) == 2 and words[0] in {c.name for c in cli.COMMANDS}:
            listed[words[0]] = words[1]
    assert listed == {c.name: c.help for c in cli.COMMANDS if c.name != "rehearse-dataflow"}
    # A name too long for the column puts its help on the next line.
    assert "rehearse-dataflow\n" in proc.stdout
    assert cli.COMMANDS[4].help in proc.stdout


def test_the_table_names_every_command_module_once() -> None:
    names = [c.name for c in cli.COMMANDS]
    assert len(names) == len(set(names))
    assert set(names) == {
        *("build", "matrix", "emulated", "rehearse", "rehearse-dataflow", "torchenv"),
        *("freethreaded", "gpu-carry", "upload", "check-tag", "publish-target"),
        *("check-repaired", "assemble", "contents", "split-variants", "verify"),
        "variant-index",
        "variant-sizes",
        *("test-installed", "map", "footprint"),
    }
    modules = {f"devtools.commands.{p.stem}" for p in COMMANDS.glob("*.py")} - {
        "devtools.commands.__init__"
    }
    assert sorted(c.module for c in cli.COMMANDS) == sorted(modules)
    for command in cli.COMMANDS:
        assert len(command.help) <= 55, f"{command.name}: one line in --help"


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: c.name)
def test_each_command_shows_its_options(
    command: cli.Command, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([command.name, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m devtools {command.name} [-h]")
    # The description is the module's docstring.
    doc = str(getattr(command.load(), "__doc__", ""))
    assert doc.strip().splitlines()[0] in out


def test_only_the_chosen_commands_module_is_imported() -> None:
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['devtools', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('devtools', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('devtools.commands.')))\n"
    )

    def imported(*argv: str) -> str:
        proc = _python("-c", probe, *argv)
        return proc.stdout.strip().splitlines()[-1]

    assert imported("--help") == "[]"
    assert imported("check-tag", "--help") == "['devtools.commands.check_tag']"


def test_a_command_that_cannot_be_imported_breaks_neither_help_nor_the_others(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As a command whose optional dependency is missing would fail to import.
    broken = cli.Command("broken", "devtools.commands.no_such_module", "needs what is missing")
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, broken))
    monkeypatch.setitem(cli._BY_NAME, "broken", broken)
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    assert "needs what is missing" in capsys.readouterr().out
    assert cli.main(["check-tag", f"v{_version()}"]) == 0


def _version() -> str:
    from _torch_c_dlpack_ext_core.version import __version__

    return __version__


def test_an_unknown_command_gets_a_hint_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["buidl", "--cells", "x"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown command 'buidl' (did you mean 'build'?)" in err
    proc = _devtools("rehearse_dataflow")
    assert proc.returncode == 2
    assert "(did you mean 'rehearse-dataflow'?)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 2
    assert "required: <command>" in capsys.readouterr().err


def test_a_handled_error_is_one_line_with_its_exit_code() -> None:
    proc = _devtools("check-tag", "v9.9.9")
    assert proc.returncode == ReleaseError.exit_code == 9
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: ReleaseError: tag 'v9.9.9' does not match ")


@pytest.mark.parametrize("where", ["before", "after"])
def test_traceback_flag_shows_the_traceback(where: str) -> None:
    argv = ["check-tag", "v9.9.9"]
    proc = _devtools(*(["--traceback", *argv] if where == "before" else [*argv, "--traceback"]))
    assert proc.returncode == ReleaseError.exit_code
    assert proc.stderr.startswith("Traceback (most recent call last):")
    assert "devtools/release/publish.py" in proc.stderr.replace("\\", "/")
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ReleaseError: tag 'v9.9.9' does not match ")


def _fake_command(
    monkeypatch: pytest.MonkeyPatch, run: Callable[[argparse.Namespace], int]
) -> cli.Command:
    module = types.ModuleType("devtools.commands.fake")
    module.__doc__ = "A command made up by the test."

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--flag", action="store_true")

    module.add_arguments = add_arguments  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    command = cli.Command("fake", module.__name__, "made up")
    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, command))
    monkeypatch.setitem(cli._BY_NAME, "fake", command)
    return command


def test_an_unexpected_exception_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise RuntimeError("boom in the fake command")

    _fake_command(monkeypatch, run)
    assert cli.main(["fake"]) == UNEXPECTED_EXIT_CODE == 70
    err = capsys.readouterr().err
    assert err.count("Traceback (most recent call last):") == 1
    assert err.count("RuntimeError: boom in the fake command") == 1
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: `python -m devtools fake` failed unexpectedly (a bug in devtools; the "
        "traceback above says where)"
    ]


def test_a_commands_own_exit_status_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []

    def run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 1

    _fake_command(monkeypatch, run)
    assert cli.main(["fake", "--flag"]) == 1
    assert seen[0].flag is True
    assert seen[0].traceback is False


def test_the_old_gpu_carry_spelling_is_an_alias() -> None:
    proc = _python("-m", "devtools.envs.gpu_carry", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m devtools gpu-carry [-h] [--dest DEST]")
