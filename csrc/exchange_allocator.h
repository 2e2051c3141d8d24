// The native table's allocator: managed_tensor_allocator.
// Part of csrc/exchange_api.cc's one translation unit (included there, in this order):
// every file that includes ATen costs the compiler about 20 s and 1.4 GB, so the native
// table's rooms are headers of one .cc rather than .cc files of their own.
#pragma once

namespace {

using SetErrorFn = void (*)(void* error_ctx, const char* kind, const char* message);

int AllocatorFail(DLManagedTensorVersioned** out, void* error_ctx, SetErrorFn set_error,
                  const char* kind, const char* message) noexcept {
  if (out != nullptr) *out = nullptr;
  if (set_error != nullptr) set_error(error_ctx, kind, message);
  return -1;
}

// Whether at::empty fills new memory: torch.use_deterministic_algorithms(True)
// with torch.utils.deterministic.fill_uninitialized_memory (its default) makes
// it fill floats with NaN and integers with their maximum. Then the allocator
// goes through at::empty, so its memory holds what torch's own table gives
// (docs/facts.md, "What the exchange hot paths rest on").
// Read per call: Python can switch the mode at any time.
bool FillsUninitializedMemory() {
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

// Sizes at::empty would refuse: a negative size, or more than int64 holds.
enum class LayoutProblem { kNone, kNegative, kOverflow };

// The contiguous layout at::empty gives `sizes` (copied into `shape`), with the
// strides written to `strides` and the byte size to `*nbytes`; c10's own rules
// decide what it refuses (c10/core/TensorImpl.h: safe_compute_numel and
// empty_tensor_restride; computeStorageNbytesContiguous): the element count,
// multiplied left to right (an overflow before a zero size still counts), the
// byte size, and every row-major stride (zero sizes count as one) must fit in
// int64. `*bad_dim` names a negative size.
LayoutProblem ContiguousLayout(const int64_t* sizes, int32_t ndim, uint64_t itemsize,
                               int64_t* shape, int64_t* strides, uint64_t* nbytes,
                               int32_t* bad_dim) noexcept {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1;
  bool overflow = false;
  for (int32_t i = 0; i < ndim; ++i) {
    const int64_t size = sizes[i];
    if (size < 0) {
      *bad_dim = i;
      return LayoutProblem::kNegative;
    }
    shape[i] = size;
    overflow |= TcdeMulOverflows(numel, static_cast<uint64_t>(size), &numel);
  }
  overflow |= numel > kMax || TcdeMulOverflows(numel, itemsize, nbytes) || *nbytes > kMax;
  uint64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    strides[i] = static_cast<int64_t>(stride);
    if (i > 0) {
      overflow |= TcdeMulOverflows(stride, static_cast<uint64_t>(std::max<int64_t>(shape[i], 1)),
                               &stride) ||
                  stride > kMax;
    }
  }
  return overflow ? LayoutProblem::kOverflow : LayoutProblem::kNone;
}

void DeleteStorageReference(void* storage) noexcept { delete static_cast<c10::Storage*>(storage); }

// The memory of a tensor at::empty (or the backend's own empty) just made, as a
// DataPtr holding a reference to its storage. Throws std::runtime_error (not a
// c10::Error: this is no allocation failure) if the tensor is not plain memory
// of the requested layout: a Python mode may answer at::empty.
c10::DataPtr MemoryOf(const at::TensorBase& t, const c10::Device& device,
                      c10::ScalarType scalar_type, at::IntArrayRef sizes, uint64_t nbytes) {
  if (!t.defined() || t.device() != device || t.scalar_type() != scalar_type ||
      t.sizes() != sizes || !t.is_contiguous() || !t.has_storage()) {
    throw std::runtime_error(
        "torch-c-dlpack-ext allocator: at::empty returned a tensor that is not plain memory "
        "of the requested dtype, device and shape (is a Python mode active?)");
  }
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  void* data = nbytes == 0 ? nullptr : t.data_ptr();
  const auto offset_bytes = static_cast<uint64_t>(t.storage_offset()) * t.element_size();
  if (nbytes != 0 && (data == nullptr || storage.nbytes() < offset_bytes + nbytes)) {
    throw std::runtime_error(
        "torch-c-dlpack-ext allocator: at::empty returned a tensor without the memory it "
        "describes (is a Python mode active?)");
  }
  return c10::DataPtr(data, new c10::Storage(storage), &DeleteStorageReference, device);
}

#if defined(TCDE_BACKEND_CUDA)
// CUDA memory from the allocator at::empty takes it from, with at::detail::empty_cuda's
// own steps (aten/src/ATen/cuda/EmptyTensor.cpp; the same in torch 2.6.0's and 2.9.1's
// source and in 2.11's and 2.15's libtorch_cuda): the lazy CUDA init (which also
// initializes the caching allocator), a device guard (the caching allocator serves the
// current device, on its current stream), and the allocator at::cuda::getCUDADeviceAllocator()
// returns, c10's caching allocator or the one torch.cuda.memory.change_current_allocator
// installed. Without the dispatcher, a tensor and its storage, which at::empty made ours
// cost what torch's own table costs (1,055 vs 1,029 ns for float32[16] on an H200,
// docs/facts.md "What torch's own members do on CUDA"). Only libc10_cuda and libtorch_cpu,
// both already linked (at::detail::empty_cuda itself would link libtorch_cuda, whose
// NEEDED entry every load of the library paid for: docs/facts.md, "torch_python is
// resolved at run time").
c10::DataPtr AllocateCudaMemory(c10::DeviceIndex index, uint64_t nbytes) {
#if TCDE_TORCH_AT_LEAST(2, 6)
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
#else
  at::globalContext().lazyInitCUDA();  // lazyInitDevice() arrived in 2.6
#endif
  // c10's DeviceGuard (the registered CUDA guard, through its virtual interface), as
  // empty_cuda uses it: c10::cuda::CUDAGuard's inline code would call libcudart.
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, index));
  return c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<size_t>(nbytes));
}
#endif

