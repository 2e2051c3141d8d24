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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlpack/dlpack.h>

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

static const char kLib[] = "torch-c-dlpack-ext (portable table)";

/* ------------------------------------------------------------------------ */
/* dtypes                                                                   */
/* ------------------------------------------------------------------------ */

enum {
  kDtypeComplex = 1,  /* can carry the conjugate bit */
  kDtypeByteView = 2, /* one byte per element; old torch may not exchange it itself */
  kDtypeExportOnly = 4, /* exported as another type's code (sub-byte ints), never imported */
  /* torch < 2.10 refuses to export it (no DLPack code in its header), and its refusal
   * leaks (docs/facts.md): such exports go straight to the uint8 view. */
  kDtypeOldTorchRefuses = 8
};

typedef struct {
  const char* name; /* attribute of the torch module */
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
  unsigned flags;
} DtypeSpec;

/* The DLPack code of every torch dtype DLPack can express, as the native table
 * maps them (csrc/tcde_convert.h). A torch without one of them skips it. */
static const DtypeSpec kDtypeSpecs[] = {
    {"float32", kDLFloat, 32, 1, 0},
    {"float64", kDLFloat, 64, 1, 0},
    {"float16", kDLFloat, 16, 1, 0},
    {"bfloat16", kDLBfloat, 16, 1, 0},
    {"int64", kDLInt, 64, 1, 0},
    {"int32", kDLInt, 32, 1, 0},
    {"int16", kDLInt, 16, 1, 0},
    {"int8", kDLInt, 8, 1, 0},
    {"uint8", kDLUInt, 8, 1, 0},
    {"bool", kDLBool, 8, 1, 0},
    {"uint16", kDLUInt, 16, 1, 0},
    {"uint32", kDLUInt, 32, 1, 0},
    {"uint64", kDLUInt, 64, 1, 0},
    {"complex32", kDLComplex, 32, 1, kDtypeComplex},
    {"complex64", kDLComplex, 64, 1, kDtypeComplex},
    {"complex128", kDLComplex, 128, 1, kDtypeComplex},
    {"float8_e5m2", kDLFloat8_e5m2, 8, 1, kDtypeByteView | kDtypeOldTorchRefuses},
    {"float8_e4m3fn", kDLFloat8_e4m3fn, 8, 1, kDtypeByteView | kDtypeOldTorchRefuses},
    {"float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8, 1, kDtypeByteView | kDtypeOldTorchRefuses},
    {"float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8, 1, kDtypeByteView | kDtypeOldTorchRefuses},
    {"float8_e8m0fnu", kDLFloat8_e8m0fnu, 8, 1, kDtypeByteView | kDtypeOldTorchRefuses},
    {"float4_e2m1fn_x2", kDLFloat4_e2m1fn, 4, 2, kDtypeByteView | kDtypeOldTorchRefuses},
    /* Sub-byte integers are stored one element per byte: exported as 8-bit
     * (u)ints, as torch 2.13 does. */
    {"uint1", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"uint2", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"uint3", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"uint4", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"uint5", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"uint6", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"uint7", kDLUInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int1", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int2", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int3", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int4", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int5", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int6", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
    {"int7", kDLInt, 8, 1, kDtypeByteView | kDtypeExportOnly},
};
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

/* Everything looked up once. Built by whichever thread first needs it and
 * published with one atomic compare-and-swap: a thread that loses the race
 * drops its own copy. No lock is held while Python runs (an import or getattr
 * can release the GIL), so no thread can wait on another that waits for the GIL. */
typedef struct {
  PyObject* torch;             /* the torch module */
  PyTypeObject* tensor_type;   /* torch.Tensor */
  PyObject* to_dlpack;         /* torch._C._to_dlpack_versioned, else torch._C._to_dlpack */
  PyObject* from_dlpack;       /* torch._C._from_dlpack */
  PyObject* empty;             /* torch.empty */
  PyObject* is_conj;           /* torch.Tensor.is_conj (unbound) */
  PyObject* is_neg;            /* torch.Tensor.is_neg (unbound) */
  PyObject* view;              /* torch.Tensor.view (unbound) */
  PyObject* detach;            /* torch.Tensor.detach (unbound) */
  PyObject* stride;            /* torch.Tensor.stride (unbound) */
  PyObject* size;              /* torch.Tensor.size (unbound) */
  PyObject* as_strided;        /* torch.as_strided */
  PyObject* strided;           /* torch.strided */
  PyObject* jagged;            /* torch.jagged, or NULL */
  PyObject* cpu_device;        /* torch.device("cpu") */
  PyObject* cuda_device_ctor;  /* torch.device */
  /* The __get__ of torch._C.TensorBase's own descriptors: a subclass's class
   * attribute cannot stand in for them (its __torch_function__ still can, outside
   * a TrustedScope). */
  PyObject* get_layout;
  PyObject* get_dtype;
  PyObject* get_is_nested;
  PyObject* get_device;
  PyTypeObject* parameter_type; /* torch.nn.Parameter, or NULL */
  PyObject* disable_torch_function; /* torch._C.DisableTorchFunction, or NULL */
  PyObject* torch_function_mode_on; /* torch._C._is_torch_function_mode_enabled, or NULL */
  PyObject* str_enter;
  PyObject* str_exit;
  PyObject* str_dtype;
  PyObject* str_layout;
  PyObject* str_is_nested;
  PyObject* str_device;        /* "device": torch.empty's keyword */
  PyObject* dims_cache;        /* {id(tensor): (weakref, dims capsule)}: dltensor_from_py */
  int versioned_export;        /* torch exports DLManagedTensorVersioned (2.9+) */
  int versioned_import;        /* torch._C._from_dlpack reads "dltensor_versioned" (2.9+) */
  int full_import;             /* ... and byte_offset and the float8/fp4 codes (2.10+) */
  int null_data_import_leaks;  /* torch < 2.3: a data-NULL import never runs its deleter */
  int other_gpu_stream;        /* a GPU torch < 2.13 answers kDLCUDA and kDLROCM alike */
  int32_t gpu_type;            /* kDLCUDA on a CUDA torch, kDLROCM on a ROCm torch, else 0 */
  int xpu;                     /* torch.version.xpu is set */
  int uint8_index;             /* index of torch.uint8 in dtypes */
  Dtype dtypes[TCDE_NUM_DTYPES];
} State;

static _Atomic(State*) g_state = NULL;

/* The GPU half, looked up on the first GPU stream request only (nothing at
 * init touches torch.cuda: importing it is harmless, but no device query runs). */
typedef struct {
  PyObject* raw_stream;     /* torch._C._cuda_getCurrentRawStream(index) -> int, or NULL */
  PyObject* current_stream; /* torch.cuda.current_stream / torch.xpu.current_stream */
  PyObject* str_handle;     /* "cuda_stream" / "sycl_queue" */
} StreamState;

static _Atomic(StreamState*) g_cuda_streams = NULL;
static _Atomic(StreamState*) g_xpu_streams = NULL;

static void FreeState(State* s) {
  if (s == NULL) return;
  Py_XDECREF(s->torch);
  Py_XDECREF((PyObject*)s->tensor_type);
  Py_XDECREF(s->to_dlpack);
  Py_XDECREF(s->from_dlpack);
  Py_XDECREF(s->empty);
  Py_XDECREF(s->is_conj);
  Py_XDECREF(s->is_neg);
  Py_XDECREF(s->view);
  Py_XDECREF(s->detach);
  Py_XDECREF(s->stride);
  Py_XDECREF(s->size);
  Py_XDECREF(s->as_strided);
  Py_XDECREF(s->strided);
  Py_XDECREF(s->jagged);
  Py_XDECREF(s->cpu_device);
  Py_XDECREF(s->cuda_device_ctor);
  Py_XDECREF(s->get_layout);
  Py_XDECREF(s->get_dtype);
  Py_XDECREF(s->get_is_nested);
  Py_XDECREF(s->get_device);
  Py_XDECREF((PyObject*)s->parameter_type);
  Py_XDECREF(s->disable_torch_function);
  Py_XDECREF(s->torch_function_mode_on);
  Py_XDECREF(s->str_enter);
  Py_XDECREF(s->str_exit);
  Py_XDECREF(s->str_dtype);
  Py_XDECREF(s->str_layout);
  Py_XDECREF(s->str_is_nested);
  Py_XDECREF(s->str_device);
  Py_XDECREF(s->dims_cache);
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) Py_XDECREF(s->dtypes[i].dtype);
  free(s);
}

/* getattr(obj, name), or NULL with AttributeError cleared when `optional`. */
static PyObject* GetAttr(PyObject* obj, const char* name, int optional) {
  PyObject* value = PyObject_GetAttrString(obj, name);
  if (value == NULL && optional && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
  return value;
}

/* Whether torch.version.<name> is set (not None); -1 on error. */
static int VersionFieldSet(PyObject* torch, const char* name) {
  PyObject* version = GetAttr(torch, "version", 0);
  if (version == NULL) return -1;
  PyObject* value = GetAttr(version, name, 1);
  Py_DECREF(version);
  if (value == NULL) return PyErr_Occurred() ? -1 : 0;
  const int set = value != Py_None;
  Py_DECREF(value);
  return set;
}

/* type.__dict__[name].__get__ (a new reference): the getter of a C type's own
 * descriptor, which no attribute of a subclass can replace. */
static PyObject* DescriptorGetter(PyObject* type, const char* name) {
  PyObject* dict = GetAttr(type, "__dict__", 0);
  PyObject* descriptor = dict == NULL ? NULL : PyMapping_GetItemString(dict, name);
  Py_XDECREF(dict);
  PyObject* getter = descriptor == NULL ? NULL : GetAttr(descriptor, "__get__", 0);
  Py_XDECREF(descriptor);
  return getter;
}

static State* BuildState(void) {
  State* s = (State*)calloc(1, sizeof(State));
  if (s == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  PyObject* c = NULL;
  PyObject* tensor_base = NULL;
  s->torch = PyImport_ImportModule("torch");
  if (s->torch == NULL) goto fail;
  c = GetAttr(s->torch, "_C", 0);
  if (c == NULL) goto fail;
  s->to_dlpack = GetAttr(c, "_to_dlpack_versioned", 1);
  s->versioned_export = s->to_dlpack != NULL;
  if (s->to_dlpack == NULL) {
    if (PyErr_Occurred()) goto fail;
    s->to_dlpack = GetAttr(c, "_to_dlpack", 0);
    if (s->to_dlpack == NULL) goto fail;
  }
  /* torch._C._from_dlpack reads "dltensor_versioned" capsules from the release
   * that added _to_dlpack_versioned (2.9, PyTorch PR #145000; docs/facts.md). */
  s->versioned_import = s->versioned_export;
  /* torch 2.4-2.9 import ignores byte_offset and has no float8/fp4 DLPack codes
   * (its DLPack header is 0.8/1.0); 2.10 and later (DLPack 1.3) import both. */
  {
    PyObject* version = GetAttr(s->torch, "__version__", 0);
    PyObject* text = version == NULL ? NULL : PyObject_Str(version);
    PyObject* bytes = text == NULL ? NULL : PyUnicode_AsUTF8String(text);
    Py_XDECREF(version);
    Py_XDECREF(text);
    if (bytes == NULL) goto fail;
    int major = 0, minor = 0;
    if (sscanf(PyBytes_AsString(bytes), "%d.%d", &major, &minor) != 2) major = minor = 0;
    Py_DECREF(bytes);
    s->full_import = s->versioned_import && (major > 2 || (major == 2 && minor >= 10));
    /* Measured (docs/facts.md): 2.2.2 never releases a data-NULL import, 2.3.1 and
     * later do. An unparsable version is taken for a new one. */
    s->null_data_import_leaks = major == 2 && minor < 3;
    /* torch's own current_work_stream (2.10-2.12) and its Python DLPack protocol (2.0-2.9)
     * hand a GPU caller the build's current stream for either GPU type; 2.13 answers
     * the other type with NULL (docs/facts.md, "Device types"). */
    s->other_gpu_stream = major == 2 && minor <= 12;
  }
  s->from_dlpack = GetAttr(c, "_from_dlpack", 0);
  if (s->from_dlpack == NULL) goto fail;
  s->tensor_type = (PyTypeObject*)GetAttr(s->torch, "Tensor", 0);
  if (s->tensor_type == NULL) goto fail;
  if (!PyType_Check((PyObject*)s->tensor_type)) {
    PyErr_Format(PyExc_TypeError, "%s: torch.Tensor is not a class", kLib);
    goto fail;
  }
  /* The C methods of torch._C.TensorBase (torch.Tensor's base), unbound: a call
   * skips the attribute lookup, and a subclass cannot redefine what they report. */
  tensor_base = GetAttr(c, "TensorBase", 1);
  if (tensor_base == NULL) {
    if (PyErr_Occurred()) goto fail;
    tensor_base = GetAttr(c, "_TensorBase", 0); /* torch < 2.3 */
    if (tensor_base == NULL) goto fail;
  }
  if ((s->is_conj = GetAttr(tensor_base, "is_conj", 0)) == NULL) goto fail;
  if ((s->is_neg = GetAttr(tensor_base, "is_neg", 0)) == NULL) goto fail;
  if ((s->view = GetAttr(tensor_base, "view", 0)) == NULL) goto fail;
  if ((s->detach = GetAttr(tensor_base, "detach", 0)) == NULL) goto fail;
  if ((s->stride = GetAttr(tensor_base, "stride", 0)) == NULL) goto fail;
  if ((s->size = GetAttr(tensor_base, "size", 0)) == NULL) goto fail;
  if ((s->as_strided = GetAttr(s->torch, "as_strided", 0)) == NULL) goto fail;
  if ((s->empty = GetAttr(s->torch, "empty", 0)) == NULL) goto fail;
  if ((s->strided = GetAttr(s->torch, "strided", 0)) == NULL) goto fail;
  s->jagged = GetAttr(s->torch, "jagged", 1);
  if (s->jagged == NULL && PyErr_Occurred()) goto fail;
  if ((s->cuda_device_ctor = GetAttr(s->torch, "device", 0)) == NULL) goto fail;
  s->cpu_device = PyObject_CallFunction(s->cuda_device_ctor, "s", "cpu");
  if (s->cpu_device == NULL) goto fail;
  if ((s->get_layout = DescriptorGetter(tensor_base, "layout")) == NULL) goto fail;
  if ((s->get_dtype = DescriptorGetter(tensor_base, "dtype")) == NULL) goto fail;
  if ((s->get_is_nested = DescriptorGetter(tensor_base, "is_nested")) == NULL) goto fail;
  if ((s->get_device = DescriptorGetter(tensor_base, "device")) == NULL) goto fail;
  {
    PyObject* nn = GetAttr(s->torch, "nn", 1);
    s->parameter_type = nn == NULL ? NULL : (PyTypeObject*)GetAttr(nn, "Parameter", 1);
    Py_XDECREF(nn);
    if (s->parameter_type == NULL && PyErr_Occurred()) goto fail;
    if (s->parameter_type != NULL && !PyType_Check((PyObject*)s->parameter_type)) {
      Py_CLEAR(s->parameter_type);
    }
  }
  /* Both in torch 2.2-2.13 (docs/facts.md); without DisableTorchFunction a subclass or
   * a mode is refused rather than trusted (EnterTrustedScope). */
  s->disable_torch_function = GetAttr(c, "DisableTorchFunction", 1);
  if (s->disable_torch_function == NULL && PyErr_Occurred()) goto fail;
  s->torch_function_mode_on = GetAttr(c, "_is_torch_function_mode_enabled", 1);
  if (s->torch_function_mode_on == NULL && PyErr_Occurred()) goto fail;
  if ((s->str_enter = PyUnicode_InternFromString("__enter__")) == NULL) goto fail;
  if ((s->str_exit = PyUnicode_InternFromString("__exit__")) == NULL) goto fail;
  if ((s->str_dtype = PyUnicode_InternFromString("dtype")) == NULL) goto fail;
  if ((s->str_layout = PyUnicode_InternFromString("layout")) == NULL) goto fail;
  if ((s->str_is_nested = PyUnicode_InternFromString("is_nested")) == NULL) goto fail;
  if ((s->str_device = PyUnicode_InternFromString("device")) == NULL) goto fail;
  if ((s->dims_cache = PyDict_New()) == NULL) goto fail;
  /* The build flavour from torch.version, never from a device query: no CUDA
   * initialisation here (docs/facts.md). */
  {
    const int hip = VersionFieldSet(s->torch, "hip");
    const int cuda = hip == 0 ? VersionFieldSet(s->torch, "cuda") : 0;
    const int xpu = VersionFieldSet(s->torch, "xpu");
    if (hip < 0 || cuda < 0 || xpu < 0) goto fail;
    s->gpu_type = hip ? kDLROCM : cuda ? kDLCUDA : 0;
    s->xpu = xpu;
  }
  s->uint8_index = -1;
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) {
    const DtypeSpec* spec = &kDtypeSpecs[i];
    Dtype* d = &s->dtypes[i];
    d->dtype = GetAttr(s->torch, spec->name, 1);
    if (d->dtype == NULL && PyErr_Occurred()) goto fail;
    d->dl.code = spec->code;
    d->dl.bits = spec->bits;
    d->dl.lanes = spec->lanes;
    d->flags = spec->flags;
    d->itemsize = ((uint64_t)spec->bits * spec->lanes + 7) / 8;
    if (strcmp(spec->name, "uint8") == 0) s->uint8_index = i;
  }
  Py_DECREF(c);
  Py_DECREF(tensor_base);
  return s;
fail:
  Py_XDECREF(c);
  Py_XDECREF(tensor_base);
  FreeState(s);
  return NULL;
}

/* The cached entry points, or NULL with a Python error set. GIL held. */
static State* GetState(void) {
  State* s = atomic_load_explicit(&g_state, memory_order_acquire);
  if (s != NULL) return s;
  /* Builds no tensor and calls nothing that depends on the default device or
   * dtype, or on a mode: the load runs under whatever the importer has set. */
  State* mine = BuildState();
  if (mine == NULL) return NULL;
  State* expected = NULL;
  if (atomic_compare_exchange_strong_explicit(&g_state, &expected, mine, memory_order_acq_rel,
                                              memory_order_acquire)) {
    return mine;
  }
  FreeState(mine);
  return expected;
}

/* ------------------------------------------------------------------------ */
/* Small Python helpers                                                     */
/* ------------------------------------------------------------------------ */

static PyObject* Call1(PyObject* callable, PyObject* arg) {
#if TCDE_VECTORCALL
  PyObject* args[2] = {NULL, arg};
  return PyObject_Vectorcall(callable, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
#else
  return PyObject_CallFunctionObjArgs(callable, arg, NULL);
#endif
}

static PyObject* Call2(PyObject* callable, PyObject* arg0, PyObject* arg1) {
#if TCDE_VECTORCALL
  PyObject* args[3] = {NULL, arg0, arg1};
  return PyObject_Vectorcall(callable, args + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
#else
  return PyObject_CallFunctionObjArgs(callable, arg0, arg1, NULL);
#endif
}

/* torch._C._to_dlpack*(tensor). torch 2.11 and 2.13 take an argument tuple
 * (METH_VARARGS), which the abi3 build's Call1 would make only after a
 * vectorcall's argument array; torch 2.2-2.8 take the tensor alone (METH_O),
 * which Call1 passes without a tuple. The vectorcall builds' Call1 is as cheap
 * as either. */
static PyObject* CallToDlpack(const State* s, PyObject* tensor) {
#if !TCDE_VECTORCALL
  if (!PyCFunction_Check(s->to_dlpack) || !(PyCFunction_GetFlags(s->to_dlpack) & METH_O)) {
    PyObject* args = PyTuple_Pack(1, tensor);
    if (args == NULL) return NULL;
    PyObject* capsule = PyObject_Call(s->to_dlpack, args, NULL);
    Py_DECREF(args);
    return capsule;
  }
#endif
  return Call1(s->to_dlpack, tensor);
}

/* The pending exception as one object (a new reference), the indicator cleared. */
static PyObject* TakeException(void) {
#if TCDE_RAISED_EXCEPTION_API
  return PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return value;
#endif
}

/* The pending exception as "Type: message" in `buf`; clears it. */
static void TakeExceptionText(char* buf, size_t size) {
  PyObject* exc = TakeException();
  PyObject* text = exc == NULL ? NULL : PyObject_Str(exc);
  PyObject* bytes = text == NULL ? NULL : PyUnicode_AsUTF8String(text);
  const char* utf8 = bytes == NULL ? NULL : PyBytes_AsString(bytes);
  PyObject* name = exc == NULL ? NULL : PyObject_GetAttrString((PyObject*)Py_TYPE(exc), "__name__");
  PyObject* name_bytes = name == NULL ? NULL : PyUnicode_AsUTF8String(name);
  const char* name_utf8 = name_bytes == NULL ? NULL : PyBytes_AsString(name_bytes);
  if (utf8 == NULL || name_utf8 == NULL) PyErr_Clear();
  snprintf(buf, size, "%s: %s", name_utf8 != NULL ? name_utf8 : "Exception",
           utf8 != NULL ? utf8 : "(no message)");
  Py_XDECREF(name_bytes);
  Py_XDECREF(name);
  Py_XDECREF(bytes);
  Py_XDECREF(text);
  Py_XDECREF(exc);
}

/* Makes `exc` (stolen; NULL: nothing) the pending exception again. */
static void RestoreException(PyObject* exc) {
  if (exc == NULL) return;
#if TCDE_RAISED_EXCEPTION_API
  PyErr_SetRaisedException(exc);
#else
  PyObject* type = (PyObject*)Py_TYPE(exc);
  Py_INCREF(type);
  PyErr_Restore(type, exc, NULL);
#endif
}

/* Sets `type`(message: cause) with `cause` (stolen) as __cause__. Returns -1. */
static int RaiseFrom(PyObject* type, const char* message, PyObject* cause) {
  if (cause == NULL) {
    PyErr_Format(type, "%s: %s", kLib, message);
    return -1;
  }
  PyErr_Format(type, "%s: %s: %S", kLib, message, cause);
  PyObject* raised = TakeException();
  if (raised != NULL) {
    PyException_SetCause(raised, cause); /* steals cause */
    RestoreException(raised);
  } else {
    Py_DECREF(cause);
  }
  return -1;
}

static int IsMemoryError(PyObject* exc) {
  return exc != NULL && PyErr_GivenExceptionMatches(exc, PyExc_MemoryError);
}

static const Dtype* FindDtype(const State* s, PyObject* dtype) {
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) {
    if (s->dtypes[i].dtype == dtype) return &s->dtypes[i];
  }
  return NULL;
}

/* The torch dtype a DLPack dtype imports as, or NULL. */
static const Dtype* FromDLDataType(const State* s, DLDataType dl) {
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) {
    const Dtype* d = &s->dtypes[i];
    if (d->dtype != NULL && !(d->flags & kDtypeExportOnly) && d->dl.code == dl.code &&
        d->dl.bits == dl.bits && d->dl.lanes == dl.lanes) {
      return d;
    }
  }
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Export                                                                   */
/* ------------------------------------------------------------------------ */

/* A legacy DLManagedTensor (torch 2.4-2.8) as a DLManagedTensorVersioned: one
 * allocation; the deleter chains to torch's. Plain C, no Python. */
typedef struct {
  DLManagedTensorVersioned managed;
  DLManagedTensor* legacy;
  int64_t strides[]; /* the tensor's own strides (see TakeCapsule) */
} LegacyExport;

static void DeleteLegacyExport(DLManagedTensorVersioned* self) {
  if (self == NULL) return;
  LegacyExport* wrap = (LegacyExport*)self->manager_ctx;
  DLManagedTensor* legacy = wrap->legacy;
  free(wrap);
  if (legacy != NULL && legacy->deleter != NULL) legacy->deleter(legacy);
}

/* Takes over the tensor of a capsule torch._C._to_dlpack* returned (stolen):
 * the capsule is marked used, so its destructor leaves the tensor alone. */
static DLManagedTensorVersioned* TakeCapsule(const State* s, PyObject* capsule) {
  DLManagedTensorVersioned* managed = NULL;
  if (s->versioned_export) {
    managed = (DLManagedTensorVersioned*)PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (managed == NULL || PyCapsule_SetName(capsule, "used_dltensor_versioned") != 0) {
      Py_DECREF(capsule);
      return NULL;
    }
    Py_DECREF(capsule);
    return managed;
  }
  DLManagedTensor* legacy = (DLManagedTensor*)PyCapsule_GetPointer(capsule, "dltensor");
  if (legacy == NULL) {
    Py_DECREF(capsule);
    return NULL;
  }
  const int32_t ndim = legacy->dl_tensor.ndim;
  LegacyExport* wrap =
      (LegacyExport*)malloc(sizeof(LegacyExport) + (size_t)(ndim > 0 ? ndim : 0) * sizeof(int64_t));
  if (wrap == NULL) {
    Py_DECREF(capsule);
    PyErr_NoMemory();
    return NULL;
  }
  if (PyCapsule_SetName(capsule, "used_dltensor") != 0) {
    free(wrap);
    Py_DECREF(capsule);
    return NULL;
  }
  Py_DECREF(capsule);
  wrap->legacy = legacy;
  wrap->managed.dl_tensor = legacy->dl_tensor;
  wrap->managed.manager_ctx = wrap;
  wrap->managed.deleter = &DeleteLegacyExport;
  /* torch 2.4-2.9 export strides "normalized" to 1 for dimensions of size 0 or 1
   * (PyTorch gh-83069); torch 2.13 and the native table report the tensor's own.
   * The caller corrects those from `obj` (see FixNormalizedStrides). */
  for (int32_t i = 0; i < ndim; ++i) wrap->strides[i] = legacy->dl_tensor.strides[i];
  wrap->managed.dl_tensor.strides = ndim > 0 ? wrap->strides : NULL;
  return &wrap->managed;
}

static void DeleteManaged(DLManagedTensorVersioned* managed) {
  if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
}

/* ------------------------------------------------------------------------ */
/* What a tensor says of itself                                             */
/* ------------------------------------------------------------------------ */

/* The object a consumer hands the table is untrusted: a Tensor subclass, or a
 * torch function mode around the call, can answer dtype, shape, stride(),
 * device, detach() or view() with anything (docs/facts.md). Two rules keep the
 * table memory-safe whatever they answer:
 *  - what memory an export describes (data, shape, strides, element size,
 *    device) comes from torch's own export, which reads the C++ tensor; where
 *    the table relabels a dtype the element sizes must agree;
 *  - the questions the table asks the object itself (layout, dtype, conj and
 *    neg bits, detach, the uint8 view, strides of short dimensions) go to
 *    torch._C.TensorBase's own getters and methods, and for a subclass or
 *    under a torch function mode they run with __torch_function__ off
 *    (torch._C.DisableTorchFunction: a TrustedScope). A plain torch.Tensor
 *    (or nn.Parameter) with no mode on needs no scope, and its attributes are
 *    looked up the plain way: they reach the same descriptors. */

static PyObject* CallNoArgs(PyObject* callable) {
#if TCDE_VECTORCALL
  return PyObject_Vectorcall(callable, NULL, 0, NULL);
#else
  return PyObject_CallObject(callable, NULL);
#endif
}

static int IsPlainTensor(const State* s, PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  return type == s->tensor_type || (s->parameter_type != NULL && type == s->parameter_type);
}

/* Enters torch._C.DisableTorchFunction where `obj`'s answers need it: *scope is
 * the entered context, NULL where none was needed. 0, or -1 with a Python error. */
static int EnterTrustedScope(const State* s, PyObject* obj, PyObject** scope) {
  *scope = NULL;
  /* Without the mode query (not seen in any torch 2.2-2.13) a mode cannot be ruled out. */
  int needed = !IsPlainTensor(s, obj) || s->torch_function_mode_on == NULL;
  if (!needed) {
    PyObject* on = CallNoArgs(s->torch_function_mode_on);
    if (on == NULL) return -1;
    needed = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (needed < 0) return -1;
  }
  if (!needed) return 0;
  if (s->disable_torch_function == NULL) {
    PyErr_Format(PyExc_BufferError,
                 "%s: this torch has no torch._C.DisableTorchFunction, so what a tensor subclass "
                 "or a torch function mode answers cannot be checked; export a plain "
                 "torch.Tensor, outside any torch function mode",
                 kLib);
    return -1;
  }
  PyObject* context = CallNoArgs(s->disable_torch_function);
  PyObject* entered =
      context == NULL ? NULL : PyObject_CallMethodObjArgs(context, s->str_enter, NULL);
  if (entered == NULL) {
    Py_XDECREF(context);
    return -1;
  }
  Py_DECREF(entered);
  *scope = context;
  return 0;
}

/* Leaves a TrustedScope (NULL: none), keeping a pending exception. 0, or -1 when
 * an exception is pending afterwards (the caller's, or leaving failed). */
static int ExitTrustedScope(const State* s, PyObject* scope) {
  if (scope != NULL) {
    PyObject* pending = TakeException();
    PyObject* left =
        PyObject_CallMethodObjArgs(scope, s->str_exit, Py_None, Py_None, Py_None, NULL);
    Py_DECREF(scope);
    if (left != NULL) {
      Py_DECREF(left);
    } else if (pending != NULL) {
      PyErr_Clear(); /* the caller's exception says more */
    }
    RestoreException(pending);
  }
  return PyErr_Occurred() ? -1 : 0;
}

/* The strides of an export's dimensions of size 0 or 1 as the tensor has them:
 * torch 2.4-2.9 write 1 there (PyTorch gh-83069), torch 2.13 and the native
 * table the tensor's own. Such a stride addresses no memory, so asking the
 * tensor is safe whatever it answers; only those dimensions are read. Written
 * only where they differ (the non-owning export of a 2.10+ torch holds the
 * tensor's own arrays). 0, or -1 with a Python error. */
static int FixStridesOfShortDims(const State* s, PyObject* obj, DLTensor* dl) {
  int any = 0;
  for (int32_t i = 0; i < dl->ndim; ++i) any |= dl->shape[i] < 2;
  if (!any) return 0;
  PyObject* strides = Call1(s->stride, obj);
  if (strides == NULL) return -1;
  if (!PyTuple_Check(strides) || PyTuple_Size(strides) != dl->ndim) {
    Py_DECREF(strides);
    PyErr_Format(PyExc_BufferError,
                 "%s: Tensor.stride() of this tensor does not match torch's own export of it "
                 "(a subclass or mode answering stride()?); export a plain torch.Tensor",
                 kLib);
    return -1;
  }
  for (int32_t i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] >= 2) continue;
    const long long stride = PyLong_AsLongLong(PyTuple_GetItem(strides, i));
    if (stride == -1 && PyErr_Occurred()) {
      Py_DECREF(strides);
      return -1;
    }
    if (dl->strides[i] != (int64_t)stride) dl->strides[i] = (int64_t)stride;
  }
  Py_DECREF(strides);
  return 0;
}

static int RaiseNotATensor(PyObject* obj) {
  if (obj == NULL) {
    PyErr_Format(PyExc_TypeError, "%s: expected a torch.Tensor, got NULL", kLib);
  } else {
    PyErr_Format(PyExc_TypeError,
                 "%s: expected a torch.Tensor, got %S; pass a tensor (e.g. torch.as_tensor(x))",
                 kLib, (PyObject*)Py_TYPE(obj));
  }
  return -1;
}

/* The backend name of a GPU device type, as the native builds are named. */
static const char* GpuName(int32_t device_type) {
  return device_type == kDLROCM ? "rocm" : "cuda";
}

static int RaiseUnservedDevice(int32_t device_type) {
  if (device_type == kDLCUDA || device_type == kDLROCM) {
    PyErr_Format(PyExc_BufferError,
                 "%s: this torch build serves no %s devices, so the table cannot report their "
                 "stream (current_work_stream) and a consumer would run on the wrong one; use "
                 "the %s build of torch, or move the tensor to the CPU (.cpu())",
                 kLib, device_type == kDLCUDA ? "CUDA" : "ROCm", GpuName(device_type));
  } else {
    PyErr_Format(PyExc_BufferError,
                 "%s: tensors on DLPack device type %d cannot be exported through DLPack by this "
                 "table; move the tensor to a CPU or GPU device first (e.g. .to('cpu'))",
                 kLib, (int)device_type);
  }
  return -1;
}

/* Whether an export on this DLPack device type is one the table serves. */
static int ServesExportDevice(const State* s, int32_t device_type) {
  if (device_type == kDLCPU) return 1;
  if (device_type == kDLCUDA || device_type == kDLROCM) return device_type == s->gpu_type;
  if (device_type == kDLOneAPI) return s->xpu;
  /* Host memory of devices torch reports as their own (mps, privateuse1): as the
   * native table does. */
  return device_type == kDLMetal || device_type == kDLExtDev;
}

/* A self-contained export of a tensor without elements (data NULL, nothing
 * to own), for the tensors torch's exporter refuses although DLPack describes
 * them: torch 2.4-2.8 export through aten.as_strided, which a wrapper subclass
 * may not implement. It describes no memory, whatever the tensor answers. NULL
 * (no error set) when `obj` has elements or is on a device the table does not
 * serve. Error path only; inside the export's TrustedScope. */
typedef struct {
  DLManagedTensorVersioned managed;
  int64_t dims[]; /* shape, then strides */
} EmptyExport;

static void DeleteEmptyExport(DLManagedTensorVersioned* self) {
  if (self != NULL) free(self->manager_ctx);
}

static DLManagedTensorVersioned* ExportEmpty(const State* s, PyObject* obj, const Dtype* dtype) {
  PyObject* sizes = Call1(s->size, obj);
  PyObject* strides = sizes == NULL ? NULL : Call1(s->stride, obj);
  PyObject* device = strides == NULL ? NULL : Call1(s->get_device, obj);
  PyObject* type = device == NULL ? NULL : PyObject_GetAttrString(device, "type");
  PyObject* index = type == NULL ? NULL : PyObject_GetAttrString(device, "index");
  EmptyExport* wrap = NULL;
  if (index == NULL || !PyTuple_Check(sizes) || !PyTuple_Check(strides) ||
      !PyUnicode_Check(type) || PyTuple_Size(sizes) != PyTuple_Size(strides) ||
      PyTuple_Size(sizes) > INT32_MAX) {
    goto done;
  }
  const int32_t ndim = (int32_t)PyTuple_Size(sizes);
  int has_elements = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    has_elements &= PyLong_AsLongLong(PyTuple_GetItem(sizes, i)) != 0;
  }
  DLDevice dl_device = {kDLCPU, 0};
  if (PyUnicode_CompareWithASCIIString(type, "cuda") == 0 && s->gpu_type != 0) {
    dl_device.device_type = (DLDeviceType)s->gpu_type;
    dl_device.device_id = index == Py_None ? 0 : (int32_t)PyLong_AsLong(index);
  } else if (PyUnicode_CompareWithASCIIString(type, "cpu") != 0) {
    goto done;
  }
  if (has_elements || PyErr_Occurred()) goto done;
  wrap = (EmptyExport*)malloc(sizeof(EmptyExport) + 2 * (size_t)ndim * sizeof(int64_t));
  if (wrap == NULL) goto done;
  for (int32_t i = 0; i < ndim; ++i) {
    wrap->dims[i] = (int64_t)PyLong_AsLongLong(PyTuple_GetItem(sizes, i));
    wrap->dims[ndim + i] = (int64_t)PyLong_AsLongLong(PyTuple_GetItem(strides, i));
  }
  if (PyErr_Occurred()) {
    free(wrap);
    wrap = NULL;
    goto done;
  }
  wrap->managed.version.major = DLPACK_MAJOR_VERSION;
  wrap->managed.version.minor = DLPACK_MINOR_VERSION;
  wrap->managed.manager_ctx = wrap;
  wrap->managed.deleter = &DeleteEmptyExport;
  wrap->managed.flags = 0;
  DLTensor* dl = &wrap->managed.dl_tensor;
  dl->data = NULL;
  dl->device = dl_device;
  dl->ndim = ndim;
  dl->dtype = dtype->dl;
  dl->shape = ndim > 0 ? wrap->dims : NULL;
  dl->strides = ndim > 0 ? wrap->dims + ndim : NULL;
  dl->byte_offset = 0;
done:
  PyErr_Clear();
  Py_XDECREF(index);
  Py_XDECREF(type);
  Py_XDECREF(device);
  Py_XDECREF(strides);
  Py_XDECREF(sizes);
  return wrap == NULL ? NULL : &wrap->managed;
}

/* What `obj` says its attribute `name` is (a new reference, or NULL with an error):
 * through TensorBase's own descriptor `getter` when it is not a plain tensor outside
 * any mode (`plain` 0), else through the plain lookup, which for an exact torch.Tensor
 * reaches the same descriptor, faster. */
static PyObject* Answer(PyObject* getter, PyObject* name, PyObject* obj, int plain) {
  return plain ? PyObject_GetAttr(obj, name) : Call1(getter, obj);
}

/* 1 if `result` (a new reference, stolen; NULL: an error) is true, 0 if not, -1 on error. */
static int Truth(PyObject* result) {
  if (result == NULL) return -1;
  const int truth = result == Py_True ? 1 : result == Py_False ? 0 : PyObject_IsTrue(result);
  Py_DECREF(result);
  return truth;
}

/* The refusals of the native table's Describe() that torch's exporter does not
 * make itself (layout, nesting, conjugate and negative bits), and the tensor's
 * dtype; NULL with a Python error set when refused. */
static const Dtype* CheckExportable(const State* s, PyObject* obj, int plain) {
  PyObject* layout = Answer(s->get_layout, s->str_layout, obj, plain);
  if (layout == NULL) return NULL;
  const int strided = layout == s->strided;
  const int jagged = layout == s->jagged && layout != NULL;
  if (!strided) {
    if (jagged) {
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a jagged nested tensor through DLPack, which describes "
                   "one strided array; export its packed values and offsets (t.values(), "
                   "t.offsets()) or its components (t.unbind()) one by one",
                   kLib);
    } else {
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with layout %S through DLPack, which describes "
                   "only strided tensors; convert it with .to_dense() first",
                   kLib, layout);
    }
    Py_DECREF(layout);
    return NULL;
  }
  Py_DECREF(layout);
  const int is_nested = Truth(Answer(s->get_is_nested, s->str_is_nested, obj, plain));
  if (is_nested != 0) {
    if (is_nested > 0) {
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a nested tensor through DLPack, which describes one "
                   "strided array; export a padded copy (t.to_padded_tensor(0.0)) or its "
                   "components (t.unbind()) one by one",
                   kLib);
    }
    return NULL;
  }
  PyObject* dtype_obj = Answer(s->get_dtype, s->str_dtype, obj, plain);
  if (dtype_obj == NULL) return NULL;
  const Dtype* dtype = FindDtype(s, dtype_obj);
  if (dtype == NULL) {
    PyErr_Format(PyExc_BufferError,
                 "%s: dtype %S has no DLPack equivalent; convert the tensor first (e.g. "
                 ".dequantize() for quantized tensors, .to(torch.float32))",
                 kLib, dtype_obj);
    Py_DECREF(dtype_obj);
    return NULL;
  }
  Py_DECREF(dtype_obj);
  /* DLPack has no conjugate/negative flags: exporting the raw memory would hand
   * out the wrong values. Only complex tensors carry the conjugate bit. */
  if (dtype->flags & kDtypeComplex) {
    const int conj = Truth(Call1(s->is_conj, obj));
    if (conj != 0) {
      if (conj > 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s: cannot export a tensor with its conjugate bit set (DLPack cannot "
                     "express a lazy conjugation); call .resolve_conj() first",
                     kLib);
      }
      return NULL;
    }
  }
  const int neg = Truth(Call1(s->is_neg, obj));
  if (neg != 0) {
    if (neg > 0) {
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with its negative bit set (DLPack cannot express "
                   "a lazy negation); call .resolve_neg() first",
                   kLib);
    }
    return NULL;
  }
  return dtype;
}

