/* The portable DLPackExchangeAPI table: torch.Tensor exchanged through torch's
 * Python-level entry points only, so one build serves every torch (no ATen
 * header, no C++ ABI, no torch minor). It includes Python.h and dlpack.h and
 * nothing of torch:
 *
 *   export     torch._C._to_dlpack_versioned (2.9+) or torch._C._to_dlpack
 *              (every torch; a legacy DLManagedTensor, wrapped here);
 *   import     torch._C._from_dlpack on a capsule this file makes (versioned
 *              where torch reads those, legacy before);
 *   allocator  torch.empty, then exported as above;
 *   stream     torch._C._cuda_getCurrentRawStream / torch.cuda.current_stream,
 *              torch.xpu.current_stream.
 *
 * The contract is the native table's (csrc/exchange_api.cc), member by member:
 * the same refusals with the same error types, the same ownership rules. Its
 * differences from torch's own table are tests/conformance/tables.py's
 * DEVIATIONS, and tests/integration/test_portable_vs_native.py holds it equal to
 * the native library call by call.
 *
 * Trust: the tensor handed in is untrusted (a subclass or a torch function mode
 * may answer anything): what an export describes comes from torch's own export
 * (see "What a tensor says of itself" below).
 *
 * Threads: from_py, to_py and dltensor_from_py are called with the GIL held.
 * The allocator and current_work_stream may come from threads that do not hold
 * it: they take it (PyGILState_Ensure) only when they must call into Python,
 * and leave an error set only for a caller that held it. After Py_Finalize
 * they return -1 (the allocator through SetError) without touching Python; a
 * call racing with Py_Finalize itself cannot be made safe before PEP 788.
 * Deleters are plain C and touch no Python object: they may run anywhere, even
 * after the interpreter has finalised.
 *
 * Build: C11, -fvisibility=hidden, csrc/exports.map; Py_LIMITED_API=0x03090000
 * (abi3), 0x030C0000 (abi3 with vectorcall) or none (the full API of one
 * CPython, free-threaded included). TCDE_TOOLCHAIN names the compiler. */
#ifndef TCDE_PORTABLE_H_
#define TCDE_PORTABLE_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlpack/dlpack.h>

#include "../tcde_contract.h"

#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(DLPACK_MAJOR_VERSION) || !defined(DLPACK_MINOR_VERSION) || \
    (DLPACK_MAJOR_VERSION < 1) || (DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION < 2)
#error "the portable table needs dlpack.h >= 1.2 (DLPackExchangeAPI): put apache-tvm-ffi's include dir (tvm_ffi.libinfo.find_dlpack_include_path()) on the include path"
#endif

#if !defined(TCDE_TOOLCHAIN)
#error "TCDE_TOOLCHAIN must be defined as a string literal naming the compiler (see CONTRIBUTING.md, build contract)"
#endif

/* Vectorcall is in the limited API from 3.12 only (PEP 590); the abi3 build for
 * 3.9 calls through PyObject_Call with argument tuples. */
#if defined(Py_LIMITED_API) && Py_LIMITED_API >= 0x030C0000 && PY_VERSION_HEX < 0x030C0000
#error "Py_LIMITED_API=0x030C0000 (abi3 with vectorcall) needs the headers of a CPython >= 3.12"
#endif
#if !defined(Py_LIMITED_API) || Py_LIMITED_API >= 0x030C0000
#define TCDE_VECTORCALL 1
#else
#define TCDE_VECTORCALL 0
#endif

/* PyErr_Fetch/Restore are deprecated from 3.12 in favour of the raised-exception API. */
#if PY_VERSION_HEX >= 0x030C0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API >= 0x030C0000)
#define TCDE_RAISED_EXCEPTION_API 1
#else
#define TCDE_RAISED_EXCEPTION_API 0
#endif

/* Whether this thread holds the GIL. PyGILState_Check is not in the limited
 * API (any version): there every call takes PyGILState_Ensure, which is
 * re-entrant (a thread that holds the GIL keeps it, and Release restores that). */
#if defined(Py_LIMITED_API)
#define TCDE_GIL_HELD() 0
#else
#define TCDE_GIL_HELD() PyGILState_Check()
#endif

#if defined(_WIN32)
#define TCDE_EXPORT __declspec(dllexport)
#else
#define TCDE_EXPORT __attribute__((visibility("default")))
#endif

#define TCDE_STRINGIFY_(x) #x
#define TCDE_STRINGIFY(x) TCDE_STRINGIFY_(x)

TCDE_EXPORT int64_t TorchDLPackExchangeAPIPtr(void);
TCDE_EXPORT const char* TorchCDLPackExtBuildInfo(void);
TCDE_EXPORT const char* TorchCDLPackExtLoadProblem(void);

