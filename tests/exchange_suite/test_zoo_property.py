"""A property over the dispatch zoo: whatever sizes, strides and storage offset a
``_make_subclass`` tensor's ``__torch_dispatch__`` answers, over whatever real storage,
both exports describe bytes of that storage only (or refuse with ``BufferError`` naming
the library).

Deterministic for CI: ``derandomize`` (the examples follow from the test alone), no
example database, a fixed number of examples, no deadline (a sanitizer build is slow).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from .dlpack_ctypes import DLPackExchangeAPI
from .zoo import (
    CannotMake,
    Lie,
    check_export,
    check_refusal,
    dispatch_liar,
    export_non_owning,
    export_owning,
    storage_of,
)

hypothesis = pytest.importorskip("hypothesis", reason="the zoo's property needs hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: Examples per run: each makes one liar and exports it twice (~1 ms each).
EXAMPLES = 150

DTYPES = (torch.uint8, torch.float32, torch.float64)

#: Values near a small storage's edges, and far past them (strides to +-2**24 and sizes to
#: 2**20 over three dimensions reach 2**60 elements: numel still fits int64, the bytes
#: described may not).
_SMALL = st.integers(0, 9)
SIZES = st.one_of(_SMALL, st.integers(0, 1 << 20))
STRIDES = st.one_of(st.integers(-9, 9), st.integers(-(1 << 24), 1 << 24))
OFFSETS = st.one_of(_SMALL, st.integers(0, 1 << 30))


@st.composite
def cases(draw: Any) -> tuple[torch.Tensor, Lie]:
    """(the real tensor, what its liar answers)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    real = torch.zeros(math.prod(shape), dtype=dtype).reshape(shape)
    if draw(st.booleans()):  # the "strides" policy: the sizes are the real ones
        strides = draw(st.lists(STRIDES, min_size=len(shape), max_size=len(shape)))
        return real, Lie(strides=tuple(strides))
    ndim = draw(st.integers(1, 3))
    sizes = tuple(draw(st.lists(SIZES, min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(STRIDES, min_size=ndim, max_size=ndim)))
    offset = draw(st.one_of(st.none(), OFFSETS))
    return real, Lie(sizes=sizes, strides=strides, offset=offset)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=cases())
def test_lying_sizes_strides_offsets_stay_in_the_storage(
    api: DLPackExchangeAPI, case: tuple[torch.Tensor, Lie]
) -> None:
    real, lie = case
    storage = storage_of(real)
    try:
        liar = dispatch_liar(real, lie)
    except CannotMake as exc:
        pytest.skip(str(exc))
    for export in (export_owning, export_non_owning):
        what = f"{lie} over {tuple(real.shape)} {real.dtype} ({export.__name__})"
        try:
            fields = export(api, liar)
        except BufferError as refused:
            check_refusal(refused, what)
            continue
        check_export(fields, storage, what)