// Memory for a contiguous tensor of `sizes`, from the allocator at::empty would
// use. Host memory (the common case) comes from c10::GetCPUAllocator(), as in
// at::detail::empty_cpu, and CUDA memory from the caching allocator
// (AllocateCudaMemory), without the dispatcher and without building a tensor only to
// take its memory. The deterministic fill (see FillsUninitializedMemory) and ROCm
// memory go through at::empty: its kernel fills, and the ROCm build's direct path
// (HIP's caching allocator behind its CUDA masquerade) cannot be compiled here (no
// ROCm torch's headers are published on PyPI).
c10::DataPtr AllocateMemory(bool host, const c10::Device& device, c10::ScalarType scalar_type,
                            at::IntArrayRef sizes, uint64_t nbytes) {
  if (C10_LIKELY(!FillsUninitializedMemory())) {
    if (C10_LIKELY(host)) return c10::GetCPUAllocator()->allocate(nbytes);
#if defined(TCDE_BACKEND_CUDA)
    return AllocateCudaMemory(device.index(), nbytes);
#endif
  }
  // The overload with explicit options: the same operator call as with
  // TensorOptions, without assembling and re-checking a TensorOptions first.
  return MemoryOf(at::empty(sizes, scalar_type, std::nullopt, device, std::nullopt, std::nullopt),
                  device, scalar_type, sizes, nbytes);
}

using AllocatedContext = ManagedContext<c10::DataPtr>;

struct AllocatedContextDeleter {
  void operator()(AllocatedContext* ctx) const noexcept {
    DeleteManagedContext<c10::DataPtr>(&ctx->managed);
  }
};

