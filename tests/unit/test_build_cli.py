"""``nox -s build``'s command line: the report follows ``--out`` (never the checkout's
build/ when another output was asked for) and the summary table cuts notes at a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from devtools import build

NOTE = (
    "index https://download.pytorch.org/whl/cu126 did not answer within 5 s "
    "(<urlopen error [Errno -2] Name or service not known>)"
)


def test_clip_cuts_at_a_word_boundary() -> None:
    clipped = build.clip(NOTE, 60)
    assert len(clipped) <= 60
    assert clipped.endswith(" \N{HORIZONTAL ELLIPSIS}")
    kept = clipped.removesuffix(" \N{HORIZONTAL ELLIPSIS}")
    assert NOTE.startswith(kept)
    assert NOTE[len(kept)] == " ", "cut inside a word"


def test_clip_keeps_short_text_and_takes_the_first_line() -> None:
    assert build.clip("no ROCm toolchain\nsecond line") == "no ROCm toolchain"
    assert build.clip("") == ""
    assert build.clip("x" * 200, 20) == "x" * 19 + "\N{HORIZONTAL ELLIPSIS}"


def test_table_note_column_is_clipped(capsys: pytest.CaptureFixture[str]) -> None:
    result = build.CellResult(
        cell="cp311-linux_x86_64-t26_cuda_abi0", status="skipped", reason=NOTE
    )
    build.print_table([result])
    line = capsys.readouterr().out.splitlines()[1]
    note = line.split("  ")[-1]
    assert note == build.clip(NOTE)
    assert len(note) < len(NOTE)


def test_report_goes_beside_out_not_into_the_checkout(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    cells = tmp_path / "cells"
    # A cell of another platform: skipped with its reason, nothing compiled.
    code = build.main(
        ["--cells", "cp311-win_amd64-t28_cpu", "--no-assemble", "--out", str(out),
         "--build-dir", str(cells)]
    )  # fmt: skip
    assert code == 0
    report = json.loads((tmp_path / build.REPORT_NAME).read_text(encoding="utf-8"))
    assert [c["cell"] for c in report["cells"]] == ["cp311-win_amd64-t28_cpu"]
    assert report["cells"][0]["status"] == "skipped"
    assert not (out / build.REPORT_NAME).exists(), "dist/ holds only what gets published"
    assert not (cells.parent / "cells" / build.REPORT_NAME).exists()


def test_report_option_and_default(tmp_path: Path) -> None:
    parser = build._parser()
    cells = tmp_path / "b" / "cells"
    assert build.report_path(parser.parse_args([]), cells) == tmp_path / "b" / build.REPORT_NAME
    args = parser.parse_args(["--out", str(tmp_path / "o" / "dist")])
    assert build.report_path(args, cells) == tmp_path / "o" / build.REPORT_NAME
    # --out naming the default dist/ keeps the default report (not one in the checkout root).
    args = parser.parse_args(["--out", str(build.DEFAULT_OUT)])
    assert build.report_path(args, cells) == tmp_path / "b" / build.REPORT_NAME
    args = parser.parse_args(["--out", "x", "--report", str(tmp_path / "r.json")])
    assert build.report_path(args, cells) == tmp_path / "r.json"
