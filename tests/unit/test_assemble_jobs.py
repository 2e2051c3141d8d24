"""The assemble step (``nox -s build -- --assemble-from``) on job wheels laid out as the
release workflow downloads them: one folder per job artifact, equal file names from
different jobs, tag sets that differ between jobs of one architecture (D1, D4), and
the release contents computed from the result."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from build_backend._metadata import project_metadata
from build_backend._wheel import assemble_wheel
from devtools.base import wheelnames
from devtools.base.errors import ReleaseError
from devtools.build import repair, variants, wheels
from devtools.matrix.cells import Cell
from devtools.matrix.reader import load_matrix
from devtools.rehearse import flowjob
from devtools.release import cisteps, contents, distfiles, verify

from _torch_c_dlpack_ext_core.files import sha256_of, write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.version import __version__

ROOT = Path(__file__).resolve().parents[2]
MATRIX = load_matrix()
V = __version__


def _cells(*ids: str) -> list[Cell]:
    return list(MATRIX.select(list(ids)))


def job_wheel(
    tmp_path: Path, job: str, cells: list[Cell], platform: str, *, tamper: bool = False
) -> Path:
    """A job wheel (stand-in libraries, a true manifest) as job ``job`` uploads it,
    in ``cells/cell-<job>/`` like download-artifact v4 lays it out."""
    libs = tmp_path / "libs" / job
    pairs = [flowjob.stand_in_library(c, libs, elf=False) for c in cells]
    if tamper:
        pairs[0][1].write_bytes(b"changed after the manifest was written")
    folder = tmp_path / "cells" / f"cell-{job}"
    folder.mkdir(parents=True, exist_ok=True)
    return assemble_wheel(
        folder, meta=project_metadata(ROOT), libraries=pairs, platform=platform,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("platform", "key"),
    [
        ("manylinux_2_28_x86_64", ("linux", "x86_64")),
        ("manylinux_2_17_x86_64", ("linux", "x86_64")),
        ("manylinux2014_x86_64", ("linux", "x86_64")),
        ("linux_x86_64", ("linux", "x86_64")),
        ("manylinux_2_28_aarch64", ("linux", "aarch64")),
        ("musllinux_1_2_x86_64", ("musllinux", "x86_64")),
        ("macosx_11_0_arm64", ("macos", "arm64")),
        ("macosx_14_0_arm64", ("macos", "arm64")),
        ("win_amd64", ("win", "amd64")),
    ],
)
def test_platform_key_is_family_and_architecture(platform: str, key: tuple[str, str]) -> None:
    assert wheelnames.platform_key(platform) == key


@pytest.mark.parametrize(
    ("tag_sets", "combined"),
    [
        ([{"manylinux_2_28_x86_64"}], "manylinux_2_28_x86_64"),
        # auditwheel without --only-plat adds tags a job is also eligible for.
        (
            [{"manylinux_2_27_x86_64", "manylinux_2_28_x86_64"}, {"manylinux_2_28_x86_64"}],
            "manylinux_2_28_x86_64",
        ),
        (
            [{"manylinux_2_17_x86_64", "manylinux2014_x86_64"}, {"manylinux_2_28_x86_64"}],
            "manylinux_2_28_x86_64",
        ),
        ([{"manylinux_2_17_x86_64", "manylinux2014_x86_64"}], "manylinux_2_17_x86_64"),
        ([{"manylinux_2_28_x86_64"}, {"linux_x86_64"}], "linux_x86_64"),
        ([{"macosx_11_0_arm64"}, {"macosx_14_0_arm64"}], "macosx_14_0_arm64"),
        ([{"win_amd64"}, {"win_amd64"}], "win_amd64"),
    ],
)
def test_combined_platform_of_mixed_tag_sets(tag_sets: list[set[str]], combined: str) -> None:
    assert wheelnames.combined_platform([frozenset(s) for s in tag_sets]) == combined


def test_combined_platform_refuses_two_architectures() -> None:
    with pytest.raises(ReleaseError, match="different platforms"):
        wheelnames.combined_platform(
            [frozenset({"manylinux_2_28_x86_64"}), frozenset({"manylinux_2_28_aarch64"})]
        )


@pytest.fixture
def cuda_and_rocm(tmp_path: Path) -> tuple[Path, list[Cell]]:
    """The D1 case: two jobs of one platform with equal wheel names (both abi3), and
    (D4) one of them tagged with an extra, lower policy."""
    cuda = _cells("linux_x86_64-t28_cpu", "linux_x86_64-t28_cuda")
    rocm = _cells("linux_x86_64-t28_rocm", "linux_x86_64-t29_rocm")
    a = job_wheel(tmp_path, "linux_x86_64-cuda", cuda, "manylinux_2_28_x86_64")
    b = job_wheel(
        tmp_path, "linux_x86_64-rocm6.4", rocm,
        "manylinux_2_27_x86_64.manylinux_2_28_x86_64",
    )  # fmt: skip
    mac = _cells("macosx_11_0_arm64-t28_cpu")
    job_wheel(tmp_path, "macosx_11_0_arm64-cpu", mac, "macosx_11_0_arm64")
    assert a.name.split("-")[:4] == b.name.split("-")[:4]
    return tmp_path / "cells", [*cuda, *rocm, *mac]


def _manifest(wheel: Path) -> list[dict[str, Any]]:
    with zipfile.ZipFile(wheel) as archive:
        data = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
    return list(data["libraries"])


def test_assemble_keeps_every_jobs_libraries(
    cuda_and_rocm: tuple[Path, list[Cell]], tmp_path: Path
) -> None:
    cells_dir, cells = cuda_and_rocm
    out = tmp_path / "dist"
    made = wheels.assemble_from_wheels(cells_dir, out)
    names = sorted(p.name for p in made if p.suffix == ".whl")
    combined = [n for n in names if n.count("-") == 4 and "none-any" not in n]
    assert combined == [
        f"torch_c_dlpack_ext-{V}-cp39-abi3-macosx_11_0_arm64.whl",
        f"torch_c_dlpack_ext-{V}-cp39-abi3-manylinux_2_28_x86_64.whl",
    ]
    linux = _manifest(out / combined[1])
    assert sorted(Path(e["file"]).name for e in linux) == sorted(
        c.library for c in cells if c.platform.name == "linux_x86_64"
    )
    for cell in cells:
        label = variants.variant_label(cell.torch.minor)
        assert any(n.endswith(f"-{label}.whl") and cell.platform.name[:5] in n
                   for n in names), cell.id  # fmt: skip
    # The release contents: each cell once, nothing unexpected.
    jobs = [
        {"id": "linux_x86_64-cuda", "cells": [c.id for c in cells[:2]], "allow_failure": ""},
        {
            "id": "linux_x86_64-rocm6.4",
            "cells": [c.id for c in cells[2:4]],
            "allow_failure": "unproven",
        },
        {"id": "macosx_11_0_arm64-cpu", "cells": [cells[4].id], "allow_failure": ""},
    ]
    infos = [distfiles.read_wheel(p) for p in sorted(out.glob("*.whl"))]
    statuses = contents.release_contents(
        load_matrix(), jobs, infos, arrived=contents.arrived_jobs(cells_dir)
    )
    assert [(s.cell, s.state) for s in statuses] == [(c.id, "present") for c in cells]
    contents.check_contents(statuses)
    # The torch 2.8 variant of linux carries every library of 2.8 the combined wheel does.
    (t28,) = [i for i in infos if i.path.name.endswith("manylinux_2_28_x86_64-t28.whl")]
    linux_combined = next(i for i in infos if i.path.name == combined[1])
    assert sorted(e.file for e in t28.libraries) == sorted(
        e.file for e in linux_combined.libraries if e.portable or e.torch == "2.8"
    )


def test_contents_name_what_is_missing_and_whether_that_is_allowed(
    cuda_and_rocm: tuple[Path, list[Cell]], tmp_path: Path
) -> None:
    cells_dir, cells = cuda_and_rocm
    out = tmp_path / "dist"
    wheels.assemble_from_wheels(cells_dir, out)
    infos = [distfiles.read_wheel(p) for p in sorted(out.glob("*.whl"))]
    jobs = [
        {"id": "linux_x86_64-cuda", "cells": [c.id for c in cells[:2]], "allow_failure": ""},
        {
            "id": "linux_x86_64-rocm6.4",
            "cells": [c.id for c in cells[2:4]],
            "allow_failure": "unproven",
        },
        {"id": "macosx_11_0_arm64-cpu", "cells": [cells[4].id], "allow_failure": ""},
        {
            "id": "linux_x86_64-rocm6.3",
            "cells": ["linux_x86_64-t27_rocm"],
            "allow_failure": "unproven",
        },
    ]
    statuses = contents.release_contents(
        load_matrix(), jobs, infos, arrived=contents.arrived_jobs(cells_dir)
    )
    (absent,) = [s for s in statuses if s.state != "present"]
    assert absent.cell == "linux_x86_64-t27_rocm"
    assert (
        absent.reason == "job linux_x86_64-rocm6.3 uploaded no wheels (it failed or was cancelled)"
    )
    assert absent.acceptable
    contents.check_contents(statuses)  # allowed to fail: no error
    notes = contents.release_notes(statuses)
    assert "5 of 6 cells" in notes
    assert "`linux_x86_64-t27_rocm`" in notes
    assert "0 of these block publishing" in notes
    # The same absence for a job that may not fail blocks verify.
    jobs[-1] = {"id": "linux_aarch64-cpu", "cells": ["linux_aarch64-t28_cpu"],
                "allow_failure": ""}  # fmt: skip
    statuses = contents.release_contents(load_matrix(), jobs, infos)
    with pytest.raises(
        ReleaseError, match=r"1 cell\(s\) not in the release.*linux_aarch64-t28_cpu"
    ):
        contents.check_contents(statuses)
    assert "1 of these block publishing" in contents.release_notes(statuses)


def test_contents_see_a_cell_no_job_expects(
    cuda_and_rocm: tuple[Path, list[Cell]], tmp_path: Path
) -> None:
    cells_dir, cells = cuda_and_rocm
    out = tmp_path / "dist"
    wheels.assemble_from_wheels(cells_dir, out)
    infos = [distfiles.read_wheel(p) for p in sorted(out.glob("*.whl"))]
    jobs = [{"id": "linux_x86_64-cuda", "cells": [c.id for c in cells[:2]]}]
    statuses = contents.release_contents(load_matrix(), jobs, infos)
    unexpected = sorted(s.cell for s in statuses if s.state == "unexpected")
    assert unexpected == sorted(c.id for c in cells[2:])
    with pytest.raises(ReleaseError):
        contents.check_contents(statuses)


def test_one_library_in_two_job_wheels(tmp_path: Path) -> None:
    cells = _cells("linux_x86_64-t28_cpu")
    first = job_wheel(tmp_path, "a", cells, "manylinux_2_28_x86_64")
    # The same bytes twice (a job rerun uploaded under another name): kept once.
    (tmp_path / "cells" / "cell-b").mkdir()
    (tmp_path / "cells" / "cell-b" / first.name).write_bytes(first.read_bytes())
    made = wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist")
    (combined,) = [p for p in made if p.name.endswith("-manylinux_2_28_x86_64.whl")]
    assert len(_manifest(combined)) == 1
    # Different bytes for one cell: refused, naming both job wheels.
    entry, path = flowjob.stand_in_library(cells[0], tmp_path / "rebuilt", elf=False)
    path.write_bytes(b"another build of the same cell")
    entry = entry._replace(size=path.stat().st_size, sha256=sha256_of(path))
    folder = tmp_path / "cells" / "cell-c"
    folder.mkdir()
    assemble_wheel(folder, meta=project_metadata(ROOT), libraries=[(entry, path)],
                   platform="manylinux_2_28_x86_64")  # fmt: skip
    with pytest.raises(ReleaseError, match=r"differs between .*cell-a.* and .*cell-c"):
        wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist2")


def test_assemble_refuses_a_damaged_job_wheel(tmp_path: Path) -> None:
    cells = _cells("linux_x86_64-t28_cpu")
    job_wheel(tmp_path, "a", cells, "manylinux_2_28_x86_64", tamper=True)
    with pytest.raises(ReleaseError, match="does not match its manifest entry"):
        wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist")
    (tmp_path / "cells" / "cell-b").mkdir()
    broken = tmp_path / "cells" / "cell-b" / f"torch_c_dlpack_ext-{V}-cp39-abi3-linux_x86_64.whl"
    broken.write_bytes(b"not a zip")
    for wheel in (tmp_path / "cells" / "cell-a").glob("*.whl"):
        wheel.unlink()
    with pytest.raises(ReleaseError, match="not a job wheel"):
        wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist")


def test_grafted_libraries_are_refused(tmp_path: Path) -> None:
    cells = _cells("linux_x86_64-t28_cpu")
    wheel = job_wheel(tmp_path, "a", cells, "manylinux_2_28_x86_64")
    assert repair.grafted_libraries(wheel) == []
    assert cisteps.check_repaired(wheel.parent) == [wheel]
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("torch_c_dlpack_ext.libs/libc10-1234abcd.so", b"copy of torch")
    assert repair.grafted_libraries(wheel) == ["torch_c_dlpack_ext.libs/libc10-1234abcd.so"]
    with pytest.raises(ReleaseError, match=r"grafted torch_c_dlpack_ext\.libs/libc10"):
        cisteps.check_repaired(wheel.parent)
    with pytest.raises(ReleaseError, match="grafted"):
        wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist")
    with pytest.raises(ReleaseError, match="no wheels"):
        cisteps.check_repaired(tmp_path / "libs")


def test_verify_refuses_unrepaired_linux_wheels(tmp_path: Path) -> None:
    cells = _cells("linux_x86_64-t28_cpu")
    job_wheel(tmp_path, "linux_x86_64-cuda", cells, "linux_x86_64")
    out = tmp_path / "dist"
    wheels.assemble_from_wheels(tmp_path / "cells", out)
    jobs = [{"id": "linux_x86_64-cuda", "cells": [cells[0].id]}]
    with pytest.raises(ReleaseError, match="plain linux_\\* tag, which PyPI refuses"):
        verify.verify(out, expect=jobs, install=False)


def test_arrived_jobs_reads_the_download_layout(tmp_path: Path) -> None:
    assert contents.arrived_jobs(tmp_path / "nothing-downloaded") == set()
    (tmp_path / "cell-a").mkdir()
    (tmp_path / "cell-a" / "x.whl").write_bytes(b"")
    (tmp_path / "cell-b").mkdir()  # an empty artifact folder: nothing arrived
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "y.whl").write_bytes(b"")
    assert contents.arrived_jobs(tmp_path) == {"a"}


def test_abi3_and_free_threaded_job_wheels_make_separate_combined_wheels(tmp_path: Path) -> None:
    abi3 = _cells("linux_x86_64-t29_cpu", "linux_x86_64-t29_cuda")
    free = _cells("linux_x86_64-t29_cpu-cp314t", "linux_x86_64-t29_cuda-cp314t")
    job_wheel(tmp_path, "linux_x86_64-cuda", abi3, "manylinux_2_28_x86_64")
    job_wheel(tmp_path, "linux_x86_64-cuda-cp314t", free, "manylinux_2_28_x86_64")
    out = tmp_path / "dist"
    made = wheels.assemble_from_wheels(tmp_path / "cells", out)
    names = sorted(p.name for p in made if p.suffix == ".whl")
    assert f"torch_c_dlpack_ext-{V}-cp39-abi3-manylinux_2_28_x86_64.whl" in names
    assert f"torch_c_dlpack_ext-{V}-cp314-cp314t-manylinux_2_28_x86_64.whl" in names
    assert f"torch_c_dlpack_ext-{V}-cp314-cp314t-manylinux_2_28_x86_64-t29.whl" in names
    jobs = [
        {"id": "linux_x86_64-cuda", "cells": [c.id for c in abi3], "allow_failure": ""},
        {"id": "linux_x86_64-cuda-cp314t", "cells": [c.id for c in free], "allow_failure": ""},
    ]
    infos = [distfiles.read_wheel(p) for p in sorted(out.glob("*.whl"))]
    statuses = contents.release_contents(load_matrix(), jobs, infos)
    assert [(s.cell, s.state) for s in statuses] == [(c.id, "present") for c in [*abi3, *free]]


def test_a_variant_wheel_counts_only_for_the_cells_of_its_torch_minor(tmp_path: Path) -> None:
    # The variant of torch 2.8 (t28) carries both backends' libraries: both cells are in
    # it. A 2.8 library in another minor's variant counts for nothing (the variant check
    # refuses such a wheel).
    cuda, cpu = _cells("linux_x86_64-t28_cuda", "linux_x86_64-t28_cpu")
    entries = tuple(flowjob.stand_in_library(c, tmp_path, elf=False)[0] for c in (cuda, cpu))
    name = f"torch_c_dlpack_ext-{V}-cp39-abi3-manylinux_2_28_x86_64"
    combined = distfiles.WheelInfo(
        path=tmp_path / f"{name}.whl", tags=frozenset(), variant=False, libraries=entries
    )

    def variant(label: str, *libraries: ManifestEntry) -> distfiles.WheelInfo:
        return distfiles.WheelInfo(
            path=tmp_path / f"{name}-{label}.whl",
            tags=frozenset(),
            variant=True,
            libraries=libraries,
            label=label,
        )

    jobs = [{"id": "linux_x86_64-cuda", "cells": [cuda.id, cpu.id]}]
    wheels_ = [combined, variant("t28", *entries)]
    statuses = {s.cell: s for s in contents.release_contents(load_matrix(), jobs, wheels_)}
    assert statuses[cuda.id].state == statuses[cpu.id].state == "present"
    wheels_ = [combined, variant("t28", entries[0]), variant("t29", entries[1])]
    statuses = {s.cell: s for s in contents.release_contents(load_matrix(), jobs, wheels_)}
    assert statuses[cuda.id].state == "present"
    assert statuses[cpu.id].state == "absent"
    assert statuses[cpu.id].reason == "no variant wheel holds it"


def test_check_repaired_with_the_jobs_cells(tmp_path: Path) -> None:
    # The cells job's post-build check: the wheels hold exactly TCDE_JOB_CELLS, each once.
    cells = _cells("linux_x86_64-t28_cpu", "linux_x86_64-t28_cuda")
    ids = [c.id for c in cells]
    wheel = job_wheel(tmp_path, "a", cells, "manylinux_2_28_x86_64")
    assert cisteps.check_repaired(wheel.parent, ids) == [wheel]
    assert cisteps.check_repaired(wheel.parent, ids[::-1]) == [wheel]
    with pytest.raises(ReleaseError, match="cells of the job missing: linux_x86_64-t26_cpu"):
        cisteps.check_repaired(wheel.parent, [*ids, "linux_x86_64-t26_cpu"])
    with pytest.raises(ReleaseError, match="cells the job does not build: linux_x86_64-t28_cuda"):
        cisteps.check_repaired(wheel.parent, ids[:1])
    # Two wheels in one wheelhouse holding one cell twice.
    second = job_wheel(tmp_path, "b", cells[:1], "manylinux_2_27_x86_64")
    second.rename(wheel.parent / second.name)
    with pytest.raises(ReleaseError, match="in more than one library: linux_x86_64-t28_cpu"):
        cisteps.check_repaired(wheel.parent, ids)


def test_check_repaired_allows_the_groups_portable_table_once(tmp_path: Path) -> None:
    """Issue 30: the group's first job also packs the portable table (its own cell id,
    not one of TCDE_JOB_CELLS): allowed beside the job's cells, never twice."""
    cells = _cells("linux_x86_64-t28_cpu")
    libs = tmp_path / "libs" / "a"
    pairs = [flowjob.stand_in_library(c, libs, elf=False) for c in cells]
    data = b"portable stand-in"
    (libs / "libtorch_c_dlpack_ext-portable.so").write_bytes(data)
    portable = pairs[0][0]._replace(
        file="libtorch_c_dlpack_ext-portable.so",
        torch="any",
        torch_build="any",
        backend=None,
        cxx11_abi=None,
        gpu_toolkit=None,
        size=len(data),
        sha256=sha256_of(libs / "libtorch_c_dlpack_ext-portable.so"),
        cell="linux_x86_64-portable",
    )
    pairs.append((portable, libs / portable.file))
    folder = tmp_path / "cells" / "cell-a"
    folder.mkdir(parents=True)
    wheel = assemble_wheel(
        folder, meta=project_metadata(ROOT), libraries=pairs, platform="manylinux_2_28_x86_64"
    )
    assert cisteps.check_repaired(folder, [cells[0].id]) == [wheel]
    # Job wheels carrying it merge into one combined wheel holding it once.
    made = wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "dist")
    (combined,) = [p for p in made if p.name.endswith("manylinux_2_28_x86_64.whl")]
    listed = [e.cell for e in distfiles.read_wheel(combined).libraries]
    assert sorted(str(c) for c in listed) == ["linux_x86_64-portable", "linux_x86_64-t28_cpu"]


