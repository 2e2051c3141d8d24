#include "portable.h"

/* ------------------------------------------------------------------------ */
/* Allocator                                                                */
/* ------------------------------------------------------------------------ */


static int AllocatorFail(DLManagedTensorVersioned** out, void* error_ctx, SetErrorFn set_error,
                         const char* kind, const char* message) {
  if (out != NULL) *out = NULL;
  if (set_error != NULL) set_error(error_ctx, kind, message);
  return -1;
}

/* SetError with the pending Python exception's text; clears it. */
static int AllocatorFailFromPython(DLManagedTensorVersioned** out, void* error_ctx,
                                   SetErrorFn set_error, const char* kind, const char* what) {
  char message[512];
  char text[256];
  TakeExceptionText(text, sizeof(text));
  snprintf(message, sizeof(message), "torch-c-dlpack-ext allocator (portable table): %s: %s",
           what, text);
  return AllocatorFail(out, error_ctx, set_error, kind, message);
}

/* The native table's ContiguousLayout(): 0 when fine, 1 for a negative size
 * (`*bad_dim`), 2 when the element count, byte size or a stride passes int64. */
static int CheckContiguous(const int64_t* sizes, int32_t ndim, uint64_t itemsize,
                           int32_t* bad_dim) {
  const uint64_t kMax = (uint64_t)INT64_MAX;
  uint64_t numel = 1;
  uint64_t nbytes = 0;
  int overflow = 0;
  for (int32_t i = 0; i < ndim; ++i) {
    if (sizes[i] < 0) {
      *bad_dim = i;
      return 1;
    }
    overflow |= TcdeMulOverflows(numel, (uint64_t)sizes[i], &numel);
  }
  overflow |= numel > kMax || TcdeMulOverflows(numel, itemsize, &nbytes) || nbytes > kMax;
  uint64_t stride = 1;
  for (int32_t i = ndim - 1; i > 0; --i) {
    overflow |= TcdeMulOverflows(stride, sizes[i] > 1 ? (uint64_t)sizes[i] : 1, &stride) ||
                stride > kMax;
  }
  return overflow ? 2 : 0;
}

/* torch.device for a prototype's device (a new reference), or NULL with an error. */
static PyObject* TorchDevice(const State* s, const DLDevice* device) {
  if (device->device_type == kDLCPU) {
    Py_INCREF(s->constants.cpu_device);
    return s->constants.cpu_device;
  }
  const char* kind = device->device_type == kDLOneAPI ? "xpu" : "cuda";
  return PyObject_CallFunction(s->entry.device_ctor, "si", kind, (int)device->device_id);
}

/* The positional arguments of torch.empty for a prototype: its sizes as separate
 * ints, torch.empty(2, 3) (a 0-d tensor: torch.empty(())). One tuple of sizes,
 * torch.empty((2, 3)), costs torch's argument parser a raised and cleared
 * TypeError on every call: it tries the tuple as an int first (docs/facts.md). */
static PyObject* EmptyArgs(const DLTensor* prototype) {
  const int32_t ndim = prototype->ndim;
  if (ndim == 0) {
    PyObject* no_sizes = PyTuple_New(0);
    PyObject* args = no_sizes == NULL ? NULL : PyTuple_Pack(1, no_sizes);
    Py_XDECREF(no_sizes);
    return args;
  }
  PyObject* args = PyTuple_New(ndim);
  if (args == NULL) return NULL;
  for (int32_t i = 0; i < ndim; ++i) {
    PyObject* size = PyLong_FromLongLong((long long)prototype->shape[i]);
    /* PyTuple_SetItem steals `size`; on a new tuple it cannot fail. */
    if (size == NULL || PyTuple_SetItem(args, i, size) != 0) {
      Py_DECREF(args);
      return NULL;
    }
  }
  return args;
}

/* torch.empty(*args[, dtype=dtype][, device=device]): a keyword is left out
 * where its argument is NULL. torch's functions take an argument tuple
 * (METH_VARARGS): PyObject_Call hands them `args` as it is, where a vectorcall
 * would first copy its arguments into a new tuple. */
