"""The test suite's shards: groups of tests by the torch environments they need, so that each
group fits a CI runner's disk (ci.yml runs one job per shard) and a contributor can run
one group with one command: ``nox -s tests -- --shard NAME`` (``pytest --shard NAME``).

Each test belongs to the first shard whose patterns match its id, else to ``core``, which
needs no downloaded torch at all. A pattern is a test id where ``*`` matches anything and
no other character is special (a module path alone stands for all its tests); a shard
also lists the environments of ``devtools.envs.torchenv`` (directory names, ``*`` as
above) its tests may use. Under
``--shard`` the suite refuses, before anything is downloaded, an environment the running
test's shard does not list: a test in the wrong shard fails at once, naming the shard
that has its environment, instead of filling a runner's disk.

``quick`` is no shard but a subset for contributors: ``core``'s tests that are not marked
``slow``, and one real-torch round trip (torch 2.8.0).

What each shard needs on disk and how long it takes is measured (docs/test-footprint.md,
``--footprint``); ci.yml's disk guards hold those numbers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

__all__ = ["QUICK", "SHARDS", "Shard", "in_quick", "shard_named", "shard_of"]

INTEGRATION = "tests/integration"


@dataclasses.dataclass(frozen=True)
class Shard:
    """A group of tests and the environments they may use."""

    name: str
    #: What its tests need, in a few words (ci.yml's job names repeat it).
    summary: str
    tests: tuple[str, ...]
    envs: tuple[str, ...]
    #: Tests of the shard left out of it (``quick``: the slow ones), by marker.
    without_markers: tuple[str, ...] = ()

    def has_test(self, nodeid: str) -> bool:
        return any(_match(pattern, nodeid) for pattern in self.tests)

    def allows(self, env_name: str) -> bool:
        return any(_glob(pattern).fullmatch(env_name) for pattern in self.envs)


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
    Shard(
        "freethreaded",
        "free-threaded CPython 3.14t and 3.13t (built from Debian's sources), torch 2.9.1 cp314t",
        tests=(
            f"{INTEGRATION}/test_freethreaded_build.py",
            f"{INTEGRATION}/test_portable_freethreaded.py",
            *_in("test_abi3_interpreters.py", "test_free_threaded_wheel_*"),
            *_in("test_portable_selection.py", "test_the_driver_builds_a_free_threaded_*"),
        ),
        envs=("py3.1*t-torch*", "tree-py3.1*t-torch*"),
    ),
    Shard(
        "abi3",
        "the abi3 wheel on CPython 3.9, 3.10, 3.12, 3.13 with torch 2.4.1, 2.6.0, 2.8.0",
        tests=(f"{INTEGRATION}/test_abi3_interpreters.py",),
        envs=(
            "py3.9-torch2.4.1-import-*",
            "py3.10-torch2.8.0-import-*",
            "py3.12-torch2.6.0-import-*",
            "py3.13-torch2.8.0-import-*",
        ),
    ),
    Shard(
        "old",
        "torch 2.2.2, 2.3.1 and 2.4.1 (CUDA 12.1 wheels), Debian's torch",
        tests=(
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
        envs=("py*-torch2.2.2-import-*", "py*-torch2.3.1-import-*", "py*-torch2.4.1-import-*"),
    ),
    Shard(
        "main",
        "torch 2.6.0, 2.8.0 and 2.9.1 (CUDA 12.4 and 12.8 wheels), wheels and release flows",
        tests=(
            *_in("test_portable_table.py", "*[2.8.0*", "*[2.9.1*", "test_cpu_exchanges_*"),
            *_in("test_portable_trust.py", "*[2.8.0*", "test_package_publishes_*"),
            *_in("test_portable_vs_native.py", "*[2.8.0*"),
            *_in("test_compile_real_torch.py", "test_old_torch_*", "test_cuda_variant_*"),
            *_in("test_conformance_suite.py", "*_torch28", "*_on_older_torch*"),
            *_in(
                "test_faults.py", "test_library_for_other_*", "test_library_override_for_another_*"
            ),
            *_in("test_abi_audit.py", "*_on_old_torch_*", "*cxx11_*", "test_real_library_*"),
            *_in("test_portable_selection.py", "*_on_real_torch_2_8"),
            *_in("test_no_cuda_at_import.py", "test_cuda_torch_*", "test_cpu_library_*"),
            f"{INTEGRATION}/test_tvm_ffi_dropin.py",
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
        envs=("py*-torch2.6.0-import-*", "py*-torch2.8.0-import-*", "py*-torch2.9.1-import-*"),
    ),
    Shard(
        "newer",
        "torch 2.10-2.15 to compile against, and the GPU machine's twin (torch 2.11.0+cu130)",
        tests=(
            f"{INTEGRATION}/test_compile_newer_torch.py",
            "tests/gpu/test_cuda_torch_without_gpu.py",
            *_in("test_portable_table.py", "test_exchange_suite_on_the_cuda_torch_211"),
            *_in("test_gilless_refusals.py", "*[portable-2.11.0-cuda*"),
            *_in("test_portable_allocator_calls.py", "*[2.11.0-cuda*"),
        ),
        envs=("py*-torch2.1*-build-*", "py3.12-torch2.11.0-import-*"),
    ),
    Shard("core", "no downloaded torch (torch 2.13 of the test session)", tests=("*",), envs=()),
)

#: The contributors' subset (``nox -s quick``): core without its slow tests, and one
#: real-torch round trip (our library compiled against PyPI's torch 2.8.0, imported
#: there, and the exchange suite run on it).
QUICK = Shard(
    "quick",
    "core's tests not marked slow, and one round trip on real torch 2.8.0",
    tests=(*_in("test_compile_real_torch.py", "test_old_torch_*[2.8.0*"),),
    envs=("py*-torch2.8.0-import-*",),
    without_markers=("slow",),
)


def shard_named(name: str) -> Shard:
    """The shard (or :data:`QUICK`) called ``name``; ``KeyError`` naming the choices."""
    for shard in (*SHARDS, QUICK):
        if shard.name == name:
            return shard
    raise KeyError(f"no shard {name!r}; the shards: {', '.join(s.name for s in (*SHARDS, QUICK))}")


def shard_of(nodeid: str) -> Shard:
    """The shard of test ``nodeid``: the first of :data:`SHARDS` whose patterns match."""
    return next(shard for shard in SHARDS if shard.has_test(nodeid))


def in_quick(nodeid: str, markers: Iterable[str]) -> bool:
    """Whether test ``nodeid`` (with ``markers``) is in :data:`QUICK`."""
    if QUICK.has_test(nodeid):
        return True
    return shard_of(nodeid).name == "core" and not set(markers) & set(QUICK.without_markers)