#define kLib "torch-c-dlpack-ext (portable table)"

/* ------------------------------------------------------------------------ */
/* dtypes                                                                   */
/* ------------------------------------------------------------------------ */

enum {
  kDtypeComplex = kTcdeDtypeComplex,
  kDtypeByteView = kTcdeDtypeByteView,
  kDtypeExportOnly = kTcdeDtypeExportOnly,
  kDtypeOldTorchRefuses = kTcdeDtypeOldTorchRefuses
};

typedef struct {
  const char* name; /* attribute of the torch module */
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
  unsigned flags;
} DtypeSpec;

/* The DLPack code of every torch dtype DLPack can express: the contract's one list
 * (csrc/tcde_contract.h). A torch without one of them skips it. */
#define TCDE_DTYPE_SPEC(name, scalar_type, code, bits, lanes, flags) {#name, code, bits, lanes, flags},
static const DtypeSpec kDtypeSpecs[] = {TCDE_DTYPES(TCDE_DTYPE_SPEC)};
#undef TCDE_DTYPE_SPEC
#define TCDE_NUM_DTYPES ((int)(sizeof(kDtypeSpecs) / sizeof(kDtypeSpecs[0])))

typedef struct {
  PyObject* dtype; /* the torch.dtype object (strong), NULL where this torch lacks it */
  DLDataType dl;
  unsigned flags;
  uint64_t itemsize;
} Dtype;

/* ------------------------------------------------------------------------ */
/* The cached torch entry points                                            */
/* ------------------------------------------------------------------------ */

/* torch's Python-level entry points the table calls. */
typedef struct {
  PyObject* torch_module;       /* the torch module */
  PyTypeObject* tensor_type;    /* torch.Tensor */
  PyTypeObject* parameter_type; /* torch.nn.Parameter, or NULL */
  PyObject* to_dlpack;          /* torch._C._to_dlpack_versioned, else torch._C._to_dlpack */
  PyObject* from_dlpack;        /* torch._C._from_dlpack */
  PyObject* empty;              /* torch.empty */
  PyObject* as_strided;         /* torch.as_strided */
  PyObject* device_ctor;        /* torch.device */
} TorchEntryPoints;

/* torch._C.TensorBase's own C methods (unbound) and descriptor getters
 * (type.__dict__[name].__get__): a subclass's class attribute cannot stand in for
 * them (its __torch_function__ still can, outside a TrustedScope). */
typedef struct {
  PyObject* is_conj;
  PyObject* is_neg;
  PyObject* view;
  PyObject* detach;
  PyObject* stride;
  PyObject* size;
  PyObject* untyped_storage; /* the C++ storage: no Python answers it */
  PyObject* get_layout;
  PyObject* get_dtype;
  PyObject* get_is_nested;
  PyObject* get_device;
} TensorBaseMethods;

/* torch._C.StorageBase's own C methods: what the C++ storage says of itself. NULL where
 * a torch lacks one (then every tensor that answers through Python is refused). */
typedef struct {
  PyObject* data_ptr;
  PyObject* nbytes;
  PyObject* get_device;
} StorageBaseMethods;

/* Switches of torch's Python overrides; NULL where a torch lacks one (not seen in torch
 * 2.2-2.13: then a subclass or a mode is refused rather than trusted). */
typedef struct {
  PyObject* disable_torch_function; /* torch._C.DisableTorchFunction */
  PyObject* function_mode_on;       /* torch._C._is_torch_function_mode_enabled */
  PyObject* disable_torch_dispatch; /* torch._C._DisableTorchDispatch */
  PyObject* dispatch_stack_len;     /* torch._C._len_torch_dispatch_stack */
} ModeSwitches;

/* Interned attribute and keyword names. */
typedef struct {
  PyObject* enter;
  PyObject* exit;
  PyObject* dtype;
  PyObject* layout;
  PyObject* is_nested;
  PyObject* device; /* also torch.empty's keyword */
  PyObject* is_cpu;
  PyObject* type;
  PyObject* index;
} InternedNames;

/* torch objects compared against or passed along. */
typedef struct {
  PyObject* strided;    /* torch.strided */
  PyObject* jagged;     /* torch.jagged, or NULL */
  PyObject* cpu_device; /* torch.device("cpu") */
} TorchConstants;

/* What the running torch can do, read once from its version and build. */
typedef struct {
  int versioned_export;       /* torch exports DLManagedTensorVersioned (2.9+) */
  int versioned_import;       /* torch._C._from_dlpack reads "dltensor_versioned" (2.9+) */
  /* torch 2.10+ (DLPack 1.3): imports byte_offset and the float8/fp4 codes, and exports
   * without going through aten.as_strided (which dispatch modes answer) or leaking on a
   * refusal. Before, the table steps around all four. */
  int torch_has_dlpack13;
  int null_data_import_leaks; /* torch < 2.3: a data-NULL import never runs its deleter */
  int other_gpu_stream;       /* a GPU torch < 2.13 answers kDLCUDA and kDLROCM alike */
  int32_t gpu_type;           /* kDLCUDA on a CUDA torch, kDLROCM on a ROCm torch, else 0 */
  int xpu;                    /* torch.version.xpu is set */
} TorchCapabilities;