def test_check_repaired_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from devtools.base import cli

    from _torch_c_dlpack_ext_core.errors import ConfigError

    cells = _cells("linux_x86_64-t28_cpu")
    wheel = job_wheel(tmp_path, "a", cells, "manylinux_2_28_x86_64")
    assert cli.main(["check-repaired", str(wheel.parent), "--cells", cells[0].id]) == 0
    assert "the job's 1 cell(s), each once" in capsys.readouterr().out
    assert cli.main(["check-repaired", str(wheel.parent)]) == 0
    # TCDE_JOB_CELLS unset in the job: refused, as the job's build refuses it.
    assert cli.main(["check-repaired", str(wheel.parent), "--cells", ""]) == ConfigError.exit_code
    failed = cli.main(["check-repaired", str(wheel.parent), "--cells", "linux_x86_64-t26_cpu"])
    assert failed == ReleaseError.exit_code
    assert "do not hold exactly its 1 cell(s)" in capsys.readouterr().err


def _assemble(tmp_path: Path, jobs: list[dict[str, Any]], *extra: str) -> int:
    from devtools.base import cli

    (tmp_path / "matrix.json").write_text(json.dumps({"include": jobs}), encoding="utf-8")
    argv = ["assemble", "--cells", str(tmp_path / "cells"), "--matrix"]
    argv += [str(tmp_path / "matrix.json"), "--dist", str(tmp_path / "dist")]
    argv += ["--variants", str(tmp_path / "variants"), "--notes", str(tmp_path / "notes")]
    return cli.main([*argv, *extra])


