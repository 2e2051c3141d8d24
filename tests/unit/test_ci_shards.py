"""The suite's shards (tests/shards.py), ci.yml and the committed records of each job
(docs/footprint/) say the same thing, checked by meaning:

- every shard pattern selects a test in its own shard (a pattern shadowed by an earlier
  shard fails), and no test is claimed by two shards other than ``core``;
- ci.yml's test jobs are generated from tests/shards.py and the records (.ci/matrix):
  each asks for the disk and time its record was measured to need, frees disk first
  where a runner has too little, runs its root-needing tests with sudo, and checks its
  skips against its record;
- a pull request runs only the cheap jobs unless it touches what the heavy ones test
  (.ci/heavy-needed), and one aggregate check is red exactly when a needed job failed.

Each property is a function run on the real shards here and, on a seeded defect, shown
to fail (``test_*_catches_*``)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml
from devtools.testkit.footprint import GIB, RunRecord, read_run
from tests.shards import (
    CI_JOBS,
    HEAVY_JOBS,
    PULL_REQUEST_JOBS,
    QUICK,
    ROUND_TRIP,
    SHARDS,
    Shard,
    in_quick,
    selectable,
    shard_named,
    shard_of,
)

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / ".github" / "workflows" / "ci.yml"
RESULTS = ROOT / "docs" / "footprint"


def _load_script(path: Path) -> ModuleType:
    """A Python script without the ``.py`` suffix (``.ci/matrix``), as a module."""
    loader = importlib.machinery.SourceFileLoader(f"_tcde_{path.name}", str(path))
    module = ModuleType(loader.name)
    module.__file__ = str(path)
    loader.exec_module(module)
    return module


#: .ci/matrix's rules.
MATRIX = _load_script(ROOT / ".ci" / "matrix")

Collected = list[tuple[str, list[str]]]


def _workflow() -> dict[str, Any]:
    workflow: dict[str, Any] = yaml.safe_load(CI.read_text(encoding="utf-8"))
    return workflow


def _matrix(*args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "matrix"), *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    key, _, value = proc.stdout.strip().partition("=")
    assert key == "matrix", proc.stdout
    include: list[dict[str, Any]] = json.loads(value)["include"]
    return include


@pytest.fixture(scope="module")
def collected() -> Collected:
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
    items: Collected = [(n, m) for n, m in json.loads(proc.stdout.strip().splitlines()[-1])]
    return items


# -- the properties --------------------------------------------------------------------


def _first(shards: Sequence[Shard], nodeid: str) -> Shard | None:
    return next((shard for shard in shards if shard.has_test(nodeid)), None)


def idle_patterns(shards: Sequence[Shard], nodeids: Sequence[str]) -> list[tuple[str, str]]:
    """(shard, pattern) of each pattern that selects no test in its own shard: one that
    names no test, or whose tests an earlier shard claims (shadowed)."""
    idle = []
    for shard in shards:
        for pattern in shard.test_patterns:
            probe = Shard("probe", (pattern,), ())
            if not any(probe.has_test(n) and _first(shards, n) is shard for n in nodeids):
                idle.append((shard.name, pattern))
    return idle


def claimed_twice(shards: Sequence[Shard], nodeids: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Each test that two or more shards other than ``core`` match, with those shards."""
    twice = []
    for nodeid in nodeids:
        having = [s.name for s in shards if s.name != "core" and s.has_test(nodeid)]
        if len(having) > 1:
            twice.append((nodeid, having))
    return twice


def test_each_shard_pattern_selects_a_test_in_its_own_shard(collected: Collected) -> None:
    nodeids = [n for n, _ in collected]
    assert idle_patterns(SHARDS, nodeids) == []
    # The pull requests' round trip is no shard: its pattern names a test of `main`.
    assert [n for n in nodeids if ROUND_TRIP.has_test(n)], ROUND_TRIP.test_patterns


def test_no_test_is_claimed_by_two_shards_besides_core(collected: Collected) -> None:
    assert claimed_twice(SHARDS, [n for n, _ in collected]) == []


