// The native table's exports: managed_tensor_from_py_object_no_sync and
// dltensor_from_py_object_no_sync (Describe: what DLPack says of a tensor, or why not).
// Part of csrc/exchange_api.cc's one translation unit (included there, in this order):
// every file that includes ATen costs the compiler about 20 s and 1.4 GB, so the native
// table's rooms are headers of one .cc rather than .cc files of their own.
#pragma once

namespace {

// Why a tensor cannot be exported; kNone when it can.
enum class ExportProblem {
  kNone,
  kLayout,
  kNested,
  kDtype,
  kConj,
  kNeg,
  kUnservedGpu,
  kDevice,
  kNoStorage,
  kWrongDevice,
  kOutsideStorage
};

// The contract's rule (tcde_contract.h) for a tensor whose sizes, strides, offset or
// device Python may have answered (the Python dispatch key: a subclass's
// __torch_dispatch__ with a sizes/strides policy or dispatch_device): `described` lies
// within the C++ storage and on its device. Out of line: the common tensor never gets here.
C10_NOINLINE ExportProblem CheckAgainstStorage(const at::Tensor& t,
                                               const DLTensor& described) noexcept {
  TcdeStorageFacts facts{};
  try {
    const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
    DLDevice storage_device{};
    if (storage && tcde::ToDLDevice(storage.device(), &storage_device)) {
      facts.data = reinterpret_cast<uintptr_t>(storage.data_ptr().get());
      facts.nbytes = static_cast<uint64_t>(storage.nbytes());
      facts.device = storage_device;
      facts.known = facts.data != 0;
    }
  } catch (...) {
    facts.known = 0;  // a storage that refuses to be read has no memory to export
  }
  switch (TcdeCheckDescribed(&described, TcdeItemSize(described.dtype), &facts)) {
    case kTcdeDescribedOk:
      return ExportProblem::kNone;
    case kTcdeDescribedNoStorage:
      return ExportProblem::kNoStorage;
    case kTcdeDescribedWrongDevice:
      return ExportProblem::kWrongDevice;
    case kTcdeDescribedOutside:
      break;
  }
  return ExportProblem::kOutsideStorage;
}

// Fills `out`, with shape and strides borrowed from the tensor (valid while it
// lives and keeps its metadata), or says why DLPack cannot describe the tensor.
// `out` is written only after every check passed and every accessor returned,
// so a failure (or exception) leaves it untouched. The fields are built in
// locals and stored one by one into the caller's struct: no DLTensor is
// assembled on the stack and copied whole, whose wide loads would wait on the
// narrow stores just made (a store-forwarding stall).
ExportProblem Describe(const at::Tensor& t, DLTensor* out) {
  // Order matters: later checks call accessors that throw on the earlier kinds.
  // Nested first: a jagged nested tensor also has a layout of its own (kJagged),
  // and the layout message's remedy (.to_dense()) does not apply to it.
  if (t.is_nested()) return ExportProblem::kNested;
  if (t.layout() != c10::kStrided) return ExportProblem::kLayout;
  DLDataType dtype;
  if (!tcde::ToDLDataType(t.scalar_type(), &dtype)) return ExportProblem::kDtype;
  // DLPack has no conjugate/negative flags: exporting the raw memory would
  // silently hand out the wrong values (torch 2.13 does; we refuse).
  if (t.is_conj()) return ExportProblem::kConj;
  if (t.is_neg()) return ExportProblem::kNeg;
  if (tcde::IsUnservedGpu(t.device().type())) return ExportProblem::kUnservedGpu;
  DLDevice device;
  if (!tcde::ToDLDevice(t.device(), &device)) return ExportProblem::kDevice;
  if (!t.has_storage()) return ExportProblem::kNoStorage;
  const auto ndim = static_cast<int32_t>(t.dim());
  // Like torch 2.13: data is the first element (storage + offset), byte_offset
  // 0, and NULL for tensors without elements.
  void* data = nullptr;
  if (t.numel() != 0) {
    // Fake and functional tensors refuse data_ptr() (a c10::Error naming neither this
    // library nor a remedy): they have no memory to export.
    try {
      data = t.data_ptr();
    } catch (const c10::Error&) {
      return ExportProblem::kNoStorage;
    }
    // Wrapper subclasses and fake tensors have elements but no memory. torch
    // 2.13 exports them with data == NULL, which a consumer would dereference;
    // we refuse instead.
    if (data == nullptr) return ExportProblem::kNoStorage;
  }
  int64_t* shape = const_cast<int64_t*>(t.sizes().data());
  int64_t* strides = const_cast<int64_t*>(t.strides().data());
  // Python may have answered the sizes, strides, offset or device (the cost of the
  // check is one bit test for every other tensor, whose answers are the TensorImpl's).
  if (C10_UNLIKELY(t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python))) {
    const DLTensor described{data, device, ndim, dtype, shape, strides, 0};
    const ExportProblem problem = CheckAgainstStorage(t, described);
    if (problem != ExportProblem::kNone) return problem;
  }
  out->data = data;
  out->device = device;
  out->ndim = ndim;
  out->dtype = dtype;
  out->shape = shape;
  out->strides = strides;
  out->byte_offset = 0;
  return ExportProblem::kNone;
}

