"""No reference or memory leaks over many conversions."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
from pathlib import Path

import pytest
import torch

from .dlpack_ctypes import (
    DLManagedTensorVersioned,
    DLPackExchangeAPI,
    DLTensor,
    import_managed,
)

try:
    import psutil
except ImportError:  # minimal old-torch environments: Linux's /proc tells the same
    psutil = None

#: RSS growth tolerated over a loop: allocator and interpreter noise, far below
#: what a leak of even a few bytes per conversion would add over 100,000 calls.
RSS_SLACK = 8 * 1024 * 1024


def rss() -> int:
    """Resident set size in bytes (psutil, else /proc/self/statm)."""
    gc.collect()
    if psutil is not None:
        return int(psutil.Process().memory_info().rss)
    statm = Path("/proc/self/statm")
    if not statm.exists():
        pytest.skip("neither psutil nor /proc/self/statm is available to measure RSS")
    return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_from_py_object_and_deleter(api: DLPackExchangeAPI) -> None:
    tensor = torch.ones(4, 5)[1:, ::2]
    convert = api.managed_tensor_from_py_object_no_sync
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    out_ref = ctypes.byref(out)
    # Warm up: first calls allocate caches that are not leaks.
    for _ in range(1000):
        convert(tensor, out_ref)
        out.contents.deleter(out)
    refs = sys.getrefcount(tensor)
    before = rss()
    for _ in range(100_000):
        convert(tensor, out_ref)
        out.contents.deleter(out)
    assert sys.getrefcount(tensor) == refs
    growth = rss() - before
    assert growth < RSS_SLACK, f"RSS grew by {growth / 2**20:.1f} MiB over 100,000 conversions"


def test_dltensor_from_py_object(api: DLPackExchangeAPI) -> None:
    tensor = torch.ones(3, 3)
    convert = api.dltensor_from_py_object_no_sync
    out = ctypes.byref(DLTensor())
    refs = sys.getrefcount(tensor)
    before = rss()
    for _ in range(100_000):
        convert(tensor, out)
    assert sys.getrefcount(tensor) == refs
    assert rss() - before < RSS_SLACK


def test_round_trips(api: DLPackExchangeAPI) -> None:
    tensor = torch.arange(16.0).reshape(4, 4)
    convert = api.managed_tensor_from_py_object_no_sync
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    for _ in range(500):
        convert(tensor, ctypes.byref(out))
        import_managed(api, out)
    refs = sys.getrefcount(tensor)
    before = rss()
    for _ in range(20_000):
        convert(tensor, ctypes.byref(out))
        back = import_managed(api, out)
        del back
    assert sys.getrefcount(tensor) == refs
    assert rss() - before < RSS_SLACK


def test_errors_do_not_leak(api: DLPackExchangeAPI) -> None:
    conj = torch.ones(3, dtype=torch.complex64).conj()
    out = ctypes.byref(ctypes.POINTER(DLManagedTensorVersioned)())
    refs = sys.getrefcount(conj)
    before = rss()
    for _ in range(20_000):
        with contextlib.suppress(BufferError):
            api.managed_tensor_from_py_object_no_sync(conj, out)
    assert sys.getrefcount(conj) == refs
    assert rss() - before < RSS_SLACK
