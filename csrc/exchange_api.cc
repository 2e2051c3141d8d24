// The DLPackExchangeAPI table for torch.Tensor, implemented against the ATen
// tensor API shared by torch 2.4-2.9 and 2.13 (not at::toDLPack*, whose output
// differs between versions), so every torch gets the same behaviour.
//
// The export and import members are called by a C consumer with the GIL held; the
// allocator and current_work_stream may be called without it (docs/import.md), and keep a
// Python error only for a caller that held the GIL (tcde_contract.h), as the portable table
// does. No member lets a C++ exception escape: each one catches everything and reports it
// as a Python exception (or through SetError for the allocator).
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

// Why a tensor cannot be exported; kNone when it can.
enum class ExportProblem {
  kNone,
  kLayout,
  kNested,
  kDtype,
  kConj,
  kNeg,
  kUnservedGpu,
  kDevice,
  kNoStorage,
  kWrongDevice,
  kOutsideStorage
};

// The contract's rule (tcde_contract.h) for a tensor whose sizes, strides, offset or
// device Python may have answered (the Python dispatch key: a subclass's
// __torch_dispatch__ with a sizes/strides policy or dispatch_device): `described` lies
// within the C++ storage and on its device. Out of line: the common tensor never gets here.
C10_NOINLINE ExportProblem CheckAgainstStorage(const at::Tensor& t,
                                               const DLTensor& described) noexcept {
  TcdeStorageFacts facts{};
  try {
    const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
    DLDevice storage_device{};
    if (storage && tcde::ToDLDevice(storage.device(), &storage_device)) {
      facts.data = reinterpret_cast<uintptr_t>(storage.data_ptr().get());
      facts.nbytes = static_cast<uint64_t>(storage.nbytes());
      facts.device = storage_device;
      facts.known = facts.data != 0;
    }
  } catch (...) {
    facts.known = 0;  // a storage that refuses to be read has no memory to export
  }
  switch (TcdeCheckDescribed(&described, TcdeItemSize(described.dtype), &facts)) {
    case kTcdeDescribedOk:
      return ExportProblem::kNone;
    case kTcdeDescribedNoStorage:
      return ExportProblem::kNoStorage;
    case kTcdeDescribedWrongDevice:
      return ExportProblem::kWrongDevice;
    case kTcdeDescribedOutside:
      break;
  }
  return ExportProblem::kOutsideStorage;
}

// Fills `out`, with shape and strides borrowed from the tensor (valid while it
// lives and keeps its metadata), or says why DLPack cannot describe the tensor.
// `out` is written only after every check passed and every accessor returned,
// so a failure (or exception) leaves it untouched. The fields are built in
// locals and stored one by one into the caller's struct: no DLTensor is
// assembled on the stack and copied whole, whose wide loads would wait on the
// narrow stores just made (a store-forwarding stall).
ExportProblem Describe(const at::Tensor& t, DLTensor* out) {
  // Order matters: later checks call accessors that throw on the earlier kinds.
  // Nested first: a jagged nested tensor also has a layout of its own (kJagged),
  // and the layout message's remedy (.to_dense()) does not apply to it.
  if (t.is_nested()) return ExportProblem::kNested;
  if (t.layout() != c10::kStrided) return ExportProblem::kLayout;
  DLDataType dtype;
  if (!tcde::ToDLDataType(t.scalar_type(), &dtype)) return ExportProblem::kDtype;
  // DLPack has no conjugate/negative flags: exporting the raw memory would
  // silently hand out the wrong values (torch 2.13 does; we refuse).
  if (t.is_conj()) return ExportProblem::kConj;
  if (t.is_neg()) return ExportProblem::kNeg;
  if (tcde::IsUnservedGpu(t.device().type())) return ExportProblem::kUnservedGpu;
  DLDevice device;
  if (!tcde::ToDLDevice(t.device(), &device)) return ExportProblem::kDevice;
  if (!t.has_storage()) return ExportProblem::kNoStorage;
  const auto ndim = static_cast<int32_t>(t.dim());
  // Like torch 2.13: data is the first element (storage + offset), byte_offset
  // 0, and NULL for tensors without elements.
  void* data = nullptr;
  if (t.numel() != 0) {
    // Fake and functional tensors refuse data_ptr() (a c10::Error naming neither this
    // library nor a remedy): they have no memory to export.
    try {
      data = t.data_ptr();
    } catch (const c10::Error&) {
      return ExportProblem::kNoStorage;
    }
    // Wrapper subclasses and fake tensors have elements but no memory. torch
    // 2.13 exports them with data == NULL, which a consumer would dereference;
    // we refuse instead.
    if (data == nullptr) return ExportProblem::kNoStorage;
  }
  int64_t* shape = const_cast<int64_t*>(t.sizes().data());
  int64_t* strides = const_cast<int64_t*>(t.strides().data());
  // Python may have answered the sizes, strides, offset or device (the cost of the
  // check is one bit test for every other tensor, whose answers are the TensorImpl's).
  if (C10_UNLIKELY(t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python))) {
    const DLTensor described{data, device, ndim, dtype, shape, strides, 0};
    const ExportProblem problem = CheckAgainstStorage(t, described);
    if (problem != ExportProblem::kNone) return problem;
  }
  out->data = data;
  out->device = device;
  out->ndim = ndim;
  out->dtype = dtype;
  out->shape = shape;
  out->strides = strides;
  out->byte_offset = 0;
  return ExportProblem::kNone;
}