static PyObject* CallEmpty(const State* s, PyObject* args, PyObject* dtype, PyObject* device) {
  if (dtype == NULL && device == NULL) return PyObject_Call(s->entry.empty, args, NULL);
  PyObject* kwargs = PyDict_New();
  if (kwargs == NULL || (dtype != NULL && PyDict_SetItem(kwargs, s->names.dtype, dtype) != 0) ||
      (device != NULL && PyDict_SetItem(kwargs, s->names.device, device) != 0)) {
    Py_XDECREF(kwargs);
    return NULL;
  }
  PyObject* result = PyObject_Call(s->entry.empty, args, kwargs);
  Py_DECREF(kwargs);
  return result;
}

/* torch.empty(shape, dtype=..., device=...) exported; checked to be plain
 * memory of what was asked (a dispatch mode or fake-tensor mode may answer
 * torch.empty with anything). GIL held. Returns NULL after SetError. */
static DLManagedTensorVersioned* AllocateWithTorchIn(const State* s, const DLTensor* prototype,
                                                     const Dtype* dtype, int explicit_first,
                                                     DLManagedTensorVersioned** out,
                                                     void* error_ctx, SetErrorFn set_error) {
  const int32_t ndim = prototype->ndim;
  const int host = prototype->device.device_type == kDLCPU;
  /* torch 2.4-2.9 export no float8/fp4: allocate the same bytes as uint8. */
  const Dtype* alloc_dtype =
      (!s->caps.torch_has_dlpack13 && (dtype->flags & kDtypeByteView)) ? &s->dtypes[s->uint8_index]
                                                               : dtype;
  PyObject* args = EmptyArgs(prototype);
  if (args == NULL) goto python_error;
  PyObject* device = TorchDevice(s, &prototype->device);
  if (device == NULL) {
    Py_DECREF(args);
    goto python_error;
  }
  /* First try: host memory of the default float32 without the keywords, which
   * cost torch's argument parser a third of torch.empty(16) again (docs/facts.md).
   * A changed default dtype or device shows in the export below: then ask again,
   * explicitly. */
  int explicit_call = !host || explicit_first;
  PyObject* tensor;
retry:
  tensor = CallEmpty(s, args, explicit_call || alloc_dtype != &s->dtypes[0] ? alloc_dtype->dtype
                                                                            : NULL,
                     explicit_call ? device : NULL);
  if (tensor == NULL) {
    Py_DECREF(args);
    Py_DECREF(device);
    PyObject* exc = TakeException();
    /* The sizes were checked: on host memory a failure is the allocator's. */
    const char* kind = IsMemoryError(exc) || host ? "MemoryError" : "RuntimeError";
    RestoreException(exc);
    AllocatorFailFromPython(out, error_ctx, set_error, kind, "torch.empty failed");
    return NULL;
  }
  /* Plain memory: a torch.Tensor itself (no subclass: fake tensors, wrapper
   * subclasses), of the dtype asked for; the export checks the rest. */
  if (Py_TYPE(tensor) != s->entry.tensor_type) {
    Py_DECREF(tensor);
    Py_DECREF(args);
    Py_DECREF(device);
    AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                  "torch-c-dlpack-ext allocator (portable table): torch.empty returned a tensor "
                  "subclass, not plain memory (is a fake-tensor or Python dispatch mode active?)");
    return NULL;
  }
  PyObject* capsule = CallToDlpack(s, tensor);
  Py_DECREF(tensor);
  DLManagedTensorVersioned* managed = capsule == NULL ? NULL : TakeCapsule(s, capsule);
  if (managed == NULL && !explicit_call) {
    /* torch.set_default_device("meta"), say: ask again with the device named. */
    PyErr_Clear();
    explicit_call = 1;
    goto retry;
  }
  if (managed == NULL) {
    Py_DECREF(args);
    Py_DECREF(device);
    AllocatorFailFromPython(out, error_ctx, set_error, "RuntimeError",
                            "torch.empty returned a tensor without exportable memory (is a "
                            "Python dispatch mode active?)");
    return NULL;
  }
  DLTensor* dl = &managed->dl_tensor;
  /* The dtype as torch exports it (the codes of the table above, for every dtype
   * the allocator makes). */
  int as_requested = dl->dtype.code == alloc_dtype->dl.code &&
                     dl->dtype.bits == alloc_dtype->dl.bits &&
              dl->dtype.lanes == alloc_dtype->dl.lanes && dl->ndim == ndim &&
              dl->byte_offset == 0 &&
              dl->device.device_type == (host ? kDLCPU : prototype->device.device_type) &&
              (host || dl->device.device_id == prototype->device.device_id);
  /* Unsigned: past the outermost dimension the product may leave int64 (a shape with a
   * zero elsewhere is checked only for its element count); it is never used there. */
  uint64_t expected_stride = 1;
  int has_elements = 1;
  for (int32_t i = ndim - 1; as_requested && i >= 0; --i) {
    as_requested = dl->shape[i] == prototype->shape[i] &&
            (prototype->shape[i] < 2 || (uint64_t)dl->strides[i] == expected_stride);
    has_elements &= prototype->shape[i] != 0;
    expected_stride *= prototype->shape[i] > 1 ? (uint64_t)prototype->shape[i] : 1;
  }
  if (as_requested && has_elements && dl->data == NULL) as_requested = 0;
  if (!as_requested && !explicit_call) {
    DeleteManaged(managed);
    explicit_call = 1;
    goto retry;
  }
  Py_DECREF(args);
  Py_DECREF(device);
  if (!as_requested) {
    DeleteManaged(managed);
    AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                  "torch-c-dlpack-ext allocator (portable table): torch.empty returned a tensor "
                  "that is not plain memory of the requested dtype, device and shape (is a "
                  "Python mode active?)");
    return NULL;
  }
  /* Row-major strides for every dimension (torch may report any stride for a
   * dimension of size 0 or 1), as the native allocator writes them. */
  uint64_t stride = 1; /* checked within int64 for every dimension it is written to */
  for (int32_t i = ndim - 1; i >= 0; --i) {
    dl->strides[i] = (int64_t)stride;
    stride *= prototype->shape[i] > 1 ? (uint64_t)prototype->shape[i] : 1;
  }
  if (!has_elements) dl->data = NULL;
  dl->dtype = prototype->dtype;
  dl->device = prototype->device;
  if (host) dl->device.device_id = 0;
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  managed->flags = 0;
  return managed;
