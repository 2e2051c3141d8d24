"""``nox -s build``'s command line: the report follows ``--out`` (never the checkout's
build/ when another output was asked for), the summary table cuts notes at a word, an
empty ``--cells`` is refused before any work and a run that builds nothing fails."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from devtools.base import cli
from devtools.base.errors import CellsNotBuiltError
from devtools.build import cellbuild as build
from devtools.build import cellresults
from devtools.build import host as buildhost
from devtools.commands import build as command

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend

NOTE = (
    "index https://download.pytorch.org/whl/cu126 did not answer within 5 s "
    "(<urlopen error [Errno -2] Name or service not known>)"
)


def test_clip_cuts_at_a_word_boundary() -> None:
    clipped = cellresults.clip(NOTE, 60)
    assert len(clipped) <= 60
    assert clipped.endswith(" \N{HORIZONTAL ELLIPSIS}")
    kept = clipped.removesuffix(" \N{HORIZONTAL ELLIPSIS}")
    assert NOTE.startswith(kept)
    assert NOTE[len(kept)] == " ", "cut inside a word"


def test_clip_keeps_short_text_and_takes_the_first_line() -> None:
    assert cellresults.clip("no ROCm toolchain\nsecond line") == "no ROCm toolchain"
    assert cellresults.clip("") == ""
    assert cellresults.clip("x" * 200, 20) == "x" * 19 + "\N{HORIZONTAL ELLIPSIS}"


def test_table_note_column_is_clipped(capsys: pytest.CaptureFixture[str]) -> None:
    result = cellresults.CellResult(
        cell="linux_x86_64-t26_cuda_abi0", status="skipped", reason=NOTE
    )
    command.print_table([result])
    line = capsys.readouterr().out.splitlines()[1]
    note = line.split("  ")[-1]
    assert note == cellresults.clip(NOTE)
    assert len(note) < len(NOTE)


def test_report_goes_beside_out_not_into_the_checkout(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    cells = tmp_path / "cells"
    # A cell of another platform: skipped with its reason, nothing compiled (so the run
    # fails: it built none of the cells asked for), and the report says why.
    code = cli.main(
        ["build", "--cells", "win_amd64-t28_cpu", "--no-assemble", "--out", str(out),
         "--build-dir", str(cells)]
    )  # fmt: skip
    assert code == CellsNotBuiltError.exit_code
    report = json.loads((tmp_path / command.REPORT_NAME).read_text(encoding="utf-8"))
    # The group's portable table comes with its cells (issue 30), skipped alike.
    assert [c["cell"] for c in report["cells"]] == ["win_amd64-t28_cpu", "win_amd64-portable"]
    assert [c["status"] for c in report["cells"]] == ["skipped", "skipped"]
    assert not (out / command.REPORT_NAME).exists(), "dist/ holds only what gets published"
    assert not (cells.parent / "cells" / command.REPORT_NAME).exists()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser


def test_report_option_and_default(tmp_path: Path) -> None:
    parser = _parser()
    cells = tmp_path / "b" / "cells"
    assert command.report_path(parser.parse_args([]), cells) == tmp_path / "b" / command.REPORT_NAME
    args = parser.parse_args(["--out", str(tmp_path / "o" / "dist")])
    assert command.report_path(args, cells) == tmp_path / "o" / command.REPORT_NAME
    # --out naming the default dist/ keeps the default report (not one in the checkout root).
    args = parser.parse_args(["--out", str(command.DEFAULT_OUT)])
    assert command.report_path(args, cells) == tmp_path / "b" / command.REPORT_NAME
    args = parser.parse_args(["--out", "x", "--report", str(tmp_path / "r.json")])
    assert command.report_path(args, cells) == tmp_path / "r.json"


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record any attempt to build or to provision: the cases below must fail before."""
    calls: list[object] = []
    monkeypatch.setattr(build, "build_cells", lambda *a, **k: calls.append(a) or [])
    monkeypatch.setattr(build, "build_one", lambda *a, **k: calls.append(a))
    return calls