// Sets a BufferError (the object is a tensor, DLPack just cannot describe it) naming the problem
// and the fix. Error path only, so building strings here is fine.
int RaiseExportProblem(ExportProblem problem, const at::Tensor& t) {
  switch (problem) {
    case ExportProblem::kLayout: {
      std::ostringstream layout;
      layout << t.layout();
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with layout %s through DLPack, which describes "
                   "only strided tensors; convert it with .to_dense() first",
                   kLib, layout.str().c_str());
      break;
    }
    case ExportProblem::kNested:
      // Neither kind of nested tensor has .to_dense(): name what each has on every
      // torch served (a jagged one has no to_padded_tensor() on torch 2.4).
      if (t.layout() == c10::kJagged) {
        PyErr_Format(PyExc_BufferError,
                     "%s: cannot export a jagged nested tensor through DLPack, which describes "
                     "one strided array; export its packed values and offsets (t.values(), "
                     "t.offsets()) or its components (t.unbind()) one by one",
                     kLib);
      } else {
        PyErr_Format(PyExc_BufferError,
                     "%s: cannot export a nested tensor through DLPack, which describes one "
                     "strided array; export a padded copy (t.to_padded_tensor(0.0)) or its "
                     "components (t.unbind()) one by one",
                     kLib);
      }
      break;
    case ExportProblem::kDtype:
      PyErr_Format(PyExc_BufferError,
                   "%s: dtype %s has no DLPack equivalent; convert the tensor first (e.g. "
                   ".dequantize() for quantized tensors, .to(torch.float32))",
                   kLib, c10::toString(t.scalar_type()));
      break;
    case ExportProblem::kConj:
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with its conjugate bit set (DLPack cannot express "
                   "a lazy conjugation); call .resolve_conj() first",
                   kLib);
      break;
    case ExportProblem::kNeg:
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot export a tensor with its negative bit set (DLPack cannot express "
                   "a lazy negation); call .resolve_neg() first",
                   kLib);
      break;
    case ExportProblem::kUnservedGpu:
      PyErr_Format(PyExc_BufferError,
                   "%s: this is its " TCDE_BACKEND_NAME " build, which does not export tensors on "
                   "device '%s': it cannot report their stream (current_work_stream), and a "
                   "consumer would run on the wrong one. Use the cuda build (the rocm build on "
                   "a ROCm torch): install the wheel that carries it or set "
                   "TORCH_C_DLPACK_EXT_JIT=1; or move the tensor to the CPU (.cpu())",
                   kLib, t.device().str().c_str());
      break;
    case ExportProblem::kDevice:
      PyErr_Format(PyExc_BufferError,
                   "%s: tensors on device '%s' cannot be exported through DLPack; move the "
                   "tensor to a CPU or GPU device first (e.g. .to('cpu'))",
                   kLib, t.device().str().c_str());
      break;
    case ExportProblem::kNoStorage:
      PyErr_Format(PyExc_BufferError,
                   "%s: the tensor has no memory to export (a fake, meta-like or "
                   "wrapper-subclass tensor?); export a tensor backed by real storage",
                   kLib);
      break;
    case ExportProblem::kWrongDevice:
      PyErr_Format(PyExc_BufferError, TcdeDescribedMessage(kTcdeDescribedWrongDevice), kLib);
      break;
    case ExportProblem::kOutsideStorage:
      PyErr_Format(PyExc_BufferError, TcdeDescribedMessage(kTcdeDescribedOutside), kLib);
      break;
    case ExportProblem::kNone:
      break;
  }
  return -1;
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

