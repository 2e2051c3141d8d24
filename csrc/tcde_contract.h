/* The contract both tables keep, written once: the native table (csrc/exchange_*.cc,
 * C++17) and the portable one (csrc/portable/, C11) include this header. It holds
 *
 *   - the dtype list (TCDE_DTYPES_*: an X-macro list; the Python test tables are checked
 *     against it by tests/unit/test_dtype_list.py);
 *   - checked arithmetic (overflow) and the import's storage rule (TcdeStorageElements);
 *   - the export's memory rule (TcdeCheckDescribed): an export never describes a byte
 *     outside the storage it holds, nor another device than that storage's;
 *   - the import preamble (TcdeImportLayoutProblem) and its messages;
 *   - the no-GIL error rule (TcdeKeepErrorFor).
 *
 * Include it after a dlpack.h (>= 1.2), and after Python.h for the part that calls Python
 * (again, where it was first included before Python.h); it includes nothing of torch. Every
 * function is static inline: each translation unit gets its own copy, no symbol leaves. */
#ifndef TCDE_CONTRACT_H_
#define TCDE_CONTRACT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TCDE_NOEXCEPT noexcept
#else
#define TCDE_NOEXCEPT
#endif

/* ------------------------------------------------------------------------ */
/* dtypes                                                                   */
/* ------------------------------------------------------------------------ */

/* Flags of a dtype (the last column of the lists below). */
enum {
  kTcdeDtypeComplex = 1,  /* can carry the conjugate bit */
  kTcdeDtypeByteView = 2, /* one byte per element; torch < 2.10 may not exchange it itself */
  kTcdeDtypeExportOnly = 4, /* exported as another type's code (sub-byte ints), never imported */
  /* torch < 2.10 refuses to export it (no DLPack code in its header), and its refusal
   * leaks (docs/facts.md): such exports go straight to the uint8 view. */
  kTcdeDtypeOldTorchRefuses = 8
};

/* Every torch dtype DLPack can express, as X(torch attribute, c10::ScalarType, DLPack
 * code, bits, lanes, flags), grouped by the torch release whose ATen has the scalar type
 * (the native table compiles a group only against a torch that has it; the portable table
 * skips a dtype the running torch lacks). Sub-byte integers are stored one element per
 * byte: exported as 8-bit (u)ints, as torch 2.13 does. One FP4 byte holds two values:
 * bits 4, lanes 2. */
