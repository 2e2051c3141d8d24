// The torch_python symbols this library uses, declared here instead of taken
// from <torch/csrc/autograd/python_variable.h>. That header includes pybind11,
// and pybind11's inline templates were three quarters of the library's machine
// code although nothing here calls them.
//
// Each declaration repeats torch's own, version by version; they were read from
// the headers of torch 2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0, 2.9.1, 2.10.0, 2.11.0,
// 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1 and 2.15.0 (PyPI wheels). A declaration
// that does not match its torch fails the build (the driver's ABI audit finds the
// undefined symbol, or on Linux the run-time name missing from libtorch_python.so)
// or the exchange suite (a wrong layout). The driver also reads the installation's
// python_variable.h before compiling and refuses a THPVariable whose head differs
// from the one below (a dev build of a checked version).
//
// On Linux the library does NOT link libtorch_python: its NEEDED entry made every
// dlopen of the library walk libtorch_python's dependency closure (libtorch,
// libtorch_cuda, the NVIDIA libraries), ~70 us per import on torch 2.8 (docs/facts.md,
// "torch_python is resolved at run time"). `import torch` has already loaded it (as
// torch._C's dependency, in that module's local scope, so RTLD_DEFAULT does not see
// it), and TorchDLPackExchangeAPIPtr() resolves the three symbols from it once, by
// name, through torch._C's handle, before it hands out the table (exchange_api.cc,
// ResolveTorchPython()). Only
// those names must then match torch's: the declarations below still give the
// function pointer its type, and the mangled name sits next to the declaration it
// spells. macOS and Windows still link libtorch_python (untested here).
#pragma once

#include "tcde_dlpack.h"  // must precede ATen: see the comment in that header

#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>
#include <torch/csrc/Export.h>

// <Python.h> itself, not torch's <torch/csrc/python_headers.h>: that one also includes
// <frameobject.h> and <structseq.h>, which this library does not use. Every Python API used
// here is in the limited API (Py_LIMITED_API=0x03090000, one abi3 library for every
// CPython) and none reads a PyObject field a free-threaded build (Py_GIL_DISABLED, which
// cannot use the limited API) lays out differently: Py_TYPE() is the only field access.
// glibc's <features.h> (already included through the C++ headers) and pyconfig.h both define
// these two macros; saved and restored as torch's python_headers.h does.
#pragma push_macro("_XOPEN_SOURCE")
#pragma push_macro("_POSIX_C_SOURCE")
#undef _XOPEN_SOURCE
#undef _POSIX_C_SOURCE
#include <Python.h>
#pragma pop_macro("_XOPEN_SOURCE")
#pragma pop_macro("_POSIX_C_SOURCE")

// The torch.Tensor and torch.nn.Parameter type objects (NULL until torch's
// Python module has initialized).
TORCH_PYTHON_API extern PyObject* THPVariableClass;
TORCH_PYTHON_API extern PyObject* ParameterClass;

// A new reference to the Python object of a tensor. 2.4 and 2.5 take the
// tensor by value; 2.6 and later by const reference (2.10 adds an rvalue and a
// PyTypeObject* overload, which this library does not use).
// TCDE_THPVARIABLE_WRAP_SYMBOL is the declaration's Itanium mangling, the name
// libtorch_python.so exports it under (`nm -D`: 2.4.1 the by-value name; 2.6.0,
// 2.8.0, 2.9.1 and 2.10.0-2.15.0 the const-reference one).
#if TCDE_TORCH_AT_LEAST(2, 6)
TORCH_PYTHON_API PyObject* THPVariable_Wrap(const at::TensorBase& var);
#define TCDE_THPVARIABLE_WRAP_SYMBOL "_Z16THPVariable_WrapRKN2at10TensorBaseE"
#else
TORCH_PYTHON_API PyObject* THPVariable_Wrap(at::TensorBase var);
#define TCDE_THPVARIABLE_WRAP_SYMBOL "_Z16THPVariable_WrapN2at10TensorBaseE"
#endif

// Whether the symbols above are looked up at run time (ELF: Linux) rather than
// bound by the linker (macOS, Windows). With 1, nothing may name them but
// tcde::torch_python's resolution: a direct use would be an undefined symbol that
// the Linux ABI audit refuses and that RTLD_NOW loading could not bind.
#if defined(__linux__)
#define TCDE_TORCH_PYTHON_AT_RUN_TIME 1
#else
#define TCDE_TORCH_PYTHON_AT_RUN_TIME 0
#endif