// An owning DLManagedTensorVersioned for an exportable tensor (`described` from
// Describe(), whose shape and strides it copies): one allocation, holding a
// reference to the tensor's storage until the consumer calls the deleter.
DLManagedTensorVersioned* NewManaged(const at::Tensor& t, const DLTensor& described) {
  const int32_t ndim = described.ndim;
  // Describe() checked has_storage(); unsafe_storage() skips the check that
  // storage() repeats (and that throws for tensors whose storage access throws,
  // none of which Describe() accepts with elements).
  auto* ctx = NewContext(c10::Storage(t.unsafeGetTensorImpl()->unsafe_storage()), ndim);
  int64_t* shape = ctx->dims();
  int64_t* strides = shape + ndim;
  for (int32_t i = 0; i < ndim; ++i) {
    shape[i] = described.shape[i];
    strides[i] = described.strides[i];
  }
  // Field by field, not as one struct copy: see Describe().
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = described.data;
  dl.device = described.device;
  dl.ndim = ndim;
  dl.dtype = described.dtype;
  dl.shape = shape;
  dl.strides = strides;
  dl.byte_offset = described.byte_offset;
  return &ctx->managed;
}

int ManagedTensorFromPyObjectNoSync(void* py_obj, DLManagedTensorVersioned** out) {
  try {
    if (out == nullptr) {
      PyErr_Format(PyExc_ValueError, "%s: managed_tensor_from_py_object_no_sync: out is NULL",
                   kLib);
      return -1;
    }
    *out = nullptr;
    const at::Tensor* tensor = TensorOf(static_cast<PyObject*>(py_obj));
    if (tensor == nullptr) return -1;
    const at::Tensor& t = *tensor;
    DLTensor described{};
    const ExportProblem problem = Describe(t, &described);
    if (problem != ExportProblem::kNone) return RaiseExportProblem(problem, t);
    *out = NewManaged(t, described);
    return 0;
  } catch (...) {
    return RaiseCurrentException(PyExc_BufferError);
  }
}

// The non-owning export of a tensor Python answers for (the Python dispatch key: a
// subclass's __torch_dispatch__ may answer its sizes and strides): the arrays such an
// answer lives in are rewritten by the next one, so a consumer converting f(x, x) would
// find the first DLTensor changed. It gets copies that live as long as the object
// (tcde_borrowed_dims.h, shared with the portable table). Out of line: plain tensors
// never get here.
C10_NOINLINE int DescribeAnsweredByPython(PyObject* obj, const at::Tensor& t, DLTensor* out) {
  DLTensor described{};
  const ExportProblem problem = Describe(t, &described);
  if (problem != ExportProblem::kNone) return RaiseExportProblem(problem, t);
  // One dict for the process, made on first use (the GIL is held here); never freed.
  static PyObject* const cache = PyDict_New();
  if (cache == nullptr) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
  }
  const int64_t* dims = TcdeBorrowedDims(cache, obj, &described);
  if (dims == nullptr) return -1;
  described.shape = const_cast<int64_t*>(dims);
  described.strides = const_cast<int64_t*>(dims) + described.ndim;
  *out = described;
  return 0;
}

int DLTensorFromPyObjectNoSync(void* py_obj, DLTensor* out) {
  try {
    if (out == nullptr) {
      PyErr_Format(PyExc_ValueError, "%s: dltensor_from_py_object_no_sync: out is NULL", kLib);
      return -1;
    }
    const at::Tensor* tensor = TensorOf(static_cast<PyObject*>(py_obj));
    if (tensor == nullptr) return -1;
    const at::Tensor& t = *tensor;
    // Non-owning: shape and strides stay valid while the caller holds the
    // object and does not change its metadata, the contract of this entry point.
    if (C10_LIKELY(!t.unsafeGetTensorImpl()->key_set().has(c10::DispatchKey::Python))) {
      const ExportProblem problem = Describe(t, out);
      if (problem != ExportProblem::kNone) return RaiseExportProblem(problem, t);
      return 0;
    }
    return DescribeAnsweredByPython(static_cast<PyObject*>(py_obj), t, out);
  } catch (...) {
    return RaiseCurrentException(PyExc_BufferError);
  }
}

// The storage deleter of an import while its tensor is being built: none. If
// building fails, the storage dies without touching the producer's tensor (a
// failed import leaves it with the caller, deleter not run); DeleteImported is
// swapped in once the tensor exists (c10::DataPtr::compare_exchange_deleter).
void KeepImported(void* /*ctx*/) noexcept {}

// Storage context deleter of an imported tensor: hands the memory back to its
// producer, exactly once, when torch frees the storage.
void DeleteImported(void* ctx) noexcept {
  auto* managed = static_cast<DLManagedTensorVersioned*>(ctx);
  if (managed->deleter != nullptr) managed->deleter(managed);
}