// Sets a BufferError (the object is a tensor, DLPack just cannot describe it) naming the problem
// and the fix. Error path only, so building strings here is fine.
int RaiseExportProblem(ExportProblem problem, const at::Tensor& t) {
  switch (problem) {
    case ExportProblem::kLayout: {
      std::ostringstream layout;
      layout << t.layout();
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with layout %s through DLPack, which describes "
                   "only strided tensors; convert it with .to_dense() first",
                   kLib, layout.str().c_str());
      break;
    }
    case ExportProblem::kNested:
      // Neither kind of nested tensor has .to_dense(): name what each has on every
      // torch served (a jagged one has no to_padded_tensor() on torch 2.4).
      if (t.layout() == c10::kJagged) {
        PyErr_Format(PyExc_BufferError,
                     TCDE_EXPORT_JAGGED_NESTED,
                     kLib);
      } else {
        PyErr_Format(PyExc_BufferError,
                     TCDE_EXPORT_NESTED,
                     kLib);
      }
      break;
    case ExportProblem::kDtype:
      PyErr_Format(PyExc_BufferError,
                   "%s: dtype %s has no DLPack equivalent; convert the tensor first (e.g. "
                   ".dequantize() for quantized tensors, .to(torch.float32))",
                   kLib, c10::toString(t.scalar_type()));
      break;
    case ExportProblem::kConj:
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with its conjugate bit set (DLPack cannot express "
                   "a lazy conjugation); call .resolve_conj() first",
                   kLib);
      break;
    case ExportProblem::kNeg:
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with its negative bit set (DLPack cannot express "
                   "a lazy negation); call .resolve_neg() first",
                   kLib);
      break;
    case ExportProblem::kUnservedGpu:
      PyErr_Format(PyExc_BufferError,
                   "%s: this is its " TCDE_BACKEND_NAME " build, which does not export tensors on "
                   "device '%s': it cannot report their stream (current_work_stream), and a "
                   "consumer would run on the wrong one. Use the cuda build (the rocm build on "
                   "a ROCm torch): install the wheel that carries it or set "
                   "TORCH_C_DLPACK_EXT_JIT=1; or move the tensor to the CPU (.cpu())",
                   kLib, t.device().str().c_str());
      break;
    case ExportProblem::kDevice:
      PyErr_Format(PyExc_BufferError,
                   "%s: tensors on device '%s' cannot be exported through DLPack; move the "
                   "tensor to a CPU or GPU device first (e.g. .to('cpu'))",
                   kLib, t.device().str().c_str());
      break;
    case ExportProblem::kNoStorage:
      PyErr_Format(PyExc_BufferError,
                   "%s: the tensor has no memory to export (a fake, meta-like or "
                   "wrapper-subclass tensor?); export a tensor backed by real storage",
                   kLib);
      break;
    case ExportProblem::kWrongDevice:
      PyErr_Format(PyExc_BufferError, TcdeDescribedMessage(kTcdeDescribedWrongDevice), kLib);
      break;
    case ExportProblem::kOutsideStorage:
      PyErr_Format(PyExc_BufferError, TcdeDescribedMessage(kTcdeDescribedOutside), kLib);
      break;
    case ExportProblem::kNone:
      break;
  }
  return -1;
}