/* Everything looked up once. Built by whichever thread first needs it and
 * published with one atomic compare-and-swap: a thread that loses the race
 * drops its own copy. No lock is held while Python runs (an import or getattr
 * can release the GIL), so no thread can wait on another that waits for the GIL. */
typedef struct {
  TorchEntryPoints entry;
  TensorBaseMethods tensor_base;
  StorageBaseMethods storage_base;
  ModeSwitches modes;
  InternedNames names;
  TorchConstants constants;
  TorchCapabilities caps;
  PyObject* dims_cache; /* {id(tensor): (weakref, [dims capsule, ...])}: dltensor_from_py */
  int uint8_index;      /* index of torch.uint8 in dtypes */
  Dtype dtypes[TCDE_NUM_DTYPES];
} State;


extern _Atomic(State*) g_state;

/* The GPU half, looked up on the first GPU stream request only (nothing at
 * init touches torch.cuda: importing it is harmless, but no device query runs). */
typedef struct {
  PyObject* raw_stream;     /* torch._C._cuda_getCurrentRawStream(index) -> int, or NULL */
  PyObject* current_stream; /* torch.cuda.current_stream / torch.xpu.current_stream */
  PyObject* str_handle;     /* "cuda_stream" / "sycl_queue" */
} StreamState;

extern _Atomic(StreamState*) g_cuda_streams;
extern _Atomic(StreamState*) g_xpu_streams;

typedef void (*SetErrorFn)(void* error_ctx, const char* kind, const char* message);

/* The table's members, one file each. */
int ManagedTensorAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                           SetErrorFn set_error);                                /* allocator.c */
int ManagedTensorFromPyObjectNoSync(void* py_obj, DLManagedTensorVersioned** out); /* export.c */
int ManagedTensorToPyObjectNoSync(DLManagedTensorVersioned* src, void** out_py);  /* import.c */
int DLTensorFromPyObjectNoSync(void* py_obj, DLTensor* out);          /* export_borrowed.c */
int CurrentWorkStream(DLDeviceType device_type, int32_t device_id, void** out);  /* stream.c */

/* state.c: the cached entry points, or NULL with a Python error set. GIL held. */
State* GetState(void);

/* state.c: small Python helpers. */
PyObject* GetAttr(PyObject* obj, const char* name, int optional);
PyObject* CallNoArgs(PyObject* callable);
PyObject* CallWithOneArg(PyObject* callable, PyObject* arg);
PyObject* CallWithTwoArgs(PyObject* callable, PyObject* arg0, PyObject* arg1);
PyObject* CallToDlpack(const State* s, PyObject* tensor);
PyObject* TakeException(void);
void TakeExceptionText(char* buf, size_t size);
void RestoreException(PyObject* exc);
int RaiseFrom(PyObject* type, const char* message, PyObject* cause);
int IsMemoryError(PyObject* exc);
const Dtype* FindDtype(const State* s, PyObject* dtype);
const Dtype* FromDLDataType(const State* s, DLDataType dl);
const char* GpuName(int32_t device_type);

/* state.c: where Python code may answer for a tensor, the table asks with torch's
 * overrides off: torch._C.DisableTorchFunction and torch._C._DisableTorchDispatch entered
 * (both NULL: nothing entered). */
typedef struct {
  PyObject* no_torch_function;
  PyObject* no_torch_dispatch;
} TrustedScope;

/* 1 when nothing answers for `obj` through Python here (an exact torch.Tensor or
 * nn.Parameter, no torch function mode on, and, where `ask_dispatch`, no dispatch mode
 * on); 0 when something may; -1 with a Python error. */
int AnswersOnlyFromCpp(const State* s, PyObject* obj, int ask_dispatch);
/* 1 when a torch function mode or a dispatch mode is on (or cannot be ruled out), 0 when
 * none is, -1 with a Python error. */
int ModesOn(const State* s);
int EnterTrustedScope(const State* s, TrustedScope* scope);
int ExitTrustedScope(const State* s, TrustedScope* scope);

/* export.c, for the non-owning export and the allocator. */
DLManagedTensorVersioned* ExportTensor(const State* s, PyObject* obj, int owning);
DLManagedTensorVersioned* TakeCapsule(const State* s, PyObject* capsule);
void DeleteManaged(DLManagedTensorVersioned* managed);

#endif /* TCDE_PORTABLE_H_ */
