"""The errors a user of torch-c-dlpack-ext can catch, and its warning category: the core's
classes re-exported, and the face's own :class:`WarningAsImportError`.

``import torch_c_dlpack_ext`` raises only :class:`WarningAsImportError`, and only where the
user's warnings filter made its one warning an error (``python -W error``, pytest's
``filterwarnings = error``). The others come from
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
    UntrustedPathError,
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
    "UntrustedPathError",
    "WarningAsImportError",
]


class WarningAsImportError(TorchCDLPackExtError, ImportError):
    """``import torch_c_dlpack_ext`` failed because a warning it emitted was turned into an
    error by the warnings filter (``python -W error``, pytest's ``filterwarnings = error``).

    An ``ImportError``, so the optional-import guards of consumers (tvm-ffi's ``except
    ImportError``) work: they fall back to their own path, as they would without this
    package. The warning is ``__cause__`` (and :attr:`warning`); the message says the cause
    and how to import anyway.
    """

    def __init__(self, message: str, warning: Warning) -> None:
        super().__init__(message, name="torch_c_dlpack_ext")
        self.warning = warning
