#include "portable.h"

/* ------------------------------------------------------------------------ */
/* Export                                                                   */
/* ------------------------------------------------------------------------ */

/* A legacy DLManagedTensor (torch 2.4-2.8) as a DLManagedTensorVersioned: one
 * allocation; the deleter chains to torch's. Plain C, no Python. */
typedef struct {
  DLManagedTensorVersioned managed;
  DLManagedTensor* legacy;
  int64_t strides[]; /* the tensor's own strides (see TakeCapsule) */
} LegacyExport;

static void DeleteLegacyExport(DLManagedTensorVersioned* self) {
  if (self == NULL) return;
  LegacyExport* wrap = (LegacyExport*)self->manager_ctx;
  DLManagedTensor* legacy = wrap->legacy;
  free(wrap);
  if (legacy != NULL && legacy->deleter != NULL) legacy->deleter(legacy);
}

/* Takes over the tensor of a capsule torch._C._to_dlpack* returned (stolen):
 * the capsule is marked used, so its destructor leaves the tensor alone. */
DLManagedTensorVersioned* TakeCapsule(const State* s, PyObject* capsule) {
  DLManagedTensorVersioned* managed = NULL;
  if (s->caps.versioned_export) {
    managed = (DLManagedTensorVersioned*)PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (managed == NULL || PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0) {
      Py_DECREF(capsule);
      return NULL;
    }
    Py_DECREF(capsule);
    return managed;
  }
  DLManagedTensor* legacy = (DLManagedTensor*)PyCapsule_GetPointer(capsule, "dltensor");
  if (legacy == NULL) {
    Py_DECREF(capsule);
    return NULL;
  }
  const int32_t ndim = legacy->dl_tensor.ndim;
  LegacyExport* wrap =
      (LegacyExport*)malloc(sizeof(LegacyExport) + (size_t)(ndim > 0 ? ndim : 0) * sizeof(int64_t));
  if (wrap == NULL) {
    Py_DECREF(capsule);
    PyErr_NoMemory();
    return NULL;
  }
  if (PyCapsule_SetName(capsule, "used_dltensor") != 0) {
    free(wrap);
    Py_DECREF(capsule);
    return NULL;
  }
  Py_DECREF(capsule);
  wrap->legacy = legacy;
  wrap->managed.dl_tensor = legacy->dl_tensor;
  wrap->managed.manager_ctx = wrap;
  wrap->managed.deleter = &DeleteLegacyExport;
  /* torch 2.4-2.9 export strides "normalized" to 1 for dimensions of size 0 or 1
   * (PyTorch gh-83069); torch 2.13 and the native table report the tensor's own.
   * The caller corrects those from `obj` (see FixNormalizedStrides). */
  for (int32_t i = 0; i < ndim; ++i) wrap->strides[i] = legacy->dl_tensor.strides[i];
  wrap->managed.dl_tensor.strides = ndim > 0 ? wrap->strides : NULL;
  return &wrap->managed;
}

void DeleteManaged(DLManagedTensorVersioned* managed) {
  if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
}

/* ------------------------------------------------------------------------ */
/* What a tensor says of itself                                             */
/* ------------------------------------------------------------------------ */

/* See state.c, "Trusted scopes": what the table asks a tensor goes to
 * torch._C.TensorBase's own getters and methods, with torch's overrides off where Python
 * may answer; what memory an export describes comes from torch's own export, checked
 * against the C++ storage wherever Python may have answered for the tensor. */

/* The strides of an export's dimensions of size 0 or 1 as the tensor has them:
 * torch 2.4-2.9 write 1 there (PyTorch gh-83069), torch 2.13 and the native
 * table the tensor's own. Such a stride addresses no memory, so asking the
 * tensor is safe whatever it answers; only those dimensions are read. Written
 * only where they differ (the non-owning export of a 2.10+ torch holds the
 * tensor's own arrays). 0, or -1 with a Python error. */