def test_the_properties_catch_a_shadowed_pattern_and_a_test_claimed_twice() -> None:
    nodeids = ["tests/integration/test_a.py::test_x", "tests/unit/test_b.py::test_y"]
    first = Shard("first", ("tests/integration/test_a.py",), ())
    shadowed = Shard("second", ("tests/integration/test_a.py::test_*",), ())
    core = Shard("core", ("*",), ())
    # The seeded defects: a pattern wholly shadowed by an earlier shard, a pattern that
    # names nothing, and so one test in two shards.
    assert idle_patterns((first, shadowed, core), nodeids) == [
        ("second", "tests/integration/test_a.py::test_*")
    ]
    stale = Shard("first", ("tests/integration/test_gone.py",), ())
    assert idle_patterns((stale, core), nodeids) == [("first", "tests/integration/test_gone.py")]
    assert claimed_twice((first, shadowed, core), nodeids) == [
        ("tests/integration/test_a.py::test_x", ["first", "second"])
    ]
    assert idle_patterns((first, core), nodeids) == claimed_twice((first, core), nodeids) == []


def test_quick_is_core_without_slow_tests_and_the_round_trip(collected: Collected) -> None:
    quick = [nodeid for nodeid, markers in collected if in_quick(nodeid, markers)]
    outside = [n for n in quick if shard_of(n).name != "core"]
    assert outside == [n for n, _ in collected if ROUND_TRIP.has_test(n)]
    assert len(outside) == 1, outside
    slow_in_core = {n for n, m in collected if "slow" in m and shard_of(n).name == "core"}
    assert slow_in_core, "core has slow tests, which quick leaves out"
    assert not slow_in_core & set(quick)
    assert QUICK.test_patterns == ROUND_TRIP.test_patterns


# -- the environments -------------------------------------------------------------------


def _records() -> list[tuple[Path, RunRecord]]:
    return [(path, read_run(path)) for path in sorted(RESULTS.glob("*.json"))]


def test_every_env_in_every_committed_record_is_allowed_by_its_shard() -> None:
    outside = [
        (path.name, env.name)
        for path, run in _records()
        for env in run.envs
        if not shard_named(run.shard).allows(env.name)
    ]
    assert outside == []


def test_a_records_env_outside_its_shard_is_caught() -> None:
    # The seeded defect: `old` recording an env of `main`'s.
    assert not shard_named("old").allows("py3.11-torch2.8.0-import-x68ac710f")
    assert shard_named("main").allows("py3.11-torch2.8.0-import-x68ac710f")
    assert shard_named("newer").allows("py3.11-torch2.15.0-build-x09e13993")
    assert not shard_named("core").allows("py3.11-torch2.8.0-import-x68ac710f")
    with pytest.raises(KeyError, match=r"no shard 'nope'; the shards: freethreaded, .*, quick"):
        shard_named("nope")


# -- ci.yml and its matrix ----------------------------------------------------------------


def test_the_matrix_is_the_shards_ci_jobs_pull_requests_first() -> None:
    workflow = _workflow()
    tests = workflow["jobs"]["tests"]
    assert tests["strategy"]["matrix"] == "${{ fromJSON(needs.scope.outputs.matrix) }}"
    scope = " ".join(str(s.get("run", "")) for s in workflow["jobs"]["scope"]["steps"])
    assert ".ci/heavy-needed" in scope
    assert "python3 .ci/matrix --pull-request-only" in scope
    assert [job["shard"] for job in _matrix()] == [s.name for s in CI_JOBS]
    assert [job["shard"] for job in _matrix("--pull-request-only")] == [
        s.name for s in PULL_REQUEST_JOBS
    ]
    assert {s.name for s in HEAVY_JOBS} == {s.name for s in SHARDS} - {"core"}
    assert set(CI_JOBS) <= set(selectable())


