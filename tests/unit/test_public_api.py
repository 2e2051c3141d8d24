"""The public API of ``torch_c_dlpack_ext`` is curated and pinned."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import torch_c_dlpack_ext
from _torch_c_dlpack_ext_core.naming import Backend
from torch_c_dlpack_ext._decide import DecisionKind
from torch_c_dlpack_ext._torchinfo import TorchInfo


def test_all_is_pinned() -> None:
    assert sorted(torch_c_dlpack_ext.__all__) == [
        "DecisionKind",
        "Status",
        "TorchCDLPackExtWarning",
        "__version__",
        "build_for_current_torch",
        "errors",
        "status",
    ]


def test_every_public_name_resolves() -> None:
    for name in torch_c_dlpack_ext.__all__:
        assert getattr(torch_c_dlpack_ext, name) is not None, name


def test_lazy_names_are_the_real_objects() -> None:
    from torch_c_dlpack_ext import _status, errors

    assert torch_c_dlpack_ext.errors is errors
    assert torch_c_dlpack_ext.Status is _status.Status
    assert torch_c_dlpack_ext.DecisionKind is DecisionKind
    assert torch_c_dlpack_ext.TorchCDLPackExtWarning is errors.TorchCDLPackExtWarning
    assert issubclass(torch_c_dlpack_ext.TorchCDLPackExtWarning, UserWarning)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        torch_c_dlpack_ext.no_such_name  # noqa: B018


def test_status_is_frozen_and_describes_torch() -> None:
    status = torch_c_dlpack_ext.status()
    assert isinstance(status, torch_c_dlpack_ext.Status)
    assert isinstance(status.kind, DecisionKind)
    assert status.torch is not None
    assert status.reason
    assert dataclasses.is_dataclass(status)
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.reason = "x"  # type: ignore[misc]


def test_version_is_the_package_version() -> None:
    from _torch_c_dlpack_ext_core.version import __version__

    assert torch_c_dlpack_ext.__version__ == __version__


def test_shipped_and_build_code_avoids_python310_only_dataclass_options() -> None:
    """requires-python is 3.9, where ``dataclass(kw_only=..., slots=...)`` raises
    TypeError. At import time that would crash every importer (tvm-ffi included); in
    the build backend and devtools it would break the cp39 wheel builds, which run
    them under the target Python."""
    import ast

    root = Path(__file__).resolve().parents[2]
    sources = [
        path
        for folder in ("python", "build_backend", "devtools")
        for path in sorted((root / folder).rglob("*.py"))
    ]
    assert len(sources) > 20
    offenders = [
        f"{path.relative_to(root)}:{node.lineno}"
        for path in sources
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and any(kw.arg in {"kw_only", "slots", "match_args"} for kw in node.keywords)
    ]
    assert offenders == []


def _info() -> TorchInfo:
    return TorchInfo(
        version="2.8.0+cu128",
        backend=Backend.CUDA,
        cxx11_abi=True,
        cuda_version="12.8",
        hip_version=None,
        has_capsule=False,
        has_legacy_int=False,
    )


def test_status_str_is_a_short_summary_without_repeats() -> None:
    reason = "no bundled library matches torch 2.8.0+cu128 (cuda cxx11abi1)"
    remedy = "reinstall torch-c-dlpack-ext: pip install --force-reinstall torch-c-dlpack-ext"
    fallback = "the cuda library failed to load; using the CPU library instead"
    status = torch_c_dlpack_ext.Status(
        kind=DecisionKind.UNAVAILABLE,
        torch=_info(),
        reason=reason,
        remedy=remedy,
        # The final warning restates reason and remedy; the other says something new.
        warnings=(fallback, f"torch-c-dlpack-ext: N{reason[1:]}. {remedy}. torch.Tensor unchanged"),
    )
    assert str(status).splitlines() == [
        "torch-c-dlpack-ext: unavailable (torch 2.8.0+cu128, cuda)",
        f"  reason:  {reason}",
        f"  fix:     {remedy}",
        f"  warning: {fallback}",
    ]
    # The fields stay structured and complete.
    assert status.warnings[1].startswith("torch-c-dlpack-ext: No bundled library")
    assert status.reason == reason

    loaded = torch_c_dlpack_ext.Status(
        kind=DecisionKind.LOAD, library=Path("/site/libx.so"), torch=None, reason="matches"
    )
    assert str(loaded).splitlines() == [
        "torch-c-dlpack-ext: load (torch not importable)",
        "  library: /site/libx.so",
        "  reason:  matches",
    ]


def test_status_str_clips_long_values() -> None:
    status = torch_c_dlpack_ext.Status(
        kind=DecisionKind.UNAVAILABLE, reason="bad file " + "x" * 5000, remedy="fix\nit"
    )
    text = str(status)
    assert len(text) < 500
    assert max(len(line) for line in text.splitlines()) <= 331
    assert "..." in text
    assert "  fix:     fix it" in text.splitlines()


def test_status_str_of_the_running_import() -> None:
    text = str(torch_c_dlpack_ext.status())
    assert text.startswith("torch-c-dlpack-ext: ")
    assert 1 < len(text.splitlines()) <= 8
    assert torch_c_dlpack_ext.status().reason[:40] in text


def test_fast_path_names_are_the_shared_names() -> None:
    """``__init__`` spells out the names its fast path needs (so that path imports none of
    our modules); they must stay the ones ``naming``, ``_loader`` and the mirrors define."""
    from _torch_c_dlpack_ext_core import naming

    assert torch_c_dlpack_ext._ENV_PREFIX == naming.ENV_PREFIX
    assert torch_c_dlpack_ext._CAPSULE_ATTR == naming.CAPSULE_ATTR
    assert torch_c_dlpack_ext._LEGACY_INT_ATTR == naming.LEGACY_INT_ATTR
    from _torch_c_dlpack_ext_core import dlpack_ctypes
    from torch_c_dlpack_ext import _loader

    assert torch_c_dlpack_ext._CAPSULE_NAME == naming.CAPSULE_NAME == dlpack_ctypes.CAPSULE_NAME
    # _loader (the load path's names) restates them too: tests/unit/test_common_path.py.
    assert _loader.CAPSULE_NAME == naming.CAPSULE_NAME