static int FixStridesOfShortDims(const State* s, PyObject* obj, DLTensor* dl) {
  int any = 0;
  for (int32_t i = 0; i < dl->ndim; ++i) any |= dl->shape[i] < 2;
  if (!any) return 0;
  PyObject* strides = CallWithOneArg(s->tensor_base.stride, obj);
  if (strides == NULL) return -1;
  if (!PyTuple_Check(strides) || PyTuple_Size(strides) != dl->ndim) {
    Py_DECREF(strides);
    PyErr_Format(PyExc_BufferError,
                 "%s: Tensor.stride() of this tensor does not match torch's own export of it "
                 "(a subclass or mode answering stride()?); export a plain torch.Tensor",
                 kLib);
    return -1;
  }
  for (int32_t i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] >= 2) continue;
    const long long stride = PyLong_AsLongLong(PyTuple_GetItem(strides, i));
    if (stride == -1 && PyErr_Occurred()) {
      Py_DECREF(strides);
      return -1;
    }
    if (dl->strides[i] != (int64_t)stride) dl->strides[i] = (int64_t)stride;
  }
  Py_DECREF(strides);
  return 0;
}

static int RaiseNotATensor(PyObject* obj) {
  if (obj == NULL) {
    PyErr_Format(PyExc_TypeError, "%s: expected a torch.Tensor, got NULL", kLib);
  } else {
    PyErr_Format(PyExc_TypeError,
                 "%s: expected a torch.Tensor, got %S; pass a tensor (e.g. torch.as_tensor(x))",
                 kLib, (PyObject*)Py_TYPE(obj));
  }
  return -1;
}

static int RaiseUnservedDevice(int32_t device_type) {
  if (device_type == kDLCUDA || device_type == kDLROCM) {
    PyErr_Format(PyExc_BufferError,
                 "%s: this torch build serves no %s devices, so the table cannot report their "
                 "stream (current_work_stream) and a consumer would run on the wrong one; use "
                 "the %s build of torch, or move the tensor to the CPU (.cpu())",
                 kLib, device_type == kDLCUDA ? "CUDA" : "ROCm", GpuName(device_type));
  } else {
    PyErr_Format(PyExc_BufferError,
                 "%s: tensors on DLPack device type %d cannot be exported through DLPack by this "
                 "table; move the tensor to a CPU or GPU device first (e.g. .to('cpu'))",
                 kLib, (int)device_type);
  }
  return -1;
}

/* Whether an export on this DLPack device type is one the table serves. */
static int ServesExportDevice(const State* s, int32_t device_type) {
  if (device_type == kDLCPU) return 1;
  if (device_type == kDLCUDA || device_type == kDLROCM) return device_type == s->caps.gpu_type;
  if (device_type == kDLOneAPI) return s->caps.xpu;
  /* Host memory of devices torch reports as their own (mps, privateuse1): as the
   * native table does. */
  return device_type == kDLMetal || device_type == kDLExtDev;
}

/* A self-contained export of a tensor without elements (data NULL, nothing
 * to own), for the tensors torch's exporter refuses although DLPack describes
 * them: torch 2.2-2.8 export through aten.as_strided, which a wrapper subclass
 * may not implement. It describes no memory, whatever the tensor answers. NULL
 * (no error set) when `obj` has elements or is on a device the table does not
 * serve. Error path only; inside the export's TrustedScope. */
typedef struct {
  DLManagedTensorVersioned managed;
  int64_t dims[]; /* shape, then strides */
} EmptyExport;

static void DeleteEmptyExport(DLManagedTensorVersioned* self) {
  if (self != NULL) free(self->manager_ctx);
}

