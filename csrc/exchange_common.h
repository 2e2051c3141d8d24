// What every member of the native table shares: the owner of exported and allocated
// memory (ManagedContext), the type check of a Python object, and the translation of a
// C++ exception into a Python one.
// Part of csrc/exchange_api.cc's one translation unit (included there, in this order):
// every file that includes ATen costs the compiler about 20 s and 1.4 GB, so the native
// table's rooms are headers of one .cc rather than .cc files of their own.
#pragma once

namespace {

constexpr const char* kLib = "torch-c-dlpack-ext";

// Owner of an exported or allocated tensor's memory, allocated with ONE operator
// new together with the shape and strides arrays that follow it in memory. The
// arrays are copies, so in-place metadata changes on the Python tensor
// (t.resize_(), t.t_()) cannot alter a DLTensor a consumer is still reading.
//
// It holds what owns the memory, not the tensor: an export holds the tensor's
// c10::Storage, an allocation the c10::DataPtr itself. A tensor reference would
// cost more on torch >= 2.10: taking a second reference to a TensorImpl that has
// a Python object increfs that object through a virtual call, and dropping it
// decrefs it again (docs/facts.md, "What the exchange hot paths rest on"); a
// storage has no Python object unless Python code asked for one. The storage is
// also what the exported `data` points into: t.set_() on the Python tensor after
// the export cannot free memory a consumer still reads.
template <typename Owner>
struct ManagedContext {
  // `managed` is left uninitialized: NewContext() and its callers set every field,
  // and zeroing it first (a `rep stos` per export) was measurable.
  explicit ManagedContext(Owner&& o) noexcept : owner(std::move(o)) {}

  Owner owner;
  DLManagedTensorVersioned managed;

  int64_t* dims() noexcept { return reinterpret_cast<int64_t*>(this + 1); }
};
static_assert(sizeof(ManagedContext<c10::Storage>) % alignof(int64_t) == 0,
              "dims() must be aligned");
static_assert(sizeof(ManagedContext<c10::DataPtr>) % alignof(int64_t) == 0,
              "dims() must be aligned");

template <typename Owner>
void DeleteManagedContext(DLManagedTensorVersioned* self) noexcept {
  if (self == nullptr) return;
  auto* ctx = static_cast<ManagedContext<Owner>*>(self->manager_ctx);
  ctx->~ManagedContext<Owner>();
  ::operator delete(ctx);
}

// A context with room for `ndim` sizes and strides and every field but the
// DLTensor's set. May throw std::bad_alloc (then `owner` is released).
template <typename Owner>
ManagedContext<Owner>* NewContext(Owner&& owner, int32_t ndim) {
  void* raw = ::operator new(sizeof(ManagedContext<Owner>) +
                             2 * static_cast<size_t>(ndim) * sizeof(int64_t));
  auto* ctx = new (raw) ManagedContext<Owner>(std::move(owner));
  DLManagedTensorVersioned& m = ctx->managed;
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.manager_ctx = ctx;
  m.deleter = &DeleteManagedContext<Owner>;
  // Shares the memory, writable: no READ_ONLY and no IS_COPIED, as torch 2.13.
  m.flags = 0;
  return ctx;
}


int RaiseNotATensor(PyObject* obj) {
  if (obj == nullptr) {
    PyErr_Format(PyExc_TypeError, "%s: expected a torch.Tensor, got NULL", kLib);
    return -1;
  }
  // %S of the type ("<class 'int'>"): the limited API has no tp_name (PyTypeObject is
  // opaque there) and PyType_GetName() is 3.11+.
  PyErr_Format(PyExc_TypeError,
               "%s: expected a torch.Tensor, got %S; pass a tensor (e.g. torch.as_tensor(x))",
               kLib, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  return -1;
}

// The tensor of a torch.Tensor object, or NULL with a Python error set
// (TypeError for anything else, or the error of a failed isinstance check).
const at::Tensor* TensorOf(PyObject* obj) {
  const int is_tensor = obj == nullptr ? 0 : tcde::IsTensor(obj);
  if (is_tensor == 1) return &tcde::UnpackTensor(obj);
  if (is_tensor == 0) RaiseNotATensor(obj);
  return nullptr;
}

// Translates the exception being handled into a Python exception and returns
// -1. c10::Error becomes `c10_error_type` (BufferError when exporting: ATen
// refused to describe the tensor). A Python error set before the C++ exception
// (torch's python_error) is kept as it is. Call only from a catch block.
int RaiseCurrentException(PyObject* c10_error_type) noexcept {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_MemoryError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    if (!PyErr_Occurred()) PyErr_SetString(c10_error_type, e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    if (!PyErr_Occurred()) {
      PyErr_Format(PyExc_RuntimeError, "%s: unknown C++ exception", kLib);
    }
  }
  return -1;
}

}  // namespace