// Ownership rule: on failure (-1) ownership has NOT been taken and the deleter
// has NOT been called; the caller still owns `src` and must delete it. This is
// what torch 2.13's own implementation does for bad dtypes and devices (its
// deleter is not called), and it is the only rule that lets a caller clean up
// without risking a double free.
int ManagedTensorToPyObjectNoSync(DLManagedTensorVersioned* src, void** out_py) {
  try {
    if (src == nullptr || out_py == nullptr) {
      PyErr_Format(PyExc_ValueError,
                   "%s: managed_tensor_to_py_object_no_sync: tensor and out must not be NULL",
                   kLib);
      return -1;
    }
    *out_py = nullptr;
    const DLTensor& dl = src->dl_tensor;
    // The contract's preamble (tcde_contract.h), with this build's dtype and device
    // answers in between. A different major version may have a different layout after
    // `flags`. torch has no read-only tensors: importing read-only memory (a constant
    // buffer, a read-only mapping) as a writable tensor would let any in-place op write to
    // it. torch 2.13 ignores the flag; we refuse. IS_COPIED (the producer made a copy)
    // and the sub-byte padding flag need nothing.
    if (src->version.major != DLPACK_MAJOR_VERSION) {
      return TcdeRaiseWrongMajor(kLib, static_cast<unsigned>(src->version.major));
    }
    if ((src->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0) {
      return TcdeRaiseBadImport(kLib, TCDE_IMPORT_READ_ONLY, &dl);
    }
    c10::ScalarType scalar_type{};
    if (!tcde::FromDLDataType(dl.dtype, &scalar_type)) {
      return TcdeRaiseBadImport(kLib, TCDE_IMPORT_NO_DTYPE, &dl);
    }
    if (const char* backend = tcde::BackendServing(dl.device.device_type)) {
      // torch itself would make a tensor of it on a device none of its kernels run on
      // ("cuda" in its CPU build, "hip" in a CUDA one) or refuse it (ROCm, kDLCUDA).
      PyErr_Format(PyExc_BufferError,
                   "%s: cannot import a DLPack tensor on device type %d id %d with its "
                   TCDE_BACKEND_NAME " build: it is %s memory, which this torch runs no "
                   "kernels on; use the %s build on a %s torch (install the wheel that "
                   "carries it or set TORCH_C_DLPACK_EXT_JIT=1). The DLManagedTensorVersioned "
                   "was not consumed and its deleter was not called",
                   kLib, static_cast<int>(dl.device.device_type),
                   static_cast<int>(dl.device.device_id), backend, backend, backend);
      return -1;
    }
    c10::Device device(c10::DeviceType::CPU);
    if (!tcde::FromDLDevice(dl.device, &device)) {
      return TcdeRaiseBadImport(kLib, TCDE_IMPORT_NO_DEVICE, &dl);
    }
    // An element-aligned byte_offset is a storage offset, as in torch 2.13: the
    // storage starts at `data` and covers the offset plus the view's extent.
    // (Not at::TensorMaker's storage_offset(): in the torch releases this library
    // serves it adds the offset to the storage size in elements, not bytes, a
    // too-small storage that views, copies and torch.save read past.) torch 2.13
    // refuses an unaligned offset; so do we: the elements would be misaligned.
    const auto itemsize = static_cast<uint64_t>(c10::elementSize(scalar_type));
    uint64_t storage_elements = 0;
    int empty_view = 0;
    if (const char* problem =
            TcdeImportLayoutProblem(&dl, itemsize, &storage_elements, &empty_view)) {
      return TcdeRaiseBadImport(kLib, problem, &dl);
    }
    const bool empty = empty_view != 0;
    const at::IntArrayRef sizes(dl.shape, static_cast<size_t>(dl.ndim));
    const uint64_t storage_offset = dl.byte_offset / itemsize;
    // Built directly (what at::for_blob(...).make_tensor() does, without the
    // builder, its dispatch-key and tracer guards, which need nothing here, and
    // its second pass over the sizes): a storage from `data` covering the offset
    // and the view's whole extent, then the view on it. A view without elements
    // gets an empty storage and no offset: its offset addresses nothing, and a
    // storage of that size (torch 2.13 makes one) would have torch.save and
    // copy.deepcopy read memory the producer never provided.
    const int64_t offset = empty ? 0 : static_cast<int64_t>(storage_offset);
    const size_t nbytes = empty ? 0 : static_cast<size_t>(storage_elements * itemsize);
    c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                         c10::DataPtr(dl.data, src, &KeepImported, device),
                         /*allocator=*/nullptr, /*resizable=*/false);
    c10::StorageImpl* storage_impl = storage.unsafeGetStorageImpl();
    // FromDLDevice() makes CPU or CUDA devices only (a ROCm torch's HIP devices are
    // "cuda"): their dispatch keys, as TensorOptions::computeDispatchKey() gives them.
    const c10::DispatchKeySet keys(device.is_cpu() ? c10::DispatchKey::CPU
                                                   : c10::DispatchKey::CUDA);
    at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), keys, c10::scalarTypeToTypeMeta(scalar_type));
    c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
    if (dl.strides != nullptr && dl.ndim > 0) {
      impl->set_sizes_and_strides(sizes, at::IntArrayRef(dl.strides, static_cast<size_t>(dl.ndim)),
                                  offset);
    } else if (offset == 0) {
      // A NULL strides array (allowed before DLPack 1.2) means compact row-major.
      impl->set_sizes_contiguous(sizes);
    } else {
      c10::SmallVector<int64_t, 8> strides(static_cast<size_t>(dl.ndim));
      int64_t step = 1;
      for (int32_t i = dl.ndim - 1; i >= 0; --i) {
        strides[i] = step;
        // (checked above not to overflow; the first size is never multiplied in)
        if (i > 0) step *= std::max<int64_t>(dl.shape[i], 1);
      }
      impl->set_sizes_and_strides(sizes, strides, offset);
    }
    // The tensor exists: from here its storage hands `src` back to the producer.
    c10::DataPtr& data_ptr = storage_impl->mutable_data_ptr();
    if (!data_ptr.compare_exchange_deleter(&KeepImported, &DeleteImported)) {
      PyErr_Format(PyExc_RuntimeError, "%s: the imported storage lost its deleter", kLib);
      return -1;
    }
    // If wrapping fails, detach our deleter again before `tensor` dies, so the
    // failure still leaves `src` with the caller.
    PyObject* wrapped = nullptr;
    try {
      wrapped = tcde::WrapTensor(tensor);
    } catch (...) {
      RaiseCurrentException(PyExc_RuntimeError);
    }
    if (wrapped == nullptr) {
      (void)data_ptr.compare_exchange_deleter(&DeleteImported, &KeepImported);
      return -1;
    }
    *out_py = wrapped;
    return 0;
  } catch (...) {
    // Building the tensor failed; its storage had KeepImported: not consumed.
    return RaiseCurrentException(PyExc_BufferError);
  }
}

