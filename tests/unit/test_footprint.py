"""The footprint report's measurements and tables (devtools.testkit.diskuse, .footprint, and
``pytest --footprint``), on small real folders: hard links counted once, the new entries
of a cache, a wheel's label, the sampled peak, the record's round trip and its Markdown."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from devtools.base.errors import ProvisionError
from devtools.testkit import diskuse, footprint, footprinttables
from tests.helpers import ROOT, devtools_env

BLOCK = 4096


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def test_a_hard_linked_file_is_counted_once_and_owned_by_neither(tmp_path: Path) -> None:
    cache = tmp_path / "uv" / "archive-v0" / "abc"
    wheel = _write(cache / "torch" / "lib" / "libtorch_cpu.so", 64 * BLOCK)
    env = tmp_path / "envs" / "py3.11-torch2.8.0-import"
    linked = env / "lib" / "torch" / "libtorch_cpu.so"
    linked.parent.mkdir(parents=True)
    os.link(wheel, linked)
    _write(env / "pyvenv.cfg", 100)
    counter = diskuse.InodeCounter()
    in_cache = counter.count(tmp_path / "uv")
    in_env = counter.count(env)
    assert in_cache >= 64 * BLOCK
    # The env adds its own small file and folders, not the linked library again.
    assert 0 < in_env < 64 * BLOCK
    assert diskuse.own_bytes(env) == in_env
    assert diskuse.InodeCounter().count(env) >= 64 * BLOCK


def test_new_entries_of_the_watched_folders(tmp_path: Path) -> None:
    folders = diskuse.watched_folders(tmp_path / "uv", tmp_path / "dev")
    before = diskuse.CacheEntries.now(folders)
    _write(tmp_path / "uv" / "archive-v0" / "w1" / "x.txt", 10)
    (tmp_path / "dev" / "envs" / "py3.11-torch2.2.2-import").mkdir(parents=True)
    (tmp_path / "dev" / "envs" / "py3.11-torch2.2.2-import.lock").touch()
    new = diskuse.CacheEntries.now(folders).new_since(before, folders)
    assert new["uv wheels"] == [tmp_path / "uv" / "archive-v0" / "w1"]
    assert new["torch envs"] == [tmp_path / "dev" / "envs" / "py3.11-torch2.2.2-import"]
    assert new["built CPythons"] == new["Debian roots"] == []


def test_a_wheel_is_named_by_its_dist_info_and_python_tag(tmp_path: Path) -> None:
    torch = tmp_path / "a"
    (torch / "torch-2.8.0.dist-info").mkdir(parents=True)
    (torch / "torch-2.8.0.dist-info" / "WHEEL").write_text(
        "Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_28_x86_64\n"
    )
    nvidia = tmp_path / "b"
    (nvidia / "nvidia_cublas_cu12-12.8.4.1.dist-info").mkdir(parents=True)
    (nvidia / "nvidia_cublas_cu12-12.8.4.1.dist-info" / "WHEEL").write_text(
        "Tag: py3-none-manylinux_2_27_x86_64\n"
    )
    (tmp_path / "c").mkdir()
    assert diskuse.wheel_label(torch) == "torch 2.8.0 cp311"
    assert diskuse.wheel_label(nvidia) == "nvidia-cublas-cu12 12.8.4.1"
    assert diskuse.wheel_label(tmp_path / "c") == "c"


def _sampled(sampler: diskuse.DiskSampler) -> None:
    """Wait until the sampler's own thread has sampled twice more (one may have begun
    before the caller's change)."""
    seen = sampler.samples
    deadline = time.monotonic() + 30
    while sampler.samples < seen + 2:
        assert time.monotonic() < deadline, "the sampler did not sample"
        time.sleep(0.01)


def test_the_sampler_keeps_the_peak_of_a_file_written_and_removed(tmp_path: Path) -> None:
    """The thread samples by itself: nothing here calls note() while the file exists."""
    sampler = diskuse.DiskSampler(tmp_path, interval_s=0.01)
    try:
        start = sampler.take_peak()
        big = _write(tmp_path / "big", 32 << 20)
        os.sync()
        _sampled(sampler)
        big.unlink()
        os.sync()
        # Other writers share this filesystem: the peak is at least ours.
        assert sampler.take_peak() - start >= 16 << 20
    finally:
        sampler.stop()


