#include "portable.h"

/* ------------------------------------------------------------------------ */
/* The table and the exports                                                */
/* ------------------------------------------------------------------------ */

/* Constant-initialised: nothing runs at load time. */
static const DLPackExchangeAPI kExchangeAPI = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    &ManagedTensorAllocator,
    &ManagedTensorFromPyObjectNoSync,
    &ManagedTensorToPyObjectNoSync,
    &DLTensorFromPyObjectNoSync,
    &CurrentWorkStream,
};

/* What the library serves, as the manifest's "python" says it. */
#define TCDE_PY_MAJOR_MINOR TCDE_STRINGIFY(PY_MAJOR_VERSION) "." TCDE_STRINGIFY(PY_MINOR_VERSION)
#if defined(Py_GIL_DISABLED) && Py_GIL_DISABLED
#define TCDE_PYTHON_JSON "\"" TCDE_PY_MAJOR_MINOR "t\""
#elif defined(Py_LIMITED_API) && Py_LIMITED_API >= 0x030C0000
#define TCDE_PYTHON_JSON "\"abi3.12\""
#elif defined(Py_LIMITED_API)
#define TCDE_PYTHON_JSON "\"abi3\""
#else
#define TCDE_PYTHON_JSON "\"" TCDE_PY_MAJOR_MINOR "\""
#endif

static const char kBuildInfo[] =
    "{\"table\": \"portable\", \"torch\": \"any\", \"torch_major\": null, \"torch_minor\": "
    "null, \"backend\": \"any\", \"cxx11_abi\": null, \"dlpack\": \"" TCDE_STRINGIFY(
        DLPACK_MAJOR_VERSION) "." TCDE_STRINGIFY(DLPACK_MINOR_VERSION) "\", \"python\": " TCDE_PYTHON_JSON
    ", \"toolchain\": \"" TCDE_TOOLCHAIN "\", \"gpu_toolkit\": null}";

static char g_load_problem[512];

/* Loads the cached entry points (importing torch if needed) when Python runs;
 * NULL when they are all there, else why not. */
static const char* CheckLoad(void) {
  if (!Py_IsInitialized()) return NULL;
  if (atomic_load_explicit(&g_state, memory_order_acquire) != NULL) return NULL;
  const PyGILState_STATE gil = PyGILState_Ensure();
  const char* problem = NULL;
  if (GetState() == NULL) {
    char text[256];
    TakeExceptionText(text, sizeof(text));
    snprintf(g_load_problem, sizeof(g_load_problem),
             "%s: torch's Python entry points are not all there (%s); this table needs "
             "torch._C._to_dlpack, torch._C._from_dlpack and torch.empty",
             kLib, text);
    problem = g_load_problem;
  }
  PyGILState_Release(gil);
  return problem;
}

int64_t TorchDLPackExchangeAPIPtr(void) {
  if (CheckLoad() != NULL) return 0;
  return (int64_t)(intptr_t)&kExchangeAPI;
}

const char* TorchCDLPackExtBuildInfo(void) { return kBuildInfo; }

const char* TorchCDLPackExtLoadProblem(void) { return CheckLoad(); }

