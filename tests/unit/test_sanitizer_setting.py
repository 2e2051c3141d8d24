"""The driver's sanitizer setting: parsed strictly into the request records, refused by a
toolchain that has none, and what it changes in a plan (flags, file name, cache key).

No build here: tests/integration/test_sanitizers.py builds both tables with it, runs the
suites under the runtimes and audits the results both ways.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from tests.conftest import FakeTorch

from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.buildrequest import BuildRequest, PortableRequest, Sanitizer
from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.toolchains import TOOLCHAINS, CompileJob, toolchain_for
from _torch_c_dlpack_ext_core.toolchains.sanitizers import (
    accepted_runtime_symbol,
    compile_flags,
    parse_sanitizers,
    tagged_filename,
)

ADDRESS, UNDEFINED = Sanitizer.ADDRESS, Sanitizer.UNDEFINED


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ()),
        ("", ()),
        ("address", (ADDRESS,)),
        ("undefined,address", (ADDRESS, UNDEFINED)),
        (" Address , UNDEFINED ,", (ADDRESS, UNDEFINED)),
        ("address,address", (ADDRESS,)),
        (["undefined"], (UNDEFINED,)),
        ((UNDEFINED, "address"), (ADDRESS, UNDEFINED)),
        ((), ()),
    ],
)
def test_sanitizers_are_read_into_one_order(value: object, expected: tuple[Sanitizer]) -> None:
    assert parse_sanitizers(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("adress", r"sanitizer 'adress' \(did you mean 'address'\?\): expected 'address' or 'und"),
        ("asan", r"unknown sanitizer 'asan' \(did you mean 'address'\?\)"),
        ("address,ubsan", r"unknown sanitizer 'ubsan' \(did you mean 'undefined'\?\)"),
        ("thread", r"unknown sanitizer 'thread': expected 'address' or 'undefined' \(comma"),
        (["address", ""], r"unknown sanitizer ''"),
        ([1], r"sanitizers: 1 \(int\) is not a sanitizer name; expected 'address'"),
    ],
)  # fmt: skip
def test_a_bad_sanitizer_is_a_config_error_naming_it(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_sanitizers(value)  # type: ignore[arg-type]


def test_the_records_read_the_setting_when_built_and_keep_it_frozen() -> None:
    request = BuildRequest(
        torch=Path("/t"),
        backend="cpu",  # type: ignore[arg-type]
        output_dir=Path("/o"),
        sanitizers="address,undefined",  # type: ignore[arg-type]
    )
    assert request.sanitizers == (ADDRESS, UNDEFINED)
    assert BuildRequest(torch=Path("/t"), backend="cpu", output_dir=Path("/o")).sanitizers == ()  # type: ignore[arg-type]
    portable = PortableRequest(output_dir=Path("/o"), sanitizers=[UNDEFINED])  # type: ignore[arg-type]
    assert portable.sanitizers == (UNDEFINED,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        portable.sanitizers = ()  # type: ignore[misc]
    with pytest.raises(ConfigError, match="unknown sanitizer 'memory'"):
        PortableRequest(output_dir=Path("/o"), sanitizers="memory")  # type: ignore[arg-type]


@pytest.mark.parametrize("platform", ["darwin", "win32", "linux_aarch64"])
def test_a_toolchain_without_sanitizer_builds_refuses_them_before_planning(
    platform: str, tmp_path: Path
) -> None:
    """Refused before anything is looked up: the request names no compiler or headers
    that exist here."""
    expected = (
        rf"the {toolchain_for(platform).name} toolchain builds no address sanitizer build.*\(gnu\)"
    )
    request = PortableRequest(output_dir=tmp_path / "out", platform=platform, sanitizers=(ADDRESS,))
    with pytest.raises(ConfigError, match=expected):
        driver.plan_portable(request)
    native = BuildRequest(
        torch=tmp_path / "no-torch", backend="cpu", output_dir=tmp_path, platform=platform,  # type: ignore[arg-type]
        sanitizers=(ADDRESS,),
    )  # fmt: skip
    with pytest.raises(ConfigError, match=expected):
        driver.plan_build(native)
    assert not (tmp_path / "out").exists()


def test_a_toolchain_that_offers_a_sanitizer_compiles_with_it(tmp_path: Path) -> None:
    """What a toolchain offers (``sanitizers``) is what its command does: each sanitizer it
    offers puts that sanitizer's flags into the command; the host's gnu toolchain offers
    both (the leak loops need them)."""
    offered = 0
    for toolchain in TOOLCHAINS.values():
        for sanitizer in toolchain.sanitizers:
            command = toolchain.command(_job(tmp_path, (sanitizer,)), "OUT", "SCRATCH")
            assert set(compile_flags((sanitizer,))) <= set(command), (toolchain, sanitizer)
            offered += 1
    assert {ADDRESS, UNDEFINED} <= TOOLCHAINS["gnu"].sanitizers
    assert offered >= 2


def _job(tmp_path: Path, sanitizers: tuple[Sanitizer, ...]) -> CompileJob:
    return CompileJob(
        cxx="CC",
        std="c11",
        defines=(),
        includes=(),
        sources=(tmp_path / "a.c",),
        source_dir=tmp_path,
        lib_dir=None,
        libraries=(),
        filename="NAME",
        language="c",
        sanitizers=sanitizers,
    )


def test_a_sanitizer_build_is_instrumented_and_keeps_its_symbols(tmp_path: Path) -> None:
    gnu = toolchain_for("linux")
    release = gnu.command(_job(tmp_path, ()), "OUT", "SCRATCH")
    sanitized = gnu.command(_job(tmp_path, (ADDRESS, UNDEFINED)), "OUT", "SCRATCH")
    flags = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer", "-g")  # fmt: skip
    assert compile_flags((ADDRESS, UNDEFINED)) == flags
    assert compile_flags(()) == ()
    assert not any(arg.startswith("-fsanitize") or arg == "-g" for arg in release)
    assert "-Wl,--strip-all" in release
    # Everything else is the release command's, the flags after the common ones.
    assert [arg for arg in sanitized if arg not in flags] == [
        arg for arg in release if arg != "-Wl,--strip-all"
    ]
    assert sanitized.index(flags[0]) < sanitized.index("-std=c11")


@pytest.mark.parametrize(
    ("name", "sanitizers", "expected"),
    [
        ("libtorch_c_dlpack_ext-portable.so", (ADDRESS, UNDEFINED),
         "libtorch_c_dlpack_ext-portable-asan-ubsan.so"),
        ("libtorch_c_dlpack_ext-torch2.13-cpu-cxx11abi1.so", (UNDEFINED,),
         "libtorch_c_dlpack_ext-torch2.13-cpu-cxx11abi1-ubsan.so"),
        ("libtorch_c_dlpack_ext-portable.so", (), "libtorch_c_dlpack_ext-portable.so"),
    ],
)  # fmt: skip
def test_a_sanitizer_build_has_a_name_of_its_own(
    name: str, sanitizers: tuple[Sanitizer, ...], expected: str
) -> None:
    assert tagged_filename(name, sanitizers) == expected


@pytest.mark.parametrize(
    ("symbol", "sanitizers", "accepted"),
    [
        ("__asan_report_load8", (ADDRESS,), True),
        ("__asan_init", (UNDEFINED,), False),
        ("__ubsan_handle_add_overflow_abort", (UNDEFINED,), True),
        ("__ubsan_handle_add_overflow_abort", (ADDRESS,), False),
        ("__sanitizer_cov_trace_pc", (UNDEFINED,), True),
        ("__asan_init", (), False),
        ("asan_init", (ADDRESS,), False),
        ("PyObject_GetAttr", (ADDRESS, UNDEFINED), False),
    ],
)
def test_only_the_runtimes_own_symbols_are_accepted(
    symbol: str, sanitizers: tuple[Sanitizer, ...], accepted: bool
) -> None:
    assert accepted_runtime_symbol(symbol, sanitizers) is accepted


def test_a_sanitizer_plan_has_its_own_name_and_cache_key(
    fake_torch: FakeTorch, dlpack_include: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "the test machine needs a C++ compiler (only its --version is run here)"
    sources = tmp_path / "csrc"
    sources.mkdir()
    (sources / "a.cc").write_text("int a() { return 1; }\n", encoding="utf-8")
    for var in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME", "CXX"):
        monkeypatch.delenv(var, raising=False)

    torch = fake_torch()

    def plan(sanitizers: str) -> driver.BuildPlan:
        return driver.plan_build(
            BuildRequest(
                torch=torch, backend="cpu", output_dir=tmp_path / "out",  # type: ignore[arg-type]
                dlpack_include=dlpack_include, source_dir=sources, cxx=cxx,
                platform="linux", sanitizers=sanitizers,  # type: ignore[arg-type]
            )
        )  # fmt: skip

    release, sanitized = plan(""), plan("address,undefined")
    assert sanitized.sanitizers == (ADDRESS, UNDEFINED)
    assert sanitized.job().sanitizers == (ADDRESS, UNDEFINED)
    assert sanitized.filename == tagged_filename(release.filename, (ADDRESS, UNDEFINED))
    assert sanitized.output != release.output
    assert sanitized.cache_key() != release.cache_key()
