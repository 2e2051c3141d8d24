"""The suite's shards (tests/shards.py), ci.yml's matrix of test jobs and the measured
footprint of each shard (docs/footprint/<shard>.json) say the same thing: every test in
exactly one shard, every pattern still matching a test, one job per shard with the disk
and time it was measured to need, and the disk step wherever a standard runner's free
space is not enough."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from devtools.testkit.footprint import GIB, read_run
from tests.shards import QUICK, SHARDS, Shard, in_quick, shard_named, shard_of

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / ".github" / "workflows" / "ci.yml"
RESULTS = ROOT / "docs" / "footprint"
#: A standard ubuntu-24.04 runner leaves ~14 GB free (GitHub's figure: 13 GiB); a shard
#: that needs more than this frees disk first, so that 2 GiB stay spare either way.
FREE_DISK_ABOVE_GIB = 11
#: The guard asks for the measured peak plus this share (other Pythons' wheels, a newer
#: torch patch release, the runner's own files), and at most this many GiB more.
MARGIN = 0.1
SLACK_GIB = 4


def _jobs() -> list[dict[str, Any]]:
    workflow = yaml.safe_load(CI.read_text(encoding="utf-8"))
    include: list[dict[str, Any]] = workflow["jobs"]["tests"]["strategy"]["matrix"]["include"]
    return include


def _steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load(CI.read_text(encoding="utf-8"))
    steps: list[dict[str, Any]] = workflow["jobs"]["tests"]["steps"]
    return steps


@pytest.fixture(scope="module")
def collected() -> list[tuple[str, list[str]]]:
    """Every test id of the suite with its markers (``pytest --collect-only``)."""
    code = (
        "import json, sys, pytest\n"
        "class P:\n"
        "    items = []\n"
        "    def pytest_collection_finish(self, session):\n"
        "        P.items = [(i.nodeid, [m.name for m in i.iter_markers()])\n"
        "                   for i in session.items]\n"
        "rc = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider'], plugins=[P()])\n"
        "print(json.dumps(P.items))\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    items: list[tuple[str, list[str]]] = [
        (n, m) for n, m in json.loads(proc.stdout.strip().splitlines()[-1])
    ]
    return items


def test_every_pattern_of_every_shard_still_names_a_test(
    collected: list[tuple[str, list[str]]],
) -> None:
    stale = [
        (shard.name, pattern)
        for shard in (*SHARDS, QUICK)
        for pattern in shard.tests
        if not any(Shard("probe", "", (pattern,), ()).has_test(nodeid) for nodeid, _ in collected)
    ]
    assert stale == []


def test_the_shards_split_the_suite_and_quick_is_a_small_subset(
    collected: list[tuple[str, list[str]]],
) -> None:
    counts = {shard.name: 0 for shard in SHARDS}
    for nodeid, _ in collected:
        counts[shard_of(nodeid).name] += 1
    assert sum(counts.values()) == len(collected)
    assert all(counts.values()), counts
    quick = [nodeid for nodeid, markers in collected if in_quick(nodeid, markers)]
    outside = [n for n in quick if shard_of(n).name != "core"]
    # One real-torch round trip beyond core.
    assert len(outside) == 1, outside
    assert "[2.8.0" in outside[0]
    assert not any(
        "slow" in markers
        for nodeid, markers in collected
        if in_quick(nodeid, markers) and nodeid not in outside
    )


def test_core_may_use_no_torch_env_and_each_env_has_a_shard() -> None:
    core = shard_named("core")
    assert core.envs == ()
    assert not core.allows("py3.11-torch2.8.0-import-x68ac710f")
    assert shard_named("main").allows("py3.11-torch2.8.0-import-x68ac710f")
    assert shard_named("newer").allows("py3.11-torch2.15.0-build-x09e13993")
    assert not shard_named("old").allows("py3.11-torch2.8.0-import-x68ac710f")
    with pytest.raises(KeyError, match=r"no shard 'nope'; the shards: freethreaded, .*, quick"):
        shard_named("nope")


def test_ci_runs_one_job_per_shard_with_its_command() -> None:
    shards = [job["shard"] for job in _jobs()]
    assert sorted(shards) == sorted(s.name for s in SHARDS), "one job per shard"
    steps = _steps()
    names = [step.get("name", step.get("uses", "")) for step in steps]
    free = names.index("Free disk space")
    guard = names.index("Disk guard")
    (run,) = [s for s in steps if "nox -s tests" in str(s.get("run", ""))]
    assert free < guard < steps.index(run)
    assert steps[free]["if"] == "matrix.free-disk"
    assert "/usr/share/dotnet" in steps[free]["run"]
    assert "disk-guard.sh" in steps[guard]["run"]
    assert steps[guard]["env"]["NEEDED_GB"] == "${{ matrix.gib }}"
    assert re.search(r'uvx nox -s tests -- --shard "\$SHARD"', run["run"])
    assert run["env"]["SHARD"] == "${{ matrix.shard }}"


@pytest.mark.parametrize("job", _jobs(), ids=lambda job: str(job["shard"]))
def test_each_job_asks_for_the_disk_and_time_its_shard_was_measured_to_need(
    job: dict[str, Any],
) -> None:
    run = read_run(RESULTS / f"{job['shard']}.json")
    assert run.shard == job["shard"]
    assert run.one_filesystem, "measured where the caches were on another filesystem"
    assert run.outcomes().get("failed", 0) == run.outcomes().get("error", 0) == 0
    # The job's whole need: what the rehearsal's image held when the tests started (the
    # checkout, the test session's venv, the caches so far) and the tests' peak above it.
    need = (run.disk_start + run.disk_peak) / GIB
    assert math.ceil(need * (1 + MARGIN)) <= job["gib"] <= math.ceil(need) + SLACK_GIB, need
    assert job["free-disk"] is (job["gib"] > FREE_DISK_ABOVE_GIB)
    minutes = run.seconds / 60
    assert math.ceil(minutes * 1.5) <= job["minutes"] <= 90, minutes
    # The CPythons the shard's envs need are on the runner.
    pythons = str(job["pythons"]).split()
    assert pythons[-1] == "3.11", "the last is the default, nox's own"
    for env in run.envs:
        version = re.match(r"(?:tree-)?py(3\.\d+)-", env.name)
        if version:
            assert version.group(1) in pythons, (env.name, pythons)


def test_the_test_sessions_torch_is_the_cpu_build_on_the_runner() -> None:
    workflow = yaml.safe_load(CI.read_text(encoding="utf-8"))
    env = workflow["jobs"]["tests"]["env"]
    assert env["PIP_FIND_LINKS"] == "https://download.pytorch.org/whl/cpu/torch/"


def _collect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_shard_option_keeps_exactly_the_shards_tests(
    collected: list[tuple[str, list[str]]],
) -> None:
    proc = _collect("--shard", "newer")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    kept = [line for line in proc.stdout.splitlines() if "::" in line]
    assert kept == [n for n, _ in collected if shard_of(n).name == "newer"]
    wrong = _collect("--shard", "nope")
    assert wrong.returncode == 4
    assert "--shard: no shard 'nope'; the shards: freethreaded, abi3, old" in wrong.stderr


def test_the_guard_refuses_an_env_of_another_shard_before_it_is_made(tmp_path: Path) -> None:
    from tests.conftest import ShardGuard

    guard = ShardGuard(shard_named("old"))
    guard.envs = tmp_path / "envs"
    guard.current = "tests/integration/test_x.py::test_y"
    # Its own envs, and stand-ins outside the dev cache (unit tests' tmp_path), pass.
    guard.before(tmp_path / "envs" / "py3.11-torch2.2.2-import-x81b65af2")
    guard.before(tmp_path / "elsewhere" / "py3.11-torch2.8.0-import-x81b65af2")
    with pytest.raises(pytest.fail.Exception) as refused:
        guard.before(tmp_path / "envs" / "py3.11-torch2.8.0-import-x81b65af2")
    message = str(refused.value)
    assert message.startswith(
        "tests/integration/test_x.py::test_y uses the torch env "
        "py3.11-torch2.8.0-import-x81b65af2, which shard 'old' does not provide"
    )
    assert message.endswith("list the test under the shard that has it in tests/shards.py (main)")


def test_an_empty_shard_name_is_refused_not_read_as_every_test() -> None:
    proc = _collect("--shard", "")
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert "--shard: no shard ''; the shards: freethreaded, abi3, old" in proc.stderr


@pytest.mark.parametrize("case", ["empty", "folder", "under a file"])
def test_a_footprint_file_that_cannot_be_written_is_refused_before_any_test(
    tmp_path: Path, case: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    value, expected = {
        "empty": ("", "--footprint: an empty FILE"),
        "folder": (str(tmp_path), f"--footprint: {tmp_path} is a folder"),
        "under a file": (str(blocker / "run.json"), f"--footprint: cannot write {blocker}"),
    }[case]
    proc = _collect("tests/unit/test_cli.py", "--footprint", value)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert expected in proc.stderr, proc.stderr[-2000:]
    assert "test_cli.py::" not in proc.stdout
    assert blocker.read_text(encoding="utf-8") == ""
