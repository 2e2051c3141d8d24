"""A small frozen description of the running torch: built once, passed around, easy to fake."""

from __future__ import annotations

from typing import Any

from ._naming import CAPSULE_ATTR, LEGACY_INT_ATTR, Backend, torch_minor
from ._record import FrozenRecord

__all__ = ["CAPSULE_ATTR", "LEGACY_INT_ATTR", "TorchInfo", "detect_backend"]


def detect_backend(torch: Any) -> Backend:
    """The backend of a torch module, by the project's reviewed rule.

    A GPU torch with no usable device reports ``cpu``: the CPU library serves it.
    ``getattr`` keeps builds whose ``torch.version`` lacks ``cuda`` or ``hip`` safe.
    """
    if torch.cuda.is_available():
        if getattr(torch.version, "cuda", None) is not None:
            return Backend.CUDA
        if getattr(torch.version, "hip", None) is not None:
            return Backend.ROCM
        return Backend.CUDA
    return Backend.CPU


class TorchInfo(FrozenRecord):
    """What the selector needs to know about the running torch."""

    #: ``torch.__version__`` including its local part (``2.6.0+cu124``, ``2.8.0a0+abc``).
    version: str
    #: Backend by :func:`detect_backend`.
    backend: Backend
    #: ``torch.compiled_with_cxx11_abi()``; ``None`` where not applicable (Windows, macOS).
    cxx11_abi: bool | None
    #: ``torch.version.cuda`` / ``torch.version.hip`` (``None`` when absent).
    cuda_version: str | None
    hip_version: str | None
    #: ``torch.Tensor`` already has the capsule attribute (torch >= 2.10, or set earlier).
    has_capsule: bool
    #: ``torch.Tensor`` has only the legacy int attribute.
    has_legacy_int: bool

    @property
    def major_minor(self) -> tuple[int, int]:
        return torch_minor(self.version)

    @classmethod
    def from_torch(cls, torch: Any) -> TorchInfo:
        """Describe an imported ``torch`` module (never raises on odd builds)."""
        import sys

        abi: bool | None
        if sys.platform.startswith(("win", "darwin")):
            abi = None
        else:
            compiled = getattr(torch, "compiled_with_cxx11_abi", None)
            abi = bool(compiled()) if callable(compiled) else None
        version_mod = getattr(torch, "version", None)
        tensor = torch.Tensor
        return cls(
            version=str(torch.__version__),
            backend=detect_backend(torch),
            cxx11_abi=abi,
            cuda_version=getattr(version_mod, "cuda", None),
            hip_version=getattr(version_mod, "hip", None),
            has_capsule=hasattr(tensor, CAPSULE_ATTR),
            has_legacy_int=hasattr(tensor, LEGACY_INT_ATTR),
        )