using SetErrorFn = void (*)(void* error_ctx, const char* kind, const char* message);

int AllocatorFail(DLManagedTensorVersioned** out, void* error_ctx, SetErrorFn set_error,
                  const char* kind, const char* message) noexcept {
  if (out != nullptr) *out = nullptr;
  if (set_error != nullptr) set_error(error_ctx, kind, message);
  return -1;
}

// Whether at::empty fills new memory: torch.use_deterministic_algorithms(True)
// with torch.utils.deterministic.fill_uninitialized_memory (its default) makes
// it fill floats with NaN and integers with their maximum. Then the allocator
// goes through at::empty, so its memory holds what torch's own table gives
// (docs/facts.md, "What the exchange hot paths rest on").
// Read per call: Python can switch the mode at any time.
bool FillsUninitializedMemory() {
  const at::Context& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

// Sizes at::empty would refuse: a negative size, or more than int64 holds.
enum class LayoutProblem { kNone, kNegative, kOverflow };

// The contiguous layout at::empty gives `sizes` (copied into `shape`), with the
// strides written to `strides` and the byte size to `*nbytes`; c10's own rules
// decide what it refuses (c10/core/TensorImpl.h: safe_compute_numel and
// empty_tensor_restride; computeStorageNbytesContiguous): the element count,
// multiplied left to right (an overflow before a zero size still counts), the
// byte size, and every row-major stride (zero sizes count as one) must fit in
// int64. `*bad_dim` names a negative size.
LayoutProblem ContiguousLayout(const int64_t* sizes, int32_t ndim, uint64_t itemsize,
                               int64_t* shape, int64_t* strides, uint64_t* nbytes,
                               int32_t* bad_dim) noexcept {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1;
  bool overflow = false;
  for (int32_t i = 0; i < ndim; ++i) {
    const int64_t size = sizes[i];
    if (size < 0) {
      *bad_dim = i;
      return LayoutProblem::kNegative;
    }
    shape[i] = size;
    overflow |= TcdeMulOverflows(numel, static_cast<uint64_t>(size), &numel);
  }
  overflow |= numel > kMax || TcdeMulOverflows(numel, itemsize, nbytes) || *nbytes > kMax;
  uint64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    strides[i] = static_cast<int64_t>(stride);
    if (i > 0) {
      overflow |= TcdeMulOverflows(stride, static_cast<uint64_t>(std::max<int64_t>(shape[i], 1)),
                               &stride) ||
                  stride > kMax;
    }
  }
  return overflow ? LayoutProblem::kOverflow : LayoutProblem::kNone;
}

void DeleteStorageReference(void* storage) noexcept { delete static_cast<c10::Storage*>(storage); }