python_error:
  AllocatorFailFromPython(out, error_ctx, set_error, "MemoryError", "cannot build the call");
  return NULL;
}

/* AllocateWithTorchIn, outside every mode: a host request never reaches a torch
 * function mode (torch.set_default_device's among them, which would put it on a GPU) or a
 * dispatch mode, and never touches CUDA. Without a mode (two queries), the fast first try
 * runs as it is; under one, torch.empty runs in a TrustedScope with its device and dtype
 * named. */
static DLManagedTensorVersioned* AllocateWithTorch(const State* s, const DLTensor* prototype,
                                                   const Dtype* dtype,
                                                   DLManagedTensorVersioned** out,
                                                   void* error_ctx, SetErrorFn set_error) {
  const int modes = ModesOn(s);
  if (modes == 0) {
    return AllocateWithTorchIn(s, prototype, dtype, 0, out, error_ctx, set_error);
  }
  TrustedScope scope;
  if (modes < 0 || EnterTrustedScope(s, &scope) != 0) {
    AllocatorFailFromPython(out, error_ctx, set_error, "RuntimeError",
                            "cannot allocate outside torch's function and dispatch modes");
    return NULL;
  }
  DLManagedTensorVersioned* managed =
      AllocateWithTorchIn(s, prototype, dtype, 1, out, error_ctx, set_error);
  if (ExitTrustedScope(s, &scope) != 0) {
    DeleteManaged(managed);
    managed = NULL;
    AllocatorFailFromPython(out, error_ctx, set_error, "RuntimeError",
                            "cannot leave the scope that turned torch's modes off");
  }
  return managed;
}

