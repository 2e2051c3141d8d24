"""Fixtures of the exchange suite: the library under test, its table, torch's own table.

The suite deliberately does not import ``torch_c_dlpack_ext``: importing it publishes a
capsule on ``torch.Tensor``, and on torch >= 2.10 the suite compares the library with
the table *torch itself* provides.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from .dlpack_ctypes import DLPackExchangeAPI, ExchangeLibrary, api_from_capsule

#: Path of the library under test. The name follows the project's one env-var
#: prefix (_torch_c_dlpack_ext_core.naming.ENV_PREFIX), spelled out here because the
#: suite must not import the package (see the module docstring).
LIBRARY_ENV = "TCDE_TEST_LIBRARY"

#: First torch release with its own ``torch.Tensor.__dlpack_c_exchange_api__``.
TORCH_OWN_API_SINCE = (2, 10)

torch = pytest.importorskip("torch", reason="the exchange suite needs torch installed")


@pytest.fixture(scope="session")
def exchange_library() -> ExchangeLibrary:
    """The library named by $TCDE_TEST_LIBRARY (read when first needed, so a
    fixture or hook of an enclosing conftest may build the library and set it first)."""
    value = os.environ.get(LIBRARY_ENV, "")
    if not value:
        pytest.skip(
            f"{LIBRARY_ENV} is not set: point it at a built exchange library "
            "(e.g. libtorch_c_dlpack_ext-torch2.8-cpu-cxx11abi1.so) to run the exchange suite"
        )
    path = Path(value)
    if not path.is_file():
        pytest.fail(f"{LIBRARY_ENV}={value!r} does not name a file; build the library first")
    return ExchangeLibrary(path)


@pytest.fixture(autouse=True)
def _require_library(exchange_library: ExchangeLibrary) -> None:
    # Autouse: every test of the suite skips (with the reason above) when no library is given.
    return


@pytest.fixture(scope="session")
def api(exchange_library: ExchangeLibrary) -> DLPackExchangeAPI:
    """The DLPackExchangeAPI table of the library under test."""
    return exchange_library.api


@pytest.fixture(scope="session")
def torch_api(exchange_library: ExchangeLibrary) -> DLPackExchangeAPI | None:
    """torch's OWN table (torch >= 2.10), or None where torch has none.

    Before torch 2.10 any capsule on torch.Tensor was published by a fallback library
    (possibly another copy of this one), and a capsule that points at the library under
    test is not torch's own either: neither counts.
    """
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) < TORCH_OWN_API_SINCE:
        return None
    capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if capsule is None:
        return None
    table = api_from_capsule(capsule)
    if ctypes.addressof(table) == exchange_library.address:
        return None
    return table


@pytest.fixture
def need_torch_api(torch_api: DLPackExchangeAPI | None) -> DLPackExchangeAPI:
    """torch's own table, skipping the test where torch has none (torch < 2.10)."""
    if torch_api is None:
        pytest.skip(
            f"torch {torch.__version__} has no exchange API of its own (added in 2.10): "
            "nothing to compare with"
        )
    return torch_api
