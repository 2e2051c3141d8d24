"""torch-c-dlpack-ext: the DLPack C exchange API for every PyTorch.

Importing this package publishes ``torch.Tensor.__dlpack_c_exchange_api__`` when the
running torch lacks it (the drop-in contract tvm-ffi relies on).
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