def test_the_assemble_jobs_one_call(
    cuda_and_rocm: tuple[Path, list[Cell]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cells = cuda_and_rocm
    summary = tmp_path / "summary.md"
    summary.write_text("an earlier step's summary\n", encoding="utf-8")
    # The fixture's job wheels carry no portable table (test_release_expects_the_portable_
    # table_in_one_combined_wheel covers that expectation): these jobs build none.
    jobs = [{**job, "portable": []} for job in MATRIX.jobs(MATRIX.select([c.id for c in cells]))]
    assert _assemble(tmp_path, jobs, "--summary", str(summary)) == 0
    notes = (tmp_path / "notes" / "NOTES.md").read_text(encoding="utf-8")
    assert f"{len(cells)} of {len(cells)} cells" in notes
    assert capsys.readouterr().out == notes
    assert summary.read_text(encoding="utf-8") == "an earlier step's summary\n" + notes
    data = json.loads((tmp_path / "notes" / "release-contents.json").read_text("utf-8"))
    assert data["present"] == data["expected"] == len(cells)
    # dist/ holds what PyPI takes (checked by twine); the variant wheels moved aside.
    left = distfiles.collect(tmp_path / "dist")
    assert not any(w.variant for w in left.wheels)
    assert left.variants_index is None
    assert len([w for w in left.wheels if not w.universal]) == 2
    moved = sorted(p.name for p in (tmp_path / "variants").iterdir())
    assert distfiles.variants_index_name() in moved
    minors = {(c.platform.name, c.python, c.torch.minor) for c in cells}  # one variant each
    assert len([n for n in moved if wheelnames.is_variant_name(n)]) == len(minors)


def test_the_assemble_job_reports_absent_cells_and_leaves_the_verdict_to_verify(
    cuda_and_rocm: tuple[Path, list[Cell]], tmp_path: Path
) -> None:
    _, cells = cuda_and_rocm
    jobs = MATRIX.jobs(MATRIX.select([*(c.id for c in cells), "linux_aarch64-t28_cpu"]))
    # The fixture's wheels carry no portable table; the aarch64 job, which uploaded
    # nothing, would have carried its group's, so it is absent too.
    jobs = [job if job["id"] == "linux_aarch64-cpu" else {**job, "portable": []} for job in jobs]
    assert _assemble(tmp_path, jobs) == 0
    notes = (tmp_path / "notes" / "NOTES.md").read_text(encoding="utf-8")
    assert f"{len(cells)} of {len(cells) + 2} cells" in notes
    assert "job linux_aarch64-cpu uploaded no wheels" in notes
    assert "`linux_aarch64-portable` | linux_aarch64-cpu | absent" in notes
    assert "2 of these block publishing" in notes


def test_release_expects_the_portable_table_in_one_combined_wheel(tmp_path: Path) -> None:
    """Issue 30: the job matrix names each group's portable table under its first job;
    the release holds it when exactly one combined wheel carries it (no variant wheel
    does), and it is absent, blocking publishing, otherwise."""
    from devtools.release.contents import release_contents
    from devtools.release.distfiles import WheelInfo

    (cell,) = _cells("linux_x86_64-t28_cpu")
    (job,) = MATRIX.jobs([cell])
    assert job["portable"] == ["linux_x86_64-portable"]
    (table,) = flowjob.job_portable_cells(MATRIX, job)
    native, _ = flowjob.stand_in_library(cell, tmp_path, elf=False)
    portable, _ = flowjob.stand_in_library(table, tmp_path, elf=False)
    assert (portable.torch, portable.backend, portable.cell) == ("any", None, table.id)

    def wheel(name: str, *libraries: Any, label: str | None = None) -> WheelInfo:
        return WheelInfo(tmp_path / name, frozenset(), label is not None, libraries, label)

    variant = wheel("v.whl", native, label=variants.variant_label(cell.torch.minor))
    with_table = release_contents(load_matrix(), [job], [wheel("c.whl", native, portable), variant])
    assert {s.cell: s.state for s in with_table} == {cell.id: "present", table.id: "present"}
    without = release_contents(load_matrix(), [job], [wheel("c.whl", native), variant])
    assert {s.cell: s.state for s in without} == {cell.id: "present", table.id: "absent"}
    (missing,) = [s for s in without if s.cell == table.id]
    assert missing.reason == "no combined wheel holds it"
    twice = release_contents(
        load_matrix(), [job], [wheel("c.whl", native, portable), wheel("d.whl", portable), variant]
    )
    assert {s.cell: s.state for s in twice}[table.id] == "duplicate"


def test_assemble_from_writes_the_variant_layout_nox_build_writes(tmp_path: Path) -> None:
    """Issue 44: ``--assemble-from`` (CI's job wheels) and ``nox -s build`` (the group
    folders) give the same variants: one per torch minor, the same libraries in each, the
    same variants file (only the platform tag differs: the jobs' repaired one)."""
    cells = _cells("linux_x86_64-t26_cpu_abi0", "linux_x86_64-t26_cuda_abi0",
                   "linux_x86_64-t28_cpu", "linux_x86_64-t28_cuda")  # fmt: skip
    job_wheel(tmp_path, "linux_x86_64-cuda", cells, "manylinux_2_28_x86_64")
    from_jobs = wheels.assemble_from_wheels(tmp_path / "cells", tmp_path / "from-jobs")
    group = tmp_path / "group"
    group.mkdir()
    entries = []
    for cell in cells:
        entry, path = flowjob.stand_in_library(cell, tmp_path / "again", elf=False)
        shutil.copyfile(path, group / entry.file)
        entries.append(entry)
    write_manifest(group / "manifest.json", entries)
    from_build = wheels.assemble_dist(
        {group: {e.file for e in entries}}, tmp_path / "from-build", matrix=MATRIX, repair=False
    )

    def variants_of(made: list[Path]) -> dict[str, list[str]]:
        return {
            p.name.rsplit("-", 1)[-1]: sorted(e["file"] for e in _manifest(p))
            for p in made
            if wheelnames.is_variant_name(p.name)
        }

    assert variants_of(from_jobs) == variants_of(from_build)
    assert sorted(variants_of(from_build)) == ["t26.whl", "t28.whl"]
    index = distfiles.variants_index_name()
    assert (tmp_path / "from-jobs" / index).read_bytes() == (
        tmp_path / "from-build" / index
    ).read_bytes()
