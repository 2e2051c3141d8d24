#include "portable.h"

/* ------------------------------------------------------------------------ */
/* Import                                                                   */
/* ------------------------------------------------------------------------ */

/* What torch imports: a copy of the producer's tensor description with the
 * strides spelled out (a NULL strides array means row-major), in a capsule
 * without a destructor. Its deleter hands `src` back to the producer once
 * armed: only after the import fully succeeded. A deleter torch runs on a
 * refusal (old torch does, after it took ownership) finds it unarmed and leaves
 * `src` with the caller, as the contract says. */
enum { kImportPending = 0, kImportArmed = 1, kImportAbandoned = 2, kImportDeletedEarly = 3 };

typedef struct {
  DLManagedTensorVersioned versioned;
  DLManagedTensor legacy;
  DLManagedTensorVersioned* src;
  atomic_int state;
  int64_t flat[2]; /* legacy with a byte_offset: the whole storage as one dimension */
  int64_t strides[];
} ImportWrap;

static void ReleaseImportWrap(ImportWrap* wrap) {
  const int previous = atomic_exchange(&wrap->state, kImportDeletedEarly);
  if (previous == kImportArmed) {
    DLManagedTensorVersioned* src = wrap->src;
    free(wrap);
    if (src->deleter != NULL) src->deleter(src);
  } else if (previous == kImportAbandoned) {
    free(wrap);
  }
  /* Pending: the import is still under way and failed; its caller frees the wrap. */
}

static void DeleteImportVersioned(DLManagedTensorVersioned* self) {
  if (self != NULL) ReleaseImportWrap((ImportWrap*)self->manager_ctx);
}

static void DeleteImportLegacy(DLManagedTensor* self) {
  if (self != NULL) ReleaseImportWrap((ImportWrap*)self->manager_ctx);
}

/* After a failed import: the wrap is freed now, or by the deleter if torch still
 * holds it. */
static void AbandonImportWrap(ImportWrap* wrap) {
  if (atomic_exchange(&wrap->state, kImportAbandoned) == kImportDeletedEarly) free(wrap);
}

/* torch.as_strided(flat, shape, strides, offset); steals `flat`. */
static PyObject* ViewOf(const State* s, PyObject* flat, const DLTensor* dl, const int64_t* strides,
                        int64_t offset) {
  PyObject* shape = PyTuple_New(dl->ndim);
  PyObject* stride = PyTuple_New(dl->ndim);
  PyObject* result = NULL;
  if (shape != NULL && stride != NULL) {
    int ok = 1;
    for (int32_t i = 0; ok && i < dl->ndim; ++i) {
      PyObject* size = PyLong_FromLongLong((long long)dl->shape[i]);
      PyObject* step = PyLong_FromLongLong((long long)strides[i]);
      if (size == NULL || step == NULL) {
        Py_XDECREF(size);
        Py_XDECREF(step);
        ok = 0;
        break;
      }
      PyTuple_SetItem(shape, i, size);
      PyTuple_SetItem(stride, i, step);
    }
    if (ok) {
      result = PyObject_CallFunction(s->entry.as_strided, "OOOL", flat, shape, stride,
                                     (long long)offset);
    }
  }
  Py_XDECREF(shape);
  Py_XDECREF(stride);
  Py_DECREF(flat);
  return result;
}

/* What a zero-element import points torch at where NULL would leak it (never read). */
static const unsigned char kNoElements = 0;

static int ServesImportDevice(const State* s, const DLDevice* device) {
  if (device->device_type == kDLCPU) return 1;
  if ((int32_t)device->device_type == s->caps.gpu_type && s->caps.gpu_type != 0) {
    return device->device_id >= 0;
  }
  return 0;
}

