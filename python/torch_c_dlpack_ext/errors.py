"""The errors a user of torch-c-dlpack-ext can catch, and its warning category.

``import torch_c_dlpack_ext`` never raises; these come from
:func:`torch_c_dlpack_ext.build_for_current_torch` (a failed build says which tool,
header or torch file is missing, and how to get it) and from
``python -m torch_c_dlpack_ext``. Every class derives from
:class:`TorchCDLPackExtError`; each message names what went wrong and how to fix it.
"""

from __future__ import annotations

from _torch_c_dlpack_ext_core.errors import (
    ABIAuditError,
    ABIMismatchError,
    BackendUnavailableError,
    BuildError,
    CompilerNotFoundError,
    ConfigError,
    DLPackHeaderNotFoundError,
    GPUHeadersNotFoundError,
    InvalidBackendError,
    LibraryLoadError,
    ManifestError,
    TorchCDLPackExtError,
    TorchCDLPackExtWarning,
    TorchInstallError,
)

__all__ = [
    "ABIAuditError",
    "ABIMismatchError",
    "BackendUnavailableError",
    "BuildError",
    "CompilerNotFoundError",
    "ConfigError",
    "DLPackHeaderNotFoundError",
    "GPUHeadersNotFoundError",
    "InvalidBackendError",
    "LibraryLoadError",
    "ManifestError",
    "TorchCDLPackExtError",
    "TorchCDLPackExtWarning",
    "TorchInstallError",
]
