/*
 * Timing loops over a DLPackExchangeAPI table.
 *
 * Python loads this file's shared library with ctypes.PyDLL, so every entry point runs
 * with the GIL held, which the exchange API requires of its callers. The harness sees the
 * producer only through the C table, the way a consumer such as tvm-ffi does; it includes
 * no torch header, so one build serves every torch version on the same Python.
 *
 * Every entry point has the same shape:
 *
 *     int64_t tcde_bench_<name>(const DLPackExchangeAPI* api, PyObject* tensors, int64_t calls)
 *
 * It makes `calls` calls cycling over the Python list `tensors` and returns the elapsed
 * CLOCK_MONOTONIC nanoseconds, or -1 with a Python exception set (ctypes.PyDLL raises it).
 *
 * The allocator and the stream getter take no tensor, so the device is theirs to say:
 * `tcde_bench_allocator_on` and `tcde_bench_current_work_stream_on` take two more arguments,
 * `int32_t device_type, int32_t device_id` (a DLDeviceType such as kDLCUDA, and its index);
 * `tcde_bench_allocator` and `tcde_bench_current_work_stream` are those on (kDLCPU, 0).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <time.h>

#define TCDE_BENCH_EXPORT __attribute__((visibility("default")))

/* to_py_object consumes managed tensors; they are made untimed in batches of this size so
 * that memory stays bounded however many calls are timed. */
#define TO_PY_BATCH 256

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + (int64_t)ts.tv_nsec;
}

/* Producers must set a Python error when they fail; one that does not would otherwise
 * make ctypes return -1 silently. */
static int64_t fail(const char* function) {
  if (!PyErr_Occurred()) {
    PyErr_Format(PyExc_RuntimeError, "%s failed without setting a Python error", function);
  }
  return -1;
}

static int check_args(const DLPackExchangeAPI* api, PyObject* tensors, int64_t calls) {
  if (api == NULL) {
    PyErr_SetString(PyExc_ValueError, "the DLPackExchangeAPI pointer is NULL");
    return -1;
  }
  if (api->header.version.major != DLPACK_MAJOR_VERSION) {
    PyErr_Format(PyExc_ValueError,
                 "the exchange API reports DLPack major version %u; this harness was "
                 "compiled against major version %d",
                 (unsigned)api->header.version.major, DLPACK_MAJOR_VERSION);
    return -1;
  }
  if (!PyList_Check(tensors) || PyList_GET_SIZE(tensors) == 0) {
    PyErr_SetString(PyExc_TypeError, "tensors must be a non-empty list");
    return -1;
  }
  if (calls <= 0) {
    PyErr_SetString(PyExc_ValueError, "calls must be positive");
    return -1;
  }
  return 0;
}

static PyObject* nth(PyObject* tensors, int64_t i) {
  return PyList_GET_ITEM(tensors, (Py_ssize_t)(i % PyList_GET_SIZE(tensors)));
}

/* The cost of the loop itself, to read the other numbers against. */
TCDE_BENCH_EXPORT int64_t tcde_bench_loop_overhead(const DLPackExchangeAPI* api,
                                                   PyObject* tensors, int64_t calls) {
  if (check_args(api, tensors, calls) != 0) return -1;
  volatile uintptr_t sink = 0;
  int64_t start = now_ns();
  for (int64_t i = 0; i < calls; ++i) {
    sink ^= (uintptr_t)nth(tensors, i);
  }
  int64_t elapsed = now_ns() - start;
  (void)sink;
  return elapsed;
}

/* An owning export and its release, which is what a consumer pays per kernel argument. */
TCDE_BENCH_EXPORT int64_t tcde_bench_from_py_object(const DLPackExchangeAPI* api,
                                                    PyObject* tensors, int64_t calls) {
  if (check_args(api, tensors, calls) != 0) return -1;
  int64_t start = now_ns();
  for (int64_t i = 0; i < calls; ++i) {
    DLManagedTensorVersioned* managed = NULL;
    if (api->managed_tensor_from_py_object_no_sync(nth(tensors, i), &managed) != 0) {
      return fail("managed_tensor_from_py_object_no_sync");
    }
    if (managed->deleter != NULL) managed->deleter(managed);
  }
  return now_ns() - start;
}

TCDE_BENCH_EXPORT int64_t tcde_bench_dltensor_from_py_object(const DLPackExchangeAPI* api,
                                                             PyObject* tensors, int64_t calls) {
  if (check_args(api, tensors, calls) != 0) return -1;
  if (api->dltensor_from_py_object_no_sync == NULL) {
    PyErr_SetString(PyExc_NotImplementedError,
                    "this producer leaves dltensor_from_py_object_no_sync NULL");
    return -1;
  }
  volatile uintptr_t sink = 0;
  int64_t start = now_ns();
  for (int64_t i = 0; i < calls; ++i) {
    DLTensor view;
    if (api->dltensor_from_py_object_no_sync(nth(tensors, i), &view) != 0) {
      return fail("dltensor_from_py_object_no_sync");
    }
    sink ^= (uintptr_t)view.data;
  }
  int64_t elapsed = now_ns() - start;
  (void)sink;
  return elapsed;
}

/* Times the import of managed tensors (made untimed by from_py_object) plus the release of
 * the resulting Python objects, which is where the imported tensor is torn down. */
