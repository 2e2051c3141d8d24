"""detect_backend and TorchInfo.from_torch on fake torch modules (no real torch needed)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from torch_c_dlpack_ext._naming import Backend
from torch_c_dlpack_ext._torchinfo import TorchInfo, detect_backend


def fake_torch(available: bool, version: Any, *, tensor_attrs: dict[str, Any] | None = None) -> Any:
    tensor = type("Tensor", (), dict(tensor_attrs or {}))
    return types.SimpleNamespace(
        __version__="2.6.0+x",
        cuda=types.SimpleNamespace(is_available=lambda: available),
        version=version,
        Tensor=tensor,
        compiled_with_cxx11_abi=lambda: False,
    )


@pytest.mark.parametrize(
    ("available", "version", "expected"),
    [
        (True, types.SimpleNamespace(cuda="12.4", hip=None), Backend.CUDA),
        (True, types.SimpleNamespace(cuda=None, hip="6.2.4"), Backend.ROCM),
        # A GPU build on a machine without a device: the CPU library serves it.
        (False, types.SimpleNamespace(cuda="12.4", hip=None), Backend.CPU),
        (False, types.SimpleNamespace(cuda=None, hip="6.2.4"), Backend.CPU),
        (False, types.SimpleNamespace(cuda=None, hip=None), Backend.CPU),
        # Builds whose torch.version lacks the attributes must not raise.
        (True, types.SimpleNamespace(), Backend.CUDA),
        (True, types.SimpleNamespace(hip="6.0"), Backend.ROCM),
        (False, types.SimpleNamespace(), Backend.CPU),
    ],
    ids=[
        "cuda",
        "hip",
        "cuda-build-no-device",
        "hip-build-no-device",
        "neither",
        "available-no-attrs",
        "hip-only-attr",
        "no-attrs",
    ],
)
def test_detect_backend(available: bool, version: Any, expected: Backend) -> None:
    assert detect_backend(fake_torch(available, version)) is expected


def test_torchinfo_from_fake_torch_without_version_attributes() -> None:
    info = TorchInfo.from_torch(fake_torch(False, types.SimpleNamespace()))
    assert info.backend is Backend.CPU
    assert (info.cuda_version, info.hip_version) == (None, None)
    assert info.cxx11_abi is False
    assert not info.has_capsule
    assert not info.has_legacy_int


def test_torchinfo_sees_attributes() -> None:
    torch = fake_torch(
        True,
        types.SimpleNamespace(hip="6.2"),
        tensor_attrs={"__dlpack_c_exchange_api__": object()},
    )
    info = TorchInfo.from_torch(torch)
    assert info.backend is Backend.ROCM
    assert info.has_capsule
    assert info.hip_version == "6.2"
    legacy = TorchInfo.from_torch(
        fake_torch(False, types.SimpleNamespace(), tensor_attrs={"__c_dlpack_exchange_api__": 1})
    )
    assert legacy.has_legacy_int
    assert not legacy.has_capsule