static DLManagedTensorVersioned* ExportEmpty(const State* s, PyObject* obj, const Dtype* dtype) {
  PyObject* sizes = CallWithOneArg(s->tensor_base.size, obj);
  PyObject* strides = sizes == NULL ? NULL : CallWithOneArg(s->tensor_base.stride, obj);
  PyObject* device = strides == NULL ? NULL : CallWithOneArg(s->tensor_base.get_device, obj);
  PyObject* type = device == NULL ? NULL : PyObject_GetAttrString(device, "type");
  PyObject* index = type == NULL ? NULL : PyObject_GetAttrString(device, "index");
  EmptyExport* wrap = NULL;
  if (index == NULL || !PyTuple_Check(sizes) || !PyTuple_Check(strides) ||
      !PyUnicode_Check(type) || PyTuple_Size(sizes) != PyTuple_Size(strides) ||
      PyTuple_Size(sizes) > INT32_MAX) {
    goto done;
  }
  const int32_t ndim = (int32_t)PyTuple_Size(sizes);
  int has_elements = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    has_elements &= PyLong_AsLongLong(PyTuple_GetItem(sizes, i)) != 0;
  }
  DLDevice dl_device = {kDLCPU, 0};
  if (PyUnicode_CompareWithASCIIString(type, "cuda") == 0 && s->caps.gpu_type != 0) {
    dl_device.device_type = (DLDeviceType)s->caps.gpu_type;
    dl_device.device_id = index == Py_None ? 0 : (int32_t)PyLong_AsLong(index);
  } else if (PyUnicode_CompareWithASCIIString(type, "cpu") != 0) {
    goto done;
  }
  if (has_elements || PyErr_Occurred()) goto done;
  wrap = (EmptyExport*)malloc(sizeof(EmptyExport) + 2 * (size_t)ndim * sizeof(int64_t));
  if (wrap == NULL) goto done;
  for (int32_t i = 0; i < ndim; ++i) {
    wrap->dims[i] = (int64_t)PyLong_AsLongLong(PyTuple_GetItem(sizes, i));
    wrap->dims[ndim + i] = (int64_t)PyLong_AsLongLong(PyTuple_GetItem(strides, i));
  }
  if (PyErr_Occurred()) {
    free(wrap);
    wrap = NULL;
    goto done;
  }
  wrap->managed.version.major = DLPACK_MAJOR_VERSION;
  wrap->managed.version.minor = DLPACK_MINOR_VERSION;
  wrap->managed.manager_ctx = wrap;
  wrap->managed.deleter = &DeleteEmptyExport;
  wrap->managed.flags = 0;
  DLTensor* dl = &wrap->managed.dl_tensor;
  dl->data = NULL;
  dl->device = dl_device;
  dl->ndim = ndim;
  dl->dtype = dtype->dl;
  dl->shape = ndim > 0 ? wrap->dims : NULL;
  dl->strides = ndim > 0 ? wrap->dims + ndim : NULL;
  dl->byte_offset = 0;
done:
  PyErr_Clear();
  Py_XDECREF(index);
  Py_XDECREF(type);
  Py_XDECREF(device);
  Py_XDECREF(strides);
  Py_XDECREF(sizes);
  return wrap == NULL ? NULL : &wrap->managed;
}

/* What `obj` says its attribute `name` is (a new reference, or NULL with an error):
 * through TensorBase's own descriptor `getter` when it may answer through Python
 * (`cpp_answers` 0), else through the plain lookup, which for an exact torch.Tensor
 * reaches the same descriptor, faster. */
static PyObject* TensorAttribute(PyObject* getter, PyObject* name, PyObject* obj, int cpp_answers) {
  return cpp_answers ? PyObject_GetAttr(obj, name) : CallWithOneArg(getter, obj);
}

/* 1 if `result` (a new reference, stolen; NULL: an error) is true, 0 if not, -1 on error. */
static int TruthOf(PyObject* result) {
  if (result == NULL) return -1;
  const int truth = result == Py_True ? 1 : result == Py_False ? 0 : PyObject_IsTrue(result);
  Py_DECREF(result);
  return truth;
}

/* The refusals of the native table's Describe() that torch's exporter does not
 * make itself (layout, nesting, conjugate and negative bits), and the tensor's
 * dtype; NULL with a Python error set when refused. */
