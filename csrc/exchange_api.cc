// The DLPackExchangeAPI table for torch.Tensor, implemented against the ATen
// tensor API shared by torch 2.4-2.9 and 2.13 (not at::toDLPack*, whose output
// differs between versions), so every torch gets the same behaviour.
//
// The export and import members are called by a C consumer with the GIL held; the
// allocator and current_work_stream may be called without it (docs/import.md), and keep a
// Python error only for a caller that held the GIL (tcde_contract.h), as the portable table
// does. No member lets a C++ exception escape: each one catches everything and reports it
// as a Python exception (or through SetError for the allocator).
//
// What both tables promise is written once, in tcde_contract.h. This file is the table
// and the loader's entry points; its members live in one header each, included below
// into this one translation unit: exchange_common.h, exchange_export.h,
// exchange_import.h, exchange_allocator.h, exchange_stream.h.
#include "tcde_dlpack.h"  // must precede ATen: see the comment in that header
#include "tcde_convert.h"
#include "tcde_python.h"
#include "tcde_contract.h"  // again, after Python.h: its part that calls Python
#include "tcde_borrowed_dims.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/CPUAllocator.h>

#if defined(TCDE_BACKEND_CUDA)
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#elif defined(TCDE_BACKEND_ROCM)
#include <c10/hip/HIPStream.h>
#endif

#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#if TCDE_TORCH_PYTHON_AT_RUN_TIME
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <mutex>

// glibc 2.34 moved dlopen and dlsym from libdl.so.2 into libc.so.6 under a
// new symbol version (GLIBC_2.34), keeping the old one as a compatibility symbol. A
// build on a newer glibc would bind the new version, and the library would refuse
// to load on a glibc older than 2.34 (the manylinux_2_28 wheels). Bind the
// architecture's base version instead, which every glibc has: in libdl.so.2 before
// 2.34 (the gnu toolchain links -ldl), in libc.so.6 since. Another architecture
// binds what its build host's glibc offers.
#if defined(__GLIBC__) && defined(__x86_64__)
#define TCDE_GLIBC_BASE_VERSION "GLIBC_2.2.5"
#elif defined(__GLIBC__) && defined(__aarch64__)
#define TCDE_GLIBC_BASE_VERSION "GLIBC_2.17"
#endif
#if defined(TCDE_GLIBC_BASE_VERSION)
__asm__(".symver dlopen,dlopen@" TCDE_GLIBC_BASE_VERSION);
__asm__(".symver dlsym,dlsym@" TCDE_GLIBC_BASE_VERSION);
#endif
#endif

#include "exchange_common.h"
#include "exchange_export.h"
#include "exchange_import.h"
#include "exchange_allocator.h"
#include "exchange_stream.h"

namespace {
// Constant-initialized: no static constructor runs at load time.
const DLPackExchangeAPI kExchangeAPI = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    &ManagedTensorAllocator,
    &ManagedTensorFromPyObjectNoSync,
    &ManagedTensorToPyObjectNoSync,
    &DLTensorFromPyObjectNoSync,
    &CurrentWorkStream,
};

#if TCDE_TORCH_PYTHON_AT_RUN_TIME
// The path of torch's Python extension module torch._C (`.../torch/_C.<suffix>.so`),
// the first loaded object so named: dl_iterate_phdr's callback, which stops there.
struct TorchCSearch {
  char path[4096];
  bool found;
};

int FindTorchC(struct dl_phdr_info* info, size_t /*size*/, void* data) noexcept {
  const char* name = info->dlpi_name;
  const char* slash = name != nullptr ? std::strrchr(name, '/') : nullptr;
  if (slash == nullptr || slash - name < 6 || std::strncmp(slash - 6, "/torch", 6) != 0) return 0;
  const char* base = slash + 1;
  const size_t length = std::strlen(base);
  if (length < 7 || std::strncmp(base, "_C.", 3) != 0 || std::strcmp(base + length - 3, ".so") != 0) {
    return 0;
  }
  auto* search = static_cast<TorchCSearch*>(data);
  if (std::strlen(name) >= sizeof(search->path)) return 0;
  std::memcpy(search->path, name, std::strlen(name) + 1);
  search->found = true;
  return 1;
}

