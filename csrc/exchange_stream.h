// The native table's current_work_stream.
// Part of csrc/exchange_api.cc's one translation unit (included there, in this order):
// every file that includes ATen costs the compiler about 20 s and 1.4 GB, so the native
// table's rooms are headers of one .cc rather than .cc files of their own.
#pragma once

namespace {

#if !defined(TCDE_BACKEND_CPU)
// The backend's current stream on device `index` (-1: the current device).
void* CurrentGpuStream(c10::DeviceIndex index) {
#if defined(TCDE_BACKEND_CUDA)
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(index).stream());
#else
  return static_cast<void*>(c10::hip::getCurrentHIPStream(index).stream());
#endif
}
#endif

// current_work_stream for everything but a GPU stream this build answers (see
// CurrentWorkStream): NULL for host memory, which has no stream; an error for a GPU
// device type whose stream this build does not answer (tcde::AnswersStream: torch's own
// answer there is NULL, which a consumer takes for the default stream); NULL for other
// device types in the CPU build (as torch's CPU build answers them) and an error in a
// GPU build, which knows only its own GPU's streams; an error for a NULL `out` and for
// device ids c10 cannot index (torch's own would write through NULL, or take the id
// modulo 256: another device's stream). Out of line: the fast path stays small.
C10_NOINLINE int CurrentWorkStreamOther(DLDeviceType device_type, int32_t device_id,
                                        void** out) noexcept {
  if (out == nullptr) {
    if (!TcdeCallerHoldsGil()) return -1;  // no error without the GIL (tcde_contract.h)
    PyErr_Format(PyExc_ValueError, "%s: current_work_stream: out is NULL", kLib);
    return -1;
  }
  *out = nullptr;
  if (device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost ||
      device_type == kDLCUDAManaged) {
    return 0;
  }
  if (const char* backend = tcde::StreamBackendServing(device_type)) {
    if (!TcdeCallerHoldsGil()) return -1;
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: device type %d is a GPU whose stream its "
                 TCDE_BACKEND_NAME " build (torch %d.%d) does not know (NULL would put the "
                 "consumer on the default stream, unordered against torch's work); use the "
                 "%s build on a %s torch (install the wheel that carries it or set "
                 "TORCH_C_DLPACK_EXT_JIT=1)",
                 kLib, static_cast<int>(device_type), TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                 backend, backend);
    return -1;
  }
#if defined(TCDE_BACKEND_CPU)
  (void)device_id;
  return 0;
#else
  if (!TcdeCallerHoldsGil()) return -1;
  if (!tcde::AnswersStream(device_type)) {
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: device type %d is not a device this library was "
                 "built for (a " TCDE_BACKEND_NAME " build)",
                 kLib, static_cast<int>(device_type));
    return -1;
  }
  PyErr_Format(PyExc_ValueError,
               "%s: current_work_stream: invalid device id %d; pass -1 (the current device) "
               "or a device index from 0 to %d",
               kLib, static_cast<int>(device_id),
               static_cast<int>(std::numeric_limits<c10::DeviceIndex>::max()));
  return -1;
#endif
}

// The call a consumer makes on every kernel launch. torch's own (CUDA build, 2.10-2.12)
// compares the type and calls getCurrentCUDAStream() (2.13+: at::accelerator's lookups
// first); ours makes three tests before the same call, each needed for safety: `out` not
// NULL, a device type whose stream this build answers, an id c10 can index. All else is
// CurrentWorkStreamOther's.
int CurrentWorkStream(DLDeviceType device_type, int32_t device_id, void** out) {
#if !defined(TCDE_BACKEND_CPU)
  if (C10_LIKELY(out != nullptr && tcde::AnswersStream(device_type) &&
                 tcde::FitsDeviceIndex(device_id))) {
    try {
      *out = CurrentGpuStream(static_cast<c10::DeviceIndex>(device_id));
      return 0;
    } catch (...) {
      *out = nullptr;
      // (No GIL: the exception's text has nowhere to go; torch's own python_error
      // already holds whatever Python error it caught.)
      if (!TcdeCallerHoldsGil()) return -1;
      return RaiseCurrentException(PyExc_RuntimeError);
    }
  }
#else
  // A CPU build's common call: host memory, no stream.
  if (C10_LIKELY(out != nullptr && device_type == kDLCPU)) {
    *out = nullptr;
    return 0;
  }
#endif
  return CurrentWorkStreamOther(device_type, device_id, out);
}

}  // namespace