static const Dtype* CheckExportable(const State* s, PyObject* obj, int cpp_answers) {
  PyObject* layout = TensorAttribute(s->tensor_base.get_layout, s->names.layout, obj, cpp_answers);
  if (layout == NULL) return NULL;
  const int strided = layout == s->constants.strided;
  const int jagged = layout == s->constants.jagged && layout != NULL;
  if (!strided) {
    if (jagged) {
      PyErr_Format(PyExc_BufferError,
                   TCDE_EXPORT_JAGGED_NESTED,
                   kLib);
    } else {
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with layout %S through DLPack, which describes "
                   "only strided tensors; convert it with .to_dense() first",
                   kLib, layout);
    }
    Py_DECREF(layout);
    return NULL;
  }
  Py_DECREF(layout);
  const int is_nested = TruthOf(
      TensorAttribute(s->tensor_base.get_is_nested, s->names.is_nested, obj, cpp_answers));
  if (is_nested != 0) {
    if (is_nested > 0) {
      PyErr_Format(PyExc_BufferError,
                   TCDE_EXPORT_NESTED,
                   kLib);
    }
    return NULL;
  }
  PyObject* dtype_obj = TensorAttribute(s->tensor_base.get_dtype, s->names.dtype, obj, cpp_answers);
  if (dtype_obj == NULL) return NULL;
  const Dtype* dtype = FindDtype(s, dtype_obj);
  if (dtype == NULL) {
    PyErr_Format(PyExc_BufferError,
                 "%s: dtype %S has no DLPack equivalent; convert the tensor first (e.g. "
                 ".dequantize() for quantized tensors, .to(torch.float32))",
                 kLib, dtype_obj);
    Py_DECREF(dtype_obj);
    return NULL;
  }
  Py_DECREF(dtype_obj);
  /* DLPack has no conjugate/negative flags: exporting the raw memory would hand
   * out the wrong values. Only complex tensors carry the conjugate bit. */
  if (dtype->flags & kDtypeComplex) {
    const int conj = TruthOf(CallWithOneArg(s->tensor_base.is_conj, obj));
    if (conj != 0) {
      if (conj > 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s: cannot export a tensor with its conjugate bit set (DLPack cannot "
                     "express a lazy conjugation); call .resolve_conj() first",
                     kLib);
      }
      return NULL;
    }
  }
  const int neg = TruthOf(CallWithOneArg(s->tensor_base.is_neg, obj));
  if (neg != 0) {
    if (neg > 0) {
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with its negative bit set (DLPack cannot express "
                   "a lazy negation); call .resolve_neg() first",
                   kLib);
    }
    return NULL;
  }
  return dtype;
}

/* torch's export of the same memory viewed as uint8, for the one-byte types
 * torch < 2.10 cannot export (float8, fp4): a capsule, or NULL with an error. */
static PyObject* ExportBytes(const State* s, PyObject* obj) {
  if (s->uint8_index < 0) {
    PyErr_Format(PyExc_BufferError, "%s: this torch has no uint8 dtype to export through", kLib);
    return NULL;
  }
  PyObject* detached = CallWithOneArg(s->tensor_base.detach, obj);
  PyObject* bytes =
      detached == NULL
          ? NULL
          : CallWithTwoArgs(s->tensor_base.view, detached, s->dtypes[s->uint8_index].dtype);
  Py_XDECREF(detached);
  PyObject* capsule = bytes == NULL ? NULL : CallToDlpack(s, bytes);
  Py_XDECREF(bytes);
  return capsule;
}

/* The dtype of an export, as the table reports `dtype`: torch's own code kept
 * unless it differs from the native table's; a relabelling only between types
 * of one element size (a uint8 view relabelled float8, say). 0, or -1 with a
 * BufferError: the export is not of the memory `dtype` describes. */
static int RelabelDtype(const DLTensor* dl, const Dtype* dtype, int via_bytes) {
  const DLDataType got = dl->dtype;
  const DLDataType want = dtype->dl;
  const int same_size = (uint32_t)got.bits * got.lanes == (uint32_t)want.bits * want.lanes;
  const int bytes_ok = !via_bytes || (got.code == kDLUInt && got.bits == 8 && got.lanes == 1);
  if (same_size && bytes_ok) return 0;
  PyErr_Format(PyExc_BufferError,
               "%s: torch exported elements of %u bits x %u lanes (DLPack code %u) for a tensor "
               "whose dtype has %u x %u: a tensor subclass, or a mode, answered detach() or "
               "view() with another tensor; export a plain torch.Tensor",
               kLib, (unsigned)got.bits, (unsigned)got.lanes, (unsigned)got.code,
               (unsigned)want.bits, (unsigned)want.lanes);
  return -1;
}

/* The DLPack device of a torch device type name ("cpu", "cuda", ...) and index; 0 when
 * the table exports nothing on it (meta, and devices torch has no DLPack code for). */