// Fills tcde::torch_python from the libtorch_python.so `import torch` loaded
// (see tcde_python.h: this library does not link it on Linux). Returns NULL when
// all three symbols were found, else why not (the loader, which sees only a NULL
// table, reads it through TorchCDLPackExtLoadProblem() and puts it in its one
// message). Not a static initializer: nothing runs at dlopen. A success is kept for
// the life of the process; a failure is not, so a library loaded before `import
// torch` works once torch is imported. A mutex makes concurrent first calls look once
// (the pointers are published before `resolved` says so); later calls read one flag.
//
// The symbols are looked up through torch._C, the extension module that needs
// libtorch_python: Python dlopen()ed it, so the loader keeps its dependency scope,
// and dlopen(RTLD_NOLOAD) of it costs about a microsecond. libtorch_python itself
// was loaded only as a dependency: dlopen(RTLD_NOLOAD) of it makes glibc build its
// whole dependency scope first (~150 us after `import torch` on 2.8, measured), most
// of what not linking it saves (docs/facts.md, "torch_python is resolved at run time").
const char* ResolveTorchPython() noexcept {
  static std::atomic<bool> resolved{false};
  if (resolved.load(std::memory_order_acquire)) return nullptr;
  static std::mutex lock;
  static char message[512];
  static TorchCSearch search;
  const std::lock_guard<std::mutex> guard(lock);
  if (resolved.load(std::memory_order_relaxed)) return nullptr;
  search.found = false;
  dl_iterate_phdr(&FindTorchC, &search);
  // RTLD_NOLOAD: only the copy already loaded; never a second load. The reference
  // it takes is kept: Python never unloads an extension module either.
  void* handle = search.found ? dlopen(search.path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (handle == nullptr || dlsym(handle, "PyInit__C") == nullptr) {
    std::snprintf(message, sizeof(message),
                  "%s: torch's extension module torch._C is not loaded in this process; "
                  "load this library only after `import torch`",
                  kLib);
    return message;
  }
  const char* const names[] = {"THPVariableClass", "ParameterClass",
                               TCDE_THPVARIABLE_WRAP_SYMBOL};
  void* found[3] = {};
  for (int i = 0; i < 3; ++i) {
    found[i] = dlsym(handle, names[i]);
    if (found[i] == nullptr) {
      std::snprintf(message, sizeof(message),
                    "%s: the loaded torch (%s) does not export %s from libtorch_python; "
                    "this library was built for another torch: rebuild it against the "
                    "running one",
                    kLib, search.path, names[i]);
      return message;
    }
  }
  tcde::torch_python.tensor_class = static_cast<PyObject* const*>(found[0]);
  tcde::torch_python.parameter_class = static_cast<PyObject* const*>(found[1]);
  tcde::torch_python.wrap = reinterpret_cast<tcde::WrapFunction>(found[2]);
  resolved.store(true, std::memory_order_release);
  return nullptr;
}
#endif

}  // namespace

#if TCDE_TORCH_PYTHON_AT_RUN_TIME
namespace tcde {
TorchPython torch_python{};
}  // namespace tcde
#endif

// NULL (0) when the torch_python symbols cannot be found: the loader then refuses
// the library with TorchCDLPackExtLoadProblem()'s reason.
extern "C" int64_t TorchDLPackExchangeAPIPtr(void) {
#if TCDE_TORCH_PYTHON_AT_RUN_TIME
  if (ResolveTorchPython() != nullptr) return 0;
#endif
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(&kExchangeAPI));
}

extern "C" const char* TorchCDLPackExtLoadProblem(void) {
#if TCDE_TORCH_PYTHON_AT_RUN_TIME
  return ResolveTorchPython();
#else
  return nullptr;
#endif
}