@pytest.mark.parametrize("name", [shard.name for shard in CI_JOBS])
def test_each_job_asks_for_the_disk_and_time_its_record_was_measured_to_need(name: str) -> None:
    shard = shard_named(name)
    paths = (RESULTS / f"{shard.name}.json", RESULTS / f"{shard.name}+root.json")
    runs = [read_run(p) for p in paths if p.is_file()]
    assert runs, f"no committed record of {shard.name}: rehearse it (.ci/rehearse-shard)"
    (job,) = [job for job in _matrix() if job["shard"] == name]
    for run in runs:
        assert run.shard == shard.name
        assert run.one_filesystem, "measured where the caches were on another filesystem"
        assert run.outcomes().get("failed", 0) == run.outcomes().get("error", 0) == 0
    # The job's whole need: what the rehearsal's image held at the tests' peak.
    need = max(run.disk_start + run.disk_peak for run in runs) / GIB
    assert job["gib"] >= need * (1 + MATRIX.MARGIN), need
    assert job["free-disk"] is (job["gib"] > MATRIX.FREE_DISK_ABOVE_GIB)
    whole = runs[0].job_seconds
    least = whole if whole is not None else sum(r.seconds for r in runs)
    assert job["minutes"] * 60 >= least * MATRIX.TIME_FACTOR
    assert job["minutes"] <= 90
    # The CPythons the shard's envs need are on the runner; the default is nox's, last.
    pythons = str(job["pythons"]).split()
    assert pythons[-1] == "3.11"
    for run in runs:
        for env in run.envs:
            version = re.match(r"(?:tree-)?py(3\.\d+)-", env.name)
            if version:
                assert version.group(1) in pythons, (env.name, pythons)


def test_the_root_tests_flag_is_whether_the_shard_has_tests_that_need_root(
    collected: Collected,
) -> None:
    having = {shard_of(n).name for n, markers in collected if "needs_root" in markers}
    assert {s.name for s in SHARDS if s.root_tests} == having
    assert {job["shard"] for job in _matrix() if job["root-tests"]} == having


def test_the_freethreaded_job_installs_what_building_cpython_needs() -> None:
    from devtools.envs.freethreaded import BUILD_DEPENDENCIES

    (job,) = [j for j in _matrix() if j["shard"] == "freethreaded"]
    assert set(BUILD_DEPENDENCIES.values()) | {"debian-archive-keyring"} <= set(job["apt"].split())


def _step(steps: list[dict[str, Any]], predicate: Any) -> int:
    (index,) = [i for i, step in enumerate(steps) if predicate(step)]
    return index


def test_each_test_job_frees_disk_before_its_guard_and_runs_root_tests_with_sudo() -> None:
    steps: list[dict[str, Any]] = _workflow()["jobs"]["tests"]["steps"]

    def run(step: dict[str, Any]) -> str:
        return str(step.get("run", ""))

    free = _step(steps, lambda s: "rm -rf /usr/share/dotnet" in run(s))
    guard = _step(steps, lambda s: "disk-guard.sh" in run(s))
    tests = _step(steps, lambda s: "nox -s tests" in run(s))
    root = _step(steps, lambda s: "-m needs_root" in run(s))
    summary = _step(steps, lambda s: ".ci/job-summary" in run(s))
    assert free < guard < tests < root < summary
    assert steps[free]["if"] == "matrix.free-disk"
    assert steps[guard]["env"]["NEEDED_GIB"] == "${{ matrix.gib }}"
    assert '"$NEEDED_GIB"' in run(steps[guard])
    assert re.search(r'--shard "\$SHARD" -m "not needs_root"', run(steps[tests]))
    assert "sudo" not in run(steps[tests])
    assert run(steps[root]).startswith("sudo ")
    assert "matrix.root-tests" in steps[root]["if"]
    assert '--shard "$SHARD"' in run(steps[root])
    assert _workflow()["jobs"]["tests"]["env"]["SHARD"] == "${{ matrix.shard }}"
    assert _workflow()["jobs"]["tests"]["timeout-minutes"] == "${{ matrix.minutes }}"
    # Only these steps use sudo (the rehearsal lets only them): freeing disk, installing
    # packages, the root-needing tests.
    using = [i for i, step in enumerate(steps) if re.search(r"(^|\s)sudo\s", run(step))]
    packages = _step(steps, lambda s: "apt-get install" in run(s))
    assert using == sorted([free, packages, root])
    assert steps[packages]["if"] == "matrix.apt != ''"