// Errors go through SetError, not the Python error indicator: the consumer
// decides how to surface them. Kinds: ValueError for a prototype torch cannot
// represent (its dtype, its device, a negative size, or an element count, byte
// size or stride beyond int64, which at::empty refuses with a RuntimeError),
// MemoryError when the memory cannot be allocated (the CPU allocator's failure,
// which c10 reports as a plain c10::Error, c10::OutOfMemoryError, std::bad_alloc),
// RuntimeError otherwise (for example a CUDA error).
int ManagedTensorAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                           SetErrorFn set_error) {
  char message[256];
  try {
    if (prototype == nullptr || out == nullptr) {
      return AllocatorFail(out, error_ctx, set_error, "ValueError",
                           "torch-c-dlpack-ext allocator: prototype and out must not be NULL");
    }
    *out = nullptr;
    c10::ScalarType scalar_type{};
    if (!tcde::FromDLDataType(prototype->dtype, &scalar_type)) {
      std::snprintf(message, sizeof(message),
                    "torch-c-dlpack-ext allocator: DLPack dtype (code=%u, bits=%u, lanes=%u) has "
                    "no torch equivalent; request a dtype torch supports",
                    static_cast<unsigned>(prototype->dtype.code),
                    static_cast<unsigned>(prototype->dtype.bits),
                    static_cast<unsigned>(prototype->dtype.lanes));
      return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
    }
    // Host memory is the common case: only other device types need the device checks.
    const bool host = prototype->device.device_type == kDLCPU;
    c10::Device device(c10::DeviceType::CPU);
    if (!host) {
      if (const char* backend = tcde::BackendServing(prototype->device.device_type)) {
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: cannot allocate on DLPack device type %d id "
                      "%d with its " TCDE_BACKEND_NAME " build, which serves no such device; use "
                      "the %s build",
                      static_cast<int>(prototype->device.device_type),
                      static_cast<int>(prototype->device.device_id), backend);
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      }
      if (!tcde::FromDLDevice(prototype->device, &device)) {
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: cannot allocate on DLPack device type %d id "
                      "%d with this library (a " TCDE_BACKEND_NAME " build)",
                      static_cast<int>(prototype->device.device_type),
                      static_cast<int>(prototype->device.device_id));
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      }
    }
    const int32_t ndim = prototype->ndim;
    if (ndim < 0 || (ndim > 0 && prototype->shape == nullptr)) {
      return AllocatorFail(out, error_ctx, set_error, "ValueError",
                           "torch-c-dlpack-ext allocator: prototype ndim is negative or its "
                           "shape is NULL");
    }
    // One allocation for the context, its shape and its strides; the memory follows.
    std::unique_ptr<AllocatedContext, AllocatedContextDeleter> ctx(
        NewContext(c10::DataPtr(), ndim));
    int64_t* shape = ctx->dims();
    int64_t* strides = shape + ndim;
    uint64_t nbytes = 0;
    int32_t bad_dim = 0;
    const auto itemsize = static_cast<uint64_t>(c10::elementSize(scalar_type));
    switch (ContiguousLayout(prototype->shape, ndim, itemsize, shape, strides, &nbytes,
                             &bad_dim)) {
      case LayoutProblem::kNone:
        break;
      case LayoutProblem::kNegative:
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: prototype shape[%d] is %lld; sizes must be "
                      ">= 0",
                      static_cast<int>(bad_dim), static_cast<long long>(prototype->shape[bad_dim]));
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      case LayoutProblem::kOverflow:
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: a contiguous tensor of this prototype's %d "
                      "sizes and %llu-byte elements has an element count, byte size or stride "
                      "beyond int64, which torch cannot represent; request a smaller shape",
                      static_cast<int>(ndim), static_cast<unsigned long long>(itemsize));
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
    }
    try {
      ctx->owner = AllocateMemory(host, device, scalar_type,
                                  at::IntArrayRef(shape, static_cast<size_t>(ndim)), nbytes);
    } catch (const c10::OutOfMemoryError& e) {
      return AllocatorFail(out, error_ctx, set_error, "MemoryError", e.what_without_backtrace());
    } catch (const c10::Error& e) {
      // The sizes were checked above: on host memory, the allocator failing is the one
      // c10::Error left (DefaultCPUAllocator: "can't allocate memory").
      return AllocatorFail(out, error_ctx, set_error, host ? "MemoryError" : "RuntimeError",
                           e.what_without_backtrace());
    }
    DLTensor& dl = ctx->managed.dl_tensor;
    // NULL for a tensor without elements, as exports have it.
    dl.data = nbytes == 0 ? nullptr : ctx->owner.get();
    dl.device = prototype->device;
    if (host) dl.device.device_id = 0;  // as an export of a CPU tensor reports it
    dl.ndim = ndim;
    dl.dtype = prototype->dtype;
    dl.shape = shape;
    dl.strides = strides;
    dl.byte_offset = 0;
    *out = &ctx.release()->managed;
    return 0;
  } catch (const c10::OutOfMemoryError& e) {
    return AllocatorFail(out, error_ctx, set_error, "MemoryError", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError", e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return AllocatorFail(out, error_ctx, set_error, "MemoryError",
                         "torch-c-dlpack-ext allocator: out of host memory");
  } catch (const std::exception& e) {
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError", e.what());
  } catch (...) {
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                         "torch-c-dlpack-ext allocator: unknown C++ exception");
  }
}

}  // namespace
