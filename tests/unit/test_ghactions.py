"""devtools on GitHub Actions (issue 32, item 5): ``::group::`` around each step, never
nested and always closed; ``::error`` annotations escaped by GitHub's rules, with a file
and line where known; the build's table of cells in the job summary. Without
``GITHUB_ACTIONS=true`` the output is the plain one, without a workflow command."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from devtools.base import cli, ghactions
from devtools.base.errors import MatrixError, ReleaseError
from devtools.build import cellbuild as build
from devtools.build import cellresults
from devtools.commands import build as command
from devtools.matrix.reader import load_matrix
from devtools.release import verify

from _torch_c_dlpack_ext_core.errors import BuildError, ConfigError

GCC_TAIL = (
    "CompileError: compile failed (exit code 1): g++ -c csrc/exchange.cpp\n"
    "last lines of its output:\n"
    "In file included from csrc/exchange.cpp:3:\n"
    "csrc/exchange.h:41:12: error: 'DLTensor' does not name a type\n"
    "csrc/exchange.cpp:99:1: error: expected ';'\n"
)


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")


def _commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("::")]


# --- the module ---------------------------------------------------------------------


def test_on_github_only_when_the_variable_is_true(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not ghactions.on_github()
    for value in ("false", "1", "TRUE", ""):
        monkeypatch.setenv("GITHUB_ACTIONS", value)
        assert not ghactions.on_github(), value
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert ghactions.on_github()


def test_escaping_follows_githubs_rules() -> None:
    assert ghactions.escape_data("50% done\r\nnext: a, b") == "50%25 done%0D%0Anext: a, b"
    assert ghactions.escape_property("C:\\x,y\n%") == "C%3A\\x%2Cy%0A%25"


def test_off_github_groups_and_errors_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with ghactions.group("build a cell"):
        print("inside")
    ghactions.error("boom", file="a.cpp", line=3, title="t")
    captured = capsys.readouterr()
    assert captured.out == "inside\n"
    assert captured.err == ""


def test_groups_open_and_close_in_pairs(github: None, capsys: pytest.CaptureFixture[str]) -> None:
    with ghactions.group("build linux_x86_64-t28_cpu"):
        print("compiling")
    with ghactions.group("50% of\nthe cells"):
        pass
    assert capsys.readouterr().out.splitlines() == [
        "::group::build linux_x86_64-t28_cpu",
        "compiling",
        "::endgroup::",
        "::group::50%25 of%0Athe cells",
        "::endgroup::",
    ]
    assert ghactions.GROUP_MARK not in os.environ


def test_a_group_is_closed_when_its_step_raises(
    github: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError), ghactions.group("audit"):
        raise ConfigError("bad")
    assert _commands(capsys.readouterr().out) == ["::group::audit", "::endgroup::"]
    assert ghactions.GROUP_MARK not in os.environ
    # The next step gets a group of its own again.
    with ghactions.group("repair"):
        pass
    assert _commands(capsys.readouterr().out) == ["::group::repair", "::endgroup::"]


def test_a_group_is_never_opened_inside_another(
    github: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with ghactions.group("outer"):
        assert os.environ[ghactions.GROUP_MARK]  # children see it too
        with ghactions.group("inner"):
            print("inner work")
    assert capsys.readouterr().out.splitlines() == [
        "::group::outer",
        "inner work",
        "::endgroup::",
    ]


def test_no_group_inside_cibuildwheels_own_or_a_parents(
    github: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CIBUILDWHEEL", "1")  # cibuildwheel groups each build itself
    with ghactions.group("build"):
        print("x")
    monkeypatch.delenv("CIBUILDWHEEL")
    monkeypatch.setenv(ghactions.GROUP_MARK, "1")  # a parent devtools opened one
    with ghactions.group("build"):
        print("y")
    monkeypatch.delenv(ghactions.GROUP_MARK)
    with ghactions.no_groups(), ghactions.group("build"):
        print("z")
    assert capsys.readouterr().out == "x\ny\nz\n"
    assert ghactions.GROUP_MARK not in os.environ


def test_error_annotation_escapes_and_names_file_and_line(
    github: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).parents[2])
    source = Path.cwd() / "csrc" / "exchange.cpp"
    ghactions.error("100% wrong\nsecond line", file=source, line=12, title="cell a:b, failed")
    ghactions.error("no line known", file="dist/x.whl", title="verify")
    ghactions.error("a line without a file is dropped", line=5)
    assert _commands(capsys.readouterr().out) == [
        "::error file=csrc/exchange.cpp,line=12,title=cell a%3Ab%2C failed::100%25 wrong%0A"
        "second line",
        "::error file=dist/x.whl,title=verify::no line known",
        "::error::a line without a file is dropped",
    ]


# --- the one error report -----------------------------------------------------------


def test_report_is_unchanged_off_github(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.report(ConfigError("bad value")) == ConfigError.exit_code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: ConfigError: bad value\n"


def test_report_annotates_handled_errors_on_github(
    github: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.report(ConfigError("bad: value\nmore")) == ConfigError.exit_code
    assert cli.report(MatrixError("matrix.toml: [torch] needs minor")) == MatrixError.exit_code
    cli.report(BuildError(GCC_TAIL))
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ConfigError: bad: value\nmore\n")
    commands = _commands(captured.out)
    assert commands[:2] == [
        "::error title=ConfigError::bad: value%0Amore",
        "::error file=matrix.toml,title=MatrixError::matrix.toml: [torch] needs minor",
    ]
    assert commands[2].startswith("::error file=csrc/exchange.h,line=41,title=BuildError::")


def test_a_step_annotation_is_not_repeated_by_the_report(
    github: None, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = types.SimpleNamespace(path=Path("dist/t-0.2.0-cp39-abi3-linux_x86_64.whl"))
    title = "verify t-0.2.0 with torch 2.8"
    with pytest.raises(ReleaseError) as info, verify._step(title, wheel):  # type: ignore[arg-type]
        raise ReleaseError("decided jit, expected load")
    cli.report(info.value)
    assert _commands(capsys.readouterr().out) == [
        "::group::verify t-0.2.0 with torch 2.8",
        "::endgroup::",
        "::error file=dist/t-0.2.0-cp39-abi3-linux_x86_64.whl,title=verify t-0.2.0 with "
        "torch 2.8::decided jit, expected load",
    ]


# --- the job summary ----------------------------------------------------------------


def test_summary_appends_to_the_runners_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("before\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert ghactions.step_summary("| a |")
    assert summary.read_text(encoding="utf-8") == "before\n| a |\n"


def test_summary_unset_is_silent_off_github_and_a_note_on_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not ghactions.step_summary("| a |")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert not ghactions.step_summary("| a |")
    assert "GITHUB_STEP_SUMMARY is not set" in capsys.readouterr().err


def test_an_unwritable_summary_is_a_note_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (tmp_path, tmp_path / "missing" / "summary.md"):
        assert not ghactions.step_summary("| a |", path)
        err = capsys.readouterr().err
        assert err.startswith(f"note: cannot append to the job summary {path}: ")
        assert "Traceback" not in err


def test_summary_inside_cibuildwheels_container_is_under_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CIBUILDWHEEL", "1")
    runner_path = Path("/nonexistent-runner") / "step_summary_1"
    mounted = Path("/host") / runner_path.relative_to("/")
    assert ghactions._container_path(runner_path) == (
        mounted if mounted.parent.is_dir() else runner_path
    )
    here = tmp_path / "s.md"
    assert ghactions._container_path(here) == here  # a path that exists stays


# --- the build ----------------------------------------------------------------------


def test_compiler_location_reads_gcc_clang_and_msvc() -> None:
    assert ghactions.compiler_location(GCC_TAIL) == ("csrc/exchange.h", 41)
    assert ghactions.compiler_location("/p/a b.cpp:7: fatal error: dlpack.h: missing") == (
        "/p/a b.cpp",
        7,
    )
    msvc = "C:\\w\\csrc\\exchange.cpp(120,5): error C2065: 'x': undeclared identifier"
    assert ghactions.compiler_location(msvc) == ("C:\\w\\csrc\\exchange.cpp", 120)
    assert ghactions.compiler_location("ProvisionError: uv pip install failed") is None
    assert ghactions.compiler_location("note: see a.cpp:3:1: warning: unused") is None


def _two_cells() -> tuple[object, ...]:
    return load_matrix().select(platform=["linux_x86_64"])[:2]


def _fake_builds(monkeypatch: pytest.MonkeyPatch, *, raise_on: str | None = None) -> None:
    monkeypatch.setattr(build, "skip_reason", lambda *a: None)
    monkeypatch.setattr(build, "cross_target", lambda *a: None)

    def build_one(cell: object, build_dir: Path, cross: object) -> cellresults.CellResult:
        cell_id = str(cell.id)  # type: ignore[attr-defined]
        print(f"compiling {cell_id}")
        if cell_id == raise_on:
            raise ConfigError("a bug in the step")
        return cellresults.CellResult(cell=cell_id, status="failed", seconds=1.0, reason=GCC_TAIL)

    monkeypatch.setattr(build, "build_one", build_one)


def test_build_cells_off_github_prints_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_builds(monkeypatch)
    cells = _two_cells()
    build.build_cells(cells, tmp_path, jobs=1)  # type: ignore[arg-type]
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"compiling {c.id}" for c in cells]  # type: ignore[attr-defined]
    lines = captured.err.splitlines()
    assert len(lines) == 2, "one progress line per cell, no reason, no command"
    assert all(line.startswith("[cell ") for line in lines)


def test_build_cells_on_github_groups_each_cell_and_annotates_failures(
    github: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fake_builds(monkeypatch)
    first, second = _two_cells()
    build.build_cells([first, second], tmp_path, jobs=1)  # type: ignore[list-item]
    out = capsys.readouterr().out.splitlines()
    commands = _commands("\n".join(out))
    location = "file=csrc/exchange.h,line=41"
    for cell, at in ((first, 0), (second, 3)):
        assert commands[at] == f"::group::build {cell.id}"  # type: ignore[attr-defined]
        assert commands[at + 1] == "::endgroup::"
        assert commands[at + 2].startswith(
            f"::error {location},title=cell {cell.id} failed (CompileError)::CompileError"  # type: ignore[attr-defined]
        )
        assert "%0A" in commands[at + 2]
    # The compile's own output is inside its group.
    assert out.index(f"compiling {first.id}") == out.index(f"::group::build {first.id}") + 1  # type: ignore[attr-defined]


def test_a_cells_group_is_closed_when_its_build_raises(
    github: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second = _two_cells()
    _fake_builds(monkeypatch, raise_on=str(second.id))  # type: ignore[attr-defined]
    with pytest.raises(ConfigError):
        build.build_cells([first, second], tmp_path, jobs=1)  # type: ignore[list-item]
    commands = _commands(capsys.readouterr().out)
    groups = [c for c in commands if "group::" in c]
    assert groups == [
        f"::group::build {first.id}",  # type: ignore[attr-defined]
        "::endgroup::",
        f"::group::build {second.id}",  # type: ignore[attr-defined]
        "::endgroup::",
    ]


def test_markdown_table_of_the_cells() -> None:
    results = [
        cellresults.CellResult(
            cell="linux_x86_64-t28_cpu", status="built", seconds=12.34, size=4096
        ),
        cellresults.CellResult(cell="win_amd64-t28_cpu", status="skipped", reason="a | b\nsecond"),
    ]
    assert command.markdown_table(results, title="build: 2 cell(s)") == (
        "### build: 2 cell(s)\n"
        "\n"
        "| cell | status | seconds | size | note |\n"
        "| --- | --- | ---: | ---: | --- |\n"
        "| `linux_x86_64-t28_cpu` | built | 12.3 | 4096 |  |\n"
        "| `win_amd64-t28_cpu` | skipped | 0.0 | - | a \\| b |\n"
        "\n"
    )


def _build_elsewhere(tmp_path: Path, *extra: str) -> int:
    # A cell of another platform: skipped, so the run fails (exit 13) after its table.
    return cli.main(
        ["build", "--cells", "win_amd64-t28_cpu", "--no-assemble", "--out",
         str(tmp_path / "dist"), "--build-dir", str(tmp_path / "cells"), *extra]
    )  # fmt: skip


def test_the_build_adds_its_table_to_the_job_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert _build_elsewhere(tmp_path) == 13
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("### build: 2 cell(s)\n")
    assert "| `win_amd64-t28_cpu` | skipped |" in text
    assert "| `win_amd64-portable` | skipped |" in text
    assert not _commands(capsys.readouterr().out)


def test_an_unwritable_summary_does_not_break_the_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _build_elsewhere(tmp_path, "--summary", str(tmp_path)) == 13
    err = capsys.readouterr().err
    assert f"note: cannot append to the job summary {tmp_path}: " in err
    assert "Traceback" not in err


def _parallel_build(cell: object, build_dir: Path, cross: object) -> cellresults.CellResult:
    # Runs in a worker process: whether it may open a group of its own.
    mark = os.environ.get(ghactions.GROUP_MARK, "")
    return cellresults.CellResult(
        cell=str(cell.id),  # type: ignore[attr-defined]
        status="failed",
        reason=f"CompileError: mark={mark!r}\n{GCC_TAIL}",
    )


def test_parallel_builds_group_each_result_and_no_worker_opens_one(
    github: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(build, "skip_reason", lambda *a: None)
    monkeypatch.setattr(build, "cross_target", lambda *a: None)
    monkeypatch.setattr(build, "build_one", _parallel_build)
    cells = _two_cells()
    results = build.build_cells(cells, tmp_path, jobs=2)  # type: ignore[arg-type]
    assert all("mark='1'" in r.reason for r in results), "a worker could open a group"
    assert ghactions.GROUP_MARK not in os.environ
    commands = _commands(capsys.readouterr().out)
    groups = [c for c in commands if "group::" in c]
    assert sorted(groups[0::2]) == sorted(f"::group::build {c.id}: failed" for c in cells)  # type: ignore[attr-defined]
    assert groups[1::2] == ["::endgroup::", "::endgroup::"]
    assert sum(c.startswith("::error file=csrc/exchange.h,line=41,") for c in commands) == 2