TCDE_BENCH_EXPORT int64_t tcde_bench_to_py_object(const DLPackExchangeAPI* api,
                                                  PyObject* tensors, int64_t calls) {
  if (check_args(api, tensors, calls) != 0) return -1;
  DLManagedTensorVersioned* batch[TO_PY_BATCH];
  int64_t elapsed = 0;
  for (int64_t done = 0; done < calls;) {
    int64_t count = calls - done < TO_PY_BATCH ? calls - done : TO_PY_BATCH;
    for (int64_t j = 0; j < count; ++j) {
      if (api->managed_tensor_from_py_object_no_sync(nth(tensors, done + j), &batch[j]) != 0) {
        for (int64_t k = 0; k < j; ++k) {
          if (batch[k]->deleter != NULL) batch[k]->deleter(batch[k]);
        }
        return fail("managed_tensor_from_py_object_no_sync");
      }
    }
    int64_t start = now_ns();
    for (int64_t j = 0; j < count; ++j) {
      void* out = NULL;
      if (api->managed_tensor_to_py_object_no_sync(batch[j], &out) != 0) {
        /* A failed import leaves ownership with the caller (torch 2.13 and this project
         * both follow that rule), so batch[j] and the rest are still ours to release. */
        for (int64_t k = j; k < count; ++k) {
          if (batch[k]->deleter != NULL) batch[k]->deleter(batch[k]);
        }
        return fail("managed_tensor_to_py_object_no_sync");
      }
      Py_DECREF((PyObject*)out);
    }
    elapsed += now_ns() - start;
    done += count;
  }
  return elapsed;
}

/* The round trip a consumer makes for each tensor it hands back to Python: an owning
 * export, then the import of that managed tensor, then the release of the new object
 * (which tears the imported tensor down and runs the export's deleter). */
TCDE_BENCH_EXPORT int64_t tcde_bench_round_trip(const DLPackExchangeAPI* api, PyObject* tensors,
                                                int64_t calls) {
  if (check_args(api, tensors, calls) != 0) return -1;
  int64_t start = now_ns();
  for (int64_t i = 0; i < calls; ++i) {
    DLManagedTensorVersioned* managed = NULL;
    if (api->managed_tensor_from_py_object_no_sync(nth(tensors, i), &managed) != 0) {
      return fail("managed_tensor_from_py_object_no_sync");
    }
    void* out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(managed, &out) != 0) {
      if (managed->deleter != NULL) managed->deleter(managed);
      return fail("managed_tensor_to_py_object_no_sync");
    }
    Py_DECREF((PyObject*)out);
  }
  return now_ns() - start;
}

static void set_python_error(void* error_ctx, const char* kind, const char* message) {
  (void)error_ctx;
  PyErr_Format(PyExc_RuntimeError, "%s: %s", kind, message);
}

/* A small float32 tensor on (device_type, device_id): the allocation a consumer asks for a
 * kernel output. */
TCDE_BENCH_EXPORT int64_t tcde_bench_allocator_on(const DLPackExchangeAPI* api, PyObject* tensors,
                                                  int64_t calls, int32_t device_type,
                                                  int32_t device_id) {
  if (check_args(api, tensors, calls) != 0) return -1;
  int64_t shape[1] = {16};
  DLTensor prototype;
  prototype.data = NULL;
  prototype.device.device_type = (DLDeviceType)device_type;
  prototype.device.device_id = device_id;
  prototype.ndim = 1;
  prototype.dtype.code = kDLFloat;
  prototype.dtype.bits = 32;
  prototype.dtype.lanes = 1;
  prototype.shape = shape;
  prototype.strides = NULL;
  prototype.byte_offset = 0;
  int64_t start = now_ns();
  for (int64_t i = 0; i < calls; ++i) {
    DLManagedTensorVersioned* managed = NULL;
    if (api->managed_tensor_allocator(&prototype, &managed, NULL, set_python_error) != 0) {
      return fail("managed_tensor_allocator");
    }
    if (managed->deleter != NULL) managed->deleter(managed);
  }
  return now_ns() - start;
}

/* The CPU allocation (the shape every entry point shares: the CPU benchmarks call this). */
TCDE_BENCH_EXPORT int64_t tcde_bench_allocator(const DLPackExchangeAPI* api, PyObject* tensors,
                                               int64_t calls) {
  return tcde_bench_allocator_on(api, tensors, calls, kDLCPU, 0);
}

/* The current stream of (device_type, device_id): a CUDA device's is what a consumer asks
 * before each kernel launch. */
TCDE_BENCH_EXPORT int64_t tcde_bench_current_work_stream_on(const DLPackExchangeAPI* api,
                                                            PyObject* tensors, int64_t calls,
                                                            int32_t device_type,
                                                            int32_t device_id) {
  if (check_args(api, tensors, calls) != 0) return -1;
  volatile uintptr_t sink = 0;
  int64_t start = now_ns();
  for (int64_t i = 0; i < calls; ++i) {
    void* stream = NULL;
    if (api->current_work_stream((DLDeviceType)device_type, device_id, &stream) != 0) {
      return fail("current_work_stream");
    }
    sink ^= (uintptr_t)stream;
  }
  int64_t elapsed = now_ns() - start;
  (void)sink;
  return elapsed;
}

TCDE_BENCH_EXPORT int64_t tcde_bench_current_work_stream(const DLPackExchangeAPI* api,
                                                         PyObject* tensors, int64_t calls) {
  return tcde_bench_current_work_stream_on(api, tensors, calls, kDLCPU, 0);
}
