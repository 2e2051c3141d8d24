// The DLPack header this library is built with, plus the few definitions every
// translation unit of csrc/ shares (export macro, backend selection).
//
// Include this header FIRST in every .cc file. dlpack.h and torch's
// <ATen/dlpack.h> share the include guard DLPACK_DLPACK_H_; whichever is seen
// first wins. Torch 2.4-2.9 ship DLPack 0.8/1.0, which lack
// DLManagedTensorVersioned details, the FP8/FP4 codes and DLPackExchangeAPI, so
// the newer header (from apache-tvm-ffi, put first on the include path by the
// build driver) must be included before any ATen header.
#pragma once

#include <dlpack/dlpack.h>

#if !defined(DLPACK_MAJOR_VERSION) || !defined(DLPACK_MINOR_VERSION) || \
    (DLPACK_MAJOR_VERSION < 1) || (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION < 2)
#error "torch-c-dlpack-ext needs dlpack.h >= 1.2 (DLPackExchangeAPI). Put a newer DLPack include dir (e.g. apache-tvm-ffi's tvm_ffi/include) FIRST on the include path, and include csrc/tcde_dlpack.h before any ATen/torch header (torch's own ATen/dlpack.h is older and shares the include guard)."
#endif

#if (defined(TCDE_BACKEND_CPU) + defined(TCDE_BACKEND_CUDA) + defined(TCDE_BACKEND_ROCM)) != 1
#error "define exactly one of TCDE_BACKEND_CPU, TCDE_BACKEND_CUDA, TCDE_BACKEND_ROCM (see CONTRIBUTING.md, build contract)"
#endif

// The backend's name as the manifest and _naming.Backend spell it.
#if defined(TCDE_BACKEND_CUDA)
#define TCDE_BACKEND_NAME "cuda"
#elif defined(TCDE_BACKEND_ROCM)
#define TCDE_BACKEND_NAME "rocm"
#else
#define TCDE_BACKEND_NAME "cpu"
#endif

#if defined(_WIN32)
#define TCDE_EXPORT __declspec(dllexport)
#else
#define TCDE_EXPORT __attribute__((visibility("default")))
#endif

#include <stdint.h>
#include <torch/version.h>

// True when compiling against torch major.minor or newer.
#define TCDE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||       \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

extern "C" {
// Address of the static DLPackExchangeAPI table, as an integer (what existing
// consumers such as tvm-ffi call through ctypes).
TCDE_EXPORT int64_t TorchDLPackExchangeAPIPtr(void);
// A JSON object describing this build (torch, backend, C++ ABI, DLPack, toolchain).
TCDE_EXPORT const char* TorchCDLPackExtBuildInfo(void);
// Why TorchDLPackExchangeAPIPtr() returns NULL (one line naming what is missing
// and what to do), or NULL when it does not.
TCDE_EXPORT const char* TorchCDLPackExtLoadProblem(void);
}