static int DLDeviceOfName(const State* s, PyObject* type, PyObject* index, DLDevice* out) {
  out->device_id = 0;
  if (index != NULL && index != Py_None) {
    const long id = PyLong_AsLong(index);
    if (id == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    out->device_id = (int32_t)id;
  }
  if (PyUnicode_CompareWithASCIIString(type, "cpu") == 0) {
    out->device_type = kDLCPU;
    out->device_id = 0;
    return 1;
  }
  if (PyUnicode_CompareWithASCIIString(type, "cuda") == 0 && s->caps.gpu_type != 0) {
    out->device_type = (DLDeviceType)s->caps.gpu_type;
    return 1;
  }
  if (PyUnicode_CompareWithASCIIString(type, "xpu") == 0 && s->caps.xpu) {
    out->device_type = kDLOneAPI;
    return 1;
  }
  if (PyUnicode_CompareWithASCIIString(type, "mps") == 0) {
    out->device_type = kDLMetal;
    return 1;
  }
  return 0;
}

/* BufferError for a tensor on `device` (a torch.device) the table exports nothing on,
 * before torch sees it: torch < 2.10 leaks on its own refusal (docs/facts.md), and its
 * message names neither the library nor a remedy. Returns -1. */
static int RaiseRefusedDevice(PyObject* device) {
  PyErr_Format(PyExc_BufferError,
               "%s: tensors on device '%S' cannot be exported through DLPack (a meta tensor "
               "has no memory); move the tensor to a CPU or GPU device first (e.g. "
               ".to('cpu'))",
               kLib, device);
  return -1;
}

/* 0 when `device` (a torch.device, or NULL: none known) is one the table exports on,
 * else -1 with the table's BufferError. */
static int CheckDeviceName(const State* s, PyObject* device) {
  if (device == NULL) return 0;
  PyObject* type = PyObject_GetAttr(device, s->names.type);
  PyObject* index = type == NULL ? NULL : PyObject_GetAttr(device, s->names.index);
  if (index == NULL) {
    Py_XDECREF(type);
    return -1;
  }
  DLDevice dl_device;
  const int served = PyUnicode_Check(type) && DLDeviceOfName(s, type, index, &dl_device);
  Py_DECREF(type);
  Py_DECREF(index);
  if (served) return 0;
  return RaiseRefusedDevice(device);
}

/* What the C++ storage of `obj` says of itself (data pointer, byte size, device),
 * through TensorBase.untyped_storage and StorageBase's own methods: no Python code answers
 * them, and inside a TrustedScope no mode sees them (docs/facts.md). `facts->known` 0 when
 * the tensor has no data-bearing storage (wrapper subclasses, fake and functional tensors:
 * their storage refuses data_ptr, or is on meta). Never fails: an error means "no
 * storage". */
static void ReadStorageFacts(const State* s, PyObject* obj, TcdeStorageFacts* facts) {
  facts->known = 0;
  if (s->tensor_base.untyped_storage == NULL || s->storage_base.get_device == NULL) return;
  PyObject* storage = CallWithOneArg(s->tensor_base.untyped_storage, obj);
  PyObject* storage_device =
      storage == NULL ? NULL : CallWithOneArg(s->storage_base.get_device, storage);
  PyObject* type = storage_device == NULL ? NULL : PyObject_GetAttr(storage_device, s->names.type);
  PyObject* index = type == NULL ? NULL : PyObject_GetAttr(storage_device, s->names.index);
  /* The device first: a fake tensor's storage (on meta) warns when asked for data_ptr. */
  if (index != NULL && PyUnicode_Check(type) && DLDeviceOfName(s, type, index, &facts->device)) {
    PyObject* data = CallWithOneArg(s->storage_base.data_ptr, storage);
    PyObject* nbytes = data == NULL ? NULL : CallWithOneArg(s->storage_base.nbytes, storage);
    if (nbytes != NULL) {
      facts->data = (uintptr_t)PyLong_AsVoidPtr(data);
      facts->nbytes = (uint64_t)PyLong_AsUnsignedLongLong(nbytes);
      facts->known = !PyErr_Occurred() && facts->data != 0;
    }
    Py_XDECREF(data);
    Py_XDECREF(nbytes);
  }
  PyErr_Clear();
  Py_XDECREF(index);
  Py_XDECREF(type);
  Py_XDECREF(storage);
  Py_XDECREF(storage_device);
}

/* torch's export of `obj` (a capsule, or NULL with torch's error pending), with the
 * element type `*via_bytes` says: torch < 2.10 refuses float8/fp4 and leaks on the
 * refusal (docs/facts.md), so such a tensor goes straight to its uint8 view. */
static PyObject* TorchExport(const State* s, PyObject* obj, const Dtype* dtype, int owning,
                             int* via_bytes) {
  *via_bytes = !s->caps.torch_has_dlpack13 && (dtype->flags & kDtypeOldTorchRefuses);
  if (*via_bytes) return ExportBytes(s, obj);
  /* An owning export must not see later changes of the Python tensor: torch
   * 2.13's versioned export holds the tensor's own TensorImpl (t.t_() would
   * change the exported shape, t.set_() free the exported memory), where torch
   * 2.4-2.8 export a fresh as_strided view. Export a detached alias there: a
   * TensorImpl of its own on the same storage. The non-owning export copies
   * the metadata it hands out and promises nothing across metadata changes. */
  PyObject* alias = NULL;
  if (owning && s->caps.versioned_export) {
    alias = CallWithOneArg(s->tensor_base.detach, obj);
    /* A wrapper subclass may refuse aten.detach: it has no memory of its own
     * (torch's export refuses it, or describes it with data NULL, which only an
     * empty tensor passes below), so export it as it is. */
    if (alias == NULL) PyErr_Clear();
  }
  PyObject* capsule = CallToDlpack(s, alias != NULL ? alias : obj);
  Py_XDECREF(alias);
  if (capsule == NULL && (dtype->flags & kDtypeByteView)) {
    /* A torch that refuses another one-byte type (sub-byte ints): its uint8 view. */
    PyObject* first = TakeException();
    capsule = ExportBytes(s, obj);
    if (capsule != NULL) {
      Py_XDECREF(first);
      *via_bytes = 1;
    } else {
      PyErr_Clear();
      RestoreException(first);
    }
  }
  return capsule;
}

/* After torch refused to export `obj` (its error pending): a self-contained export of
 * a tensor without elements, or NULL with the table's own error. */
static DLManagedTensorVersioned* AfterTorchRefused(const State* s, PyObject* obj,
                                                   const Dtype* dtype) {
  /* torch refused (a tensor without storage: wrapper subclasses, fake tensors;
   * a meta tensor): a tensor DLPack cannot describe is a BufferError. */
  PyObject* cause = TakeException();
  if (IsMemoryError(cause)) {
    RestoreException(cause);
    return NULL;
  }
  DLManagedTensorVersioned* empty = ExportEmpty(s, obj, dtype);
  if (empty != NULL) {
    Py_XDECREF(cause);
    return empty;
  }
  /* A device the table refuses gets the table's message (torch 2.11+ refuses meta with
   * a bare "Cannot pack tensors on meta"). Error path only. */
  PyObject* device = CallWithOneArg(s->tensor_base.get_device, obj);
  if (device != NULL) {
    const int refused = CheckDeviceName(s, device);
    Py_DECREF(device);
    if (refused != 0) {
      Py_XDECREF(cause);
      return NULL;
    }
  }
  PyErr_Clear();
  if (cause != NULL && PyErr_GivenExceptionMatches(cause, PyExc_BufferError)) {
    RestoreException(cause);
    return NULL;
  }
  RaiseFrom(PyExc_BufferError,
            "torch cannot export this tensor through DLPack (a fake, meta-like or "
            "wrapper-subclass tensor without memory?)",
            cause);
  return NULL;
}

/* The export proper, inside the caller's TrustedScope where `cpp_answers` is 0: an
 * owning DLManagedTensorVersioned (dtype, version and flags as the native table writes
 * them), or NULL with a Python error set. */
static DLManagedTensorVersioned* ExportChecked(const State* s, PyObject* obj, int owning,
                                               int cpp_answers) {
  const Dtype* dtype = CheckExportable(s, obj, cpp_answers);
  if (dtype == NULL) return NULL;
  /* What the export may describe: where Python may answer for the tensor, its C++
   * storage, read before torch's export (whose refusals leak on torch < 2.10). */
  TcdeStorageFacts storage = {0, 0, 0, {kDLCPU, 0}};
  if (!cpp_answers) {
    ReadStorageFacts(s, obj, &storage);
    if (!storage.known) {
      /* No data-bearing storage: only a tensor without elements is exported, by the
       * table itself (torch < 2.10 leaks on its refusals; later ones export wrapper
       * subclasses with data NULL and refuse fake tensors without naming the library). */
      DLManagedTensorVersioned* empty = ExportEmpty(s, obj, dtype);
      if (empty != NULL) return empty;
      PyErr_Format(PyExc_BufferError, TcdeDescribedMessage(kTcdeDescribedNoStorage), kLib);
      return NULL;
    }
  } else if (!s->caps.torch_has_dlpack13) {
    /* A plain tensor: its own device, which no Python answers. Not on the CPU (one
     * attribute read): checked before torch < 2.10 refuses it and leaks. */
    PyObject* is_cpu = PyObject_GetAttr(obj, s->names.is_cpu);
    if (is_cpu == NULL) return NULL;
    Py_DECREF(is_cpu);
    if (is_cpu != Py_True) {
      PyObject* device = PyObject_GetAttr(obj, s->names.device);
      if (device == NULL) return NULL;
      const int refused = CheckDeviceName(s, device);
      Py_DECREF(device);
      if (refused != 0) return NULL;
    }
  }
  int via_bytes = 0;
  PyObject* capsule = TorchExport(s, obj, dtype, owning, &via_bytes);
  if (capsule == NULL) return AfterTorchRefused(s, obj, dtype);
  DLManagedTensorVersioned* managed = TakeCapsule(s, capsule);
  if (managed == NULL) return NULL;
  DLTensor* dl = &managed->dl_tensor;
  if (RelabelDtype(dl, dtype, via_bytes) != 0 || FixStridesOfShortDims(s, obj, dl) != 0) {
    DeleteManaged(managed);
    return NULL;
  }
  if (!ServesExportDevice(s, dl->device.device_type)) {
    const int32_t device_type = dl->device.device_type;
    DeleteManaged(managed);
    RaiseUnservedDevice(device_type);
    return NULL;
  }
  /* The contract's rule (csrc/tcde_contract.h): no byte outside the storage, no other
   * device than the storage's. A plain tensor's export is torch's reading of it; it
   * still never hands out NULL data for elements. */
  const TcdeDescribedProblem problem =
      cpp_answers ? (dl->data == NULL ? TcdeCheckDescribed(dl, dtype->itemsize, &storage)
                                      : kTcdeDescribedOk)
                  : TcdeCheckDescribed(dl, dtype->itemsize, &storage);
  if (problem != kTcdeDescribedOk) {
    DeleteManaged(managed);
    PyErr_Format(PyExc_BufferError, TcdeDescribedMessage(problem), kLib);
    return NULL;
  }
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  managed->flags = 0; /* shares the memory, writable: as torch 2.13 and the native table */
  dl->dtype = dtype->dl;
  return managed;
}

/* Any torch.Tensor (subclasses included) exported: see ExportChecked. Where Python may
 * answer for the tensor (a subclass, a mode), everything runs in a TrustedScope, and the
 * export is checked against the C++ storage. torch 2.2-2.8 export through aten.as_strided,
 * which a dispatch mode answers (2.9.1 does not: docs/facts.md); the table asks for modes
 * on every torch < 2.10, and from 2.10 for the owning export, whose detach() a mode sees. */
DLManagedTensorVersioned* ExportTensor(const State* s, PyObject* obj, int owning) {
  if (obj == NULL || !PyType_IsSubtype(Py_TYPE(obj), s->entry.tensor_type)) {
    RaiseNotATensor(obj);
    return NULL;
  }
  const int cpp_answers =
      AnswersOnlyFromCpp(s, obj, owning || !s->caps.torch_has_dlpack13);
  if (cpp_answers < 0) return NULL;
  if (cpp_answers) return ExportChecked(s, obj, owning, 1);
  TrustedScope scope;
  if (EnterTrustedScope(s, &scope) != 0) return NULL;
  DLManagedTensorVersioned* managed = ExportChecked(s, obj, owning, 0);
  if (ExitTrustedScope(s, &scope) != 0 && managed != NULL) {
    DeleteManaged(managed);
    managed = NULL;
  }
  return managed;
}

int ManagedTensorFromPyObjectNoSync(void* py_obj, DLManagedTensorVersioned** out) {
  if (out == NULL) {
    PyErr_Format(PyExc_ValueError, "%s: managed_tensor_from_py_object_no_sync: out is NULL",
                 kLib);
    return -1;
  }
  *out = NULL;
  const State* s = GetState();
  if (s == NULL) return -1;
  DLManagedTensorVersioned* managed = ExportTensor(s, (PyObject*)py_obj, 1);
  if (managed == NULL) return -1;
  *out = managed;
  return 0;
}

