// The native table's import: managed_tensor_to_py_object_no_sync.
// Part of csrc/exchange_api.cc's one translation unit (included there, in this order):
// every file that includes ATen costs the compiler about 20 s and 1.4 GB, so the native
// table's rooms are headers of one .cc rather than .cc files of their own.
#pragma once

namespace {

// The storage deleter of an import while its tensor is being built: none. If
// building fails, the storage dies without touching the producer's tensor (a
// failed import leaves it with the caller, deleter not run); DeleteImported is
// swapped in once the tensor exists (c10::DataPtr::compare_exchange_deleter).
void KeepImported(void* /*ctx*/) noexcept {}

// Storage context deleter of an imported tensor: hands the memory back to its
// producer, exactly once, when torch frees the storage.
void DeleteImported(void* ctx) noexcept {
  auto* managed = static_cast<DLManagedTensorVersioned*>(ctx);
  if (managed->deleter != nullptr) managed->deleter(managed);
}

// Ownership rule: on failure (-1) ownership has NOT been taken and the deleter
// has NOT been called; the caller still owns `src` and must delete it. This is
// what torch 2.13's own implementation does for bad dtypes and devices (its
// deleter is not called), and it is the only rule that lets a caller clean up
// without risking a double free.
int ManagedTensorToPyObjectNoSync(DLManagedTensorVersioned* src, void** out_py) {
  try {
    if (src == nullptr || out_py == nullptr) {
      PyErr_Format(PyExc_ValueError,
                   "%s: managed_tensor_to_py_object_no_sync: tensor and out must not be NULL",
                   kLib);
      return -1;
    }
    *out_py = nullptr;
    const DLTensor& dl = src->dl_tensor;
    // The contract's preamble (tcde_contract.h), with this build's dtype and device
    // answers in between. A different major version may have a different layout after
    // `flags`. torch has no read-only tensors: importing read-only memory (a constant
    // buffer, a read-only mapping) as a writable tensor would let any in-place op write to
    // it. torch 2.13 ignores the flag; we refuse. IS_COPIED (the producer made a copy)
    // and the sub-byte padding flag need nothing.
    if (src->version.major != DLPACK_MAJOR_VERSION) {
      return TcdeRaiseWrongMajor(kLib, static_cast<unsigned>(src->version.major));
    }
    if ((src->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0) {
      return TcdeRaiseBadImport(kLib, TCDE_IMPORT_READ_ONLY, &dl);
    }
    c10::ScalarType scalar_type{};
    if (!tcde::FromDLDataType(dl.dtype, &scalar_type)) {
      return TcdeRaiseBadImport(kLib, TCDE_IMPORT_NO_DTYPE, &dl);
    }
    if (const char* backend = tcde::BackendServing(dl.device.device_type)) {
      // torch itself would make a tensor of it on a device none of its kernels run on
      // ("cuda" in its CPU build, "hip" in a CUDA one) or refuse it (ROCm, kDLCUDA).
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot import a DLPack tensor on device type %d id %d with its "
                   TCDE_BACKEND_NAME " build: it is %s memory, which this torch runs no "
                   "kernels on; use the %s build on a %s torch (install the wheel that "
                   "carries it or set TORCH_C_DLPACK_EXT_JIT=1). The DLManagedTensorVersioned "
                   "was not consumed and its deleter was not called",
                   kLib, static_cast<int>(dl.device.device_type),
                   static_cast<int>(dl.device.device_id), backend, backend, backend);
      return -1;
    }
    c10::Device device(c10::DeviceType::CPU);
    if (!tcde::FromDLDevice(dl.device, &device)) {
      return TcdeRaiseBadImport(kLib, TCDE_IMPORT_NO_DEVICE, &dl);
    }
    // An element-aligned byte_offset is a storage offset, as in torch 2.13: the
    // storage starts at `data` and covers the offset plus the view's extent.
    // (Not at::TensorMaker's storage_offset(): in the torch releases this library
    // serves it adds the offset to the storage size in elements, not bytes, a
    // too-small storage that views, copies and torch.save read past.) torch 2.13
    // refuses an unaligned offset; so do we: the elements would be misaligned.
    const auto itemsize = static_cast<uint64_t>(c10::elementSize(scalar_type));
    uint64_t storage_elements = 0;
    int empty_view = 0;
    if (const char* problem =
            TcdeImportLayoutProblem(&dl, itemsize, &storage_elements, &empty_view)) {
      return TcdeRaiseBadImport(kLib, problem, &dl);
    }
    const bool empty = empty_view != 0;
    const at::IntArrayRef sizes(dl.shape, static_cast<size_t>(dl.ndim));
    const uint64_t storage_offset = dl.byte_offset / itemsize;
    // Built directly (what at::for_blob(...).make_tensor() does, without the
    // builder, its dispatch-key and tracer guards, which need nothing here, and
    // its second pass over the sizes): a storage from `data` covering the offset
    // and the view's whole extent, then the view on it. A view without elements
    // gets an empty storage and no offset: its offset addresses nothing, and a
    // storage of that size (torch 2.13 makes one) would have torch.save and
    // copy.deepcopy read memory the producer never provided.
    const int64_t offset = empty ? 0 : static_cast<int64_t>(storage_offset);
    const size_t nbytes = empty ? 0 : static_cast<size_t>(storage_elements * itemsize);
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                         c10::DataPtr(dl.data, src, &KeepImported, device),
                         /*allocator=*/nullptr, /*resizable=*/false);
    c10::StorageImpl* storage_impl = storage.unsafeGetStorageImpl();
    // FromDLDevice() makes CPU or CUDA devices only (a ROCm torch's HIP devices are
    // "cuda"): their dispatch keys, as TensorOptions::computeDispatchKey() gives them.
    const c10::DispatchKeySet keys(device.is_cpu() ? c10::DispatchKey::CPU
                                                   : c10::DispatchKey::CUDA);
    at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), keys, c10::scalarTypeToTypeMeta(scalar_type));
    c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
    if (dl.strides != nullptr && dl.ndim > 0) {
      impl->set_sizes_and_strides(sizes, at::IntArrayRef(dl.strides, static_cast<size_t>(dl.ndim)),
                                  offset);
    } else if (offset == 0) {
      // A NULL strides array (allowed before DLPack 1.2) means compact row-major.
      impl->set_sizes_contiguous(sizes);
    } else {
      c10::SmallVector<int64_t, 8> strides(static_cast<size_t>(dl.ndim));
      int64_t step = 1;
      for (int32_t i = dl.ndim - 1; i >= 0; --i) {
        strides[i] = step;
        // (checked above not to overflow; the first size is never multiplied in)
        if (i > 0) step *= std::max<int64_t>(dl.shape[i], 1);
      }
      impl->set_sizes_and_strides(sizes, strides, offset);
    }
    // The tensor exists: from here its storage hands `src` back to the producer.
    c10::DataPtr& data_ptr = storage_impl->mutable_data_ptr();
    if (!data_ptr.compare_exchange_deleter(&KeepImported, &DeleteImported)) {
      PyErr_Format(PyExc_RuntimeError, "%s: the imported storage lost its deleter", kLib);
      return -1;
    }
    // If wrapping fails, detach our deleter again before `tensor` dies, so the
    // failure still leaves `src` with the caller.
    PyObject* wrapped = nullptr;
    try {
      wrapped = tcde::WrapTensor(tensor);
    } catch (...) {
      RaiseCurrentException(PyExc_RuntimeError);
    }
    if (wrapped == nullptr) {
      (void)data_ptr.compare_exchange_deleter(&DeleteImported, &KeepImported);
      return -1;
    }
    *out_py = wrapped;
    return 0;
  } catch (...) {
    // Building the tensor failed; its storage had KeepImported: not consumed.
    return RaiseCurrentException(PyExc_BufferError);
  }
}

}  // namespace