/* torch's export of the same memory viewed as uint8, for the one-byte types
 * torch < 2.10 cannot export (float8, fp4): a capsule, or NULL with an error. */
static PyObject* ExportBytes(const State* s, PyObject* obj) {
  if (s->uint8_index < 0) {
    PyErr_Format(PyExc_BufferError, "%s: this torch has no uint8 dtype to export through", kLib);
    return NULL;
  }
  PyObject* detached = Call1(s->detach, obj);
  PyObject* bytes =
      detached == NULL ? NULL : Call2(s->view, detached, s->dtypes[s->uint8_index].dtype);
  Py_XDECREF(detached);
  PyObject* capsule = bytes == NULL ? NULL : CallToDlpack(s, bytes);
  Py_XDECREF(bytes);
  return capsule;
}

/* The dtype of an export, as the table reports `dtype`: torch's own code kept
 * unless it differs from the native table's; a relabelling only between types
 * of one element size (a uint8 view relabelled float8, say). 0, or -1 with a
 * BufferError: the export is not of the memory `dtype` describes. */
static int RelabelDtype(const DLTensor* dl, const Dtype* dtype, int via_bytes) {
  const DLDataType got = dl->dtype;
  const DLDataType want = dtype->dl;
  const int same_size = (uint32_t)got.bits * got.lanes == (uint32_t)want.bits * want.lanes;
  const int bytes_ok = !via_bytes || (got.code == kDLUInt && got.bits == 8 && got.lanes == 1);
  if (same_size && bytes_ok) return 0;
  PyErr_Format(PyExc_BufferError,
               "%s: torch exported elements of %u bits x %u lanes (DLPack code %u) for a tensor "
               "whose dtype has %u x %u: a tensor subclass, or a mode, answered detach() or "
               "view() with another tensor; export a plain torch.Tensor",
               kLib, (unsigned)got.bits, (unsigned)got.lanes, (unsigned)got.code,
               (unsigned)want.bits, (unsigned)want.lanes);
  return -1;
}

