// TorchCDLPackExtBuildInfo(): the build's identity as a JSON object, assembled at
// compile time from the driver's TCDE_* macros, so diagnostics can ask a library
// what it was built for without trusting its file name.
#include "tcde_dlpack.h"

#include <Python.h>  // only its macros: which CPython ABI this build serves
#include <torch/version.h>

#include <cstddef>  // also pulls in libstdc++'s config, which defines _GLIBCXX_USE_CXX11_ABI

#if !defined(TCDE_TORCH_BUILD) || !defined(TCDE_TOOLCHAIN) || !defined(TCDE_GPU_TOOLKIT)
#error "TCDE_TORCH_BUILD, TCDE_TOOLCHAIN and TCDE_GPU_TOOLKIT must be defined as string literals (see CONTRIBUTING.md, build contract)"
#endif

#define TCDE_STRINGIFY_(x) #x
#define TCDE_STRINGIFY(x) TCDE_STRINGIFY_(x)

// The dual libstdc++ ABI only exists on Linux with libstdc++; elsewhere the
// field is null, as the manifest records it.
#if defined(__linux__) && defined(_GLIBCXX_USE_CXX11_ABI)
#define TCDE_CXX11_ABI_JSON TCDE_STRINGIFY(_GLIBCXX_USE_CXX11_ABI)
#else
#define TCDE_CXX11_ABI_JSON "null"
#endif

// What the library serves, as the manifest's "python" says it: "abi3" (the limited
// API: every CPython >= 3.9 with the GIL), "3.14t" (that free-threaded CPython only),
// or "3.11" (a build against the full API of one CPython with the GIL).
#define TCDE_PY_MAJOR_MINOR TCDE_STRINGIFY(PY_MAJOR_VERSION) "." TCDE_STRINGIFY(PY_MINOR_VERSION)
#if defined(Py_GIL_DISABLED) && Py_GIL_DISABLED
#define TCDE_PYTHON_JSON TCDE_PY_MAJOR_MINOR "t"
#elif defined(Py_LIMITED_API)
#define TCDE_PYTHON_JSON "abi3"
#else
#define TCDE_PYTHON_JSON TCDE_PY_MAJOR_MINOR
#endif

#define TCDE_INFO_PREFIX                                                                  \
  "{\"torch\": \"" TCDE_TORCH_BUILD "\", \"torch_major\": " TCDE_STRINGIFY(              \
      TORCH_VERSION_MAJOR) ", \"torch_minor\": " TCDE_STRINGIFY(TORCH_VERSION_MINOR)    \
      ", \"backend\": \"" TCDE_BACKEND_NAME "\", \"cxx11_abi\": " TCDE_CXX11_ABI_JSON    \
      ", \"dlpack\": \"" TCDE_STRINGIFY(DLPACK_MAJOR_VERSION) "." TCDE_STRINGIFY(         \
          DLPACK_MINOR_VERSION) "\", \"python\": \"" TCDE_PYTHON_JSON "\", \"toolchain\": \"" \
      TCDE_TOOLCHAIN "\", \"gpu_toolkit\": "

namespace {
// A CPU build passes TCDE_GPU_TOOLKIT="" ; the JSON says null rather than "".
constexpr const char* kBuildInfo = sizeof(TCDE_GPU_TOOLKIT) > 1
                                       ? TCDE_INFO_PREFIX "\"" TCDE_GPU_TOOLKIT "\"}"
                                       : TCDE_INFO_PREFIX "null}";
}  // namespace

extern "C" const char* TorchCDLPackExtBuildInfo(void) { return kBuildInfo; }
