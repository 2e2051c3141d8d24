"""The test suite's shards: groups of tests by the torch environments they need, so that each
group fits a CI runner's disk (ci.yml runs one job per shard) and a contributor can run
one group with one command: ``nox -s tests -- --shard NAME`` (``pytest --shard NAME``).

Each test belongs to the first shard whose patterns match its id, else to ``core``, which
needs no downloaded torch at all. A pattern is a test id where ``*`` matches anything and
no other character is special (a module path alone stands for all its tests); a shard
also lists the environments of ``devtools.envs.torchenv`` (directory names, ``*`` as
above) its tests may use. Under ``--shard`` the suite refuses, before anything is
downloaded, an environment the running test's shard does not list: a test in the wrong
shard fails at once, naming the shard that has its environment, instead of filling a
runner's disk. The shard travels to subprocesses too (``python -m devtools build``, the
rehearsals): ``--shard`` sets ``TCDE_SHARD``, which ``devtools.envs.torchenv`` obeys
before it downloads anything (``devtools.envs.shardcheck``).

This module is the one list of shard names: ci.yml's jobs, ``--shard``'s help,
``.ci/rehearse-shard`` and docs/test-footprint.md's tables take them from here (and
``tests/unit/test_ci_shards.py`` checks ci.yml against it).

``round-trip`` is no shard but the pull requests' one real-torch job: the round trip on
PyPI's torch 2.8.0 (also part of ``main``). ``quick`` is a subset for contributors:
``core``'s tests that are not marked ``slow``, and that round trip.

What each shard needs on disk and how long it takes is measured (docs/test-footprint.md,
``--footprint``); ci.yml's disk guards hold those numbers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

__all__ = [
    "CI_JOBS",
    "HEAVY_JOBS",
    "PULL_REQUEST_JOBS",
    "QUICK",
    "ROUND_TRIP",
    "SHARDS",
    "Shard",
    "in_quick",
    "selectable",
    "selects",
    "shard_named",
    "shard_of",
]

INTEGRATION = "tests/integration"


@dataclasses.dataclass(frozen=True)
class Shard:
    """A group of tests and the environments they may use, both as glob patterns."""

    name: str
    #: Test ids (``*`` matches anything; a module path stands for all its tests).
    test_patterns: tuple[str, ...]
    #: torch environment directory names its tests may use (``*`` matches anything).
    env_patterns: tuple[str, ...]
    #: Tests of the shard left out of it (``quick``: the slow ones), by marker.
    without_markers: tuple[str, ...] = ()
    #: Its CI job's CPythons (the default one, nox's, last) and the Debian packages its
    #: tests need, which the job installs with sudo (``.ci/matrix`` hands them to ci.yml).
    pythons: tuple[str, ...] = ("3.11",)
    apt: tuple[str, ...] = ()
    #: Whether it has tests marked ``needs_root`` (its CI job runs them with sudo).
    root_tests: bool = False

    def has_test(self, nodeid: str) -> bool:
        return any(_match(pattern, nodeid) for pattern in self.test_patterns)

    def allows(self, env_name: str) -> bool:
        return any(_glob(pattern).fullmatch(env_name) for pattern in self.env_patterns)


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def _match(pattern: str, nodeid: str) -> bool:
    if "::" not in pattern:
        pattern += "::*"
    return _glob(pattern).fullmatch(nodeid) is not None


def _in(module: str, *tests: str) -> tuple[str, ...]:
    return tuple(f"{INTEGRATION}/{module}::{test}" for test in tests)


#: In matching order; ``core`` (last) takes every test no other shard claims.
SHARDS: tuple[Shard, ...] = (
    # Free-threaded CPython 3.14t (built from Debian's sources) with torch 2.9.1's cp314t
    # wheel. The 3.13t cases run where the dev cache has a 3.13t CPython and torch env
    # (`python -m devtools freethreaded 3.13t`); the job provisions 3.14t only, so they
    # skip there, each skip in its record.
    Shard(
        "freethreaded",
        test_patterns=(
            f"{INTEGRATION}/test_freethreaded_build.py",
            f"{INTEGRATION}/test_portable_freethreaded.py",
            *_in("test_abi3_interpreters.py", "test_free_threaded_wheel_*"),
            *_in("test_portable_selection.py", "test_the_driver_builds_a_free_threaded_*"),
        ),
        env_patterns=("py3.1*t-torch*", "tree-py3.1*t-torch*"),
        # Building CPython from Debian's sources (devtools.envs.freethreaded).
        apt=(
            "debian-archive-keyring",
            "libssl-dev",
            "zlib1g-dev",
            "libffi-dev",
            "libbz2-dev",
            "liblzma-dev",
            "libsqlite3-dev",
            "libreadline-dev",
            "libncurses-dev",
            "uuid-dev",
        ),
    ),
    # The abi3 wheel on CPython 3.9, 3.10, 3.12, 3.13 with torch 2.4.1, 2.6.0, 2.8.0; the
    # wheel itself is built by ``python -m devtools build`` from header trees.
    Shard(
        "abi3",
        test_patterns=(
            *_in(
                "test_abi3_interpreters.py",
                "test_dist_holds_*",
                "test_pip_and_uv_pick_*",
                "test_abi3_wheel_*",
            ),
        ),
        env_patterns=(
            "py3.9-torch2.4.1-import-*",
            "py3.10-torch2.8.0-import-*",
            "py3.12-torch2.6.0-import-*",
            "py3.13-torch2.8.0-import-*",
            "tree-py3.11-torch2.4.1-*",
            "tree-py3.11-torch2.6.0-*",
            "tree-py3.11-torch2.8.0-*",
        ),
        pythons=("3.9", "3.10", "3.12", "3.13", "3.11"),
    ),
    # torch 2.2.2, 2.3.1 and 2.4.1 (CUDA 12.1 wheels), Debian's torch.
    Shard(
        "old",
        test_patterns=(
            *_in("test_portable_table.py", "*[2.2.2*", "*[2.4.1*"),
            *_in("test_portable_trust.py", "*[2.2.2*"),
            *_in("test_portable_vs_native.py", "*[2.4.1*"),
            *_in("test_compile_real_torch.py", "*[2.4.1*"),
            *_in("test_portable_selection.py", "test_torch_2_2_*"),
            *_in("test_no_cuda_at_import.py", "test_torch_below_the_matrix_*"),
            *_in("test_tvm_ffi_dropin.py", "*[portable-2.3*"),
            *_in("test_leak_loops.py", "*[2.2.2*"),
            *_in("test_portable_allocator_calls.py", "*[2.2.2*"),
            *_in("test_gilless_refusals.py", "*[portable-2.2.2*"),
            f"{INTEGRATION}/test_portable_real_torch.py",
        ),
        root_tests=True,  # Debian's torch in a debootstrap root
        env_patterns=(
            "py*-torch2.2.2-import-*",
            "py*-torch2.3.1-import-*",
            "py*-torch2.4.1-import-*",
        ),
    ),
    # torch 2.6.0, 2.8.0 and 2.9.1 (CUDA 12.4 and 12.8 wheels), wheels and release flows
    # (the rehearsal's subprocesses make header trees and an unsuffixed 2.8.0 env).
    Shard(
        "main",
        test_patterns=(
            *_in("test_portable_table.py", "*[2.8.0*", "*[2.9.1*", "test_cpu_exchanges_*"),
            *_in("test_portable_trust.py", "*[2.8.0*", "test_package_publishes_*"),
            *_in("test_portable_vs_native.py", "*[2.8.0*"),
            *_in(
                "test_compile_real_torch.py",
                "test_old_torch_*[2.6.0*",
                "test_old_torch_*[2.8.0*",
                "test_old_torch_*[2.9.1*",
                "test_cuda_variant_*",
            ),
            *_in("test_conformance_suite.py", "*_torch28", "*_on_older_torch*"),
            *_in(
                "test_faults.py", "test_library_for_other_*", "test_library_override_for_another_*"
            ),
            *_in("test_abi_audit.py", "*_on_old_torch_*", "*cxx11_*", "test_real_library_*"),
            *_in("test_portable_selection.py", "*_on_real_torch_2_8"),
            *_in("test_no_cuda_at_import.py", "test_cuda_torch_*", "test_cpu_library_*"),
            *_in(
                "test_tvm_ffi_dropin.py",
                "test_tvm_ffi_*",
                "test_broken_*",
                "test_a_table_*",
                "*[native-*",
                "*[portable-forced-*",
            ),
            "tests/conformance/test_import_totality.py::test_import_tvm_ffi_*",
            f"{INTEGRATION}/test_wheels.py",
            f"{INTEGRATION}/test_variants.py",
            f"{INTEGRATION}/test_sdist.py",
            f"{INTEGRATION}/test_readme_source_install.py",
            *_in("test_rehearse.py", "test_full_rehearsal"),
            *_in("test_dataflow.py", "test_real_cells_*"),
            *_in("test_leak_loops.py", "*[2.8.0*"),
            *_in("test_leak_loops.py", "*[2.9.1*"),
            *_in("test_portable_allocator_calls.py", "*[2.8.0*"),
            *_in("test_gilless_refusals.py", "*[portable-2.8.0*", "*[native-cuda-2.8.0*"),
            f"{INTEGRATION}/test_dispatch_zoo_native.py",
        ),
        env_patterns=(
            "py*-torch2.6.0-import-*",
            "py*-torch2.8.0-import-*",
            "py3.11-torch2.8.0-import",
            "py*-torch2.9.1-import-*",
            "tree-py3.11-torch2.6.0-*",
            "tree-py3.11-torch2.8.0-*",
        ),
    ),
    # torch 2.10-2.15 to compile against, and the GPU machine's twin (torch 2.11.0+cu130).
    Shard(
        "newer",
        test_patterns=(
            f"{INTEGRATION}/test_compile_newer_torch.py",
            "tests/gpu/test_cuda_torch_without_gpu.py",
            *_in("test_portable_table.py", "test_exchange_suite_on_the_cuda_torch_211"),
            *_in("test_gilless_refusals.py", "*[portable-2.11.0-cuda*"),
            *_in("test_portable_allocator_calls.py", "*[2.11.0-cuda*"),
        ),
        env_patterns=("py*-torch2.1*-build-*", "py3.12-torch2.11.0-import-*"),
        pythons=("3.12", "3.11"),
    ),
    # No downloaded torch (the test session's torch 2.13), but for the aarch64 cross
    # build's header tree (torch 2.4.1's headers, no libraries).
    Shard(
        "core",
        test_patterns=("*",),
        env_patterns=("tree-linux_aarch64-py3.11-torch2.4.1",),
        apt=("g++-aarch64-linux-gnu",),  # tests/integration/test_cross_aarch64.py
        root_tests=True,  # other uids (trust), mounts (a read-only source tree)
    ),
)

#: The pull requests' real-torch job: our library compiled against PyPI's torch 2.8.0,
#: imported there, and the exchange suite run on it (the test is ``main``'s too).
ROUND_TRIP = Shard(
    "round-trip",
    test_patterns=(*_in("test_compile_real_torch.py", "test_old_torch_*[2.8.0*"),),
    env_patterns=("py*-torch2.8.0-import-*",),
)

#: The contributors' subset (``nox -s quick``): core without its slow tests, and the
#: round trip.
QUICK = Shard(
    "quick",
    test_patterns=ROUND_TRIP.test_patterns,
    env_patterns=ROUND_TRIP.env_patterns,
    without_markers=("slow",),
)


#: CI's test jobs, the pull requests' first (every pull request runs them), then the
#: heavy shards (run on main, nightly, by hand, and on pull requests that touch what they
#: test): ci.yml's two matrices, in this order (tests/unit/test_ci_shards.py checks it).
PULL_REQUEST_JOBS: tuple[Shard, ...] = (SHARDS[-1], ROUND_TRIP)
HEAVY_JOBS: tuple[Shard, ...] = SHARDS[:-1]
CI_JOBS: tuple[Shard, ...] = (*PULL_REQUEST_JOBS, *HEAVY_JOBS)


def selectable() -> tuple[Shard, ...]:
    """What ``--shard`` takes: the shards, then :data:`ROUND_TRIP` and :data:`QUICK`."""
    return (*SHARDS, ROUND_TRIP, QUICK)


def shard_named(name: str) -> Shard:
    """The shard (or :data:`ROUND_TRIP`, :data:`QUICK`) called ``name``; ``KeyError``
    naming the choices."""
    for shard in selectable():
        if shard.name == name:
            return shard
    raise KeyError(f"no shard {name!r}; the shards: {', '.join(s.name for s in selectable())}")


def shard_of(nodeid: str) -> Shard:
    """The shard of test ``nodeid``: the first of :data:`SHARDS` whose patterns match."""
    return next(shard for shard in SHARDS if shard.has_test(nodeid))


def selects(shard: Shard, nodeid: str, markers: Iterable[str]) -> bool:
    """Whether ``--shard`` ``shard`` runs test ``nodeid`` (with ``markers``)."""
    if shard is QUICK:
        return in_quick(nodeid, markers)
    if shard is ROUND_TRIP:
        return shard.has_test(nodeid)
    return shard_of(nodeid) is shard


def in_quick(nodeid: str, markers: Iterable[str]) -> bool:
    """Whether test ``nodeid`` (with ``markers``) is in :data:`QUICK`."""
    if QUICK.has_test(nodeid):
        return True
    return shard_of(nodeid).name == "core" and not set(markers) & set(QUICK.without_markers)
