#include "portable.h"

_Atomic(StreamState*) g_cuda_streams = NULL;
_Atomic(StreamState*) g_xpu_streams = NULL;

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

static void FreeStreamState(StreamState* st) {
  if (st == NULL) return;
  Py_XDECREF(st->raw_stream);
  Py_XDECREF(st->current_stream);
  Py_XDECREF(st->str_handle);
  free(st);
}

/* torch.cuda's (xpu: torch.xpu's) stream getters, looked up on first use. */
static StreamState* GetStreamState(const State* s, int xpu) {
  _Atomic(StreamState*)* slot = xpu ? &g_xpu_streams : &g_cuda_streams;
  StreamState* st = atomic_load_explicit(slot, memory_order_acquire);
  if (st != NULL) return st;
  st = (StreamState*)calloc(1, sizeof(StreamState));
  if (st == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  PyObject* module = PyImport_ImportModule(xpu ? "torch.xpu" : "torch.cuda");
  if (module == NULL) goto fail;
  st->current_stream = GetAttr(module, "current_stream", 0);
  Py_DECREF(module);
  if (st->current_stream == NULL) goto fail;
  st->str_handle = PyUnicode_InternFromString(xpu ? "sycl_queue" : "cuda_stream");
  if (st->str_handle == NULL) goto fail;
  if (!xpu) {
    /* An int, without a torch.cuda.Stream object; not in every torch. */
    PyObject* c = GetAttr(s->entry.torch_module, "_C", 0);
    if (c == NULL) goto fail;
    st->raw_stream = GetAttr(c, "_cuda_getCurrentRawStream", 1);
    Py_DECREF(c);
    if (st->raw_stream == NULL && PyErr_Occurred()) goto fail;
  }
  {
    StreamState* expected = NULL;
    if (atomic_compare_exchange_strong_explicit(slot, &expected, st, memory_order_acq_rel,
                                                memory_order_acquire)) {
      return st;
    }
    FreeStreamState(st);
    return expected;
  }
fail:
  FreeStreamState(st);
  return NULL;
}

/* The current stream of a GPU device (device_id -1: the current device), GIL held. */
static int QueryStream(const State* s, int xpu, int32_t device_id, void** out) {
  StreamState* st = GetStreamState(s, xpu);
  if (st == NULL) return -1;
  PyObject* index = PyLong_FromLong((long)device_id);
  if (index == NULL) return -1;
  PyObject* handle;
  if (st->raw_stream != NULL) {
    handle = CallWithOneArg(st->raw_stream, index);
  } else {
    /* torch.cuda.current_stream(None) is the current device's. */
    PyObject* stream = CallWithOneArg(st->current_stream, device_id < 0 ? Py_None : index);
    handle = stream == NULL ? NULL : PyObject_GetAttr(stream, st->str_handle);
    Py_XDECREF(stream);
  }
  Py_DECREF(index);
  if (handle == NULL) return -1;
  void* pointer = PyLong_AsVoidPtr(handle);
  Py_DECREF(handle);
  if (pointer == NULL && PyErr_Occurred()) return -1;
  *out = pointer;
  return 0;
}

/* Host memory has no stream (NULL). kDLCUDA / kDLROCM: torch.cuda's current
 * stream (HIP's on a ROCm build) on a GPU torch, for the other GPU type too
 * where torch answers it (< 2.13, as torch's own table; docs/facts.md); a CPU
 * torch refuses both (NULL would be taken for the default stream), and so does a
 * GPU torch >= 2.13 the other type. kDLOneAPI: torch.xpu's current stream's SYCL
 * queue on an XPU torch.
 * device_id -1 means the current device of that backend. Other device types:
 * NULL on a CPU-only torch (as the native CPU build), ValueError on a GPU torch. */
int CurrentWorkStream(DLDeviceType device_type, int32_t device_id, void** out) {
  if (out != NULL) *out = NULL;
  if (out != NULL && (device_type == kDLCPU || device_type == kDLCUDAHost ||
                      device_type == kDLROCMHost || device_type == kDLCUDAManaged)) {
    return 0;
  }
  if (!Py_IsInitialized()) {
    /* After Py_Finalize no Python may run. A CPU-only torch's answer needs none
     * (the State of the load is never freed); any other is -1, with no error to
     * set. A call racing with Py_Finalize itself cannot be made safe (PEP 788). */
    const State* cached = atomic_load_explicit(&g_state, memory_order_acquire);
    const int cpu_only = cached != NULL && cached->caps.gpu_type == 0 && !cached->caps.xpu;
    return out != NULL && cpu_only && device_type != kDLCUDA && device_type != kDLROCM ? 0 : -1;
  }
  /* An error is left set only for a caller that held the GIL (PyGILState_Ensure
   * says so; PyGILState_Check is not in the limited API): a thread that did not
   * hold it has nowhere to see it, and a Python thread that had released it
   * would find it later as an unrelated SystemError. */
#if defined(Py_LIMITED_API)
  const PyGILState_STATE gil = PyGILState_Ensure();
  const int caller_held = gil == PyGILState_LOCKED;
  const int need_gil = 1;
#else
  const int caller_held = PyGILState_Check();
  const int need_gil = !caller_held;
  PyGILState_STATE gil = PyGILState_UNLOCKED;
  if (need_gil) gil = PyGILState_Ensure();
#endif
  int rc = -1;
  const State* s = NULL;
  if (out == NULL) {
    PyErr_Format(PyExc_ValueError, "%s: current_work_stream: out is NULL", kLib);
    goto done;
  }
  s = GetState();
  if (s == NULL) goto done;
  if (device_type == kDLCUDA || device_type == kDLROCM) {
    /* The build's own GPU type, or the other one where torch answers it with the same
     * stream; never a CPU torch (NULL would be taken for the default stream). */
    if ((int32_t)device_type != s->caps.gpu_type && !(s->caps.gpu_type != 0 && s->caps.other_gpu_stream)) {
      PyErr_Format(PyExc_ValueError,
                   "%s: current_work_stream: device type %d is a GPU this torch build does not "
                   "serve, so it knows no stream for it; use the %s build of torch",
                   kLib, (int)device_type, GpuName(device_type));
      goto done;
    }
  } else if (device_type == kDLOneAPI && s->caps.xpu) {
    /* below */
  } else if (s->caps.gpu_type == 0 && !s->caps.xpu) {
    rc = 0; /* a CPU-only torch: no stream, as the native CPU build answers */
    goto done;
  } else {
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: device type %d is not a device this torch build "
                 "serves",
                 kLib, (int)device_type);
    goto done;
  }
  if (device_id < -1 || device_id > TCDE_MAX_DEVICE_INDEX) {
    /* torch's own check ("Overflow when unpacking DeviceIndex") names neither the
     * library nor the range; c10::DeviceIndex is 8-bit (csrc/tcde_contract.h). */
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: invalid device id %d; pass -1 (the current device) "
                 "or a device index from 0 to %d",
                 kLib, (int)device_id, TCDE_MAX_DEVICE_INDEX);
    goto done;
  }
  rc = QueryStream(s, device_type == kDLOneAPI, device_id, out);
done:
  if (rc != 0 && !caller_held) PyErr_Clear();
  if (need_gil) PyGILState_Release(gil);
  return rc;
}

