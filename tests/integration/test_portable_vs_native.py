"""The portable table against our native library, in one process, on torch 2.4, 2.8 and 2.13.

Issue 30: on torch 2.4 and 2.8, which have no table of their own and export legacy
capsules (and on 2.13, issue 36), the portable table (csrc/portable, abi3) is compared
call by call with the native library built for that torch: the same input to both, and
the same outcome (the same fields, or the same refusal type). Torch 2.13's own table is
the reference of tests/conformance (test_conformance_suite.py); here the native library
is, since it is the table these torches get where a bundled library fits.

Inputs: every layout case of the exchange suite in every dtype the torch has, tensors
the tables refuse (conjugate and negative bits, sparse and nested layouts, meta and
wrapper tensors, non-tensors), tensor subclasses whose Python-level answers lie
(exchange_suite/liars.py), imports of what each table exported and a 0-d import with a
byte_offset and NULL strides, and allocations of every dtype in several shapes, and the
streams of host memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.helpers import ROOT, clean_env, run_python

from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

DIFFERENTIAL = r"""
import ctypes, gc, json, sys, warnings
import torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from exchange_suite.cases import DLPACK_DTYPES, LAYOUTS, make_tensor, present
from exchange_suite.dlpack_ctypes import (
    DLManagedTensorVersioned, DLTensor, ErrorSink, ExchangeLibrary, export_dltensor,
    export_managed, fields_of, import_managed, managed_fields)

native = ExchangeLibrary(__import__("pathlib").Path(sys.argv[1])).api
portable = ExchangeLibrary(__import__("pathlib").Path(sys.argv[2])).api
tables = {"native": native, "portable": portable}
cases = 0
differences = []

def outcome(call):
    try:
        return ["ok", call()]
    except Exception as exc:
        return ["refused", type(exc).__name__]

def export_fields(api, obj):
    managed = export_managed(api, obj)
    fields = managed_fields(managed)._asdict()
    managed.contents.deleter(managed)
    return fields

def dltensor_fields(api, obj):
    return fields_of(export_dltensor(api, obj))._asdict()

def described(tensor):
    return {"dtype": str(tensor.dtype), "shape": list(tensor.shape),
            "stride": list(tensor.stride()), "offset": tensor.storage_offset(),
            "data": tensor.data_ptr(), "device": str(tensor.device),
            "class": type(tensor).__name__, "grad": tensor.requires_grad}

def round_trip(exporter, importer, obj):
    managed = export_managed(tables[exporter], obj)
    tensor = import_managed(tables[importer], managed)
    same = bool((tensor.view(torch.uint8) == obj.detach().view(torch.uint8)).all()) \
        if obj.dim() and obj.numel() and obj.is_contiguous() else None
    return {**described(tensor), "values_equal": same}

def compare(case, what, results):
    global cases
    cases += 1
    native_result, portable_result = results["native"], results["portable"]
    if native_result != portable_result:
        differences.append({"case": case, "what": what, "native": native_result,
                            "portable": portable_result})

def both(case, what, call):
    compare(case, what, {name: outcome(lambda api=api: call(api)) for name, api in tables.items()})

warnings.simplefilter("ignore")
objects = []
for name in present(DLPACK_DTYPES):
    dtype = getattr(torch, name)
    for shape in [(2, 3), (0,), (), (4, 1, 2)]:
        try:
            objects.append((f"{name}{list(shape)}", make_tensor(dtype, shape)))
        except BaseException:  # make_tensor skips (pytest.skip) what this torch cannot make
            pass
objects += [(f"layout:{name}", factory()) for name, factory in LAYOUTS]
refusals = [
    ("conj", lambda: torch.ones(3, dtype=torch.complex64).conj()),
    ("neg", lambda: torch._neg_view(torch.ones(3))),
    ("sparse_coo", lambda: torch.ones(2, 2).to_sparse()),
    ("sparse_csr", lambda: torch.ones(2, 2).to_sparse_csr()),
    ("nested", lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])),
    ("meta", lambda: torch.empty(2, 3, device="meta")),
    ("quantized", lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)),
    ("not_a_tensor", lambda: object()),
    ("int", lambda: 3),
    ("numpy_like", lambda: [1.0, 2.0]),
]
for name, factory in refusals:
    try:
        objects.append((f"refusal:{name}", factory()))
    except Exception:
        pass