def test_nox_is_pinned_exactly_where_ci_runs_it() -> None:
    constraints = (ROOT / ".ci" / "nox-constraints.txt").read_text(encoding="utf-8")
    pins = [line for line in constraints.splitlines() if line and not line.startswith("#")]
    assert pins
    assert all(re.fullmatch(r"[a-z0-9-]+==[0-9][0-9.]*", pin) for pin in pins), pins
    assert any(pin.startswith("nox==") for pin in pins)
    jobs = _workflow()["jobs"]
    runs = [str(s.get("run", "")) for job in jobs.values() for s in job.get("steps", [])]
    nox = [r for r in runs if "nox " in r]
    assert nox
    assert all("uvx --constraints .ci/nox-constraints.txt nox" in r for r in nox), nox
    assert "-c .ci/nox-constraints.txt" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_only_pull_requests_cancel_their_runs_and_every_job_has_a_limit() -> None:
    workflow = _workflow()
    assert workflow["concurrency"]["cancel-in-progress"] == (
        "${{ github.event_name == 'pull_request' }}"
    )
    on = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert set(on) == {"push", "pull_request", "schedule", "workflow_dispatch"}
    assert "labeled" in on["pull_request"]["types"]
    assert all("timeout-minutes" in job for job in workflow["jobs"].values())


# -- the aggregate check ---------------------------------------------------------------------


def _aggregate(results: dict[str, str]) -> int:
    job = _workflow()["jobs"]["ci-ok"]
    (step,) = job["steps"]
    needs = json.dumps({name: {"result": result} for name, result in results.items()})
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]], env={**os.environ, "NEEDS": needs},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc.returncode


@pytest.mark.skipif(shutil.which("jq") is None, reason="the aggregate check runs jq (on runners)")
def test_the_aggregate_check_is_red_exactly_when_a_needed_job_failed_or_was_cancelled() -> None:
    job = _workflow()["jobs"]["ci-ok"]
    assert set(job["needs"]) == set(_workflow()["jobs"]) - {"ci-ok"}
    assert job["if"] == "always()"
    ok = {"lint": "success", "scope": "success", "tests": "success"}
    assert _aggregate(ok) == 0
    assert _aggregate({**ok, "tests": "skipped"}) == 0
    assert _aggregate({**ok, "tests": "failure"}) != 0
    assert _aggregate({**ok, "lint": "cancelled"}) != 0
    assert _aggregate({**ok, "scope": "failure", "tests": "skipped"}) != 0