namespace tcde {

// The head of torch's THPVariable, up to the tensor it wraps. 2.4-2.9 hold a
// c10::MaybeOwned<at::Tensor>; 2.10-2.15 hold the at::Tensor itself. A torch
// outside the checked range stops the build here: its layout was never read.
#if !TCDE_TORCH_AT_LEAST(2, 4) || TCDE_TORCH_AT_LEAST(2, 16)
#error "the THPVariable layout of this torch was not checked: csrc/tcde_python.h supports torch 2.4-2.15 (read from 2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0); read torch/csrc/autograd/python_variable.h of the new release and extend this header"
#elif TCDE_TORCH_AT_LEAST(2, 10)
#define TCDE_THPVARIABLE_HOLDS_TENSOR 1
#else
#define TCDE_THPVARIABLE_HOLDS_TENSOR 0
#endif

// The type of THPVariable_Wrap exactly as declared above: the run-time lookup
// calls through a pointer of this type, so its signature cannot drift from the
// declaration whose mangling it looks up.
using WrapFunction = decltype(&::THPVariable_Wrap);

#if TCDE_TORCH_PYTHON_AT_RUN_TIME
// Where the three torch_python symbols are, once ResolveTorchPython()
// (exchange_api.cc) found them in the loaded libtorch_python.so; all NULL until
// then. The table is handed out only after they were found, so no entry point
// runs before. The class variables are read at each use, as a linked build
// reads them.
struct TorchPython {
  PyObject* const* tensor_class;     // &THPVariableClass
  PyObject* const* parameter_class;  // &ParameterClass
  WrapFunction wrap;                 // &THPVariable_Wrap
};
extern TorchPython torch_python;
#endif

inline PyObject* TensorClass() noexcept {
#if TCDE_TORCH_PYTHON_AT_RUN_TIME
  return *torch_python.tensor_class;
#else
  return THPVariableClass;
#endif
}

inline PyObject* ParameterClassObject() noexcept {
#if TCDE_TORCH_PYTHON_AT_RUN_TIME
  return *torch_python.parameter_class;
#else
  return ParameterClass;
#endif
}

// A new reference to the Python object of `t`, or NULL with a Python error set
// (torch's THPVariable_Wrap; it may also throw).
inline PyObject* WrapTensor(const at::Tensor& t) {
#if TCDE_TORCH_PYTHON_AT_RUN_TIME
  return torch_python.wrap(t);
#else
  return ::THPVariable_Wrap(t);
#endif
}

struct PyTensor {
  PyObject_HEAD
#if TCDE_THPVARIABLE_HOLDS_TENSOR
  at::Tensor cdata;
#else
  c10::MaybeOwned<at::Tensor> cdata;
#endif
};

// 1 if the object's real type is torch.Tensor or a subtype of it, 0 if not.
// Exact Tensor/Parameter types first (the common case), then the type's MRO.
// Not isinstance(): PyObject_IsInstance honours a `__class__` attribute, so an
// object whose __class__ claims torch.Tensor would pass and be read as a
// THPVariable it is not (a crash). Only a real subtype has THPVariable's layout.
inline int IsTensor(PyObject* obj) noexcept {
  PyObject* tensor_class = TensorClass();
  if (tensor_class == nullptr) return 0;
  PyTypeObject* type = Py_TYPE(obj);
  auto* tensor_type = reinterpret_cast<PyTypeObject*>(tensor_class);
  if (type == tensor_type || type == reinterpret_cast<PyTypeObject*>(ParameterClassObject())) {
    return 1;
  }
  return PyType_IsSubtype(type, tensor_type);
}

// The tensor inside a Python object IsTensor() accepted.
inline const at::Tensor& UnpackTensor(PyObject* obj) noexcept {
#if TCDE_THPVARIABLE_HOLDS_TENSOR
  return reinterpret_cast<PyTensor*>(obj)->cdata;
#else
  return *reinterpret_cast<PyTensor*>(obj)->cdata;
#endif
}

}  // namespace tcde