// The memory of a tensor at::empty (or the backend's own empty) just made, as a
// DataPtr holding a reference to its storage. Throws std::runtime_error (not a
// c10::Error: this is no allocation failure) if the tensor is not plain memory
// of the requested layout: a Python mode may answer at::empty.
c10::DataPtr MemoryOf(const at::TensorBase& t, const c10::Device& device,
                      c10::ScalarType scalar_type, at::IntArrayRef sizes, uint64_t nbytes) {
  if (!t.defined() || t.device() != device || t.scalar_type() != scalar_type ||
      t.sizes() != sizes || !t.is_contiguous() || !t.has_storage()) {
    throw std::runtime_error(
        "torch-c-dlpack-ext allocator: at::empty returned a tensor that is not plain memory "
        "of the requested dtype, device and shape (is a Python mode active?)");
  }
  const c10::Storage& storage = t.unsafeGetTensorImpl()->unsafe_storage();
  void* data = nbytes == 0 ? nullptr : t.data_ptr();
  const auto offset_bytes = static_cast<uint64_t>(t.storage_offset()) * t.element_size();
  if (nbytes != 0 && (data == nullptr || storage.nbytes() < offset_bytes + nbytes)) {
    throw std::runtime_error(
        "torch-c-dlpack-ext allocator: at::empty returned a tensor without the memory it "
        "describes (is a Python mode active?)");
  }
  return c10::DataPtr(data, new c10::Storage(storage), &DeleteStorageReference, device);
}

#if defined(TCDE_BACKEND_CUDA)
// CUDA memory from the allocator at::empty takes it from, with at::detail::empty_cuda's
// own steps (aten/src/ATen/cuda/EmptyTensor.cpp; the same in torch 2.6.0's and 2.9.1's
// source and in 2.11's and 2.15's libtorch_cuda): the lazy CUDA init (which also
// initializes the caching allocator), a device guard (the caching allocator serves the
// current device, on its current stream), and the allocator at::cuda::getCUDADeviceAllocator()
// returns, c10's caching allocator or the one torch.cuda.memory.change_current_allocator
// installed. Without the dispatcher, a tensor and its storage, which at::empty made ours
// cost what torch's own table costs (1,055 vs 1,029 ns for float32[16] on an H200,
// docs/facts.md "What torch's own members do on CUDA"). Only libc10_cuda and libtorch_cpu,
// both already linked (at::detail::empty_cuda itself would link libtorch_cuda, whose
// NEEDED entry every load of the library paid for: docs/facts.md, "torch_python is
// resolved at run time").
c10::DataPtr AllocateCudaMemory(c10::DeviceIndex index, uint64_t nbytes) {
#if TCDE_TORCH_AT_LEAST(2, 6)
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
#else
  at::globalContext().lazyInitCUDA();  // lazyInitDevice() arrived in 2.6
#endif
  // c10's DeviceGuard (the registered CUDA guard, through its virtual interface), as
  // empty_cuda uses it: c10::cuda::CUDAGuard's inline code would call libcudart.
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, index));
  return c10::cuda::CUDACachingAllocator::get()->allocate(static_cast<size_t>(nbytes));
}
#endif

// Memory for a contiguous tensor of `sizes`, from the allocator at::empty would
// use. Host memory (the common case) comes from c10::GetCPUAllocator(), as in
// at::detail::empty_cpu, and CUDA memory from the caching allocator
// (AllocateCudaMemory), without the dispatcher and without building a tensor only to
// take its memory. The deterministic fill (see FillsUninitializedMemory) and ROCm
// memory go through at::empty: its kernel fills, and the ROCm build's direct path
// (HIP's caching allocator behind its CUDA masquerade) cannot be compiled here (no
// ROCm torch's headers are published on PyPI).
c10::DataPtr AllocateMemory(bool host, const c10::Device& device, c10::ScalarType scalar_type,
                            at::IntArrayRef sizes, uint64_t nbytes) {
  if (C10_LIKELY(!FillsUninitializedMemory())) {
    if (C10_LIKELY(host)) return c10::GetCPUAllocator()->allocate(nbytes);
#if defined(TCDE_BACKEND_CUDA)
    return AllocateCudaMemory(device.index(), nbytes);
#endif
  }
  // The overload with explicit options: the same operator call as with
  // TensorOptions, without assembling and re-checking a TensorOptions first.
  return MemoryOf(at::empty(sizes, scalar_type, std::nullopt, device, std::nullopt, std::nullopt),
                  device, scalar_type, sizes, nbytes);
}

using AllocatedContext = ManagedContext<c10::DataPtr>;

struct AllocatedContextDeleter {
  void operator()(AllocatedContext* ctx) const noexcept {
    DeleteManagedContext<c10::DataPtr>(&ctx->managed);
  }
};