int ManagedTensorAllocator(DLTensor* prototype, DLManagedTensorVersioned** out,
                                  void* error_ctx, SetErrorFn set_error) {
  char message[256];
  if (prototype == NULL || out == NULL) {
    return AllocatorFail(out, error_ctx, set_error, "ValueError",
                         "torch-c-dlpack-ext allocator: prototype and out must not be NULL");
  }
  *out = NULL;
  if (!Py_IsInitialized()) {
    /* After Py_Finalize (a C++ thread, an atexit hook): torch cannot allocate. */
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                         "torch-c-dlpack-ext allocator (portable table): the Python interpreter "
                         "has shut down, so torch cannot allocate; allocate before it exits");
  }
  const int need_gil = !TCDE_GIL_HELD();
  PyGILState_STATE gil = PyGILState_UNLOCKED;
  if (need_gil) gil = PyGILState_Ensure();
  int rc = -1;
  const State* s = GetState();
  if (s == NULL) {
    AllocatorFailFromPython(out, error_ctx, set_error, "RuntimeError",
                            "cannot reach torch's Python entry points");
    goto done;
  }
  const Dtype* dtype = FromDLDataType(s, prototype->dtype);
  if (dtype == NULL) {
    snprintf(message, sizeof(message),
             "torch-c-dlpack-ext allocator: DLPack dtype (code=%u, bits=%u, lanes=%u) has no "
             "torch equivalent; request a dtype torch supports",
             (unsigned)prototype->dtype.code, (unsigned)prototype->dtype.bits,
             (unsigned)prototype->dtype.lanes);
    AllocatorFail(out, error_ctx, set_error, "ValueError", message);
    goto done;
  }
  const int32_t device_type = prototype->device.device_type;
  if (device_type != kDLCPU) {
    const int served = ((int32_t)device_type == s->caps.gpu_type && s->caps.gpu_type != 0) ||
                       (device_type == kDLOneAPI && s->caps.xpu);
    if (!served || prototype->device.device_id < 0) {
      const int unserved_gpu = (device_type == kDLCUDA || device_type == kDLROCM) && !served;
      snprintf(message, sizeof(message),
               "torch-c-dlpack-ext allocator (portable table): cannot allocate on DLPack device "
               "type %d id %d with this torch build%s%s%s",
               (int)device_type, (int)prototype->device.device_id,
               unserved_gpu ? ", which serves no such device; use the " : "",
               unserved_gpu ? GpuName(device_type) : "", unserved_gpu ? " build of torch" : "");
      AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      goto done;
    }
  }
  const int32_t ndim = prototype->ndim;
  if (ndim < 0 || (ndim > 0 && prototype->shape == NULL)) {
    AllocatorFail(out, error_ctx, set_error, "ValueError",
                  "torch-c-dlpack-ext allocator: prototype ndim is negative or its shape is NULL");
    goto done;
  }
  int32_t bad_dim = 0;
  switch (CheckContiguous(prototype->shape, ndim, dtype->itemsize, &bad_dim)) {
    case 0:
      break;
    case 1:
      snprintf(message, sizeof(message),
               "torch-c-dlpack-ext allocator: prototype shape[%d] is %lld; sizes must be >= 0",
               (int)bad_dim, (long long)prototype->shape[bad_dim]);
      AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      goto done;
    default:
      snprintf(message, sizeof(message),
               "torch-c-dlpack-ext allocator: a contiguous tensor of this prototype's %d sizes "
               "and %llu-byte elements has an element count, byte size or stride beyond int64, "
               "which torch cannot represent; request a smaller shape",
               (int)ndim, (unsigned long long)dtype->itemsize);
      AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      goto done;
  }
  DLManagedTensorVersioned* managed =
      AllocateWithTorch(s, prototype, dtype, out, error_ctx, set_error);
  if (managed != NULL) {
    *out = managed;
    rc = 0;
  }
done:
  if (need_gil) PyGILState_Release(gil);
  return rc;
}