def _run() -> footprint.RunRecord:
    wheel = footprint.Wheel("torch 2.8.0 cp311", 3 << 30)
    nvidia = footprint.Wheel("nvidia-cudnn-cu12 9.10.2.21", 1 << 30)
    module = footprint.ModuleRecord(
        module="tests/integration/test_x.py",
        seconds=75.0,
        outcomes={"passed": 3, "skipped": 1},
        disk_added=4 << 30,
        disk_peak=5 << 30,
        cache_added=4 << 30,
        new_wheels=(wheel, nvidia),
        envs_made=("py3.11-torch2.8.0-import-xabc",),
        envs_used=("py3.11-torch2.8.0-import-xabc",),
    )
    small = footprint.ModuleRecord(
        "tests/unit/test_y.py", 1.0, {"passed": 9}, 0, 5 << 30, 0, (), (), ()
    )
    env = footprint.EnvRecord(
        name="py3.11-torch2.8.0-import-xabc",
        module="tests/integration/test_x.py",
        seconds=60.0,
        cuda="12.8",
        kind="importable",
        wheels=(wheel, nvidia),
        own=7 << 20,
    )
    return footprint.RunRecord(
        shard="main", python="3.11.7", platform="linux-x86_64", started="2026-12-04T10:00:00",
        seconds=300.0, one_filesystem=True, filesystem_size=20 << 30, disk_start=1 << 30,
        disk_peak=5 << 30, disk_end=4 << 30, areas={"uv cache": 4 << 30, "torch envs": 7 << 20},
        modules=(module, small), envs=(env,),
    )  # fmt: skip


def test_a_record_reads_back_as_written(tmp_path: Path) -> None:
    run = _run()
    footprint.write_run(tmp_path / "main.json", run)
    assert footprint.read_run(tmp_path / "main.json") == run
    skipped = dataclasses.replace(run, skips=(footprint.Skip("t::x", "why"),), job_seconds=9.5)
    footprint.write_run(tmp_path / "main.json", skipped)
    assert footprint.read_run(tmp_path / "main.json") == skipped


def test_a_job_that_skips_more_than_its_record_fails_listing_each_skip() -> None:
    record = dataclasses.replace(_run(), skips=(footprint.Skip("t.py::a", "no GPU"),))
    same = footprinttables.skip_report([record], [record])
    assert same == (
        True,
        "### Skips of `main`: 1, within the record's 1\n\n- `t.py::a`: no GPU\n",
    )
    more = _skipping(record, ("t.py::a", "no GPU"), ("t.py::b", "not root"))
    ok, report = footprinttables.skip_report([more], [record])
    assert not ok
    assert report.startswith("### Skips of `main`: 2, more than the record's 1")
    assert "- `t.py::b` **(new)**: not root" in report


def _skipping(
    run: footprint.RunRecord, *skips: tuple[str, str], **change: object
) -> footprint.RunRecord:
    """``run`` with these (test, reason) skips, in its outcomes too, and ``change``."""
    first = dataclasses.replace(run.modules[0], outcomes={"passed": 2, "skipped": len(skips)})
    listed = tuple(footprint.Skip(*skip) for skip in skips)
    return dataclasses.replace(run, **{"modules": (first, *run.modules[1:]), "skips": listed,
                                       **change})  # fmt: skip


#: The Debian-root test of the ``old`` shard, marked needs_root.
DEBIAN = "tests/integration/test_portable_real_torch.py::test_trixie_python3_torch"


def test_a_needs_root_test_the_runner_skipped_counts_as_run_where_the_sudo_step_ran() -> None:
    from tests.conftest import ROOT_ONLY

    # old.json: recorded as root before needs_root existed, every test run, 0 skips (and
    # no list of them: the record predates that too).
    record = _skipping(_run(), shard="old", as_root=True, skips=None)
    assert record.outcomes()["skipped"] == 0
    runner = _skipping(record, (DEBIAN, ROOT_ONLY), as_root=False)
    sudo = _skipping(record, root_step=True)
    ok, report = footprinttables.skip_report([runner, sudo], [record])
    assert ok, report
    assert report.startswith("### Skips of `old` + `old+root`: 0, within the record's 0")
    assert f"- `{DEBIAN}` (the sudo step ran it): {ROOT_ONLY}" in report
    # Without the sudo step nothing ran it: a lost test.
    assert footprinttables.skip_report([runner], [record])[0] is False
    # The sudo step skipping it, or the runner's step skipping another test, is a loss too.
    lost = _skipping(sudo, (DEBIAN, "no Debian root on this host: debootstrap failed"))
    assert footprinttables.skip_report([runner, lost], [record])[0] is False
    extra = _skipping(runner, (DEBIAN, ROOT_ONLY), ("t.py::gpu", "no GPU"))
    ok, report = footprinttables.skip_report([extra, sudo], [record])
    assert not ok
    assert report.startswith("### Skips of `old` + `old+root`: 1, more than the record's 0")
    assert "- `t.py::gpu`: no GPU" in report
    # Only the reason the needs_root marker gives is excused.
    mimic = _skipping(runner, (DEBIAN, "runs as root only"))
    assert footprinttables.skip_report([mimic, sudo], [record])[0] is False