# -- which runs need the heavy shards ----------------------------------------------------


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A repository with a base commit and three heads: docs only, csrc/, tests/."""
    repo = tmp_path_factory.mktemp("history")

    def git(*args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
        return subprocess.run(
            ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    (repo / "README.md").write_text("a\n")
    git("add", "."), git("commit", "-qm", "base")
    commits = {"base": git("rev-parse", "HEAD")}
    for name, path in (("docs", "docs/x.md"), ("csrc", "csrc/x.cc"), ("tests", "tests/x.py")):
        git("checkout", "-q", commits["base"])
        (repo / path).parent.mkdir(exist_ok=True)
        (repo / path).write_text(name)
        git("add", "."), git("commit", "-qm", name)
        commits[name] = git("rev-parse", "HEAD")
    commits["repo"] = str(repo)
    return commits


def _heavy(history: dict[str, str], **env: str) -> str:
    repo = Path(history["repo"])
    ci = repo / ".ci"
    if not ci.exists():
        shutil.copytree(ROOT / ".ci", ci)
    proc = subprocess.run(
        ["bash", str(ci / "heavy-needed")], env={**os.environ, **env}, cwd=repo,
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return proc.stdout.strip()


def test_a_docs_only_pull_request_runs_only_the_cheap_jobs(history: dict[str, str]) -> None:
    pr = {"EVENT": "pull_request", "BASE": history["base"], "LABELS": ""}
    assert _heavy(history, **pr, HEAD=history["docs"]) == "heavy=false"
    assert _heavy(history, **pr, HEAD=history["csrc"]) == "heavy=true"
    assert _heavy(history, **pr, HEAD=history["tests"]) == "heavy=true"
    assert _heavy(history, **{**pr, "LABELS": "docs full-ci"}, HEAD=history["docs"]) == (
        "heavy=true"
    )
    for event in ("push", "schedule", "workflow_dispatch"):
        assert _heavy(history, EVENT=event) == "heavy=true"


def test_the_heavy_paths_are_the_ones_the_heavy_shards_test() -> None:
    lines = (ROOT / ".ci" / "heavy-paths").read_text(encoding="utf-8").splitlines()
    prefixes = {line for line in lines if line and not line.startswith("#")}
    wanted = {"csrc/", "matrix.toml", "build_backend/", "devtools/envs/", "devtools/build/",
              "tests/"}  # fmt: skip
    assert wanted <= prefixes
    assert all((ROOT / p.rstrip("/")).exists() for p in prefixes), prefixes


# -- --shard, the guard, --footprint ----------------------------------------------------------


def _collect(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip


def test_shard_option_keeps_exactly_the_shards_tests(collected: Collected) -> None:
    proc = _collect("--shard", "newer")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    kept = [line for line in proc.stdout.splitlines() if "::" in line]
    assert kept == [n for n, _ in collected if shard_of(n).name == "newer"]
    proc = _collect("--shard", "round-trip")
    kept = [line for line in proc.stdout.splitlines() if "::" in line]
    assert kept == [n for n, _ in collected if ROUND_TRIP.has_test(n)]
    wrong = _collect("--shard", "nope")
    assert wrong.returncode == 4
    names = ", ".join(s.name for s in selectable())
    assert f"--shard: no shard 'nope'; the shards: {names}" in wrong.stderr


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


def test_the_tests_env_observer_tells_the_shard_guard_and_the_footprint_recorder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """conftest's ``env_observer`` (what the tests pass to torchenv) is the run's shard
    guard and footprint recorder: an env the shard lacks is refused, naming the test,
    before the recorder or uv hear of it; an env it has reaches both."""
    from devtools.base.hostenv import DEV_CACHE_VAR
    from devtools.envs import torchenv
    from tests.conftest import ShardGuard, env_watchers

    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))

    def create(path: Path, *args: object, **kwargs: object) -> dict[str, object]:
        path.mkdir()
        return {"seconds": 0.0}

    monkeypatch.setattr(torchenv, "_create", create)
    events: list[tuple[str, str]] = []

    class Recorder:
        def before(self, root: Path) -> None:
            events.append(("before", root.name))

        def after(self, root: Path, created: bool) -> None:
            events.append(("after", root.name))

    guard = ShardGuard(shard_named("old"))
    guard.envs = tmp_path / "envs"
    guard.current = "tests/integration/test_x.py::test_y"
    plugins = {"tcde-shard": guard, "tcde-footprint": Recorder(), "other": Recorder()}
    observer = env_watchers(SimpleNamespace(getplugin=plugins.get))
    with pytest.raises(pytest.fail.Exception, match=r"test_y uses the torch env py3\.11-torch2\.8"):
        torchenv.torch_env("2.8.0", kind=torchenv.EnvKind.NO_DEPS, python="3.11", observer=observer)
    assert events == []
    env = torchenv.torch_env(
        "2.2.2", kind=torchenv.EnvKind.IMPORTABLE, python="3.11", extra=["x"], observer=observer
    )
    assert events == [("before", env.root.name), ("after", env.root.name)]
    assert env.root.name.startswith("py3.11-torch2.2.2-import-")
    # Without either plugin (no --shard, no --footprint): an observer that does nothing.
    assert env_watchers(SimpleNamespace(getplugin=lambda name: None)) == torchenv.Observers(())


def test_a_subprocess_refuses_an_env_outside_the_shard_before_any_download(
    tmp_path: Path,
) -> None:
    """The shard travels in $TCDE_SHARD: ``python -m devtools torchenv`` (a subprocess, as
    ``python -m devtools build`` is) refuses an env of another shard and makes nothing."""
    from devtools.envs.shardcheck import SHARD_VARIABLE, shard_value

    old = shard_named("old")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "python"),
        "TCDE_DEV_CACHE": str(tmp_path),
        "UV_OFFLINE": "1",
        SHARD_VARIABLE: shard_value(old.name, tmp_path / "envs", old.env_patterns),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "devtools", "torchenv", "2.8.0", "--kind", "importable"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "is outside test shard 'old'" in proc.stderr, proc.stderr[-2000:]
    assert not any((tmp_path / "envs").glob("py3.11-torch2.8.0*/*"))


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder anyone may enter (pytest's own temp root is its owner's alone)."""
    where = Path(tempfile.mkdtemp(prefix="tcde-probe-"))
    where.chmod(0o755)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _probe(
    tmp_path: Path, body: str, *args: str, other_uid: bool = False
) -> subprocess.CompletedProcess[str]:
    """pytest with this suite's conftest on one test file in ``tmp_path`` (``other_uid``:
    as nobody, where this runs as root)."""
    test = tmp_path / "test_probe.py"
    test.write_text(f"import os\nimport pytest\n{body}", encoding="utf-8")
    test.chmod(0o644)
    prefix: list[str] = []
    if other_uid and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, running as another uid needs setpriv")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pytest", "-rs", "-s", "-p", "no:cacheprovider",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
         "--confcutdir", str(tmp_path), "-p", "tests.conftest", str(test),
         "--basetemp", str(tmp_path / "t"), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
             "TCDE_DEV_CACHE": str(tmp_path / "dev")},
    )  # fmt: skip


