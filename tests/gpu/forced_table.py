"""A pytest plugin that puts our table under a consumer's own tests, and proves it stayed.

``gpu_run.py`` runs apache-tvm-ffi's tests with ``-p tests.gpu.forced_table`` and the
package's variables set (``FORCE=1`` and ``LIBRARY=<native library>``, or ``PORTABLE=1`` and
``LIBRARY=<portable table>``). On torch >= 2.10 tvm-ffi never imports torch_c_dlpack_ext (torch
has the API), and it reads ``torch.Tensor.__dlpack_c_exchange_api__`` when it first meets a
tensor class; so the plugin imports the package before any test module is collected, and:

* stops the session (exit 3) unless the selector's decision is ``TCDE_GPU_EXPECT``
  (``load`` or ``portable``) and the published capsule holds the table of the library it
  loaded (its own verified copy of ``LIBRARY``);
* at the end, checks that the capsule still holds that table (no test replaced it) and writes
  both findings to ``TCDE_GPU_TABLE_REPORT`` (JSON), which ``gpu_run.py`` reports.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any

import pytest

EXPECT = "TCDE_GPU_EXPECT"
REPORT = "TCDE_GPU_TABLE_REPORT"
#: pytest's "usage error" family: the session did not run the tests it was asked to.
EXIT_NOT_OURS = 3


def _published_address() -> int:
    import torch

    capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if capsule is None:
        return 0
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get(capsule, b"dlpack_exchange_api") or 0)


def _write(config: pytest.Config, **fields: Any) -> None:
    path = os.environ.get(REPORT)
    state: dict[str, Any] = config.stash.get(_STATE, {})
    state.update(fields)
    config.stash[_STATE] = state
    if path:
        Path(path).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


_STATE = pytest.StashKey[dict[str, Any]]()


def pytest_configure(config: pytest.Config) -> None:
    import torch_c_dlpack_ext
    from torch_c_dlpack_ext import _library

    status = torch_c_dlpack_ext.status()
    kind = str(getattr(status.kind, "value", status.kind))
    library = Path(os.environ.get("TORCH_C_DLPACK_EXT_LIBRARY", ""))
    loaded = _library.loaded_library(library)
    published = _published_address()
    ours = loaded is not None and published == loaded.pointer
    expected = os.environ.get(EXPECT, "")
    _write(
        config, kind=kind, expected=expected, library=str(library), published_is_ours=ours,
        reason=str(getattr(status, "reason", "")),
    )  # fmt: skip
    if kind != expected or not ours:
        pytest.exit(
            f"forced_table: the decision is {kind!r} (expected {expected!r}) and the published "
            f"table is {'ours' if ours else 'NOT ours'} ({library.name}): the tests would not "
            "run on our table",
            returncode=EXIT_NOT_OURS,
        )


def pytest_report_header(config: pytest.Config) -> str:
    state = config.stash.get(_STATE, {})
    return f"forced_table: {state.get('kind')} of {Path(str(state.get('library'))).name}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from torch_c_dlpack_ext import _library

    state = session.config.stash.get(_STATE, {})
    loaded = _library.loaded_library(Path(str(state.get("library", ""))))
    still = loaded is not None and _published_address() == loaded.pointer
    _write(session.config, still_published_at_end=still)
    if not still:
        session.exitstatus = EXIT_NOT_OURS