def test_the_sudo_step_cannot_spend_the_skips_the_shards_root_record_allows_its_runner() -> None:
    # core.json: recorded as root, 1 skip (no GPU) in the whole shard.
    record = _skipping(_run(), ("t.py::gpu", "no GPU"), shard="core", as_root=True)
    runner = _skipping(record, ("t.py::gpu", "no GPU"), as_root=False)
    sudo = _skipping(record, root_step=True)
    assert footprinttables.skip_report([runner, sudo], [record])[0] is True
    # Judged alone, each step is within the shard's 1; together they lost a test.
    setpriv = _skipping(sudo, ("tests/unit/test_build_cache.py::t", "no setpriv"))
    ok, report = footprinttables.skip_report([runner, setpriv], [record])
    assert not ok
    assert report.startswith("### Skips of `core` + `core+root`: 2, more than the record's 1")
    # A runner's record with its +root one allows their skips added up.
    runner_record = dataclasses.replace(runner, as_root=False)
    root_record = _skipping(sudo, ("tests/unit/test_build_cache.py::t", "no setpriv"))
    assert footprinttables.skip_report([runner, setpriv], [runner_record, root_record])[0] is True


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema=1), "schema is not 2"),
        (lambda d: d["modules"][0].update(seconds="slow"), r"modules\[0\]\.seconds is not"),
        (lambda d: d["envs"][0].update(wheels={}), r"envs\[0\]\.wheels is not"),
        (lambda d: d.pop("one_filesystem"), "lacks one_filesystem"),
        (lambda d: d.update(one_filesystem=1), "one_filesystem is not of type bool"),
        (lambda d: d["modules"][0].update(disk_peak=True), r"disk_peak is not of type int"),
        (lambda d: d.update(surprise=1), "unknown keys surprise"),
        (lambda d: d.update(skips=[{"test": "x"}]), r"skips\[0\] lacks reason"),
    ],
)
def test_a_damaged_record_is_refused_naming_the_field(
    tmp_path: Path, edit: object, message: str
) -> None:
    footprint.write_run(tmp_path / "main.json", _run())
    data = json.loads((tmp_path / "main.json").read_text())
    edit(data)  # type: ignore[operator]
    (tmp_path / "main.json").write_text(json.dumps(data))
    with pytest.raises(ProvisionError, match=message):
        footprint.read_run(tmp_path / "main.json")


def test_the_tables_name_the_heavy_module_the_env_and_the_cuda_set() -> None:
    page = footprinttables.render_docs([_run()])
    assert (
        "| `main` | 12 passed, 1 skipped | 5.0 min |  | 6.0 of 20.0 | 5.0 | 4.0 | 4.0 | 0.0 "
        "| 2026-12-04, Python 3.11.7, as an unprivileged user |" in page
    )
    rehearsed = dataclasses.replace(_run(), job_seconds=480.0, as_root=True, root_step=True)
    assert "| `main+root` | 12 passed, 1 skipped | 5.0 min | 8.0 min | 6.0 of 20.0 " in (
        footprinttables.render_docs([rehearsed])
    )
    # The module table's peak column says whose peak it is.
    assert "| peak during the module, above the run's start (GiB) |" in page
    assert (
        "| `tests/integration/test_x.py` | 3 passed, 1 skipped | 1.2 min | 4.0 | 4.0 | 5.0 "
        "| `py3.11-torch2.8.0-import-xabc` |" in page
    )
    assert "| 1 other modules | 9 tests | 1 s | 0.0 | 0.0 |  |  |" in page
    assert "| 12.8 | 2.8.0 | nvidia-cudnn-cu12 9.10.2.21 | 1.0 |" in page
    assert "2 distinct wheels unpacked in uv's cache (4.0 GiB)" in page
    # The wheels, the env's own bytes (no nox venv or pip cache in this record).
    assert footprinttables.whole_suite([_run()]) == (4 << 30) + (7 << 20)
    assert "keeps about 4.0 GiB" in page
    summary = footprinttables.render_run(_run())
    assert summary.startswith("### Footprint of `main`")
    assert "disk peak 5.0 GiB above the start" in summary


