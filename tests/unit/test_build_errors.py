"""What a failed build shows (issue 21): a tool's last lines travel with the
:class:`BuildError` to every place that shows it, ``$CXX`` is a command, and a program
that is no compiler says so. No compiling here (fake tools on PATH)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from build_backend._boundary import brief_error

from _torch_c_dlpack_ext_core.errors import (
    TAIL_CHARS,
    TAIL_LINES,
    BuildError,
    CommandError,
    CompilerNotFoundError,
    output_tail,
)
from _torch_c_dlpack_ext_core.toolchains import toolchain_for
from _torch_c_dlpack_ext_core.toolchains.protocol import locate_compiler


def _failed(stderr: str, stdout: str = "", cmd: str = "/usr/bin/nm") -> CommandError:
    return CommandError([cmd, "-D", "lib.so"], 1, stdout, stderr)


# --- the tail ---------------------------------------------------------------------


def test_output_tail_keeps_the_last_lines_and_marks_the_cut() -> None:
    text = "\n".join(f"line {i}" for i in range(100)) + "\n\n"
    tail = output_tail(text)
    lines = tail.splitlines()
    assert lines[0] == "..."
    assert lines[1:] == [f"line {i}" for i in range(100 - TAIL_LINES, 100)]
    assert output_tail("a\nb\n") == "a\nb"
    assert output_tail("") == ""


def test_output_tail_cuts_long_lines_to_the_character_limit() -> None:
    text = "first\n" + "x" * 5000 + "\n" + "y" * 300
    tail = output_tail(text)
    assert len(tail) <= TAIL_CHARS + 4
    assert tail.startswith("...\n")
    assert tail.endswith("y" * 300)
    # A single line longer than the limit keeps its end.
    assert output_tail("z" * 5000) == "...\n" + "z" * TAIL_CHARS


def test_from_command_keeps_the_tools_last_lines_where_every_display_finds_them() -> None:
    stderr = "\n".join(f"/tmp/x.cc:{i}: error: bad {i}" for i in range(1, 41))
    error = BuildError.from_command("compiling lib.so against torch 2.8.0 failed", _failed(stderr))
    assert error.summary == "compiling lib.so against torch 2.8.0 failed: nm exited with status 1"
    assert error.details == error.tail
    assert error.tail.splitlines()[0] == "..."
    assert error.tail.splitlines()[-1] == "/tmp/x.cc:40: error: bad 40"
    assert len(error.tail.splitlines()) == TAIL_LINES + 1
    assert str(error) == f"{error.summary}\n{error.tail}"
    assert error.output == stderr  # everything, for whoever wants it
    assert error.command == ["/usr/bin/nm", "-D", "lib.so"]


def test_from_command_says_when_the_tool_printed_nothing() -> None:
    error = BuildError.from_command("the ABI audit of lib.so could not read dynamic symbols",
                                    _failed(""))  # fmt: skip
    assert str(error) == (
        "the ABI audit of lib.so could not read dynamic symbols: nm exited with status 1 "
        "and printed nothing"
    )
    assert error.details == error.tail == ""


def test_from_command_falls_back_to_stdout_and_names_a_windows_tool() -> None:
    failed = _failed("", stdout="LINK : fatal error LNK1104", cmd=r"C:\VS\bin\cl.exe")
    error = BuildError.from_command("linking failed", failed)
    assert error.summary == "linking failed: cl.exe exited with status 1"
    assert error.details == "LINK : fatal error LNK1104"


def test_a_plain_build_error_has_its_first_line_as_summary() -> None:
    error = BuildError("no Python.h in /x\nsecond line")
    assert (error.summary, error.details, error.tail) == ("no Python.h in /x", "second line", "")


def test_the_backend_paragraph_shows_the_tail() -> None:
    error = BuildError.from_command("compiling lib.so failed", _failed("a.cc:1: error: oops"))
    assert brief_error(error) == (
        "torch-c-dlpack-ext cannot be built: compiling lib.so failed: nm exited with status 1\n"
        "a.cc:1: error: oops"
    )


# --- remedies that name this version --------------------------------------------


def test_remedies_pin_this_version_and_name_the_build_requirements() -> None:
    from _torch_c_dlpack_ext_core import installsource, remedies
    from _torch_c_dlpack_ext_core.version import __version__

    pinned = f"torch-c-dlpack-ext=={__version__}"
    assert installsource.pinned_requirement() == pinned
    assert remedies.reinstall_command() == f"pip install --force-reinstall --no-deps {pinned}"
    command = remedies.build_from_source_command((3, 11))
    assert command == (
        'pip install "packaging>=24" "filelock>=3.12" "apache-tvm-ffi>=0.1.6" '
        '"pyproject-metadata>=0.9" && pip install --force-reinstall --no-deps '
        f"--no-build-isolation --no-binary torch-c-dlpack-ext {pinned}"
    )
    assert '"tomli>=1.1"' in remedies.build_from_source_command((3, 9))


# --- $CXX is a command ------------------------------------------------------------


def _tool(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    path.chmod(0o755)
    return path


GXX = 'echo "g++ (GCC) 12.2.0"; echo "Copyright (C) 2022 Free Software Foundation, Inc."\n'
# Like ccache: run the command it is given.
WRAPPER = 'exec "$@"\n'

posix_only = pytest.mark.skipif(os.name == "nt", reason="shell scripts stand in for tools")


@posix_only
def test_cxx_with_a_wrapper_is_split_like_a_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    wrapper = _tool(bin_dir, "ccache", WRAPPER)
    _tool(bin_dir, "g++", GXX)
    environ = {"PATH": str(bin_dir), "CXX": "ccache g++"}
    compiler = toolchain_for("linux").find_compiler(None, environ)
    assert compiler.path == str(wrapper)
    assert compiler.args == ("g++",)
    assert compiler.command == (str(wrapper), "g++")
    assert compiler.identity == "g++ 12.2.0"


@posix_only
def test_cxx_with_flags_and_quotes_is_split_like_a_command(tmp_path: Path) -> None:
    gxx = _tool(tmp_path / "my tools", "g++", GXX)
    environ = {"PATH": "", "CXX": f"'{gxx}' -x c++ -DNAME=\"a b\""}
    compiler = toolchain_for("linux").find_compiler(None, environ)
    assert compiler.command == (str(gxx), "-x", "c++", "-DNAME=a b")


@posix_only
def test_a_path_with_spaces_that_exists_is_taken_whole(tmp_path: Path) -> None:
    gxx = _tool(tmp_path / "my tools", "g++", GXX)
    compiler = toolchain_for("linux").find_compiler(None, {"PATH": "", "CXX": str(gxx)})
    assert compiler.command == (str(gxx),)


@pytest.mark.parametrize(
    ("cxx", "message"),
    [
        ("nowhere-ccache g++", r"'nowhere-ccache g\+\+' \(from \$CXX\): 'nowhere-ccache' does not"),
        ("g++ 'unclosed", r"cannot be read as a command \(No closing quotation\)"),
    ],
)
def test_a_cxx_command_that_cannot_run_is_named(cxx: str, message: str) -> None:
    with pytest.raises(CompilerNotFoundError, match=message):
        toolchain_for("linux").find_compiler(None, {"PATH": "", "CXX": cxx})


@posix_only
def test_a_blank_cxx_counts_as_unset(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    gxx = _tool(bin_dir, "g++", GXX)
    found = locate_compiler(
        None, {"PATH": str(bin_dir), "CXX": "  "}, defaults=("g++",), bad_request="", none_found=""
    )
    assert found == (str(gxx), (), "PATH")


@posix_only
def test_a_program_that_prints_nothing_is_no_compiler(tmp_path: Path) -> None:
    true = _tool(tmp_path / "bin", "true", "exit 0\n")
    with pytest.raises(CompilerNotFoundError) as info:
        toolchain_for("linux").find_compiler(None, {"PATH": "", "CXX": str(true)})
    message = str(info.value)
    assert f"'{true} --version' printed nothing" in message
    assert "is it a C++ compiler?" in message


@posix_only
def test_a_failing_version_query_shows_what_the_program_said(tmp_path: Path) -> None:
    broken = _tool(
        tmp_path / "bin", "g++", 'echo "g++: error: libfoo.so: cannot open" >&2\nexit 4\n'
    )
    with pytest.raises(CompilerNotFoundError) as info:
        toolchain_for("linux").find_compiler(None, {"PATH": "", "CXX": str(broken)})
    error = info.value
    assert error.summary.startswith(f"C++ compiler {broken} (from $CXX) does not work")
    assert "g++ exited with status 4; is it a C++ compiler?" in error.summary
    assert error.details == "g++: error: libfoo.so: cannot open"
