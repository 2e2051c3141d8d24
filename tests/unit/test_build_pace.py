"""How fast ``nox -s build`` goes and says it goes: the ETA leaves one-time set-up out
(a free-threaded CPython compiled from source, a torch downloaded), ``--jobs`` defaults to
the cores the memory can feed, and ``--no-freethreaded`` leaves those cells out."""

from __future__ import annotations

from pathlib import Path

import pytest
from devtools.base import cli
from devtools.build import host as buildhost
from devtools.build.cellresults import CellResult, eta_seconds
from devtools.build.host import COMPILE_MEMORY_BYTES, available_memory, jobs_for
from devtools.commands.build import select_cells, without_freethreaded
from devtools.matrix.reader import load_matrix

GIB = 2**30


def _cell(status: str, seconds: float, setup: float = 0.0) -> CellResult:
    return CellResult(cell="c", status=status, seconds=seconds, setup_seconds=setup)


def test_the_eta_leaves_set_up_out() -> None:
    # The first free-threaded cell built its CPython: 1800 s of set-up, 10 s of compile.
    first = _cell("built", 1810.0, setup=1800.0)
    assert eta_seconds([first], remaining=20, jobs=1) == pytest.approx(200.0)
    # Counted as cell time (as before), 20 cells would have been ~10 hours.
    assert eta_seconds([first, _cell("built", 12.0)], remaining=19, jobs=1) == pytest.approx(
        11.0 * 19
    )


def test_the_eta_divides_over_the_jobs_that_can_run() -> None:
    done = [_cell("built", 10.0), _cell("cached", 2.0)]
    assert eta_seconds(done, remaining=8, jobs=4) == pytest.approx(6.0 * 8 / 4)
    # Fewer cells left than jobs: they run at once.
    assert eta_seconds(done, remaining=2, jobs=8) == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("finished", "remaining"),
    [([], 5), ([_cell("built", 10.0)], 0), ([_cell("skipped", 0.0)], 3)],
)
def test_no_eta_without_a_timed_cell_or_with_nothing_left(
    finished: list[CellResult], remaining: int
) -> None:
    assert eta_seconds(finished, remaining, jobs=2) == 0.0


def test_a_failed_provisioning_is_set_up_not_compile_time() -> None:
    assert eta_seconds([_cell("failed", 30.0, setup=30.0)], remaining=3, jobs=1) == 0.0


@pytest.mark.parametrize(
    ("cpus", "memory", "jobs"),
    [
        (16, 64 * GIB, 16),  # cores decide
        (16, 6 * GIB, 4),  # memory decides: 6 GiB / 1.5 GiB
        (2, 22 * GIB, 2),  # this machine
        (8, 1 * GIB, 1),  # never 0
        (4, None, 4),  # memory unknown: the cores
        (1, 64 * GIB, 1),
    ],
)
def test_default_jobs_is_the_cores_bounded_by_memory(
    cpus: int, memory: int | None, jobs: int
) -> None:
    assert COMPILE_MEMORY_BYTES == 1.5 * GIB
    assert jobs_for(cpus, memory) == jobs


def _meminfo(tmp_path: Path, available_kb: int) -> Path:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        f"MemTotal:       24000000 kB\nMemFree:         2000000 kB\n"
        f"MemAvailable:   {available_kb} kB\nBuffers:          100 kB\n",
        encoding="ascii",
    )
    return meminfo


def test_available_memory_reads_memavailable(tmp_path: Path) -> None:
    no_cgroup = tmp_path / "no-cgroup"
    assert available_memory(_meminfo(tmp_path, 22000000), no_cgroup) == 22000000 * 1024
    # Without the file (not Linux), sysconf's figure or None; never an exception.
    value = available_memory(tmp_path / "missing", no_cgroup)
    assert value is None or value > 0


@pytest.mark.parametrize(
    ("files", "room"),
    [
        ({"memory.max": "4294967296\n", "memory.current": "1073741824\n"}, 3 * GIB),  # v2
        ({"memory.max": "max\n", "memory.current": "1073741824\n"}, None),  # v2, no limit
        (
            {
                "memory/memory.limit_in_bytes": "2147483648\n",
                "memory/memory.usage_in_bytes": "536870912\n",
            },
            int(1.5 * GIB),
        ),  # v1
        ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1, no limit
    ],
)
def test_a_containers_memory_limit_bounds_what_is_available(
    tmp_path: Path, files: dict[str, str], room: int | None
) -> None:
    # A container sees the host's /proc/meminfo: its cgroup says what it may use.
    cgroup = tmp_path / "cgroup"
    for name, text in files.items():
        (cgroup / name).parent.mkdir(parents=True, exist_ok=True)
        (cgroup / name).write_text(text, encoding="ascii")
    host = 22000000 * 1024
    expected = host if room is None else room
    assert available_memory(_meminfo(tmp_path, 22000000), cgroup) == expected


def test_the_build_command_defaults_jobs_to_the_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(buildhost, "host_cpus", lambda: 6)
    monkeypatch.setattr(buildhost, "available_memory", lambda: 30 * GIB)
    seen: list[int] = []

    def fake_build_cells(cells: object, build_dir: Path, *, jobs: int, target: object) -> list:  # type: ignore[type-arg]
        seen.append(jobs)
        return []

    from devtools.build import cellbuild as build

    monkeypatch.setattr(build, "build_cells", fake_build_cells)
    # Nor the group's portable table (compiled for real otherwise, which would succeed).
    monkeypatch.setattr(build, "build_portable_cells", lambda *args, **kwargs: [])
    # No cell built: exit 13 after the build step, which got the default.
    assert cli.main(["build", "--cells", "linux_x86_64-t28_cpu", "--no-assemble",
                     "--report", str(tmp_path / "report.json")]) != 0  # fmt: skip
    assert seen == [6]
    assert "with --jobs 6" in capsys.readouterr().err


def test_no_freethreaded_leaves_those_cells_out() -> None:
    matrix = load_matrix()
    cells = select_cells(matrix, None, "linux_x86_64")
    assert any(cell.freethreaded for cell in cells)
    kept = without_freethreaded(cells)
    assert kept
    assert not any(cell.freethreaded for cell in kept)
    assert len(kept) == len([c for c in cells if not c.freethreaded])


def test_no_freethreaded_with_only_freethreaded_cells_is_a_config_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["build", "--cells", "*-cp314t", "--no-freethreaded", "--no-assemble"])
    assert code == 2
    assert "--no-freethreaded leaves none of the selected cells" in capsys.readouterr().err