// Errors go through SetError, not the Python error indicator: the consumer
// decides how to surface them. Kinds: ValueError for a prototype torch cannot
// represent (its dtype, its device, a negative size, or an element count, byte
// size or stride beyond int64, which at::empty refuses with a RuntimeError),
// MemoryError when the memory cannot be allocated (the CPU allocator's failure,
// which c10 reports as a plain c10::Error, c10::OutOfMemoryError, std::bad_alloc),
// RuntimeError otherwise (for example a CUDA error).
int ManagedTensorAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                           SetErrorFn set_error) {
  char message[256];
  try {
    if (prototype == nullptr || out == nullptr) {
      return AllocatorFail(out, error_ctx, set_error, "ValueError",
                           "torch-c-dlpack-ext allocator: prototype and out must not be NULL");
    }
    *out = nullptr;
    c10::ScalarType scalar_type{};
    if (!tcde::FromDLDataType(prototype->dtype, &scalar_type)) {
      std::snprintf(message, sizeof(message),
                    "torch-c-dlpack-ext allocator: DLPack dtype (code=%u, bits=%u, lanes=%u) has "
                    "no torch equivalent; request a dtype torch supports",
                    static_cast<unsigned>(prototype->dtype.code),
                    static_cast<unsigned>(prototype->dtype.bits),
                    static_cast<unsigned>(prototype->dtype.lanes));
      return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
    }
    // Host memory is the common case: only other device types need the device checks.
    const bool host = prototype->device.device_type == kDLCPU;
    c10::Device device(c10::DeviceType::CPU);
    if (!host) {
      if (const char* backend = tcde::BackendServing(prototype->device.device_type)) {
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: cannot allocate on DLPack device type %d id "
                      "%d with its " TCDE_BACKEND_NAME " build, which serves no such device; use "
                      "the %s build",
                      static_cast<int>(prototype->device.device_type),
                      static_cast<int>(prototype->device.device_id), backend);
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      }
      if (!tcde::FromDLDevice(prototype->device, &device)) {
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: cannot allocate on DLPack device type %d id "
                      "%d with this library (a " TCDE_BACKEND_NAME " build)",
                      static_cast<int>(prototype->device.device_type),
                      static_cast<int>(prototype->device.device_id));
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      }
    }
    const int32_t ndim = prototype->ndim;
    if (ndim < 0 || (ndim > 0 && prototype->shape == nullptr)) {
      return AllocatorFail(out, error_ctx, set_error, "ValueError",
                           "torch-c-dlpack-ext allocator: prototype ndim is negative or its "
                           "shape is NULL");
    }
    // One allocation for the context, its shape and its strides; the memory follows.
    std::unique_ptr<AllocatedContext, AllocatedContextDeleter> ctx(
        NewContext(c10::DataPtr(), ndim));
    int64_t* shape = ctx->dims();
    int64_t* strides = shape + ndim;
    uint64_t nbytes = 0;
    int32_t bad_dim = 0;
    const auto itemsize = static_cast<uint64_t>(c10::elementSize(scalar_type));
    switch (ContiguousLayout(prototype->shape, ndim, itemsize, shape, strides, &nbytes,
                             &bad_dim)) {
      case LayoutProblem::kNone:
        break;
      case LayoutProblem::kNegative:
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: prototype shape[%d] is %lld; sizes must be "
                      ">= 0",
                      static_cast<int>(bad_dim), static_cast<long long>(prototype->shape[bad_dim]));
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
      case LayoutProblem::kOverflow:
        std::snprintf(message, sizeof(message),
                      "torch-c-dlpack-ext allocator: a contiguous tensor of this prototype's %d "
                      "sizes and %llu-byte elements has an element count, byte size or stride "
                      "beyond int64, which torch cannot represent; request a smaller shape",
                      static_cast<int>(ndim), static_cast<unsigned long long>(itemsize));
        return AllocatorFail(out, error_ctx, set_error, "ValueError", message);
    }
    try {
      ctx->owner = AllocateMemory(host, device, scalar_type,
                                  at::IntArrayRef(shape, static_cast<size_t>(ndim)), nbytes);
    } catch (const c10::OutOfMemoryError& e) {
      return AllocatorFail(out, error_ctx, set_error, "MemoryError", e.what_without_backtrace());
    } catch (const c10::Error& e) {
      // The sizes were checked above: on host memory, the allocator failing is the one
      // c10::Error left (DefaultCPUAllocator: "can't allocate memory").
      return AllocatorFail(out, error_ctx, set_error, host ? "MemoryError" : "RuntimeError",
                           e.what_without_backtrace());
    }
    DLTensor& dl = ctx->managed.dl_tensor;
    // NULL for a tensor without elements, as exports have it.
    dl.data = nbytes == 0 ? nullptr : ctx->owner.get();
    dl.device = prototype->device;
    if (host) dl.device.device_id = 0;  // as an export of a CPU tensor reports it
    dl.ndim = ndim;
    dl.dtype = prototype->dtype;
    dl.shape = shape;
    dl.strides = strides;
    dl.byte_offset = 0;
    *out = &ctx.release()->managed;
    return 0;
  } catch (const c10::OutOfMemoryError& e) {
    return AllocatorFail(out, error_ctx, set_error, "MemoryError", e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError", e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return AllocatorFail(out, error_ctx, set_error, "MemoryError",
                         "torch-c-dlpack-ext allocator: out of host memory");
  } catch (const std::exception& e) {
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError", e.what());
  } catch (...) {
    return AllocatorFail(out, error_ctx, set_error, "RuntimeError",
                         "torch-c-dlpack-ext allocator: unknown C++ exception");
  }
}