// An owning DLManagedTensorVersioned for an exportable tensor (`described` from
// Describe(), whose shape and strides it copies): one allocation, holding a
// reference to the tensor's storage until the consumer calls the deleter.
DLManagedTensorVersioned* NewManaged(const at::Tensor& t, const DLTensor& described) {
  const int32_t ndim = described.ndim;
  // Describe() checked has_storage(); unsafe_storage() skips the check that
  // storage() repeats (and that throws for tensors whose storage access throws,
  // none of which Describe() accepts with elements).
  auto* ctx = NewContext(c10::Storage(t.unsafeGetTensorImpl()->unsafe_storage()), ndim);
  int64_t* shape = ctx->dims();
  int64_t* strides = shape + ndim;
  for (int32_t i = 0; i < ndim; ++i) {
    shape[i] = described.shape[i];
    strides[i] = described.strides[i];
  }
  // Field by field, not as one struct copy: see Describe().
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = described.data;
  dl.device = described.device;
  dl.ndim = ndim;
  dl.dtype = described.dtype;
  dl.shape = shape;
  dl.strides = strides;
  dl.byte_offset = described.byte_offset;
  return &ctx->managed;
}

int ManagedTensorFromPyObjectNoSync(void* py_obj, DLManagedTensorVersioned** out) {
  try {
    if (out == nullptr) {
      PyErr_Format(PyExc_ValueError, "%s: managed_tensor_from_py_object_no_sync: out is NULL",
                   kLib);
      return -1;
    }
    *out = nullptr;
    const at::Tensor* tensor = TensorOf(static_cast<PyObject*>(py_obj));
    if (tensor == nullptr) return -1;
    const at::Tensor& t = *tensor;
    DLTensor described{};
    const ExportProblem problem = Describe(t, &described);
    if (problem != ExportProblem::kNone) return RaiseExportProblem(problem, t);
    *out = NewManaged(t, described);
    return 0;
  } catch (...) {
    return RaiseCurrentException(PyExc_BufferError);
  }
}

// The non-owning export of a tensor Python answers for (the Python dispatch key: a
// subclass's __torch_dispatch__ may answer its sizes and strides): the arrays such an
// answer lives in are rewritten by the next one, so a consumer converting f(x, x) would
// find the first DLTensor changed. It gets copies that live as long as the object
// (tcde_borrowed_dims.h, shared with the portable table). Out of line: plain tensors
// never get here.
C10_NOINLINE int DescribeAnsweredByPython(PyObject* obj, const at::Tensor& t, DLTensor* out) {
  DLTensor described{};
  const ExportProblem problem = Describe(t, &described);
  if (problem != ExportProblem::kNone) return RaiseExportProblem(problem, t);
  // One dict for the process, made on first use (the GIL is held here); never freed.
  static PyObject* const cache = PyDict_New();
  if (cache == nullptr) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
  }
  const int64_t* dims = TcdeBorrowedDims(cache, obj, &described);
  if (dims == nullptr) return -1;
  described.shape = const_cast<int64_t*>(dims);
  described.strides = const_cast<int64_t*>(dims) + described.ndim;
  *out = described;
  return 0;
}

int DLTensorFromPyObjectNoSync(void* py_obj, DLTensor* out) {
  try {
    if (out == nullptr) {
      PyErr_Format(PyExc_ValueError, "%s: dltensor_from_py_object_no_sync: out is NULL", kLib);
      return -1;
    }
    const at::Tensor* tensor = TensorOf(static_cast<PyObject*>(py_obj));
    if (tensor == nullptr) return -1;
    const at::Tensor& t = *tensor;
    // Non-owning: shape and strides stay valid while the caller holds the
    // object and does not change its metadata, the contract of this entry point.
    if (C10_LIKELY(!t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python))) {
      const ExportProblem problem = Describe(t, out);
      if (problem != ExportProblem::kNone) return RaiseExportProblem(problem, t);
      return 0;
    }
    return DescribeAnsweredByPython(static_cast<PyObject*>(py_obj), t, out);
  } catch (...) {
    return RaiseCurrentException(PyExc_BufferError);
  }
}

}  // namespace
