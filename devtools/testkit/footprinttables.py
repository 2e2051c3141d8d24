"""The test suite's footprint as Markdown, from its records
(:mod:`devtools.testkit.footprint`): docs/test-footprint.md's tables rendered from the
committed runs in the CI jobs' order (``python -m devtools footprint``), one run's table (a
CI job's summary), and the skip report that holds a CI job's skips to its committed
records."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from devtools.base.errors import ProvisionError
from devtools.base.paths import ROOT
from devtools.testkit.footprint import (
    RECORDS,
    EnvRecord,
    ModuleRecord,
    RunRecord,
    Skip,
    gib,
    read_runs,
)

__all__ = [
    "ROOT_ONLY_REASON",
    "footprint_section",
    "render_docs",
    "render_run",
    "shard_order",
    "skip_report",
    "whole_suite",
]

#: The one list of shards (devtools does not import the test package: the file is read).
SHARDS_FILE = ROOT / "tests" / "shards.py"
#: Modules below both thresholds are summed in one row per shard.
SHOWN_SECONDS = 10.0
SHOWN_BYTES = 50 << 20
#: How a skip of a test marked ``needs_root`` for anyone but root begins (tests/conftest.py's
#: ``ROOT_ONLY``): CI's sudo step runs those tests.
ROOT_ONLY_REASON = "needs_root: runs as root only"


def _excused(skip: Skip, run: RunRecord, runs: Sequence[RunRecord]) -> bool:
    """Whether ``skip`` of ``run`` is the runner's step skipping a needs_root test for
    needing root (:data:`ROOT_ONLY_REASON`) where ``runs`` (a job's steps) include the
    sudo step, which runs exactly those tests (``-m needs_root``) and counts its own skips."""
    return (
        not run.root_step
        and skip.reason.startswith(ROOT_ONLY_REASON)
        and any(other.root_step for other in runs)
    )


def _counted_skips(runs: Sequence[RunRecord]) -> int:
    """The tests ``runs`` (a job's steps) skipped together, the excused skips left out."""
    return sum(
        run.outcomes().get("skipped", 0)
        - sum(_excused(skip, run, runs) for skip in run.skips or ())
        for run in runs
    )


def skip_report(runs: Sequence[RunRecord], records: Sequence[RunRecord]) -> tuple[bool, str]:
    """Whether a CI job's steps (``runs``: the runner's, and its sudo step's) skipped no
    more tests together than its committed ``records`` (:func:`job_records`), and Markdown
    listing each of their skips with its reason (the job's summary); the skips no record
    has are marked new. Judged together, the sudo step cannot spend the skips that the
    whole shard's record allows the runner's step, and the reverse."""
    skipped, allowed = _counted_skips(runs), _counted_skips(records)
    known = {skip.test for record in records for skip in record.skips or ()}
    unlisted = any(record.skips is None for record in records)
    ok = skipped <= allowed
    verdict = "within" if ok else "more than"
    names = " + ".join(f"`{run.name}`" for run in runs)
    lines = [f"### Skips of {names}: {skipped}, {verdict} the record's {allowed}", ""]
    for run in runs:
        for skip in run.skips or ():
            if _excused(skip, run, runs):
                note = " (the sudo step ran it)"
            else:
                note = "" if unlisted or skip.test in known else " **(new)**"
            lines.append(f"- `{skip.test}`{note}: {skip.reason}")
        if run.skips is None:
            lines.append(f"- (`{run.name}` did not record its skips)")
    return ok, "\n".join(lines) + "\n"


def shard_order(path: Path = SHARDS_FILE) -> tuple[str, ...]:
    """The CI jobs' shards in tests/shards.py's order (``CI_JOBS``)."""
    spec = importlib.util.spec_from_file_location("_tcde_shards", path)
    if spec is None or spec.loader is None:
        raise ProvisionError(f"cannot read the shards from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return tuple(shard.name for shard in module.CI_JOBS)


def footprint_section(records: Path = RECORDS) -> str:
    """docs/test-footprint.md's generated section (a cog block, devtools.base.generated):
    :func:`render_docs` of the committed runs, in the CI jobs' order."""
    return "\n" + render_docs(read_runs(records, shard_order())) + "\n"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _counts(outcomes: Mapping[str, int]) -> str:
    order = ("passed", "failed", "error", "skipped")
    return ", ".join(f"{outcomes[k]} {k}" for k in order if outcomes.get(k))


def _row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _module_row(m: ModuleRecord) -> str:
    made = ", ".join(f"`{e}`" for e in m.envs_made)
    sizes = [gib(m.cache_added), gib(m.disk_added), gib(m.disk_peak)]
    return _row([f"`{m.module}`", _counts(m.outcomes), _minutes(m.seconds), *sizes, made])


def _module_rows(run: RunRecord) -> list[str]:
    shown = [
        m
        for m in run.modules
        if m.seconds >= SHOWN_SECONDS or max(m.disk_added, m.cache_added) >= SHOWN_BYTES
    ]
    rows = [_module_row(m) for m in shown]
    rest = [m for m in run.modules if m not in shown]
    if rest:
        tests = sum(sum(m.outcomes.values()) for m in rest)
        seconds = sum(m.seconds for m in rest)
        added = [gib(sum(m.cache_added for m in rest)), gib(sum(m.disk_added for m in rest))]
        rows.append(_row([f"{len(rest)} other modules", f"{tests} tests", _minutes(seconds),
                          *added, "", ""]))  # fmt: skip
    return rows


MODULE_HEADER = [
    "| module | tests | time | cache added (GiB) | disk added (GiB) "
    "| peak during the module, above the run's start (GiB) | envs made |",
    "|---|---|---:|---:|---:|---:|---|",
]


def render_run(run: RunRecord) -> str:
    """One run as Markdown: the totals, then its modules (a CI job's summary)."""
    elsewhere = "" if run.one_filesystem else "; caches on other filesystems not counted"
    areas = ", ".join(f"{name} {gib(size)} GiB" for name, size in run.areas.items())
    lines = [
        f"### Footprint of `{run.name}`",
        "",
        f"{_counts(run.outcomes())} in {_minutes(run.seconds)}; disk peak "
        f"{gib(run.disk_peak)} GiB above the start, {gib(run.disk_end)} GiB at the end "
        f"(filesystem of {gib(run.filesystem_size)} GiB{elsewhere}). At the end: {areas}.",
        "",
        *MODULE_HEADER,
        *_module_rows(run),
    ]
    return "\n".join(lines) + "\n"


_CUDA_WHEEL = re.compile(r"^(nvidia-|cuda-|triton )")


def _distinct_wheels(runs: Sequence[RunRecord]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for run in runs:
        for module in run.modules:
            for wheel in module.new_wheels:
                sizes[wheel.label] = max(sizes.get(wheel.label, 0), wheel.size)
    return sizes


def _envs(runs: Sequence[RunRecord]) -> dict[str, tuple[EnvRecord, list[str], bool]]:
    """Each env of ``runs``: its first record, the shards that made it, and whether the
    test process made it (a subprocess's envs are seen afterwards, their wheels counted
    in their module's row)."""
    envs: dict[str, tuple[EnvRecord, list[str], bool]] = {}
    for run in runs:
        in_process = {name for module in run.modules for name in module.envs_used}
        for env in run.envs:
            if env.name in envs:
                envs[env.name][1].append(run.name)
            else:
                envs[env.name] = (env, [run.name], env.name in in_process)
    return envs


def _shard_row(run: RunRecord) -> str:
    used = f"{gib(run.disk_start + run.disk_peak)} of {gib(run.filesystem_size)}"
    sizes = [used, gib(run.disk_peak), gib(run.disk_end)]
    sizes += [gib(run.areas.get("uv cache", 0)), gib(run.areas.get("torch envs", 0))]
    job = "" if run.job_seconds is None else _minutes(run.job_seconds)
    user = "root" if run.as_root else "an unprivileged user"
    measured = f"{run.started[:10]}, Python {run.python}, as {user}"
    return _row([f"`{run.name}`", _counts(run.outcomes()), _minutes(run.seconds), job, *sizes,
                 measured])  # fmt: skip


def _env_row(env: EnvRecord, shards: Sequence[str], in_process: bool) -> str:
    seconds = "" if env.seconds is None else _minutes(env.seconds)
    added = gib(sum(w.size for w in env.wheels)) if in_process else "(made by a subprocess)"
    return _row([f"`{env.name}`", env.kind, env.cuda or "", f"`{env.module}`", seconds, added,
                 gib(env.own), ", ".join(shards)])  # fmt: skip


#: The areas every shard run fills anew (the test session's venv, pip's cache): a whole
#: run on one machine holds the largest of them once.
SHARED_AREAS = ("nox envs", "pip cache")
#: The area of the dev cache beyond the torch envs (built CPythons, Debian roots).
OTHER_DEV_CACHE = "dev cache (CPythons, Debian roots)"


def whole_suite(runs: Sequence[RunRecord]) -> int:
    """About what one run of every shard on one machine leaves on its disk: each distinct
    wheel and env once, each shard's CPythons and Debian roots, the test session's venv
    and pip's cache once."""
    envs = _envs(runs)
    total = sum(_distinct_wheels(runs).values()) + sum(env.own for env, _, _ in envs.values())
    total += sum(run.areas.get(OTHER_DEV_CACHE, 0) for run in runs)
    total += sum(max((run.areas.get(area, 0) for run in runs), default=0) for area in SHARED_AREAS)
    return total


def render_docs(runs: Sequence[RunRecord]) -> str:
    """docs/test-footprint.md's generated section, from the shard runs (in shard order)."""
    wheels = _distinct_wheels(runs)
    envs = _envs(runs)
    env_own = sum(env.own for env, _, _ in envs.values())
    lines = [
        "### Shards",
        "",
        "| job step | tests | pytest's time | whole job, setup included (rehearsed) "
        "| filesystem's peak (GiB used) | peak above the tests' start (GiB) "
        "| at the end (GiB) | uv cache (GiB) | torch envs (GiB) | measured |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *(_shard_row(run) for run in runs),
        "",
        f"All runs together: {len(wheels)} distinct wheels unpacked in uv's cache "
        f"({gib(sum(wheels.values()))} GiB), {len(envs)} torch environments with "
        f"{gib(env_own)} GiB of their own (beyond their hard links into uv's cache). One "
        f"machine that runs them all (`nox -s tests`) keeps about {gib(whole_suite(runs))} "
        "GiB: those, each shard's built CPythons and Debian roots, and the test session's "
        "venv and pip's cache once.",
        "",
        "### Torch environments",
        "",
        "| environment | kind | CUDA | made by | time | added to uv's cache (GiB) "
        "| own (GiB) | shards |",
        "|---|---|---|---|---:|---:|---:|---|",
        *(_env_row(*envs[name]) for name in sorted(envs)),
        "",
        "### NVIDIA and triton wheel sets",
        "",
        *_cuda_set_rows(runs),
    ]
    for run in runs:
        lines += ["", f"### `{run.name}`, module by module", "", *MODULE_HEADER]
        lines += _module_rows(run)
    return "\n".join(lines) + "\n"


def _cuda_set_rows(runs: Sequence[RunRecord]) -> list[str]:
    """Which CUDA wheels each CUDA version's importable envs pulled into uv's cache."""
    sets: dict[str, dict[str, int]] = {}
    torches: dict[str, set[str]] = {}
    for run in runs:
        for env in run.envs:
            if env.cuda is None or env.kind != "importable":
                continue
            torches.setdefault(env.cuda, set()).add(_torch_of(env.name))
            for wheel in env.wheels:
                if _CUDA_WHEEL.match(wheel.label):
                    sets.setdefault(env.cuda, {})[wheel.label] = wheel.size
    rows = ["| CUDA | torch releases (importable) | wheels | GiB |", "|---|---|---|---:|"]
    for cuda in sorted(sets, key=lambda v: tuple(int(p) for p in v.split("."))):
        names = ", ".join(sorted(sets[cuda]))
        size = gib(sum(sets[cuda].values()))
        rows.append(_row([cuda, ", ".join(sorted(torches[cuda])), names, size]))
    return rows


def _torch_of(env_name: str) -> str:
    match = re.search(r"torch(\d+\.\d+\.\d+)", env_name)
    return match.group(1) if match else env_name
