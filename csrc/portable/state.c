#include "portable.h"

_Atomic(State*) g_state = NULL;

static void FreeState(State* s) {
  if (s == NULL) return;
  Py_XDECREF(s->entry.torch_module);
  Py_XDECREF((PyObject*)s->entry.tensor_type);
  Py_XDECREF(s->entry.to_dlpack);
  Py_XDECREF(s->entry.from_dlpack);
  Py_XDECREF(s->entry.empty);
  Py_XDECREF(s->tensor_base.is_conj);
  Py_XDECREF(s->tensor_base.is_neg);
  Py_XDECREF(s->tensor_base.view);
  Py_XDECREF(s->tensor_base.detach);
  Py_XDECREF(s->tensor_base.stride);
  Py_XDECREF(s->tensor_base.size);
  Py_XDECREF(s->entry.as_strided);
  Py_XDECREF(s->constants.strided);
  Py_XDECREF(s->constants.jagged);
  Py_XDECREF(s->constants.cpu_device);
  Py_XDECREF(s->entry.device_ctor);
  Py_XDECREF(s->tensor_base.get_layout);
  Py_XDECREF(s->tensor_base.get_dtype);
  Py_XDECREF(s->tensor_base.get_is_nested);
  Py_XDECREF(s->tensor_base.get_device);
  Py_XDECREF((PyObject*)s->entry.parameter_type);
  Py_XDECREF(s->modes.disable_torch_function);
  Py_XDECREF(s->modes.function_mode_on);
  Py_XDECREF(s->modes.disable_torch_dispatch);
  Py_XDECREF(s->modes.dispatch_stack_len);
  Py_XDECREF(s->tensor_base.untyped_storage);
  Py_XDECREF(s->storage_base.data_ptr);
  Py_XDECREF(s->storage_base.nbytes);
  Py_XDECREF(s->storage_base.get_device);
  Py_XDECREF(s->names.is_cpu);
  Py_XDECREF(s->names.type);
  Py_XDECREF(s->names.index);
  Py_XDECREF(s->names.enter);
  Py_XDECREF(s->names.exit);
  Py_XDECREF(s->names.dtype);
  Py_XDECREF(s->names.layout);
  Py_XDECREF(s->names.is_nested);
  Py_XDECREF(s->names.device);
  Py_XDECREF(s->dims_cache);
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) Py_XDECREF(s->dtypes[i].dtype);
  free(s);
}

