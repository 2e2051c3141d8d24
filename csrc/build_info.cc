// TorchCDLPackExtBuildInfo(): the build's identity as a JSON object, assembled at
// compile time from the driver's TCDE_* macros, so diagnostics can ask a library
// what it was built for without trusting its file name.
#include "tcde_dlpack.h"

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

#define TCDE_INFO_PREFIX                                                                  \
  "{\"torch\": \"" TCDE_TORCH_BUILD "\", \"torch_major\": " TCDE_STRINGIFY(              \
      TORCH_VERSION_MAJOR) ", \"torch_minor\": " TCDE_STRINGIFY(TORCH_VERSION_MINOR)    \
      ", \"backend\": \"" TCDE_BACKEND_NAME "\", \"cxx11_abi\": " TCDE_CXX11_ABI_JSON    \
      ", \"dlpack\": \"" TCDE_STRINGIFY(DLPACK_MAJOR_VERSION) "." TCDE_STRINGIFY(         \
          DLPACK_MINOR_VERSION) "\", \"toolchain\": \"" TCDE_TOOLCHAIN "\", \"gpu_toolkit\": "

namespace {
// A CPU build passes TCDE_GPU_TOOLKIT="" ; the JSON says null rather than "".
constexpr const char* kBuildInfo = sizeof(TCDE_GPU_TOOLKIT) > 1
                                       ? TCDE_INFO_PREFIX "\"" TCDE_GPU_TOOLKIT "\"}"
                                       : TCDE_INFO_PREFIX "null}";
}  // namespace

extern "C" const char* TorchCDLPackExtBuildInfo(void) { return kBuildInfo; }