/* The export proper, inside the caller's TrustedScope: an owning
 * DLManagedTensorVersioned (dtype, version and flags as the native table writes
 * them), or NULL with a Python error set. */
static DLManagedTensorVersioned* ExportChecked(const State* s, PyObject* obj, int owning,
                                               int plain) {
  const Dtype* dtype = CheckExportable(s, obj, plain);
  if (dtype == NULL) return NULL;
  /* torch < 2.10 refuses float8/fp4 and leaks on the refusal (docs/facts.md):
   * such a tensor goes straight to its uint8 view, never to torch's refusal. */
  int via_bytes = !s->full_import && (dtype->flags & kDtypeOldTorchRefuses);
  PyObject* capsule;
  if (via_bytes) {
    capsule = ExportBytes(s, obj);
  } else {
    /* An owning export must not see later changes of the Python tensor: torch
     * 2.13's versioned export holds the tensor's own TensorImpl (t.t_() would
     * change the exported shape, t.set_() free the exported memory), where torch
     * 2.4-2.8 export a fresh as_strided view. Export a detached alias there: a
     * TensorImpl of its own on the same storage. The non-owning export copies
     * the metadata it hands out and promises nothing across metadata changes. */
    PyObject* alias = NULL;
    if (owning && s->versioned_export) {
      alias = Call1(s->detach, obj);
      /* A wrapper subclass may refuse aten.detach: it has no memory of its own
       * (torch's export refuses it, or describes it with data NULL, which only an
       * empty tensor passes below), so export it as it is. */
      if (alias == NULL) PyErr_Clear();
    }
    capsule = CallToDlpack(s, alias != NULL ? alias : obj);
    Py_XDECREF(alias);
    if (capsule == NULL && (dtype->flags & kDtypeByteView)) {
      /* A torch that refuses another one-byte type (sub-byte ints): its uint8 view. */
      PyObject* first = TakeException();
      capsule = ExportBytes(s, obj);
      if (capsule != NULL) {
        Py_XDECREF(first);
        via_bytes = 1;
      } else {
        PyErr_Clear();
        RestoreException(first);
      }
    }
  }
  if (capsule == NULL) {
    /* torch refused (a tensor without storage: wrapper subclasses, fake tensors;
     * a meta tensor): a tensor DLPack cannot describe is a BufferError. */
    PyObject* cause = TakeException();
    if (!IsMemoryError(cause)) {
      DLManagedTensorVersioned* empty = ExportEmpty(s, obj, dtype);
      if (empty != NULL) {
        Py_XDECREF(cause);
        return empty;
      }
    }
    if (IsMemoryError(cause) ||
        (cause != NULL && PyErr_GivenExceptionMatches(cause, PyExc_BufferError))) {
      RestoreException(cause);
      return NULL;
    }
    RaiseFrom(PyExc_BufferError,
              "torch cannot export this tensor through DLPack (a fake, meta-like or "
              "wrapper-subclass tensor without memory?)",
              cause);
    return NULL;
  }
  DLManagedTensorVersioned* managed = TakeCapsule(s, capsule);
  if (managed == NULL) return NULL;
  DLTensor* dl = &managed->dl_tensor;
  if (RelabelDtype(dl, dtype, via_bytes) != 0 || FixStridesOfShortDims(s, obj, dl) != 0) {
    DeleteManaged(managed);
    return NULL;
  }
  if (!ServesExportDevice(s, dl->device.device_type)) {
    const int32_t device_type = dl->device.device_type;
    DeleteManaged(managed);
    RaiseUnservedDevice(device_type);
    return NULL;
  }
  if (dl->data == NULL) {
    int has_elements = 1;
    for (int32_t i = 0; i < dl->ndim; ++i) has_elements &= dl->shape[i] != 0;
    if (has_elements) {
      DeleteManaged(managed);
      PyErr_Format(PyExc_BufferError,
                   "%s: the tensor has no memory to export (a fake, meta-like or "
                   "wrapper-subclass tensor?); export a tensor backed by real storage",
                   kLib);
      return NULL;
    }
  }
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  managed->flags = 0; /* shares the memory, writable: as torch 2.13 and the native table */
  dl->dtype = dtype->dl;
  return managed;
}