/* getattr(obj, name), or NULL with AttributeError cleared when `optional`. */
PyObject* GetAttr(PyObject* obj, const char* name, int optional) {
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
  s->entry.torch_module = PyImport_ImportModule("torch");
  if (s->entry.torch_module == NULL) goto fail;
  c = GetAttr(s->entry.torch_module, "_C", 0);
  if (c == NULL) goto fail;
  s->entry.to_dlpack = GetAttr(c, "_to_dlpack_versioned", 1);
  s->caps.versioned_export = s->entry.to_dlpack != NULL;
  if (s->entry.to_dlpack == NULL) {
    if (PyErr_Occurred()) goto fail;
    s->entry.to_dlpack = GetAttr(c, "_to_dlpack", 0);
    if (s->entry.to_dlpack == NULL) goto fail;
  }
  /* torch._C._from_dlpack reads "dltensor_versioned" capsules from the release
   * that added _to_dlpack_versioned (2.9, PyTorch PR #145000; docs/facts.md). */
  s->caps.versioned_import = s->caps.versioned_export;
  /* torch 2.4-2.9 import ignores byte_offset and has no float8/fp4 DLPack codes
   * (its DLPack header is 0.8/1.0); 2.10 and later (DLPack 1.3) import both. */
  {
    PyObject* version = GetAttr(s->entry.torch_module, "__version__", 0);
    PyObject* text = version == NULL ? NULL : PyObject_Str(version);
    PyObject* bytes = text == NULL ? NULL : PyUnicode_AsUTF8String(text);
    Py_XDECREF(version);
    Py_XDECREF(text);
    if (bytes == NULL) goto fail;
    int major = 0, minor = 0;
    if (sscanf(PyBytes_AsString(bytes), "%d.%d", &major, &minor) != 2) major = minor = 0;
    Py_DECREF(bytes);
    s->caps.torch_has_dlpack13 =
        s->caps.versioned_import && (major > 2 || (major == 2 && minor >= 10));
    /* Measured (docs/facts.md): 2.2.2 never releases a data-NULL import, 2.3.1 and
     * later do. An unparsable version is taken for a new one. */
    s->caps.null_data_import_leaks = major == 2 && minor < 3;
    /* torch's own current_work_stream (2.10-2.12) and its Python DLPack protocol (2.0-2.9)
     * hand a GPU caller the build's current stream for either GPU type; 2.13 answers
     * the other type with NULL (docs/facts.md, "Device types"). */
    s->caps.other_gpu_stream = major == 2 && minor <= 12;
  }
  s->entry.from_dlpack = GetAttr(c, "_from_dlpack", 0);
  if (s->entry.from_dlpack == NULL) goto fail;
  s->entry.tensor_type = (PyTypeObject*)GetAttr(s->entry.torch_module, "Tensor", 0);
  if (s->entry.tensor_type == NULL) goto fail;
  if (!PyType_Check((PyObject*)s->entry.tensor_type)) {
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
  if ((s->tensor_base.is_conj = GetAttr(tensor_base, "is_conj", 0)) == NULL) goto fail;
  if ((s->tensor_base.is_neg = GetAttr(tensor_base, "is_neg", 0)) == NULL) goto fail;
  if ((s->tensor_base.view = GetAttr(tensor_base, "view", 0)) == NULL) goto fail;
  if ((s->tensor_base.detach = GetAttr(tensor_base, "detach", 0)) == NULL) goto fail;
  if ((s->tensor_base.stride = GetAttr(tensor_base, "stride", 0)) == NULL) goto fail;
  if ((s->tensor_base.size = GetAttr(tensor_base, "size", 0)) == NULL) goto fail;
  if ((s->entry.as_strided = GetAttr(s->entry.torch_module, "as_strided", 0)) == NULL) goto fail;
  if ((s->entry.empty = GetAttr(s->entry.torch_module, "empty", 0)) == NULL) goto fail;
  if ((s->constants.strided = GetAttr(s->entry.torch_module, "strided", 0)) == NULL) goto fail;
  s->constants.jagged = GetAttr(s->entry.torch_module, "jagged", 1);
  if (s->constants.jagged == NULL && PyErr_Occurred()) goto fail;
  if ((s->entry.device_ctor = GetAttr(s->entry.torch_module, "device", 0)) == NULL) goto fail;
  if ((s->tensor_base.get_layout = DescriptorGetter(tensor_base, "layout")) == NULL) goto fail;
  if ((s->tensor_base.get_dtype = DescriptorGetter(tensor_base, "dtype")) == NULL) goto fail;
  s->tensor_base.get_is_nested = DescriptorGetter(tensor_base, "is_nested");
  if (s->tensor_base.get_is_nested == NULL) goto fail;
  if ((s->tensor_base.get_device = DescriptorGetter(tensor_base, "device")) == NULL) goto fail;
  {
    PyObject* nn = GetAttr(s->entry.torch_module, "nn", 1);
    s->entry.parameter_type = nn == NULL ? NULL : (PyTypeObject*)GetAttr(nn, "Parameter", 1);
    Py_XDECREF(nn);
    if (s->entry.parameter_type == NULL && PyErr_Occurred()) goto fail;
    if (s->entry.parameter_type != NULL && !PyType_Check((PyObject*)s->entry.parameter_type)) {
      Py_CLEAR(s->entry.parameter_type);
    }
  }
  /* Both in torch 2.2-2.13 (docs/facts.md); without DisableTorchFunction a subclass or
   * a mode is refused rather than trusted (EnterTrustedScope). */
  s->modes.disable_torch_function = GetAttr(c, "DisableTorchFunction", 1);
  if (s->modes.disable_torch_function == NULL && PyErr_Occurred()) goto fail;
  s->modes.function_mode_on = GetAttr(c, "_is_torch_function_mode_enabled", 1);
  if (s->modes.function_mode_on == NULL && PyErr_Occurred()) goto fail;
  /* Both in torch 2.2-2.13 (docs/facts.md); without them a subclass or a mode is refused
   * rather than trusted. */
  s->modes.disable_torch_dispatch = GetAttr(c, "_DisableTorchDispatch", 1);
  if (s->modes.disable_torch_dispatch == NULL && PyErr_Occurred()) goto fail;
  s->modes.dispatch_stack_len = GetAttr(c, "_len_torch_dispatch_stack", 1);
  if (s->modes.dispatch_stack_len == NULL && PyErr_Occurred()) goto fail;
  {
    PyObject* storage_base = GetAttr(c, "StorageBase", 1);
    if (storage_base == NULL && PyErr_Occurred()) goto fail;
    if (storage_base != NULL) {
      s->storage_base.data_ptr = GetAttr(storage_base, "data_ptr", 1);
      s->storage_base.nbytes =
          s->storage_base.data_ptr == NULL ? NULL : GetAttr(storage_base, "nbytes", 1);
      s->storage_base.get_device =
          s->storage_base.nbytes == NULL ? NULL : DescriptorGetter(storage_base, "device");
      Py_DECREF(storage_base);
      if (s->storage_base.get_device == NULL) PyErr_Clear(); /* then subclasses are refused */
    }
    s->tensor_base.untyped_storage = GetAttr(tensor_base, "untyped_storage", 1);
    if (s->tensor_base.untyped_storage == NULL && PyErr_Occurred()) goto fail;
  }
  /* torch.device("cpu") is seen by torch function modes: made with them off, so that
   * loading the table asks nothing of a mode (a strict one would refuse the load). */
  {
    PyObject* scope = s->modes.disable_torch_function == NULL
                          ? NULL
                          : CallNoArgs(s->modes.disable_torch_function);
    PyObject* entered = scope == NULL ? NULL : PyObject_CallMethod(scope, "__enter__", NULL);
    if (scope != NULL && entered == NULL) {
      Py_DECREF(scope);
      goto fail;
    }
    Py_XDECREF(entered);
    s->constants.cpu_device = PyObject_CallFunction(s->entry.device_ctor, "s", "cpu");
    if (scope != NULL) {
      PyObject* pending = TakeException();
      PyObject* left = PyObject_CallMethod(scope, "__exit__", "OOO", Py_None, Py_None, Py_None);
      Py_DECREF(scope);
      Py_XDECREF(left);
      if (pending != NULL) {
        PyErr_Clear();
        RestoreException(pending);
      }
    }
    if (s->constants.cpu_device == NULL || PyErr_Occurred()) goto fail;
  }
  if ((s->names.enter = PyUnicode_InternFromString("__enter__")) == NULL) goto fail;
  if ((s->names.exit = PyUnicode_InternFromString("__exit__")) == NULL) goto fail;
  if ((s->names.dtype = PyUnicode_InternFromString("dtype")) == NULL) goto fail;
  if ((s->names.layout = PyUnicode_InternFromString("layout")) == NULL) goto fail;
  if ((s->names.is_nested = PyUnicode_InternFromString("is_nested")) == NULL) goto fail;
  if ((s->names.device = PyUnicode_InternFromString("device")) == NULL) goto fail;
  if ((s->names.is_cpu = PyUnicode_InternFromString("is_cpu")) == NULL) goto fail;
  if ((s->names.type = PyUnicode_InternFromString("type")) == NULL) goto fail;
  if ((s->names.index = PyUnicode_InternFromString("index")) == NULL) goto fail;
  if ((s->dims_cache = PyDict_New()) == NULL) goto fail;
  /* The build flavour from torch.version, never from a device query: no CUDA
   * initialisation here (docs/facts.md). */
  {
    const int hip = VersionFieldSet(s->entry.torch_module, "hip");
    const int cuda = hip == 0 ? VersionFieldSet(s->entry.torch_module, "cuda") : 0;
    const int xpu = VersionFieldSet(s->entry.torch_module, "xpu");
    if (hip < 0 || cuda < 0 || xpu < 0) goto fail;
    s->caps.gpu_type = hip ? kDLROCM : cuda ? kDLCUDA : 0;
    s->caps.xpu = xpu;
  }
  s->uint8_index = -1;
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) {
    const DtypeSpec* spec = &kDtypeSpecs[i];
    Dtype* d = &s->dtypes[i];
    d->dtype = GetAttr(s->entry.torch_module, spec->name, 1);
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
State* GetState(void) {
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

PyObject* CallWithOneArg(PyObject* callable, PyObject* arg) {
#if TCDE_VECTORCALL
  PyObject* args[2] = {NULL, arg};
  return PyObject_Vectorcall(callable, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
#else
  return PyObject_CallFunctionObjArgs(callable, arg, NULL);
#endif
}

PyObject* CallWithTwoArgs(PyObject* callable, PyObject* arg0, PyObject* arg1) {
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
PyObject* CallToDlpack(const State* s, PyObject* tensor) {
#if !TCDE_VECTORCALL
  if (!PyCFunction_Check(s->entry.to_dlpack) ||
      !(PyCFunction_GetFlags(s->entry.to_dlpack) & METH_O)) {
    PyObject* args = PyTuple_Pack(1, tensor);
    if (args == NULL) return NULL;
    PyObject* capsule = PyObject_Call(s->entry.to_dlpack, args, NULL);
    Py_DECREF(args);
    return capsule;
  }
#endif
  return CallWithOneArg(s->entry.to_dlpack, tensor);
}

/* The pending exception as one object (a new reference), the indicator cleared. */
PyObject* TakeException(void) {
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
void TakeExceptionText(char* buf, size_t size) {
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
void RestoreException(PyObject* exc) {
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
int RaiseFrom(PyObject* type, const char* message, PyObject* cause) {
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

int IsMemoryError(PyObject* exc) {
  return exc != NULL && PyErr_GivenExceptionMatches(exc, PyExc_MemoryError);
}

const Dtype* FindDtype(const State* s, PyObject* dtype) {
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) {
    if (s->dtypes[i].dtype == dtype) return &s->dtypes[i];
  }
  return NULL;
}

/* The torch dtype a DLPack dtype imports as, or NULL. */
const Dtype* FromDLDataType(const State* s, DLDataType dl) {
  for (int i = 0; i < TCDE_NUM_DTYPES; ++i) {
    const Dtype* d = &s->dtypes[i];
    if (d->dtype != NULL && !(d->flags & kDtypeExportOnly) && d->dl.code == dl.code &&
        d->dl.bits == dl.bits && d->dl.lanes == dl.lanes) {
      return d;
    }
  }
  return NULL;
}


/* The backend name of a GPU device type, as the native builds are named. */
const char* GpuName(int32_t device_type) {
  return device_type == kDLROCM ? "rocm" : "cuda";
}

/* ------------------------------------------------------------------------ */
/* Trusted scopes                                                           */
/* ------------------------------------------------------------------------ */

/* The object a consumer hands the table is untrusted: a Tensor subclass (through
 * properties, __torch_function__ or __torch_dispatch__), or a mode around the call, can
 * answer dtype, sizes, strides, device, detach(), view() or as_strided with anything
 * (docs/facts.md). The table keeps one rule whatever they answer
 * (csrc/tcde_contract.h, TcdeCheckDescribed): an export describes only bytes of the
 * storage it holds, on that storage's device. What the storage is comes from the C++
 * storage through TensorBase's and StorageBase's own C methods, which no Python code
 * answers. Where Python may answer, the table asks its questions with torch's overrides
 * off (a TrustedScope); where nothing does (an exact torch.Tensor outside any mode), the
 * export is torch's own reading of the C++ tensor and needs no check. */


PyObject* CallNoArgs(PyObject* callable) {
#if TCDE_VECTORCALL
  return PyObject_Vectorcall(callable, NULL, 0, NULL);
#else
  return PyObject_CallObject(callable, NULL);
#endif
}

static int IsPlainTensor(const State* s, PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  return type == s->entry.tensor_type ||
         (s->entry.parameter_type != NULL && type == s->entry.parameter_type);
}

/* Whether `query` (a torch._C function of no arguments) answers true; -1 on error. */
static int Queried(PyObject* query) {
  PyObject* answer = CallNoArgs(query);
  if (answer == NULL) return -1;
  const int truth = PyObject_IsTrue(answer);
  Py_DECREF(answer);
  return truth;
}

int AnswersOnlyFromCpp(const State* s, PyObject* obj, int ask_dispatch) {
  /* Without a mode query (not seen in any torch 2.2-2.13) a mode cannot be ruled out. */
  if (!IsPlainTensor(s, obj) || s->modes.function_mode_on == NULL) return 0;
  const int function_mode = Queried(s->modes.function_mode_on);
  if (function_mode != 0) return function_mode < 0 ? -1 : 0;
  if (!ask_dispatch) return 1;
  if (s->modes.dispatch_stack_len == NULL) return 0;
  const int dispatch_mode = Queried(s->modes.dispatch_stack_len);
  return dispatch_mode < 0 ? -1 : !dispatch_mode;
}

int ModesOn(const State* s) {
  if (s->modes.function_mode_on == NULL || s->modes.dispatch_stack_len == NULL) return 1;
  const int function_mode = Queried(s->modes.function_mode_on);
  if (function_mode != 0) return function_mode;
  return Queried(s->modes.dispatch_stack_len);
}

/* Enters the context manager `factory()` makes: the entered context, or NULL with an error. */
static PyObject* Enter(const State* s, PyObject* factory) {
  PyObject* context = CallNoArgs(factory);
  PyObject* entered =
      context == NULL ? NULL : PyObject_CallMethodObjArgs(context, s->names.enter, NULL);
  if (entered == NULL) {
    Py_XDECREF(context);
    return NULL;
  }
  Py_DECREF(entered);
  return context;
}

/* Leaves `context` (stolen; NULL: none), keeping a pending exception. */
static void Leave(const State* s, PyObject* context) {
  if (context == NULL) return;
  PyObject* pending = TakeException();
  PyObject* left =
      PyObject_CallMethodObjArgs(context, s->names.exit, Py_None, Py_None, Py_None, NULL);
  Py_DECREF(context);
  if (left != NULL) {
    Py_DECREF(left);
  } else if (pending != NULL) {
    PyErr_Clear(); /* the caller's exception says more */
  }
  RestoreException(pending);
}

int EnterTrustedScope(const State* s, TrustedScope* scope) {
  scope->no_torch_function = NULL;
  scope->no_torch_dispatch = NULL;
  if (s->modes.disable_torch_function == NULL || s->modes.disable_torch_dispatch == NULL) {
    PyErr_Format(PyExc_BufferError,
                 "%s: this torch has no torch._C.DisableTorchFunction or "
                 "torch._C._DisableTorchDispatch, so what a tensor subclass or a mode answers "
                 "cannot be checked; export a plain torch.Tensor, outside any mode",
                 kLib);
    return -1;
  }
  scope->no_torch_function = Enter(s, s->modes.disable_torch_function);
  if (scope->no_torch_function == NULL) return -1;
  scope->no_torch_dispatch = Enter(s, s->modes.disable_torch_dispatch);
  if (scope->no_torch_dispatch == NULL) {
    Leave(s, scope->no_torch_function);
    scope->no_torch_function = NULL;
    return -1;
  }
  return 0;
}

int ExitTrustedScope(const State* s, TrustedScope* scope) {
  Leave(s, scope->no_torch_dispatch);
  Leave(s, scope->no_torch_function);
  scope->no_torch_dispatch = NULL;
  scope->no_torch_function = NULL;
  return PyErr_Occurred() ? -1 : 0;
}