@pytest.mark.parametrize("value", ["", " ", ",", " , ,", "\t"])
def test_an_empty_cells_selection_is_an_error_before_any_work(
    value: str, tmp_path: Path, no_work: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    # TCDE_JOB_CELLS unset in a release job's before-build expands to --cells "": that
    # must never mean "every cell" (it compiled ~15 cells, then failed).
    code = cli.main(["build", "--cells", value, "--no-assemble", "--build-dir", str(tmp_path)])
    assert code == ConfigError.exit_code
    assert no_work == []
    err = capsys.readouterr().err
    assert f"--cells {value!r} names no cell" in err
    assert "nox -s matrix -- --list" in err
    assert list(tmp_path.iterdir()) == []


def test_select_cells_without_cells_is_the_host_platform() -> None:
    matrix = build.load_matrix()
    cells = command.select_cells(matrix, None)
    host = buildhost.host_platform_name(matrix)
    assert cells
    assert {c.platform.name for c in cells} == {host}
    # Every Python ABI of the platform: the abi3 cells and the free-threaded ones.
    assert {c.python for c in cells} >= {"abi3"}


def test_a_build_of_none_of_the_requested_cells_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["build", "--cells", "win_amd64-t28_cpu,macosx_11_0_arm64-t28_cpu", "--no-assemble",
         "--build-dir", str(tmp_path / "cells"), "--report", str(tmp_path / "r.json")]
    )  # fmt: skip
    assert code == CellsNotBuiltError.exit_code
    err = capsys.readouterr().err
    assert "none of the 2 selected cell(s) was built" in err
    assert "win_amd64-t28_cpu: skipped (builds on win_amd64" in err
    assert (tmp_path / "r.json").is_file()
    assert not (tmp_path / "cells").exists()


def test_python_flags_are_gone(capsys: pytest.CaptureFixture[str]) -> None:
    # Cells carry no CPython version: --python / --all-pythons no longer select anything.
    with pytest.raises(SystemExit) as info:
        cli.main(["build", "--python", "3.12"])
    assert info.value.code == 2
    assert "unrecognized arguments: --python" in capsys.readouterr().err


def test_the_report_never_overwrites_an_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devtools.build import wheels

    out = tmp_path / "dist"
    index = out / "torch_c_dlpack_ext-0.2.0-variants.json"

    def assemble(groups: object, target: Path, **kwargs: object) -> list[Path]:
        target.mkdir(parents=True, exist_ok=True)
        index.write_text('{"variants": {}}\n', encoding="utf-8")
        return [index]

    built = cellresults.CellResult(
        cell="linux_x86_64-t28_cpu", status="built", size=1, entry=_ENTRY
    )
    monkeypatch.setattr(build, "build_cells", lambda *a, **k: [built])
    monkeypatch.setattr(wheels, "assemble_dist", assemble)
    cells = ["--cells", "linux_x86_64-t28_cpu"]
    code = cli.main(["build", *cells, "--out", str(out), "--build-dir", str(tmp_path / "c")])
    assert code == 0
    # The last artifact written keeps its content; the report goes beside dist/.
    assert index.read_text(encoding="utf-8") == '{"variants": {}}\n'
    report = json.loads((tmp_path / command.REPORT_NAME).read_text(encoding="utf-8"))
    assert report["artifacts"] == [{"file": index.name, "size": index.stat().st_size}]


_ENTRY = ManifestEntry(
    file="libs/lib.so",
    torch="2.8",
    torch_build="2.8.0",
    backend=Backend.CPU,
    cxx11_abi=True,
    dlpack="1.1",
    toolchain="g++ 12.2.0",
    gpu_toolkit=None,
    platform="linux_x86_64",
    python="abi3",
    size=1,
    sha256="0" * 64,
    cell="linux_x86_64-t28_cpu",
)


def test_the_report_records_a_cells_entry_as_its_manifest_json() -> None:
    built = cellresults.CellResult(
        cell="linux_x86_64-t28_cpu", status="built", size=1, entry=_ENTRY
    )
    record = json.loads(json.dumps(built.to_json()))
    assert record["entry"] == _ENTRY.to_json()
    assert ManifestEntry.from_json(record["entry"]) == _ENTRY
    skipped = cellresults.CellResult(cell="linux_x86_64-t28_cpu", status="skipped", reason="no")
    assert skipped.to_json() == {
        "cell": "linux_x86_64-t28_cpu",
        "status": "skipped",
        "seconds": 0.0,
        "size": 0,
        "reason": "no",
        "entry": None,
        "setup_seconds": 0.0,
    }


def test_a_failed_cell_counts_its_time_as_set_up_only_when_it_failed_in_the_set_up() -> None:
    import time

    started = time.monotonic() - 5
    during = cellresults.CellResult.failed("c", OSError("no torch"), started, None)
    after = cellresults.CellResult.failed("c", OSError("compile"), started, 2.0)
    assert (during.status, during.reason) == ("failed", "OSError: no torch")
    assert during.setup_seconds == during.seconds >= 5
    assert (after.setup_seconds, after.seconds >= 5) == (2.0, True)
