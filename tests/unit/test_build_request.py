"""The driver's request records: frozen, required fields, normalised once when built."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.buildlock import LOCK_TIMEOUT_S
from _torch_c_dlpack_ext_core.buildrequest import BuildPolicy, BuildRequest, PortableRequest
from _torch_c_dlpack_ext_core.errors import InvalidBackendError
from _torch_c_dlpack_ext_core.naming import Backend


def test_a_request_is_frozen() -> None:
    request = BuildRequest(torch=Path("/t"), backend=Backend.CPU, output_dir=Path("/o"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.backend = Backend.CUDA  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BuildPolicy().echo = False  # type: ignore[misc]
    changed = dataclasses.replace(request, cxx11_abi=True)
    assert (changed.cxx11_abi, request.cxx11_abi) == (True, None)


@pytest.mark.parametrize("missing", ["torch", "backend", "output_dir"])
def test_the_target_and_the_output_are_required(missing: str) -> None:
    fields: dict[str, Any] = {"torch": Path("/t"), "backend": "cpu", "output_dir": Path("/o")}
    del fields[missing]
    with pytest.raises(TypeError, match=missing):
        BuildRequest(**fields)


def test_the_portable_request_needs_only_the_output() -> None:
    with pytest.raises(TypeError, match="output_dir"):
        PortableRequest()  # type: ignore[call-arg]
    assert PortableRequest(output_dir=Path("/o")).python is None


def test_paths_and_backend_names_are_normalised_when_built() -> None:
    request = BuildRequest(
        torch="/t",  # type: ignore[arg-type]
        backend=" CUDA ",  # type: ignore[arg-type]
        output_dir="out",  # type: ignore[arg-type]
        gpu_home="/cuda",  # type: ignore[arg-type]
        source_dir="csrc",  # type: ignore[arg-type]
    )
    assert request.backend is Backend.CUDA
    assert request.torch == Path("/t")
    assert request.output_dir == Path("out")
    assert request.gpu_home == Path("/cuda")
    assert request.source_dir == Path("csrc")
    assert request.python_include is None
    portable = PortableRequest(output_dir="o", python_lib="py.lib")  # type: ignore[arg-type]
    assert (portable.output_dir, portable.python_lib) == (Path("o"), Path("py.lib"))


def test_an_unknown_backend_is_refused_before_anything_is_planned() -> None:
    with pytest.raises(InvalidBackendError, match="unknown backend 'cdua': expected one of"):
        BuildRequest(torch=Path("/t"), backend="cdua", output_dir=Path("/o"))  # type: ignore[arg-type]


def test_the_policy_defaults_audit_echo_and_the_locks_timeout() -> None:
    policy = BuildPolicy()
    assert (policy.audit, policy.echo, policy.owners, policy.stable_abi_audit) == (
        True,
        True,
        None,
        None,
    )
    assert policy.timeout == LOCK_TIMEOUT_S
    assert BuildPolicy(lock_timeout=0).timeout == 0
    assert policy == driver.DEFAULT_POLICY


@pytest.mark.parametrize(
    ("function", "record"),
    [
        (driver.plan_build, "BuildRequest"),
        (driver.compile_library, "BuildRequest"),
        (driver.plan_portable, "PortableRequest"),
        (driver.compile_portable_library, "PortableRequest"),
    ],
)
def test_the_driver_takes_a_record_not_a_bundle_of_keywords(function: Any, record: str) -> None:
    params = list(inspect.signature(function).parameters.values())
    assert params[0].name == "request"
    assert params[0].annotation == record
    assert [p.name for p in params[1:]] in ([], ["policy", "on_compile"])
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in params)
