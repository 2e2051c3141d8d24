"""An explicit compile request, :func:`torch_c_dlpack_ext.build_for_current_torch`: describe
the running torch, read the settings, build with the JIT (:mod:`._jit`, through the core's
compiler driver), load and publish. Runs no selector: the request is the decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import ConfigError, TorchInstallError
from _torch_c_dlpack_ext_core.naming import env_var

from ._loader import LOCK, publish
from ._model import DecisionKind
from ._settings import settings_of
from ._torchinfo import describe_torch

if TYPE_CHECKING:
    from ._status import Status

__all__ = ["build_for_current_torch"]


def build_for_current_torch(environ: Mapping[str, str]) -> tuple[Status, Path]:
    """Build, load and publish for the running torch; the body of
    :func:`torch_c_dlpack_ext.build_for_current_torch`. Raises what the build raises."""
    from . import _jit
    from ._library import open_library
    from ._status import Status

    try:
        import torch
    except ImportError as exc:
        raise TorchInstallError(
            f"cannot build for the current torch: torch is not importable ({exc}); install it"
        ) from None

    with LOCK:
        info = describe_torch(torch)
        settings = settings_of(environ)
        for problem in settings.problems:
            # A bad BACKEND must not quietly become the detected backend.
            if problem.variable in (env_var("BACKEND"), env_var("CACHE_DIR")):
                raise ConfigError(f"cannot build for the current torch: {problem.message}")
        backend = settings.backend or info.backend
        loaded = open_library(*_jit.build(torch, info, backend, settings))
        publish(torch, loaded.pointer)
        status = Status(
            kind=DecisionKind.JIT,
            library=loaded.path,
            torch=info,
            reason=f"built for torch {info.version} ({backend.value}) on request",
            settings=settings,
        )
        return status, loaded.path