#define TCDE_DTYPES_ALWAYS(X)                                                               \
  X(float32, Float, kDLFloat, 32, 1, 0)                                                     \
  X(float64, Double, kDLFloat, 64, 1, 0)                                                    \
  X(float16, Half, kDLFloat, 16, 1, 0)                                                      \
  X(bfloat16, BFloat16, kDLBfloat, 16, 1, 0)                                                \
  X(int64, Long, kDLInt, 64, 1, 0)                                                          \
  X(int32, Int, kDLInt, 32, 1, 0)                                                           \
  X(int16, Short, kDLInt, 16, 1, 0)                                                         \
  X(int8, Char, kDLInt, 8, 1, 0)                                                            \
  X(uint8, Byte, kDLUInt, 8, 1, 0)                                                          \
  X(bool, Bool, kDLBool, 8, 1, 0)                                                           \
  X(uint16, UInt16, kDLUInt, 16, 1, 0)                                                      \
  X(uint32, UInt32, kDLUInt, 32, 1, 0)                                                      \
  X(uint64, UInt64, kDLUInt, 64, 1, 0)                                                      \
  X(complex32, ComplexHalf, kDLComplex, 32, 1, kTcdeDtypeComplex)                           \
  X(complex64, ComplexFloat, kDLComplex, 64, 1, kTcdeDtypeComplex)                          \
  X(complex128, ComplexDouble, kDLComplex, 128, 1, kTcdeDtypeComplex)                       \
  X(float8_e5m2, Float8_e5m2, kDLFloat8_e5m2, 8, 1,                                         \
    kTcdeDtypeByteView | kTcdeDtypeOldTorchRefuses)                                         \
  X(float8_e4m3fn, Float8_e4m3fn, kDLFloat8_e4m3fn, 8, 1,                                   \
    kTcdeDtypeByteView | kTcdeDtypeOldTorchRefuses)                                         \
  X(float8_e5m2fnuz, Float8_e5m2fnuz, kDLFloat8_e5m2fnuz, 8, 1,                             \
    kTcdeDtypeByteView | kTcdeDtypeOldTorchRefuses)                                         \
  X(float8_e4m3fnuz, Float8_e4m3fnuz, kDLFloat8_e4m3fnuz, 8, 1,                             \
    kTcdeDtypeByteView | kTcdeDtypeOldTorchRefuses)                                         \
  X(uint1, UInt1, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                 \
  X(uint2, UInt2, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                 \
  X(uint3, UInt3, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                 \
  X(uint4, UInt4, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                 \
  X(uint5, UInt5, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                 \
  X(uint6, UInt6, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                 \
  X(uint7, UInt7, kDLUInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)
/* ATen 2.6 and later. */
#define TCDE_DTYPES_SINCE_2_6(X)                                                            \
  X(int1, Int1, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                    \
  X(int2, Int2, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                    \
  X(int3, Int3, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                    \
  X(int4, Int4, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                    \
  X(int5, Int5, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                    \
  X(int6, Int6, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)                    \
  X(int7, Int7, kDLInt, 8, 1, kTcdeDtypeByteView | kTcdeDtypeExportOnly)
/* ATen 2.7 and later. */
#define TCDE_DTYPES_SINCE_2_7(X)                                                            \
  X(float8_e8m0fnu, Float8_e8m0fnu, kDLFloat8_e8m0fnu, 8, 1,                                \
    kTcdeDtypeByteView | kTcdeDtypeOldTorchRefuses)
/* ATen 2.8 and later. */
#define TCDE_DTYPES_SINCE_2_8(X)                                                            \
  X(float4_e2m1fn_x2, Float4_e2m1fn_x2, kDLFloat4_e2m1fn, 4, 2,                             \
    kTcdeDtypeByteView | kTcdeDtypeOldTorchRefuses)

/* Every group: what the portable table knows (it asks the running torch which exist). */
#define TCDE_DTYPES(X) \
  TCDE_DTYPES_ALWAYS(X) TCDE_DTYPES_SINCE_2_6(X) TCDE_DTYPES_SINCE_2_7(X) TCDE_DTYPES_SINCE_2_8(X)

/* Bytes per element of a DLPack dtype (an FP4 pair: one byte). */
static inline uint64_t TcdeItemSize(DLDataType dtype) TCDE_NOEXCEPT {
  return ((uint64_t)dtype.bits * dtype.lanes + 7) / 8;
}

/* ------------------------------------------------------------------------ */
/* Checked arithmetic                                                       */
/* ------------------------------------------------------------------------ */

/* 1 when a * b passes uint64, else 0 with *product set. */
static inline int TcdeMulOverflows(uint64_t a, uint64_t b, uint64_t* product) TCDE_NOEXCEPT {
  if (a != 0 && b > UINT64_MAX / a) return 1;
  *product = a * b;
  return 0;
}

/* 1 when a + b passes uint64 (*sum is then wrapped), else 0. */
static inline int TcdeAddOverflows(uint64_t a, uint64_t b, uint64_t* sum) TCDE_NOEXCEPT {
  *sum = a + b;
  return *sum < a;
}

/* ------------------------------------------------------------------------ */
/* The export's memory rule                                                 */
/* ------------------------------------------------------------------------ */

/* What the storage an export holds says of itself, read from the C++ storage and never
 * from the tensor: where its memory starts, how many bytes it has, its device. `known` 0:
 * the tensor has no data-bearing storage (a wrapper subclass, a fake or meta tensor). */
typedef struct {
  int known;
  uintptr_t data;
  uint64_t nbytes;
  DLDevice device;
} TcdeStorageFacts;

/* Why an export breaks the rule; kTcdeDescribedOk when it keeps it. */
typedef enum {
  kTcdeDescribedOk = 0,
  kTcdeDescribedNoStorage,  /* elements, but no data-bearing storage */
  kTcdeDescribedWrongDevice, /* labelled with another device than its storage's */
  kTcdeDescribedOutside     /* reaches bytes outside its storage (or past uint64) */
} TcdeDescribedProblem;

/* The rule every export keeps: the bytes `dl` describes (from the lowest to the highest
 * element sizes x strides + byte_offset reach, in elements of `itemsize` bytes) lie within
 * `storage`, and `dl`'s device is the storage's. An export without elements describes no
 * memory and always passes. */
static inline TcdeDescribedProblem TcdeCheckDescribed(const DLTensor* dl, uint64_t itemsize,
                                                      const TcdeStorageFacts* storage)
    TCDE_NOEXCEPT {
  for (int32_t i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] == 0) return kTcdeDescribedOk;
  }
  if (!storage->known || dl->data == NULL) return kTcdeDescribedNoStorage;
  if (dl->device.device_type != storage->device.device_type ||
      (dl->device.device_type != kDLCPU && dl->device.device_id != storage->device.device_id)) {
    return kTcdeDescribedWrongDevice;
  }
  /* Offsets from the first element's address, in elements: `below` the lowest one
   * (negative strides), `above` the highest one. */
  uint64_t below = 0;
  uint64_t above = 0;
  for (int32_t i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] < 0) return kTcdeDescribedOutside;
    const int64_t stride = dl->strides != NULL ? dl->strides[i] : 0;
    const uint64_t magnitude = stride < 0 ? (uint64_t)0 - (uint64_t)stride : (uint64_t)stride;
    uint64_t step = 0;
    if (TcdeMulOverflows((uint64_t)(dl->shape[i] - 1), magnitude, &step)) {
      return kTcdeDescribedOutside;
    }
    if (TcdeAddOverflows(stride < 0 ? below : above, step, stride < 0 ? &below : &above)) {
      return kTcdeDescribedOutside;
    }
  }
  if (dl->strides == NULL) {
    /* Row-major: the elements follow each other. */
    uint64_t numel = 1;
    for (int32_t i = 0; i < dl->ndim; ++i) {
      if (TcdeMulOverflows(numel, (uint64_t)dl->shape[i], &numel)) return kTcdeDescribedOutside;
    }
    above = numel - 1;
  }
  uint64_t below_bytes = 0;
  uint64_t end_bytes = 0; /* one past the highest element's last byte, from its first */
  uint64_t above_plus_one = 0;
  if (TcdeMulOverflows(below, itemsize, &below_bytes) ||
      TcdeAddOverflows(above, 1, &above_plus_one) ||
      TcdeMulOverflows(above_plus_one, itemsize, &end_bytes)) {
    return kTcdeDescribedOutside;
  }
  uint64_t first = 0; /* the address of the element at index 0 */
  if (TcdeAddOverflows((uint64_t)(uintptr_t)dl->data, dl->byte_offset, &first)) {
    return kTcdeDescribedOutside;
  }
  uint64_t storage_end = 0;
  if (TcdeAddOverflows((uint64_t)storage->data, storage->nbytes, &storage_end)) {
    return kTcdeDescribedOutside;
  }
  uint64_t end = 0;
  if (first < below_bytes || first - below_bytes < (uint64_t)storage->data ||
      TcdeAddOverflows(first, end_bytes, &end) || end > storage_end) {
    return kTcdeDescribedOutside;
  }
  return kTcdeDescribedOk;
}

/* The BufferError message of a TcdeDescribedProblem (printf format: the library's name,
 * then nothing else). */
static inline const char* TcdeDescribedMessage(TcdeDescribedProblem problem) TCDE_NOEXCEPT {
  switch (problem) {
    case kTcdeDescribedNoStorage:
      return "%s: the tensor has elements but no memory to export (a fake, meta-like or "
             "wrapper-subclass tensor?); export a tensor backed by real storage";
    case kTcdeDescribedWrongDevice:
      return "%s: the tensor says it is on another device than its storage (a tensor subclass "
             "or mode answering device through __torch_dispatch__?); export a plain "
             "torch.Tensor (e.g. t.as_subclass(torch.Tensor))";
    case kTcdeDescribedOutside:
      return "%s: the tensor's sizes, strides and offset reach memory outside its storage (a "
             "tensor subclass or mode answering sizes, strides or as_strided through "
             "__torch_dispatch__?); export a plain torch.Tensor (e.g. "
             "t.as_subclass(torch.Tensor))";
    case kTcdeDescribedOk:
      break;
  }
  return "%s: no problem";
}

/* What an export of a nested tensor says (a format string: the library's name first). */
#define TCDE_EXPORT_JAGGED_NESTED                                                         \
  "%s: cannot export a jagged nested tensor through DLPack, which describes one strided " \
  "array; export its packed values and offsets (t.values(), t.offsets()) or its "         \
  "components (t.unbind()) one by one"
#define TCDE_EXPORT_NESTED                                                                \
  "%s: cannot export a nested tensor through DLPack, which describes one strided array; " \
  "export a padded copy (t.to_padded_tensor(0.0)) or its components (t.unbind()) one by " \
  "one"

/* ------------------------------------------------------------------------ */
/* The import preamble                                                      */
/* ------------------------------------------------------------------------ */

#define TCDE_IMPORT_READ_ONLY                                                              \
  "it is flagged READ_ONLY, and torch tensors are always writable (copy it into writable " \
  "memory first, or have the producer export it writable)"
#define TCDE_IMPORT_NO_DTYPE "torch has no dtype for this DLPack dtype"
#define TCDE_IMPORT_NO_DEVICE "this library cannot create torch tensors on that device"
#define TCDE_IMPORT_BAD_NDIM "ndim is negative or shape is NULL"
#define TCDE_IMPORT_UNALIGNED \
  "byte_offset is not a multiple of the element size (torch needs aligned elements)"
#define TCDE_IMPORT_TOO_LARGE                                                          \
  "negative sizes or strides, or an element count or memory extent beyond int64 (torch " \
  "supports neither)"
#define TCDE_IMPORT_NULL_DATA "data is NULL but the tensor has elements"

/* The storage an import needs, in elements from `data`: `offset` elements (the
 * byte_offset) plus one past the farthest element of the view. 0 when torch cannot
 * represent the view: negative sizes or strides (torch has none), an element count c10
 * would find overflowing (it multiplies the sizes left to right, so a later zero does not
 * help), row-major strides (for NULL strides) beyond int64, or a byte size beyond int64.
 * Checked before torch sees the sizes: its builders compute the storage size in noexcept
 * code, where an overflow would terminate the process. */
static inline int TcdeStorageElements(const DLTensor* dl, uint64_t itemsize, uint64_t offset,
                                      uint64_t* storage_elements, int* empty) TCDE_NOEXCEPT {
  const uint64_t kMax = (uint64_t)INT64_MAX;
  int any_empty = 0;
  uint64_t numel = 1;
  int numel_overflows = 0;
  for (int32_t i = 0; i < dl->ndim; ++i) {
    if (dl->shape[i] < 0) return 0;
    if (dl->shape[i] == 0) any_empty = 1;
    if (dl->strides != NULL && dl->strides[i] < 0) return 0;
    numel_overflows |= TcdeMulOverflows(numel, (uint64_t)dl->shape[i], &numel);
  }
  if (numel_overflows || numel > kMax) return 0;
  if (dl->strides == NULL) {
    /* Row-major strides are products of the later sizes (zeros count as one): they must
     * fit in int64 even where a zero size leaves no elements. */
    uint64_t span = 1;
    for (int32_t i = 1; i < dl->ndim; ++i) {
      const uint64_t size = dl->shape[i] > 1 ? (uint64_t)dl->shape[i] : 1;
      if (TcdeMulOverflows(span, size, &span) || span > kMax) return 0;
    }
  }
  uint64_t elements = 0; /* one past the farthest element, from the first one */
  if (!any_empty && dl->strides != NULL) {
    for (int32_t i = 0; i < dl->ndim; ++i) {
      uint64_t step = 0;
      if (TcdeMulOverflows((uint64_t)(dl->shape[i] - 1), (uint64_t)dl->strides[i], &step) ||
          TcdeAddOverflows(elements, step, &elements)) {
        return 0;
      }
    }
    if (TcdeAddOverflows(elements, 1, &elements)) return 0;
  } else if (!any_empty) {
    elements = numel;
  }
  uint64_t bytes = 0;
  if (TcdeAddOverflows(elements, offset, &elements) ||
      TcdeMulOverflows(elements, itemsize, &bytes) || bytes > kMax) {
    return 0;
  }
  *storage_elements = elements;
  *empty = any_empty;
  return 1;
}

/* The preamble's layout checks, after the version, READ_ONLY, dtype and device checks
 * (whose answers depend on the torch): NULL when torch can build the view (with
 * *storage_elements and *empty from TcdeStorageElements), else why not (a TCDE_IMPORT_*
 * text for TcdeRaiseBadImport). */
static inline const char* TcdeImportLayoutProblem(const DLTensor* dl, uint64_t itemsize,
                                                  uint64_t* storage_elements, int* empty)
    TCDE_NOEXCEPT {
  if (dl->ndim < 0 || (dl->ndim > 0 && dl->shape == NULL)) return TCDE_IMPORT_BAD_NDIM;
  if (dl->byte_offset % itemsize != 0) return TCDE_IMPORT_UNALIGNED;
  if (!TcdeStorageElements(dl, itemsize, dl->byte_offset / itemsize, storage_elements, empty)) {
    return TCDE_IMPORT_TOO_LARGE;
  }
  if (dl->data == NULL && !*empty) return TCDE_IMPORT_NULL_DATA;
  return NULL;
}


/* ------------------------------------------------------------------------ */
/* Errors without the GIL                                                   */
/* ------------------------------------------------------------------------ */

/* The members a caller may reach without the GIL (the allocator, current_work_stream)
 * keep a Python error only for a caller that held the GIL: one that did not has nowhere
 * to see it, and a Python thread that had released it would find it later as an
 * unrelated SystemError. Such a member ends with `if (rc != 0 && !caller_held)
 * PyErr_Clear();` while it still holds the GIL it took, or sets no error at all where
 * TcdeCallerHoldsGil() says the caller does not hold it. */


/* The largest device index c10::DeviceIndex (int8_t) holds: a larger id is refused with
 * the table's own ValueError, never handed to torch (which raises "Overflow when
 * unpacking DeviceIndex", or wraps it to another device). */
#define TCDE_MAX_DEVICE_INDEX 127

#endif /* TCDE_CONTRACT_H_ */

/* The part that calls Python: defined once Python.h is in (include this header again after
 * it where it came first). */
#if defined(Py_PYTHON_H) && !defined(TCDE_CONTRACT_PYTHON_H_)
#define TCDE_CONTRACT_PYTHON_H_

/* BufferError naming what was wrong with an import (`what`) and the tensor; returns -1.
 * The caller still owns the tensor: nothing was consumed, no deleter ran. */
static inline int TcdeRaiseBadImport(const char* lib, const char* what, const DLTensor* dl) {
  PyErr_Format(PyExc_BufferError,
               "%s: cannot import a DLPack tensor: %s (dtype code=%u bits=%u lanes=%u, device "
               "type=%d id=%d, ndim=%d); the DLManagedTensorVersioned was not consumed and its "
               "deleter was not called",
               lib, what, (unsigned)dl->dtype.code, (unsigned)dl->dtype.bits,
               (unsigned)dl->dtype.lanes, (int)dl->device.device_type, (int)dl->device.device_id,
               (int)dl->ndim);
  return -1;
}

/* BufferError for a DLPack major version other than this library's; returns -1. */
static inline int TcdeRaiseWrongMajor(const char* lib, unsigned major) {
  PyErr_Format(PyExc_BufferError,
               "%s: DLManagedTensorVersioned has DLPack major version %u, this library reads "
               "%d; the tensor was not consumed and its deleter was not called",
               lib, major, DLPACK_MAJOR_VERSION);
  return -1;
}

/* Whether the calling thread holds the GIL (has an attached thread state); 0 after
 * Py_Finalize. The limited API has no PyGILState_Check: PyGILState_Ensure tells (it
 * returns PyGILState_LOCKED to a thread that held it; one that did not takes it and gives
 * it back at once). Error paths only. */
static inline int TcdeCallerHoldsGil(void) {
  if (!Py_IsInitialized()) return 0;
#if defined(Py_LIMITED_API)
  const PyGILState_STATE gil = PyGILState_Ensure();
  PyGILState_Release(gil);
  return gil == PyGILState_LOCKED;
#else
  return PyGILState_Check();
#endif
}
#endif /* TCDE_CONTRACT_PYTHON_H_ */
