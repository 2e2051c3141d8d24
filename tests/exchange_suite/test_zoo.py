"""The dispatch zoo (zoo.py) through both exports: whatever ``__torch_dispatch__`` or a
dispatch mode answers, an export describes bytes of the storage the tensor really has, on
that storage's device, or it is refused with ``BufferError`` naming the library. Every
described byte is read (a sanitizer build sees any read past the storage)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from .dlpack_ctypes import DLPackExchangeAPI
from .zoo import (
    CASES,
    CannotMake,
    Made,
    check_export,
    check_refusal,
    export_non_owning,
    export_owning,
    make,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


EXPORTS = [
    pytest.param(export_owning, id="owning"),
    pytest.param(export_non_owning, id="non-owning"),
]


def _made(name: str) -> Made:
    try:
        return make(name)
    except CannotMake as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("name", list(CASES))
def test_zoo_exports_only_the_storage_it_holds(
    api: DLPackExchangeAPI, export: Any, name: str
) -> None:
    made = _made(name)
    what = f"{name} ({export.__name__.removeprefix('export_')})"
    try:
        with made.scope():
            fields = export(api, made.obj)
    except BufferError as refused:
        check_refusal(refused, what)
        return
    check_export(fields, made.storage, what)


def test_zoo_truth_comes_from_the_storage() -> None:
    """The zoo's liars really lie (else the test above proves nothing): each answers
    torch's own queries with what its storage cannot hold."""
    made = make("sizes-policy-4MiB")
    assert made.obj.shape == (1 << 20,)
    assert made.obj.numel() == 1 << 20
    assert made.storage is not None
    assert made.storage[1] == 16
    assert make("strides-policy-big").obj.stride() == (1 << 20,)
    assert make("sizes-policy-offset").obj.storage_offset() == 1 << 20
    assert make("dispatch-device-cuda").obj.device == torch.device("cuda", 0)
    pair = make("subclass-as_strided-uint8")
    assert torch.as_strided(pair.obj, (2,), (1,)).dtype == torch.uint8
    with make("mode-as_strided-uint8").scope():
        assert torch.as_strided(torch.zeros(2, dtype=torch.float64), (2,), (1,)).numel() == 16


def test_zoo_refusals_say_what_to_do(api: DLPackExchangeAPI) -> None:
    """A refusal of a tensor without memory names what would export."""
    made = _made("wrapper-subclass")
    for export in (export_owning, export_non_owning):
        with pytest.raises(BufferError) as refused:
            export(api, made.obj)
        check_refusal(refused.value, "wrapper-subclass")
        assert re.search(r"export|\.to\(|\.cpu\(|storage|memory", str(refused.value)), refused.value
