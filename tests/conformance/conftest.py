"""Shared setup of tests/conformance: hypothesis profiles, the case counter, the tables.

Hypothesis profiles (pass ``--hypothesis-profile=NAME``; ``ci`` is the default):

- ``ci``: a fixed number of examples per property, derandomized (the same cases on every
  run, no example database), no deadline: CI-sized and reproducible;
- ``thorough``: many more examples, randomized, for local runs.

Every property reports the cases it ran through :func:`count_case`; the terminal summary
prints the totals, so each run states how much it exercised.

This conftest imports neither torch nor the package at module level: the suites here run
inside old-torch environments (``--confcutdir tests/conformance``) as well as in the dev env.
"""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

#: The library under test (the exchange suite's variable: one way to point the suites at
#: a library; _torch_c_dlpack_ext_core.naming.ENV_PREFIX spelled out, the package is not imported).
LIBRARY_ENV = "TCDE_TEST_LIBRARY"

_RELAXED = (HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much)
settings.register_profile(
    "ci", max_examples=150, derandomize=True, database=None, deadline=None,
    suppress_health_check=_RELAXED, print_blob=True,
)  # fmt: skip
settings.register_profile(
    "thorough", max_examples=3000, deadline=None, suppress_health_check=_RELAXED,
    print_blob=True,
)  # fmt: skip

#: Without a library the differential properties have nothing to compare: they are not
#: collected (rather than reported as skipped) when pytest runs the repository's testpaths;
#: tests/integration/test_conformance_suite.py runs them with a built library.
collect_ignore_glob = [] if os.environ.get(LIBRARY_ENV) else ["test_diff_*.py"]

_CASES: collections.Counter[str] = collections.Counter()
_STARTED = time.monotonic()


def count_case(prop: str, n: int = 1) -> None:
    """Record that property ``prop`` exercised ``n`` more cases (shown in the summary)."""
    _CASES[prop] += n


def pytest_configure(config: pytest.Config) -> None:
    # The hypothesis plugin loads --hypothesis-profile itself; default to ``ci`` otherwise.
    if config.getoption("hypothesis_profile", default=None) is None:
        settings.load_profile("ci")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _CASES:
        return
    total = sum(_CASES.values())
    elapsed = time.monotonic() - _STARTED
    profile = settings.get_current_profile_name()
    terminalreporter.write_line(
        f"conformance: {total} cases in {len(_CASES)} properties "
        f"(hypothesis profile {profile!r}, {elapsed:.1f} s)"
    )
    for prop, n in sorted(_CASES.items()):
        terminalreporter.write_line(f"conformance:   {n:6d}  {prop}")
    _summarize_deviations(terminalreporter)


@pytest.fixture(scope="session")
def library_path() -> Path:
    """$TCDE_TEST_LIBRARY, or a skip saying how to run the differential suite."""
    value = os.environ.get(LIBRARY_ENV, "")
    if not value:
        pytest.skip(
            f"{LIBRARY_ENV} is not set: tests/integration/test_conformance_suite.py builds the "
            "library and runs this suite with it (or set it to a built library yourself)"
        )
    path = Path(value)
    if not path.is_file():
        pytest.fail(f"{LIBRARY_ENV}={value!r} does not name a file; build the library first")
    return path


@pytest.fixture(scope="session")
def tables(library_path: Path) -> Any:
    """:class:`tables.Tables`: our table, and torch's own where this torch has one."""
    from .tables import load_tables

    return load_tables(library_path)


def _summarize_deviations(terminalreporter: Any) -> None:
    import sys

    module = sys.modules.get(f"{__package__}.tables")
    used = getattr(module, "USED", None)
    if used:
        listed = ", ".join(f"{name} x{n}" for name, n in sorted(used.items()))
        terminalreporter.write_line(f"conformance: deviations from torch relied on: {listed}")