def test_the_shard_option_hands_the_shard_to_subprocesses(open_dir: Path) -> None:
    tmp_path = open_dir
    body = "def test_x():\n    print('TCDE_SHARD=' + os.environ['TCDE_SHARD'])\n"
    proc = _probe(tmp_path, body, "--shard", "core")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if "TCDE_SHARD=" in ln]
    value = json.loads(line.split("TCDE_SHARD=", 1)[1])
    assert value == {
        "shard": "core",
        "envs": str(tmp_path / "dev" / "envs"),
        "allowed": list(shard_named("core").env_patterns),
    }


def test_a_test_that_needs_root_is_skipped_for_anyone_else_saying_so(open_dir: Path) -> None:
    tmp_path = open_dir
    proc = _probe(tmp_path, "@pytest.mark.needs_root\ndef test_root():\n    pass\n",
                  other_uid=True)  # fmt: skip
    assert "1 skipped" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "needs_root: runs as root only" in proc.stdout
    # CI's sudo step selects exactly these.
    both = "@pytest.mark.needs_root\ndef test_root():\n    pass\ndef test_other():\n    pass\n"
    selected = _probe(tmp_path, both, "-m", "needs_root", "--collect-only")
    assert "1/2 tests collected (1 deselected)" in selected.stdout, selected.stdout[-2000:]


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


@pytest.mark.parametrize("value", ["", "main", "{}", '{"shard": 1, "envs": "/x", "allowed": []}'])
def test_a_malformed_shard_variable_is_a_config_error_naming_it(value: str) -> None:
    from devtools.envs.shardcheck import SHARD_VARIABLE, refuse_outside_shard

    from _torch_c_dlpack_ext_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\$TCDE_SHARD is not a test shard"):
        refuse_outside_shard(Path("/x/py3.11-torch2.8.0-import"), {SHARD_VARIABLE: value})