#if !defined(TCDE_BACKEND_CPU)
// The backend's current stream on device `index` (-1: the current device).
void* CurrentGpuStream(c10::DeviceIndex index) {
#if defined(TCDE_BACKEND_CUDA)
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(index).stream());
#else
  return static_cast<void*>(c10::hip::getCurrentHIPStream(index).stream());
#endif
}
#endif

// current_work_stream for everything but a GPU stream this build answers (see
// CurrentWorkStream): NULL for host memory, which has no stream; an error for a GPU
// device type whose stream this build does not answer (tcde::AnswersStream: torch's own
// answer there is NULL, which a consumer takes for the default stream); NULL for other
// device types in the CPU build (as torch's CPU build answers them) and an error in a
// GPU build, which knows only its own GPU's streams; an error for a NULL `out` and for
// device ids c10 cannot index (torch's own would write through NULL, or take the id
// modulo 256: another device's stream). Out of line: the fast path stays small.
C10_NOINLINE int CurrentWorkStreamOther(DLDeviceType device_type, int32_t device_id,
                                        void** out) noexcept {
  if (out == nullptr) {
    if (!TcdeCallerHoldsGil()) return -1;  // no error without the GIL (tcde_contract.h)
    PyErr_Format(PyExc_ValueError, "%s: current_work_stream: out is NULL", kLib);
    return -1;
  }
  *out = nullptr;
  if (device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost ||
      device_type == kDLCUDAManaged) {
    return 0;
  }
  if (const char* backend = tcde::StreamBackendServing(device_type)) {
    if (!TcdeCallerHoldsGil()) return -1;
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: device type %d is a GPU whose stream its "
                 TCDE_BACKEND_NAME " build (torch %d.%d) does not know (NULL would put the "
                 "consumer on the default stream, unordered against torch's work); use the "
                 "%s build on a %s torch (install the wheel that carries it or set "
                 "TORCH_C_DLPACK_EXT_JIT=1)",
                 kLib, static_cast<int>(device_type), TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
                 backend, backend);
    return -1;
  }
#if defined(TCDE_BACKEND_CPU)
  (void)device_id;
  return 0;
#else
  if (!TcdeCallerHoldsGil()) return -1;
  if (!tcde::AnswersStream(device_type)) {
    PyErr_Format(PyExc_ValueError,
                 "%s: current_work_stream: device type %d is not a device this library was "
                 "built for (a " TCDE_BACKEND_NAME " build)",
                 kLib, static_cast<int>(device_type));
    return -1;
  }
  PyErr_Format(PyExc_ValueError,
               "%s: current_work_stream: invalid device id %d; pass -1 (the current device) "
               "or a device index from 0 to %d",
               kLib, static_cast<int>(device_id),
               static_cast<int>(std::numeric_limits<c10::DeviceIndex>::max()));
  return -1;
#endif
}

// The call a consumer makes on every kernel launch. torch's own (CUDA build, 2.10-2.12)
// compares the type and calls getCurrentCUDAStream() (2.13+: at::accelerator's lookups
// first); ours makes three tests before the same call, each needed for safety: `out` not
// NULL, a device type whose stream this build answers, an id c10 can index. All else is
// CurrentWorkStreamOther's.
int CurrentWorkStream(DLDeviceType device_type, int32_t device_id, void** out) {
#if !defined(TCDE_BACKEND_CPU)
  if (C10_LIKELY(out != nullptr && tcde::AnswersStream(device_type) &&
                 tcde::FitsDeviceIndex(device_id))) {
    try {
      *out = CurrentGpuStream(static_cast<c10::DeviceIndex>(device_id));
      return 0;
    } catch (...) {
      *out = nullptr;
      // (No GIL: the exception's text has nowhere to go; torch's own python_error
      // already holds whatever Python error it caught.)
      if (!TcdeCallerHoldsGil()) return -1;
      return RaiseCurrentException(PyExc_RuntimeError);
    }
  }
#else
  // A CPU build's common call: host memory, no stream.
  if (C10_LIKELY(out != nullptr && device_type == kDLCPU)) {
    *out = nullptr;
    return 0;
  }
#endif
  return CurrentWorkStreamOther(device_type, device_id, out);
}

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