def test_the_page_is_a_generated_section_of_the_one_mechanism() -> None:
    """docs/test-footprint.md's tables are a cog block (devtools.base.generated), so
    ``nox -s lint`` (``map --check``) fails when they drift from the records."""
    from devtools.base.generated import FILES

    assert "docs/test-footprint.md" in FILES
    page = (ROOT / "docs" / "test-footprint.md").read_text("utf-8")
    assert "cog.out(footprint_section())" in page
    assert footprinttables.footprint_section() in page


def test_the_committed_page_is_rendered_from_the_committed_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "footprint", "--check"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_pytest_writes_the_footprint_of_a_run(tmp_path: Path) -> None:
    """``--footprint`` on a real (tiny) run: each module once, in run order, with its
    outcomes; the areas measured at the end."""
    out = tmp_path / "fp.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--footprint", str(out),
         "tests/unit/test_naming.py", "tests/unit/test_version.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = footprint.read_run(out)
    assert [m.module for m in run.modules] == [
        "tests/unit/test_naming.py",
        "tests/unit/test_version.py",
    ]
    assert all(m.outcomes.get("passed") for m in run.modules)
    assert run.skips is not None
    assert len(run.skips) == run.outcomes().get("skipped", 0)
    assert run.as_root is (os.geteuid() == 0)
    assert run.root_step is False
    assert run.shard == "all"
    assert list(run.areas)[:2] == ["uv cache", "torch envs"]
    assert re.search(r"=+ footprint =+", proc.stdout), proc.stdout[-2000:]


def test_a_job_is_judged_by_its_shards_records(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match=r"no committed record .*main\.json for the main job"):
        footprint.job_records(tmp_path, "main")
    footprint.write_run(tmp_path / "main.json", _run())
    assert footprint.job_records(tmp_path, "main") == [_run()]
    root = dataclasses.replace(_run(), root_step=True, as_root=True)
    footprint.write_run(tmp_path / "main+root.json", root)
    assert footprint.job_records(tmp_path, "main") == [_run(), root]


def test_the_skip_check_judges_a_jobs_steps_together(tmp_path: Path) -> None:
    from tests.conftest import ROOT_ONLY

    records, done = tmp_path / "records", tmp_path / "done"
    records.mkdir()
    done.mkdir()
    record = _skipping(_run(), shard="old", as_root=True)
    footprint.write_run(records / "old.json", record)
    footprint.write_run(done / "old.json", _skipping(record, (DEBIAN, ROOT_ONLY), as_root=False))
    footprint.write_run(done / "old+root.json", _skipping(record, root_step=True))

    def skips(*runs: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "devtools", "footprint", "--results", str(records),
             "--skips", *(str(done / run) for run in runs)],
            cwd=ROOT, env=devtools_env(), capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip

    both = skips("old.json", "old+root.json")
    assert both.returncode == 0, both.stdout + both.stderr
    assert "`old` + `old+root`: 0, within the record's 0" in both.stdout
    alone = skips("old.json")
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert "`old`: 1, more than the record's 0" in alone.stdout
    # Steps of two jobs are not one job; a job without a committed record is refused.
    footprint.write_run(done / "core+root.json", _skipping(_run(), shard="core", root_step=True))
    mixed = skips("old.json", "core+root.json")
    assert mixed.returncode == 10, mixed.stdout + mixed.stderr
    assert "--skips: runs of one job's shard, not of core, old" in mixed.stderr
    unrecorded = skips("core+root.json")
    assert unrecorded.returncode == 12, unrecorded.stdout + unrecorded.stderr
    assert "no committed record" in unrecorded.stderr
    assert "for the core job: rehearse it" in unrecorded.stderr