/* Any torch.Tensor (subclasses included) exported: see ExportChecked. */
static DLManagedTensorVersioned* ExportTensor(const State* s, PyObject* obj, int owning) {
  if (obj == NULL || !PyType_IsSubtype(Py_TYPE(obj), s->tensor_type)) {
    RaiseNotATensor(obj);
    return NULL;
  }
  PyObject* scope = NULL;
  if (EnterTrustedScope(s, obj, &scope) != 0) return NULL;
  DLManagedTensorVersioned* managed = ExportChecked(s, obj, owning, scope == NULL);
  if (ExitTrustedScope(s, scope) != 0 && managed != NULL) {
    DeleteManaged(managed);
    managed = NULL;
  }
  return managed;
}

static int ManagedTensorFromPyObjectNoSync(void* py_obj, DLManagedTensorVersioned** out) {
  if (out == NULL) {
    PyErr_Format(PyExc_ValueError, "%s: managed_tensor_from_py_object_no_sync: out is NULL",
                 kLib);
    return -1;
  }
  *out = NULL;
  const State* s = GetState();
  if (s == NULL) return -1;
  DLManagedTensorVersioned* managed = ExportTensor(s, (PyObject*)py_obj, 1);
  if (managed == NULL) return -1;
  *out = managed;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Non-owning export                                                        */
/* ------------------------------------------------------------------------ */

/* The shape and strides handed out by dltensor_from_py, kept alive as long as
 * the tensor object: an entry of State.dims_cache, keyed by id(tensor) and
 * removed by a weakref callback when the tensor dies. One entry per live
 * tensor (replaced when its metadata changed), so memory stays flat however
 * often a tensor is exported and however many short-lived tensors are. */
typedef struct {
  int32_t ndim;
  int64_t dims[]; /* shape, then strides */
} Dims;

static void FreeDimsCapsule(PyObject* capsule) {
  free(PyCapsule_GetPointer(capsule, "tcde_dims"));
}

/* Free-threaded builds: one lock orders every look-up, insertion and removal of
 * State.dims_cache entries. Without it two threads making the first non-owning
 * export of the same tensor at once each insert an entry, and the second
 * insertion frees the Dims the first thread has just handed out (its caller then
 * reads freed shape and strides); a late weakref callback could likewise remove
 * the entry of a newer object at the same address between its check and its
 * delete. Nothing in the locked sections runs Python code (int keys, tuples,
 * capsules, weakrefs: no __eq__, no callback, no eval breaker), so no thread
 * can wait on it while holding it; PyMutex_Lock detaches the thread state while
 * it waits, so a stop-the-world pause never waits on it either. GIL builds need
 * no lock: nothing there releases the GIL between the check and the insertion. */
#if defined(Py_GIL_DISABLED)
static PyMutex g_dims_lock;
#define TCDE_DIMS_LOCK() PyMutex_Lock(&g_dims_lock)
#define TCDE_DIMS_UNLOCK() PyMutex_Unlock(&g_dims_lock)
#else
#define TCDE_DIMS_LOCK() ((void)0)
#define TCDE_DIMS_UNLOCK() ((void)0)
#endif

/* The entry of `key` in dims_cache (a new reference), NULL if none; -1 on error. */
static int DimsEntry(const State* s, PyObject* key, PyObject** entry) {
#if defined(Py_GIL_DISABLED)
  return PyDict_GetItemRef(s->dims_cache, key, entry) < 0 ? -1 : 0;
#else
  *entry = PyDict_GetItemWithError(s->dims_cache, key);
  if (*entry == NULL && PyErr_Occurred()) return -1;
  Py_XINCREF(*entry);
  return 0;
#endif
}

/* The weakref callback: self is the key; removes the entry if it still belongs
 * to this weakref (the entry may have been replaced by then). */
static PyObject* DropDims(PyObject* key, PyObject* weakref) {
  State* s = atomic_load_explicit(&g_state, memory_order_acquire);
  if (s == NULL) Py_RETURN_NONE;
  PyObject* entry = NULL;
  TCDE_DIMS_LOCK();
  int rc = DimsEntry(s, key, &entry);
  const int ours = entry != NULL && PyTuple_GetItem(entry, 0) == weakref;
  /* The dict still holds the entry: dropping this reference frees nothing. */
  Py_XDECREF(entry);
  if (rc == 0 && ours && PyDict_DelItem(s->dims_cache, key) != 0) {
    if (PyErr_ExceptionMatches(PyExc_KeyError)) {
      PyErr_Clear();
    } else {
      rc = -1;
    }
  }
  TCDE_DIMS_UNLOCK();
  if (rc != 0) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef kDropDimsDef = {"_tcde_drop_dims", (PyCFunction)(void (*)(void))DropDims,
                                   METH_O, NULL};

/* The Dims of `entry` if it is `obj`'s (its weakref still points to it: an id is
 * reused only after the old object died and its callback ran, but be sure) and
 * equals `dl`'s shape and strides; else NULL, no error set. */
static const Dims* MatchingDims(PyObject* entry, PyObject* obj, const DLTensor* dl) {
  PyObject* weakref = PyTuple_GetItem(entry, 0);
  const Dims* dims = (const Dims*)PyCapsule_GetPointer(PyTuple_GetItem(entry, 1), "tcde_dims");
  if (dims == NULL) {
    PyErr_Clear();
    return NULL;
  }
  PyObject* referent = NULL;
#if PY_VERSION_HEX >= 0x030D0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API >= 0x030D0000)
  if (PyWeakref_GetRef(weakref, &referent) < 0) PyErr_Clear();
  Py_XDECREF(referent); /* only compared: obj itself is held by the caller */
#else
  referent = PyWeakref_GetObject(weakref); /* borrowed */
#endif
  const int32_t ndim = dl->ndim;
  if (referent != obj || dims->ndim != ndim) return NULL;
  if (ndim > 0 && (memcmp(dims->dims, dl->shape, (size_t)ndim * sizeof(int64_t)) != 0 ||
                   memcmp(dims->dims + ndim, dl->strides, (size_t)ndim * sizeof(int64_t)) != 0)) {
    return NULL;
  }
  return dims;
}

/* The cached dims of `obj` if they equal `dl`'s shape and strides, else a new
 * entry holding a copy; NULL with a Python error set on failure. The Dims stay
 * in the dict (so the pointer stays valid) while obj lives and its metadata
 * does not change. */
static const Dims* DimsFor(const State* s, PyObject* obj, const DLTensor* dl) {
  PyObject* key = PyLong_FromVoidPtr(obj);
  if (key == NULL) return NULL;
  const int32_t ndim = dl->ndim;
  PyObject* entry = NULL;
  const Dims* found = NULL;
  TCDE_DIMS_LOCK();
  int rc = DimsEntry(s, key, &entry);
  if (entry != NULL) found = MatchingDims(entry, obj, dl);
  TCDE_DIMS_UNLOCK();
  Py_XDECREF(entry);
  if (rc != 0 || found != NULL) {
    Py_DECREF(key);
    return found;
  }
  Dims* dims = (Dims*)malloc(sizeof(Dims) + 2 * (size_t)ndim * sizeof(int64_t));
  if (dims == NULL) {
    Py_DECREF(key);
    PyErr_NoMemory();
    return NULL;
  }
  dims->ndim = ndim;
  for (int32_t i = 0; i < ndim; ++i) {
    dims->dims[i] = dl->shape[i];
    dims->dims[ndim + i] = dl->strides[i];
  }
  PyObject* capsule = PyCapsule_New(dims, "tcde_dims", &FreeDimsCapsule);
  if (capsule == NULL) {
    free(dims);
    Py_DECREF(key);
    return NULL;
  }
  PyObject* callback = PyCFunction_NewEx(&kDropDimsDef, key, NULL);
  PyObject* weakref = callback == NULL ? NULL : PyWeakref_NewRef(obj, callback);
  Py_XDECREF(callback);
  PyObject* value = weakref == NULL ? NULL : PyTuple_Pack(2, weakref, capsule);
  Py_XDECREF(weakref);
  Py_DECREF(capsule);
  if (value == NULL) {
    Py_DECREF(key);
    return NULL;
  }
  /* Another thread may have made the same entry meanwhile: use the one in the
   * dict, never replace it (its Dims may be in use already). */
  const Dims* result = dims;
  entry = NULL;
  TCDE_DIMS_LOCK();
  rc = DimsEntry(s, key, &entry);
  if (rc == 0 && entry != NULL) found = MatchingDims(entry, obj, dl);
  if (rc == 0 && found != NULL) {
    result = found;
  } else if (rc != 0 || PyDict_SetItem(s->dims_cache, key, value) != 0) {
    result = NULL;
  }
  TCDE_DIMS_UNLOCK();
  /* Outside the lock: dropping an unused entry, or the replaced one's last
   * reference, frees its weakref (no callback: the weakref dies first). */
  Py_XDECREF(entry);
  Py_DECREF(value);
  Py_DECREF(key);
  return result;
}

static int DLTensorFromPyObjectNoSync(void* py_obj, DLTensor* out) {
  if (out == NULL) {
    PyErr_Format(PyExc_ValueError, "%s: dltensor_from_py_object_no_sync: out is NULL", kLib);
    return -1;
  }
  const State* s = GetState();
  if (s == NULL) return -1;
  PyObject* obj = (PyObject*)py_obj;
  DLManagedTensorVersioned* managed = ExportTensor(s, obj, 0);
  if (managed == NULL) return -1;
  const DLTensor* dl = &managed->dl_tensor;
  const Dims* dims = DimsFor(s, obj, dl);
  if (dims == NULL) {
    DeleteManaged(managed);
    return -1;
  }
  /* Non-owning: data stays valid while the caller holds the object and does not
   * change its metadata (the native table's promise); the export is dropped. */
  out->data = dl->data;
  out->device = dl->device;
  out->ndim = dl->ndim;
  out->dtype = dl->dtype;
  out->shape = (int64_t*)dims->dims;
  out->strides = (int64_t*)dims->dims + dims->ndim;
  out->byte_offset = dl->byte_offset;
  DeleteManaged(managed);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Import                                                                   */
/* ------------------------------------------------------------------------ */

static int MulOverflows(uint64_t a, uint64_t b, uint64_t* product) {
  if (a != 0 && b > UINT64_MAX / a) return 1;
  *product = a * b;
  return 0;
}

static int AddOverflows(uint64_t a, uint64_t b, uint64_t* sum) {
  *sum = a + b;
  return *sum < a;
}

/* The native table's StorageElements(): false when torch cannot represent the
 * view (negative sizes or strides, an element count, row-major stride or byte
 * extent beyond int64). Checked before torch sees the sizes: its builder would
 * terminate the process on an overflow. */
static int StorageElements(const DLTensor* dl, uint64_t itemsize, uint64_t offset,
                           uint64_t* storage_elements, int* empty) {
  const uint64_t kMax = (uint64_t)INT64_MAX;
  int any_empty = 0;
  uint64_t numel = 1;
  int numel_overflows = 0;
  for (int32_t i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] < 0) return 0;
    if (dl->shape[i] == 0) any_empty = 1;
    if (dl->strides != NULL && dl->strides[i] < 0) return 0;
    numel_overflows |= MulOverflows(numel, (uint64_t)dl->shape[i], &numel);
  }
  if (numel_overflows || numel > kMax) return 0;
  if (dl->strides == NULL) {
    uint64_t span = 1;
    for (int32_t i = 1; i < dl->ndim; ++i) {
      const uint64_t size = dl->shape[i] > 1 ? (uint64_t)dl->shape[i] : 1;
      if (MulOverflows(span, size, &span) || span > kMax) return 0;
    }
  }
  uint64_t elements = 0;
  if (!any_empty && dl->strides != NULL) {
    for (int32_t i = 0; i < dl->ndim; ++i) {
      uint64_t step = 0;
      if (MulOverflows((uint64_t)(dl->shape[i] - 1), (uint64_t)dl->strides[i], &step) ||
          AddOverflows(elements, step, &elements)) {
        return 0;
      }
    }
    if (AddOverflows(elements, 1, &elements)) return 0;
  } else if (!any_empty) {
    elements = numel;
  }
  uint64_t bytes = 0;
  if (AddOverflows(elements, offset, &elements) || MulOverflows(elements, itemsize, &bytes) ||
      bytes > kMax) {
    return 0;
  }
  *storage_elements = elements;
  *empty = any_empty;
  return 1;
}

static int RaiseBadImport(const char* what, const DLTensor* dl) {
  PyErr_Format(PyExc_BufferError,
               "%s: cannot import a DLPack tensor: %s (dtype code=%u bits=%u lanes=%u, device "
               "type=%d id=%d, ndim=%d); the DLManagedTensorVersioned was not consumed and its "
               "deleter was not called",
               kLib, what, (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits,
               (unsigned)dl->dtype.lanes, (int)dl->device.device_type, (int)dl->device.device_id,
               (int)dl->ndim);
  return -1;
}

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
    if (ok) result = PyObject_CallFunction(s->as_strided, "OOOL", flat, shape, stride, (long long)offset);
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
  if ((int32_t)device->device_type == s->gpu_type && s->gpu_type != 0) return device->device_id >= 0;
  return 0;
}

static int ManagedTensorToPyObjectNoSync(DLManagedTensorVersioned* src, void** out_py) {
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
  if (src->version.major != DLPACK_MAJOR_VERSION) {
    PyErr_Format(PyExc_BufferError,
                 "%s: DLManagedTensorVersioned has DLPack major version %u, this library reads "
                 "%d; the tensor was not consumed and its deleter was not called",
                 kLib, (unsigned)src->version.major, DLPACK_MAJOR_VERSION);
    return -1;
  }
  if ((src->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0) {
    return RaiseBadImport(
        "it is flagged READ_ONLY, and torch tensors are always writable (copy it into "
        "writable memory first, or have the producer export it writable)",
        dl);
  }
  const Dtype* dtype = FromDLDataType(s, dl->dtype);
  if (dtype == NULL) return RaiseBadImport("torch has no dtype for this DLPack dtype", dl);
  const int32_t device_type = dl->device.device_type;
  if ((device_type == kDLCUDA || device_type == kDLROCM) && device_type != s->gpu_type) {
    PyErr_Format(PyExc_BufferError,
                 "%s: cannot import a DLPack tensor on device type %d id %d: this torch build "
                 "serves no such device (the table could not report its stream); use the %s "
                 "build of torch. The DLManagedTensorVersioned was not consumed and its deleter "
                 "was not called",
                 kLib, (int)device_type, (int)dl->device.device_id, GpuName(device_type));
    return -1;
  }
  if (!ServesImportDevice(s, &dl->device)) {
    return RaiseBadImport("this library cannot create torch tensors on that device", dl);
  }
  if (dl->ndim < 0 || (dl->ndim > 0 && dl->shape == NULL)) {
    return RaiseBadImport("ndim is negative or shape is NULL", dl);
  }
  const uint64_t itemsize = dtype->itemsize;
  if (dl->byte_offset % itemsize != 0) {
    return RaiseBadImport(
        "byte_offset is not a multiple of the element size (torch needs aligned elements)", dl);
  }
  int empty = 0;
  uint64_t storage_elements = 0;
  if (!StorageElements(dl, itemsize, dl->byte_offset / itemsize, &storage_elements, &empty)) {
    return RaiseBadImport(
        "negative sizes or strides, or an element count or memory extent beyond int64 "
        "(torch supports neither)",
        dl);
  }
  if (dl->data == NULL && !empty) {
    return RaiseBadImport("data is NULL but the tensor has elements", dl);
  }
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
  const int byte_view = !s->full_import && (dtype->flags & kDtypeByteView);
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
    if (copy.data == NULL && s->null_data_import_leaks) copy.data = (void*)&kNoElements;
  }
  if (!s->full_import && copy.byte_offset != 0) {
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
  if (s->versioned_import) {
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
  PyObject* tensor = Call1(s->from_dlpack, capsule);
  Py_DECREF(capsule);
  /* Unarmed until the end: if a step below fails, the deleter torch runs when
   * it drops the tensor leaves src with the caller. */
  if (tensor != NULL && byte_view) {
    PyObject* viewed = Call2(s->view, tensor, dtype->dtype);
    Py_DECREF(tensor);
    tensor = viewed;
  }
  if (tensor != NULL && copy.shape == &wrap->flat[0]) {
    tensor = ViewOf(s, tensor, dl, wrap->strides, (int64_t)(dl->byte_offset / itemsize));
  }
  if (tensor == NULL) {
    AbandonImportWrap(wrap);
    PyObject* cause = TakeException();
    if (IsMemoryError(cause)) {
      RestoreException(cause);
      return -1;
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

/* ------------------------------------------------------------------------ */
/* Allocator                                                                */
/* ------------------------------------------------------------------------ */

typedef void (*SetErrorFn)(void* error_ctx, const char* kind, const char* message);

static int AllocatorFail(DLManagedTensorVersioned** out, void* error_ctx, SetErrorFn set_error,
                         const char* kind, const char* message) {
  if (out != NULL) *out = NULL;
  if (set_error != NULL) set_error(error_ctx, kind, message);
  return -1;
}

/* SetError with the pending Python exception's text; clears it. */
static int AllocatorFailFromPython(DLManagedTensorVersioned** out, void* error_ctx,
                                   SetErrorFn set_error, const char* kind, const char* what) {
  char message[512];
  char text[256];
  TakeExceptionText(text, sizeof(text));
  snprintf(message, sizeof(message), "torch-c-dlpack-ext allocator (portable table): %s: %s",
           what, text);
  return AllocatorFail(out, error_ctx, set_error, kind, message);
}

/* The native table's ContiguousLayout(): 0 when fine, 1 for a negative size
 * (`*bad_dim`), 2 when the element count, byte size or a stride passes int64. */
static int CheckContiguous(const int64_t* sizes, int32_t ndim, uint64_t itemsize,
                           int32_t* bad_dim) {
  const uint64_t kMax = (uint64_t)INT64_MAX;
  uint64_t numel = 1;
  uint64_t nbytes = 0;
  int overflow = 0;
  for (int32_t i = 0; i < ndim; ++i) {
    if (sizes[i] < 0) {
      *bad_dim = i;
      return 1;
    }
    overflow |= MulOverflows(numel, (uint64_t)sizes[i], &numel);
  }
  overflow |= numel > kMax || MulOverflows(numel, itemsize, &nbytes) || nbytes > kMax;
  uint64_t stride = 1;
  for (int32_t i = ndim - 1; i > 0; --i) {
    overflow |= MulOverflows(stride, sizes[i] > 1 ? (uint64_t)sizes[i] : 1, &stride) ||
                stride > kMax;
  }
  return overflow ? 2 : 0;
}

/* torch.device for a prototype's device (a new reference), or NULL with an error. */
static PyObject* TorchDevice(const State* s, const DLDevice* device) {
  if (device->device_type == kDLCPU) {
    Py_INCREF(s->cpu_device);
    return s->cpu_device;
  }
  const char* kind = device->device_type == kDLOneAPI ? "xpu" : "cuda";
  return PyObject_CallFunction(s->cuda_device_ctor, "si", kind, (int)device->device_id);
}

/* The positional arguments of torch.empty for a prototype: its sizes as separate
 * ints, torch.empty(2, 3) (a 0-d tensor: torch.empty(())). One tuple of sizes,
 * torch.empty((2, 3)), costs torch's argument parser a raised and cleared
 * TypeError on every call: it tries the tuple as an int first (docs/facts.md). */
static PyObject* EmptyArgs(const DLTensor* prototype) {
  const int32_t ndim = prototype->ndim;
  if (ndim == 0) {
    PyObject* no_sizes = PyTuple_New(0);
    PyObject* args = no_sizes == NULL ? NULL : PyTuple_Pack(1, no_sizes);
    Py_XDECREF(no_sizes);
    return args;
  }
  PyObject* args = PyTuple_New(ndim);
  if (args == NULL) return NULL;
  for (int32_t i = 0; i < ndim; ++i) {
    PyObject* size = PyLong_FromLongLong((long long)prototype->shape[i]);
    /* PyTuple_SetItem steals `size`; on a new tuple it cannot fail. */
    if (size == NULL || PyTuple_SetItem(args, i, size) != 0) {
      Py_DECREF(args);
      return NULL;
    }
  }
  return args;
}

/* torch.empty(*args[, dtype=dtype][, device=device]): a keyword is left out
 * where its argument is NULL. torch's functions take an argument tuple
 * (METH_VARARGS): PyObject_Call hands them `args` as it is, where a vectorcall
 * would first copy its arguments into a new tuple. */
static PyObject* CallEmpty(const State* s, PyObject* args, PyObject* dtype, PyObject* device) {
  if (dtype == NULL && device == NULL) return PyObject_Call(s->empty, args, NULL);
  PyObject* kwargs = PyDict_New();
  if (kwargs == NULL || (dtype != NULL && PyDict_SetItem(kwargs, s->str_dtype, dtype) != 0) ||
      (device != NULL && PyDict_SetItem(kwargs, s->str_device, device) != 0)) {
    Py_XDECREF(kwargs);
    return NULL;
  }
  PyObject* result = PyObject_Call(s->empty, args, kwargs);
  Py_DECREF(kwargs);
  return result;
}

/* torch.empty(shape, dtype=..., device=...) exported; checked to be plain
 * memory of what was asked (a dispatch mode or fake-tensor mode may answer
 * torch.empty with anything). GIL held. Returns NULL after SetError. */
static DLManagedTensorVersioned* AllocateWithTorch(const State* s, const DLTensor* prototype,
                                                   const Dtype* dtype, DLManagedTensorVersioned** out,
                                                   void* error_ctx, SetErrorFn set_error) {
  const int32_t ndim = prototype->ndim;
  const int host = prototype->device.device_type == kDLCPU;
  /* torch 2.4-2.9 export no float8/fp4: allocate the same bytes as uint8. */
  const Dtype* alloc_dtype =
      (!s->full_import && (dtype->flags & kDtypeByteView)) ? &s->dtypes[s->uint8_index]
                                                               : dtype;
  PyObject* args = EmptyArgs(prototype);
  if (args == NULL) goto python_error;
  PyObject* device = TorchDevice(s, &prototype->device);
  if (device == NULL) {
    Py_DECREF(args);
    goto python_error;
  }
  /* First try: host memory of the default float32 without the keywords, which
   * cost torch's argument parser a third of torch.empty(16) again (docs/facts.md).
   * A changed default dtype or device shows in the export below: then ask again,
   * explicitly. */
  int explicit_call = !host;
  PyObject* tensor;
retry:
  tensor = CallEmpty(s, args, explicit_call || alloc_dtype != &s->dtypes[0] ? alloc_dtype->dtype
                                                                            : NULL,
                     explicit_call ? device : NULL);
  if (tensor == NULL) {
    Py_DECREF(args);
    Py_DECREF(device);
    PyObject* exc = TakeException();
    /* The sizes were checked: on host memory a failure is the allocator's. */
    const char* kind = IsMemoryError(exc) || host ? "MemoryError" : "RuntimeError";
    RestoreException(exc);
    AllocatorFailFromPython(out, error_ctx, set_error, kind, "torch.empty failed");
    return NULL;
  }
  /* Plain memory: a torch.Tensor itself (no subclass: fake tensors, wrapper
   * subclasses), of the dtype asked for; the export checks the rest. */
  if (Py_TYPE(tensor) != s->tensor_type) {
    Py_DECREF(tensor);
    Py_DECREF(args);
    Py_DECREF(device);
    AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                  "torch-c-dlpack-ext allocator (portable table): torch.empty returned a tensor "
                  "subclass, not plain memory (is a fake-tensor or Python dispatch mode active?)");
    return NULL;
  }
  PyObject* capsule = CallToDlpack(s, tensor);
  Py_DECREF(tensor);
  DLManagedTensorVersioned* managed = capsule == NULL ? NULL : TakeCapsule(s, capsule);
  if (managed == NULL && !explicit_call) {
    /* torch.set_default_device("meta"), say: ask again with the device named. */
    PyErr_Clear();
    explicit_call = 1;
    goto retry;
  }
  if (managed == NULL) {
    Py_DECREF(args);
    Py_DECREF(device);
    AllocatorFailFromPython(out, error_ctx, set_error, "RuntimeError",
                            "torch.empty returned a tensor without exportable memory (is a "
                            "Python dispatch mode active?)");
    return NULL;
  }
  DLTensor* dl = &managed->dl_tensor;
  /* The dtype as torch exports it (the codes of the table above, for every dtype
   * the allocator makes). */
  int plain = dl->dtype.code == alloc_dtype->dl.code && dl->dtype.bits == alloc_dtype->dl.bits &&
              dl->dtype.lanes == alloc_dtype->dl.lanes && dl->ndim == ndim &&
              dl->byte_offset == 0 &&
              dl->device.device_type == (host ? kDLCPU : prototype->device.device_type) &&
              (host || dl->device.device_id == prototype->device.device_id);
  /* Unsigned: past the outermost dimension the product may leave int64 (a shape with a
   * zero elsewhere is checked only for its element count); it is never used there. */
  uint64_t expected_stride = 1;
  int has_elements = 1;
  for (int32_t i = ndim - 1; plain && i >= 0; --i) {
    plain = dl->shape[i] == prototype->shape[i] &&
            (prototype->shape[i] < 2 || (uint64_t)dl->strides[i] == expected_stride);
    has_elements &= prototype->shape[i] != 0;
    expected_stride *= prototype->shape[i] > 1 ? (uint64_t)prototype->shape[i] : 1;
  }
  if (plain && has_elements && dl->data == NULL) plain = 0;
  if (!plain && !explicit_call) {
    DeleteManaged(managed);
    explicit_call = 1;
    goto retry;
  }
  Py_DECREF(args);
  Py_DECREF(device);
  if (!plain) {
    DeleteManaged(managed);
    AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                  "torch-c-dlpack-ext allocator (portable table): torch.empty returned a tensor "
                  "that is not plain memory of the requested dtype, device and shape (is a "
                  "Python mode active?)");
    return NULL;
  }
  /* Row-major strides for every dimension (torch may report any stride for a
   * dimension of size 0 or 1), as the native allocator writes them. */
  uint64_t stride = 1; /* checked within int64 for every dimension it is written to */
  for (int32_t i = ndim - 1; i >= 0; --i) {
    dl->strides[i] = (int64_t)stride;
    stride *= prototype->shape[i] > 1 ? (uint64_t)prototype->shape[i] : 1;
  }
  if (!has_elements) dl->data = NULL;
  dl->dtype = prototype->dtype;
  dl->device = prototype->device;
  if (host) dl->device.device_id = 0;
  managed->version.major = DLPACK_MAJOR_VERSION;
  managed->version.minor = DLPACK_MINOR_VERSION;
  managed->flags = 0;
  return managed;
python_error:
  AllocatorFailFromPython(out, error_ctx, set_error, "MemoryError", "cannot build the call");
  return NULL;
}

static int ManagedTensorAllocator(DLTensor* prototype, DLManagedTensorVersioned** out,
                                  void* error_ctx, SetErrorFn set_error) {
  char message[256];
  if (prototype == NULL || out == NULL) {
    return AllocatorFail(out, error_ctx, set_error, "ValueError",
                         "torch-c-dlpack-ext allocator: prototype and out must not be NULL");
  }
  *out = NULL;
  if (!Py_IsInitialized()) {
    /* After Py_Finalize (a C++ thread, an atexit hook): torch cannot allocate. */
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                         "torch-c-dlpack-ext allocator (portable table): the Python interpreter "
                         "has shut down, so torch cannot allocate; allocate before it exits");
  }
  const int need_gil = !TCDE_GIL_HELD();
  PyGILState_STATE gil = PyGILState_UNLOCKED;
  if (need_gil) gil = PyGILState_Ensure();
  int rc = -1;
  const State* s = GetState();
  if (s == NULL) {
    AllocatorFailFromPython(out, error_ctx, set_error, "RuntimeError",
                            "cannot reach torch's Python entry points");
    goto done;
  }
  const Dtype* dtype = FromDLDataType(s, prototype->dtype);
  if (dtype == NULL) {
    snprintf(message, sizeof(message),
             "torch-c-dlpack-ext allocator: DLPack dtype (code=%u, bits=%u, lanes=%u) has no "
             "torch equivalent; request a dtype torch supports",
             (unsigned)prototype->dtype.code, (unsigned)prototype->dtype.bits,
             (unsigned)prototype->dtype.lanes);
    AllocatorFail(out, error_ctx, set_error, "ValueError", message);
    goto done;
  }
  const int32_t device_type = prototype->device.device_type;
  if (device_type != kDLCPU) {
    const int served = ((int32_t)device_type == s->gpu_type && s->gpu_type != 0) ||
                       (device_type == kDLOneAPI && s->xpu);
    if (!served || prototype->device.device_id < 0) {
      const int unserved_gpu = (device_type == kDLCUDA || device_type == kDLROCM) && !served;
      snprintf(message, sizeof(message),
               "torch-c-dlpack-ext allocator (portable table): cannot allocate on DLPack device "
               "type %d id %d with this torch build%s%s%s",
               (int)device_type, (int)prototype->device.device_id,
               unserved_gpu ? ", which serves no such device; use the " : "",
               unserved_gpu ? GpuName(device_type) : "", unserved_gpu ? " build of torch" : "");
      AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      goto done;
    }
  }
  const int32_t ndim = prototype->ndim;
  if (ndim < 0 || (ndim > 0 && prototype->shape == NULL)) {
    AllocatorFail(out, error_ctx, set_error, "ValueError",
                  "torch-c-dlpack-ext allocator: prototype ndim is negative or its shape is NULL");
    goto done;
  }
  int32_t bad_dim = 0;
  switch (CheckContiguous(prototype->shape, ndim, dtype->itemsize, &bad_dim)) {
    case 0:
      break;
    case 1:
      snprintf(message, sizeof(message),
               "torch-c-dlpack-ext allocator: prototype shape[%d] is %lld; sizes must be >= 0",
               (int)bad_dim, (long long)prototype->shape[bad_dim]);
      AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      goto done;
    default:
      snprintf(message, sizeof(message),
               "torch-c-dlpack-ext allocator: a contiguous tensor of this prototype's %d sizes "
               "and %llu-byte elements has an element count, byte size or stride beyond int64, "
               "which torch cannot represent; request a smaller shape",
               (int)ndim, (unsigned long long)dtype->itemsize);
      AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      goto done;
  }
  DLManagedTensorVersioned* managed =
      AllocateWithTorch(s, prototype, dtype, out, error_ctx, set_error);
  if (managed != NULL) {
    *out = managed;
    rc = 0;
  }
done:
  if (need_gil) PyGILState_Release(gil);
  return rc;
}

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
    PyObject* c = GetAttr(s->torch, "_C", 0);
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
    handle = Call1(st->raw_stream, index);
  } else {
    /* torch.cuda.current_stream(None) is the current device's. */
    PyObject* stream = Call1(st->current_stream, device_id < 0 ? Py_None : index);
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
static int CurrentWorkStream(DLDeviceType device_type, int32_t device_id, void** out) {
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
    const int cpu_only = cached != NULL && cached->gpu_type == 0 && !cached->xpu;
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
    if ((int32_t)device_type != s->gpu_type && !(s->gpu_type != 0 && s->other_gpu_stream)) {
      PyErr_Format(PyExc_ValueError,
                   "%s: current_work_stream: device type %d is a GPU this torch build does not "
                   "serve, so it knows no stream for it; use the %s build of torch",
                   kLib, (int)device_type, GpuName(device_type));
      goto done;
    }
  } else if (device_type == kDLOneAPI && s->xpu) {
    /* below */
  } else if (s->gpu_type == 0 && !s->xpu) {
    rc = 0; /* a CPU-only torch: no stream, as the native CPU build answers */
    goto done;
  } else {
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: device type %d is not a device this torch build "
                 "serves",
                 kLib, (int)device_type);
    goto done;
  }
  if (device_id < -1 || device_id > 32767) {
    PyErr_Format(PyExc_ValueError, "%s: current_work_stream: invalid device id %d", kLib,
                 (int)device_id);
    goto done;
  }
  rc = QueryStream(s, device_type == kDLOneAPI, device_id, out);
done:
  if (rc != 0 && !caller_held) PyErr_Clear();
  if (need_gil) PyGILState_Release(gil);
  return rc;
}

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
