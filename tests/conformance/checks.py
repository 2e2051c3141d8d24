"""Checks on a torch tensor that a table imported: values, storage extent, usability."""

from __future__ import annotations

import copy
import io

import torch

#: Integer dtype of each element size: results are compared bit for bit through these
#: (any dtype can be viewed as the integer dtype of its size; NaNs compare equal).
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

#: Above this many elements the result is checked at its corners only (huge expanded views).
MAX_CHECKED_ELEMENTS = 4096


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` viewed as integers of its element size (complex128: int64 pairs)."""
    size = tensor.element_size()
    if size == 16:
        return torch.view_as_real(tensor).view(torch.int64)
    return tensor.view(_INT_OF_SIZE[size])


def view_of_bytes(
    raw: bytes, itemsize: int, shape: tuple[int, ...], strides: tuple[int, ...]
) -> torch.Tensor:
    """What a DLPack tensor over ``raw`` (its first element at raw[0]) holds, as integers
    of its element size: built from a copy of the bytes, independently of any table."""
    usable = len(raw) - len(raw) % itemsize
    flat = torch.frombuffer(bytearray(raw[:usable]) or bytearray(itemsize), dtype=torch.uint8)
    if itemsize == 16:
        ints = flat.view(torch.int64)
        return ints.as_strided((*shape, 2), (*(2 * s for s in strides), 1))
    return flat.view(_INT_OF_SIZE[itemsize]).as_strided(shape, strides)


def storage_span(tensor: torch.Tensor) -> tuple[int, int]:
    """``(first, end)`` addresses of the tensor's storage."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def view_span(tensor: torch.Tensor) -> tuple[int, int]:
    """``(first, end)`` addresses of the bytes the view can reach (non-negative strides)."""
    if tensor.numel() == 0:
        return tensor.data_ptr(), tensor.data_ptr()
    last = sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + (last + 1) * tensor.element_size()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a, b)


def corners(tensor: torch.Tensor) -> list[tuple[int, ...]]:
    """The first and last index (enough for views too large to compare whole)."""
    if tensor.numel() == 0:
        return []
    return [tuple(0 for _ in tensor.shape), tuple(n - 1 for n in tensor.shape)]


def values_equal(result: torch.Tensor, expected_bits: torch.Tensor) -> bool:
    got = bits(result)
    if got.numel() <= MAX_CHECKED_ELEMENTS:
        return same_bits(got, expected_bits)
    return got.shape == expected_bits.shape and all(
        torch.equal(got[index], expected_bits[index]) for index in corners(result)
    )


def derived_views_work(result: torch.Tensor, expected_bits: torch.Tensor) -> list[str]:
    """Slicing, transposing, deepcopy, clone and a torch.save round trip of ``result``
    all work and keep the values. Returns what failed (empty when all is well)."""
    problems: list[str] = []
    if result.dim() >= 1 and not values_equal(result[1:], expected_bits[1:]):
        problems.append("t[1:] has other values")
    if result.dim() >= 2:
        last = result.dim() - 1  # not -1: complex128's expected bits have a pair axis
        if not values_equal(result.transpose(0, last), expected_bits.transpose(0, last)):
            problems.append("t.transpose(0, -1) has other values")
    if result.numel() > MAX_CHECKED_ELEMENTS:
        return problems  # copies of huge expanded views would materialize them
    for name, make in (
        ("copy.deepcopy(t)", copy.deepcopy),
        ("t.clone()", torch.Tensor.clone),
        ("torch.save/torch.load", _save_load),
    ):
        try:
            copied = make(result)
        except Exception as exc:
            problems.append(f"{name} raised {type(exc).__name__}: {exc}")
            continue
        if not values_equal(copied, expected_bits):
            problems.append(f"{name} has other values")
    return problems


def _save_load(tensor: torch.Tensor) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    buffer.seek(0)
    loaded: torch.Tensor = torch.load(buffer, weights_only=True)
    return loaded
