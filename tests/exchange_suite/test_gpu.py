"""CUDA / ROCm devices: device fields, streams, allocation. Needs a GPU."""

from __future__ import annotations

import ctypes

import pytest
import torch

from .dlpack_ctypes import (
    DLDeviceType,
    DLPackExchangeAPI,
    ExchangeLibrary,
    export_dltensor,
    export_managed,
    fields_of,
    import_managed,
    managed_fields,
)


@pytest.fixture
def gpu_library(exchange_library: ExchangeLibrary) -> ExchangeLibrary:
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda.is_available() is False: no CUDA/ROCm device on this machine")
    backend = exchange_library.backend
    if backend == "cpu":
        pytest.skip("the library under test is a CPU build; GPU tests need a cuda/rocm build")
    return exchange_library


def gpu_device_type() -> int:
    return DLDeviceType.kDLROCM if getattr(torch.version, "hip", None) else DLDeviceType.kDLCUDA


@pytest.mark.gpu
class TestGPU:
    def test_device_fields(self, gpu_library: ExchangeLibrary, api: DLPackExchangeAPI) -> None:
        for index in range(torch.cuda.device_count()):
            tensor = torch.arange(12.0, device=f"cuda:{index}").reshape(3, 4)[1:]
            managed = export_managed(api, tensor)
            fields = managed_fields(managed)
            managed.contents.deleter(managed)
            assert (fields.device_type, fields.device_id) == (gpu_device_type(), index)
            assert fields.data == tensor.data_ptr()
            assert fields.shape == (2, 4)
            assert fields.strides == (4, 1)
            dl = fields_of(export_dltensor(api, tensor))
            assert (dl.device_type, dl.device_id, dl.data) == (
                gpu_device_type(),
                index,
                fields.data,
            )

    def test_same_as_torch(
        self,
        gpu_library: ExchangeLibrary,
        api: DLPackExchangeAPI,
        need_torch_api: DLPackExchangeAPI,
    ) -> None:
        tensor = torch.ones(5, 6, device="cuda").t()

        def describe(table: DLPackExchangeAPI) -> object:
            managed = export_managed(table, tensor)
            fields = managed_fields(managed)
            managed.contents.deleter(managed)
            return fields

        assert describe(api) == describe(need_torch_api)

    def test_current_stream(self, gpu_library: ExchangeLibrary, api: DLPackExchangeAPI) -> None:
        stream = ctypes.c_void_p()
        for index in range(torch.cuda.device_count()):
            api.current_work_stream(gpu_device_type(), index, ctypes.byref(stream))
            assert (stream.value or 0) == torch.cuda.current_stream(index).cuda_stream
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            api.current_work_stream(gpu_device_type(), side.device.index, ctypes.byref(stream))
            assert stream.value == side.cuda_stream
        assert side.cuda_stream != 0

    def test_round_trip(self, gpu_library: ExchangeLibrary, api: DLPackExchangeAPI) -> None:
        tensor = torch.arange(8, device="cuda", dtype=torch.int32)
        back = import_managed(api, export_managed(api, tensor))
        assert back.device == tensor.device
        assert back.data_ptr() == tensor.data_ptr()
        back.fill_(3)
        assert tensor.eq(3).all().item()

    def test_allocator(self, gpu_library: ExchangeLibrary, api: DLPackExchangeAPI) -> None:
        from .test_allocator_stream import allocate

        status, out, sink = allocate(api, (4, 4), device_type=gpu_device_type(), device_id=0)
        assert (status, sink.errors) == (0, [])
        fields = managed_fields(out)
        assert (fields.device_type, fields.device_id) == (gpu_device_type(), 0)
        tensor = import_managed(api, out)
        assert tensor.device == torch.device("cuda", 0)

    def test_pinned_host_memory_same_as_torch(
        self,
        gpu_library: ExchangeLibrary,
        api: DLPackExchangeAPI,
        need_torch_api: DLPackExchangeAPI,
    ) -> None:
        tensor = torch.ones(8).pin_memory()

        def describe(table: DLPackExchangeAPI) -> object:
            managed = export_managed(table, tensor)
            fields = managed_fields(managed)
            managed.contents.deleter(managed)
            return fields

        assert describe(api) == describe(need_torch_api)