for case, obj in objects:
    both(case, "export", lambda api: export_fields(api, obj))
    both(case, "dltensor", lambda api: dltensor_fields(api, obj))
    if isinstance(obj, torch.Tensor) and obj.layout == torch.strided and obj.device.type == "cpu":
        # What each table exported, imported by each: every pair gives the same tensor.
        for exporter in tables:
            results = {name: outcome(lambda name=name: round_trip(exporter, name, obj))
                       for name in tables}
            compare(case, f"import of {exporter}'s export", results)
    gc.collect()

# Tensors whose Python-level answers lie (exchange_suite/liars.py): the native table reads
# the C++ tensor; the portable table must describe the same memory.
from exchange_suite.liars import liars
for name, liar, _plain in liars():
    both(f"liar:{name}", "export", lambda api: export_fields(api, liar))
    both(f"liar:{name}", "dltensor", lambda api: dltensor_fields(api, liar))

# A 0-d import whose byte_offset points past the first element, with NULL strides: the
# native table accepts it on every torch, so must the portable one (torch 2.13 itself
# refuses NULL strides with a byte_offset).
buffer = torch.arange(4, dtype=torch.float32)
kept = []
def zero_dim_import(api):
    m = DLManagedTensorVersioned()
    m.version.major, m.version.minor = 1, 3
    dl = m.dl_tensor
    dl.data, dl.ndim, dl.shape, dl.strides, dl.byte_offset = buffer.data_ptr(), 0, None, None, 8
    dl.device.device_type = 1
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = 2, 32, 1
    kept.append(m)
    tensor = import_managed(api, ctypes.pointer(m))
    return {**described(tensor), "value": float(tensor),
            "at": tensor.data_ptr() - buffer.data_ptr()}
both("0-d byte_offset", "import", zero_dim_import)
assert all(r == ["ok", {**r[1], "value": 2.0}] for r in
           [outcome(lambda api=api: zero_dim_import(api)) for api in tables.values()]), \
    [outcome(lambda api=api: zero_dim_import(api)) for api in tables.values()]

for name, (code, bits, lanes) in DLPACK_DTYPES.items():
    for shape in [(4,), (2, 3), (), (0, 5)]:
        def allocate(api, code=code, bits=bits, lanes=lanes, shape=shape):
            dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
            proto = DLTensor()
            proto.ndim, proto.shape = len(shape), dims
            proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = code, bits, lanes
            proto.device.device_type = 1
            out = ctypes.POINTER(DLManagedTensorVersioned)()
            sink = ErrorSink()
            rc = api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None,
                                              sink.callback)
            if rc != 0:
                return {"rc": rc, "kinds": [kind for kind, _ in sink.errors]}
            fields = managed_fields(out)._asdict()
            fields.pop("data")
            out.contents.deleter(out)
            return {"rc": rc, **fields}
        both(f"allocate {name}{list(shape)}", "allocator", allocate)

# Host memory only: these PyPI torches are CUDA builds, which the portable table serves as
# such (GPU streams through torch.cuda), while the native library compared here is the
# CPU one; the GPU stream mapping has its own tests (test_portable_table.py, stand-in
# builds) and the GPU check.
for device_type in (1, 3, 11, 13):
    def stream(api, device_type=device_type):
        out = ctypes.c_void_p(7)
        rc = api.current_work_stream(device_type, 0, ctypes.byref(out))
        return [rc, out.value]
    both(f"stream {device_type}", "current_work_stream", stream)

print(json.dumps({"torch": torch.__version__, "cases": cases, "differences": differences}))
"""


@pytest.mark.parametrize("version", ["2.4.1", "2.8.0", "running"])
def test_portable_table_matches_the_native_library(
    request: pytest.FixtureRequest, portable_library: Path, build_cache: Path, version: str
) -> None:
    """torch 2.4 and 2.8 (legacy capsules, no table of their own) and the running 2.13."""
    if version == "running":
        native, _ = request.getfixturevalue("torch213_library")
        python: Path | str = sys.executable
    else:
        env = request.getfixturevalue("old_torch_env")(version)
        install = TorchInstall.from_path(env.root)
        output_dir = build_cache / f"torch{version}-portable-vs-native"
        entry = compile_library(BuildRequest(torch=install, backend="cpu", output_dir=output_dir))
        native, python = output_dir / entry.file, env.python
    proc = run_python(
        DIFFERENTIAL,
        args=[str(native), str(portable_library), str(ROOT / "tests"), str(ROOT / "python")],
        env=clean_env(), python=python, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert version == "running" or report["torch"].startswith(version)
    print(f"torch {report['torch']}: {report['cases']} cases compared", file=sys.stderr)
    # Every layout in every dtype, the refusals, the imports, allocations and streams.
    assert report["cases"] >= 300, report["cases"]
    assert report["differences"] == [], json.dumps(report["differences"][:10], indent=1)