int ManagedTensorToPyObjectNoSync(DLManagedTensorVersioned* src, void** out_py) {
  if (src == NULL || out_py == NULL) {
    PyErr_Format(PyExc_ValueError,
                 "%s: managed_tensor_to_py_object_no_sync: tensor and out must not be NULL",
                 kLib);
    return -1;
  }
  *out_py = NULL;
  const State* s = GetState();
  if (s == NULL) return -1;
  const DLTensor* dl = &src->dl_tensor;
  /* The contract's preamble (csrc/tcde_contract.h), with this table's dtype and device
   * answers in between. */
  if (src->version.major != DLPACK_MAJOR_VERSION) {
    return TcdeRaiseWrongMajor(kLib, (unsigned)src->version.major);
  }
  if ((src->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0) {
    return TcdeRaiseBadImport(kLib, TCDE_IMPORT_READ_ONLY, dl);
  }
  const Dtype* dtype = FromDLDataType(s, dl->dtype);
  if (dtype == NULL) return TcdeRaiseBadImport(kLib, TCDE_IMPORT_NO_DTYPE, dl);
  const int32_t device_type = dl->device.device_type;
  if ((device_type == kDLCUDA || device_type == kDLROCM) && device_type != s->caps.gpu_type) {
    PyErr_Format(PyExc_BufferError,
                 "%s: cannot import a DLPack tensor on device type %d id %d: this torch build "
                 "serves no such device (the table could not report its stream); use the %s "
                 "build of torch. The DLManagedTensorVersioned was not consumed and its deleter "
                 "was not called",
                 kLib, (int)device_type, (int)dl->device.device_id, GpuName(device_type));
    return -1;
  }
  if (!ServesImportDevice(s, &dl->device)) {
    return TcdeRaiseBadImport(kLib, TCDE_IMPORT_NO_DEVICE, dl);
  }
  const uint64_t itemsize = dtype->itemsize;
  int empty = 0;
  uint64_t storage_elements = 0;
  const char* problem = TcdeImportLayoutProblem(dl, itemsize, &storage_elements, &empty);
  if (problem != NULL) return TcdeRaiseBadImport(kLib, problem, dl);
  const int32_t ndim = dl->ndim;
  ImportWrap* wrap = (ImportWrap*)malloc(sizeof(ImportWrap) + (size_t)ndim * sizeof(int64_t));
  if (wrap == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  wrap->src = src;
  atomic_init(&wrap->state, kImportPending);
  if (dl->strides != NULL) {
    for (int32_t i = 0; i < ndim; ++i) wrap->strides[i] = dl->strides[i];
  } else {
    int64_t step = 1; /* checked above not to overflow */
    for (int32_t i = ndim - 1; i >= 0; --i) {
      wrap->strides[i] = step;
      if (i > 0) step *= dl->shape[i] > 1 ? dl->shape[i] : 1;
    }
  }
  /* On torch 2.4-2.9 the special one-byte types are imported as uint8 and
   * viewed back (they refuse the float8/fp4 DLPack codes). */
  const int byte_view = !s->caps.torch_has_dlpack13 && (dtype->flags & kDtypeByteView);
  DLTensor copy = *dl;
  /* Never NULL, ndim 0 included: torch 2.13 reads NULL strides as "compact" and then
   * refuses a byte_offset, which the native table (and torch 2.4-2.9) accept. */
  copy.strides = wrap->strides;
  if (byte_view) copy.dtype = s->dtypes[s->uint8_index].dl;
  if (empty) {
    /* A view without elements addresses no memory: no storage offset (see the
     * native table; deviation empty-view-storage). torch 2.2 never releases an
     * import whose data is NULL (docs/facts.md): it gets an address that is
     * never read instead. */
    copy.byte_offset = 0;
    if (copy.data == NULL && s->caps.null_data_import_leaks) copy.data = (void*)&kNoElements;
  }
  if (!s->caps.torch_has_dlpack13 && copy.byte_offset != 0) {
    /* torch 2.4-2.9 ignore byte_offset. As the native table (and torch 2.13) do,
     * the storage starts at `data` and covers the offset plus the view: import
     * that storage as one dimension, then take the view with as_strided below. */
    wrap->flat[0] = (int64_t)storage_elements;
    wrap->flat[1] = 1;
    copy.ndim = 1;
    copy.shape = &wrap->flat[0];
    copy.strides = &wrap->flat[1];
    copy.byte_offset = 0;
  }
  PyObject* capsule;
  if (s->caps.versioned_import) {
    wrap->versioned.version = src->version;
    wrap->versioned.version.major = DLPACK_MAJOR_VERSION;
    wrap->versioned.manager_ctx = wrap;
    wrap->versioned.deleter = &DeleteImportVersioned;
    wrap->versioned.flags = 0;
    wrap->versioned.dl_tensor = copy;
    capsule = PyCapsule_New(&wrap->versioned, "dltensor_versioned", NULL);
  } else {
    wrap->legacy.manager_ctx = wrap;
    wrap->legacy.deleter = &DeleteImportLegacy;
    wrap->legacy.dl_tensor = copy;
    capsule = PyCapsule_New(&wrap->legacy, "dltensor", NULL);
  }
  if (capsule == NULL) {
    free(wrap);
    return -1;
  }
  PyObject* tensor = CallWithOneArg(s->entry.from_dlpack, capsule);
  Py_DECREF(capsule);
  /* Unarmed until the end: if a step below fails, the deleter torch runs when
   * it drops the tensor leaves src with the caller. */
  /* torch < 2.10 only: the view the import finishes with runs with torch's overrides
   * off. A mode must neither see the producer's memory (it could keep a tensor over it
   * past a failed import) nor refuse the view (FakeTensorMode refuses real tensors). */
  const int follow_up = tensor != NULL && (byte_view || copy.shape == &wrap->flat[0]);
  TrustedScope scope = {NULL, NULL};
  if (follow_up && EnterTrustedScope(s, &scope) != 0) Py_CLEAR(tensor);
  if (tensor != NULL && byte_view) {
    PyObject* viewed = CallWithTwoArgs(s->tensor_base.view, tensor, dtype->dtype);
    Py_DECREF(tensor);
    tensor = viewed;
  }
  if (tensor != NULL && copy.shape == &wrap->flat[0]) {
    tensor = ViewOf(s, tensor, dl, wrap->strides, (int64_t)(dl->byte_offset / itemsize));
  }
  if (follow_up && ExitTrustedScope(s, &scope) != 0) Py_CLEAR(tensor);
  if (tensor == NULL) {
    AbandonImportWrap(wrap);
    PyObject* cause = TakeException();
    if (IsMemoryError(cause)) {
      RestoreException(cause);
      return -1;
    }
    /* Nothing over the producer's memory may outlive the failure: not a frame of the
     * cause's traceback, nor of an exception it chains. */
    if (cause != NULL) {
      PyException_SetTraceback(cause, Py_None);
      PyException_SetContext(cause, NULL);
      PyException_SetCause(cause, NULL);
    }
    return RaiseFrom(PyExc_BufferError,
                     "torch refused the DLPack tensor; it was not consumed and its deleter was "
                     "not called",
                     cause);
  }
  if (atomic_exchange(&wrap->state, kImportArmed) != kImportPending) {
    /* torch ran the deleter although the tensor lives: never seen; keep src. */
    Py_DECREF(tensor);
    free(wrap);
    PyErr_Format(PyExc_RuntimeError, "%s: torch released an import it still holds", kLib);
    return -1;
  }
  *out_py = tensor;
  return 0;
}

