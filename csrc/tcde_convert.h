// ATen <-> DLPack dtype and device mapping, written against the ATen API that
// exists in every supported torch (2.4-2.9 and 2.13), so the library reports the
// same codes on every torch. Where torch >= 2.10 has its own DLPack export, the
// choices here follow what that export produces (checked field by field by
// tests/exchange_suite).
#pragma once

#include "tcde_dlpack.h"  // must precede ATen: see the comment in that header
#include "tcde_contract.h"

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace tcde {

// DLPack dtype of an ATen scalar type. Returns false for types DLPack cannot
// express (quantized, bit-packed "bits" types). The rule, from the contract's one dtype
// list (tcde_contract.h, TCDE_DTYPES_*); ToDLDataType() below answers from a table
// computed from it.
#define TCDE_TO_DL_CASE(name, scalar, code_, bits_, lanes_, flags) \
  case c10::ScalarType::scalar:                                    \
    code = code_;                                                  \
    bits = bits_;                                                  \
    lanes = lanes_;                                                \
    break;
constexpr bool ToDLDataTypeRule(c10::ScalarType type, DLDataType* out) noexcept {
  uint8_t code = 0;
  uint8_t bits = 0;
  uint16_t lanes = 1;
  switch (type) {
    TCDE_DTYPES_ALWAYS(TCDE_TO_DL_CASE)
#if TCDE_TORCH_AT_LEAST(2, 6)
    TCDE_DTYPES_SINCE_2_6(TCDE_TO_DL_CASE)
#endif
#if TCDE_TORCH_AT_LEAST(2, 7)
    TCDE_DTYPES_SINCE_2_7(TCDE_TO_DL_CASE)
#endif
#if TCDE_TORCH_AT_LEAST(2, 8)
    TCDE_DTYPES_SINCE_2_8(TCDE_TO_DL_CASE)
#endif
    default:
      return false;
  }
  out->code = code;
  out->bits = bits;
  out->lanes = lanes;
  return true;
}
#undef TCDE_TO_DL_CASE

namespace detail {

constexpr size_t kNumScalarTypes = static_cast<size_t>(c10::ScalarType::NumOptions);

struct DLDataTypeTable {
  DLDataType dtype[kNumScalarTypes];
  bool valid[kNumScalarTypes];
};

constexpr DLDataTypeTable MakeDLDataTypeTable() noexcept {
  DLDataTypeTable table{};
  for (size_t i = 0; i < kNumScalarTypes; ++i) {
    table.valid[i] = ToDLDataTypeRule(static_cast<c10::ScalarType>(i), &table.dtype[i]);
  }
  return table;
}

inline constexpr DLDataTypeTable kDLDataTypes = MakeDLDataTypeTable();

}  // namespace detail

// ToDLDataTypeRule() as a table lookup: every export calls this, and the
// switch's indirect jump mispredicted whenever consecutive exports alternated
// dtypes (measured: about a fifth of dltensor_from_py_object).
inline bool ToDLDataType(c10::ScalarType type, DLDataType* out) noexcept {
  const auto index = static_cast<size_t>(static_cast<uint8_t>(type));
  if (index >= detail::kNumScalarTypes || !detail::kDLDataTypes.valid[index]) return false;
  *out = detail::kDLDataTypes.dtype[index];
  return true;
}

// ATen scalar type of a DLPack dtype; false when ATen has no such type. A switch (imports
// call it), held to the contract's list below.
constexpr bool FromDLDataType(DLDataType dtype, c10::ScalarType* out) noexcept {
  using c10::ScalarType;
  if (dtype.lanes != 1) {
#if TCDE_TORCH_AT_LEAST(2, 8)
    if (dtype.code == kDLFloat4_e2m1fn && dtype.bits == 4 && dtype.lanes == 2) {
      *out = ScalarType::Float4_e2m1fn_x2;
      return true;
    }
#endif
    return false;
  }
  switch (dtype.code) {
    case kDLBool:
      if (dtype.bits != 8) return false;
      *out = ScalarType::Bool;
      return true;
    case kDLInt:
      switch (dtype.bits) {
        case 8: *out = ScalarType::Char; return true;
        case 16: *out = ScalarType::Short; return true;
        case 32: *out = ScalarType::Int; return true;
        case 64: *out = ScalarType::Long; return true;
        default: return false;
      }
    case kDLUInt:
      switch (dtype.bits) {
        case 8: *out = ScalarType::Byte; return true;
        case 16: *out = ScalarType::UInt16; return true;
        case 32: *out = ScalarType::UInt32; return true;
        case 64: *out = ScalarType::UInt64; return true;
        default: return false;
      }
    case kDLFloat:
      switch (dtype.bits) {
        case 16: *out = ScalarType::Half; return true;
        case 32: *out = ScalarType::Float; return true;
        case 64: *out = ScalarType::Double; return true;
        default: return false;
      }
    case kDLBfloat:
      if (dtype.bits != 16) return false;
      *out = ScalarType::BFloat16;
      return true;
    case kDLComplex:
      switch (dtype.bits) {
        case 32: *out = ScalarType::ComplexHalf; return true;
        case 64: *out = ScalarType::ComplexFloat; return true;
        case 128: *out = ScalarType::ComplexDouble; return true;
        default: return false;
      }
    default:
      break;
  }
  if (dtype.bits != 8) return false;
  switch (dtype.code) {
    case kDLFloat8_e5m2: *out = ScalarType::Float8_e5m2; return true;
    case kDLFloat8_e4m3fn: *out = ScalarType::Float8_e4m3fn; return true;
    case kDLFloat8_e5m2fnuz: *out = ScalarType::Float8_e5m2fnuz; return true;
    case kDLFloat8_e4m3fnuz: *out = ScalarType::Float8_e4m3fnuz; return true;
#if TCDE_TORCH_AT_LEAST(2, 7)
    case kDLFloat8_e8m0fnu: *out = ScalarType::Float8_e8m0fnu; return true;
#endif
    default: return false;
  }
}

namespace detail {

// One row of the contract's dtype list, as this torch's ATen has it.
struct DtypeRow {
  c10::ScalarType type;
  DLDataType dtype;
  unsigned flags;
};

#define TCDE_DTYPE_ROW(name, scalar, code, bits, lanes, flags) \
  DtypeRow{c10::ScalarType::scalar, DLDataType{code, bits, lanes}, flags},
inline constexpr DtypeRow kDtypeRows[] = {
    TCDE_DTYPES_ALWAYS(TCDE_DTYPE_ROW)
#if TCDE_TORCH_AT_LEAST(2, 6)
    TCDE_DTYPES_SINCE_2_6(TCDE_DTYPE_ROW)
#endif
#if TCDE_TORCH_AT_LEAST(2, 7)
    TCDE_DTYPES_SINCE_2_7(TCDE_DTYPE_ROW)
#endif
#if TCDE_TORCH_AT_LEAST(2, 8)
    TCDE_DTYPES_SINCE_2_8(TCDE_DTYPE_ROW)
#endif
};
#undef TCDE_DTYPE_ROW

// FromDLDataType() imports every dtype of the list that is not export-only as its own
// scalar type.
constexpr bool ImportsEveryListedDtype() noexcept {
  for (const DtypeRow& row : kDtypeRows) {
    if ((row.flags & kTcdeDtypeExportOnly) != 0) continue;
    c10::ScalarType imported{};
    if (!FromDLDataType(row.dtype, &imported) || imported != row.type) return false;
  }
  return true;
}
static_assert(ImportsEveryListedDtype(),
              "FromDLDataType() disagrees with the dtype list of tcde_contract.h");

}  // namespace detail

// Device types follow torch's own answers, member by member and minor by minor
// (docs/facts.md, "torch's device-type rules"; the same rules as data in
// tests/conformance/tables.py, GPU_RULES), except where torch would hand a GPU caller
// a NULL stream or a tensor on a wrong device: there a build refuses, naming the build
// that serves the device type. A consumer (tvm-ffi) launches on the stream
// current_work_stream names, and NULL is the default stream, unordered against torch's
// current one (a silent race).
//
// Memory (export, import, allocator): a CUDA build serves kDLCUDA, a ROCm build kDLROCM
// (a ROCm torch names its HIP devices "cuda"), a CPU build neither. torch's CPU and CUDA
// builds import kDLROCM as a "hip" tensor no kernel of theirs runs on, its CPU build
// kDLCUDA as a "cuda" one; its ROCm build refuses kDLCUDA; its allocator (2.10+) fails
// on each of these.
// CPU-accessible memory (host, pinned host, managed) is not a GPU device here.

// The GPU device type this build's memory is, or -1 (a CPU build).
#if defined(TCDE_BACKEND_CUDA)
inline constexpr int32_t kOwnGpuType = kDLCUDA;
#elif defined(TCDE_BACKEND_ROCM)
inline constexpr int32_t kOwnGpuType = kDLROCM;
#else
inline constexpr int32_t kOwnGpuType = -1;
#endif

// The backend ("cuda", "rocm") whose build would serve GPU memory of a DLPack device
// type this build refuses, or NULL when this build serves it (or it is no GPU type).
constexpr const char* BackendServing(int32_t device_type) noexcept {
  if (device_type == kOwnGpuType) return nullptr;
  return device_type == kDLCUDA ? "cuda" : device_type == kDLROCM ? "rocm" : nullptr;
}

// Whether current_work_stream answers `device_type` with this build's current GPU stream
// (CUDA's; HIP's on ROCm), by the rule of torch major.minor:
//  - torch 2.4-2.9 have no table; their DLPack importer (torch.utils.dlpack.from_dlpack)
//    asks a producer for torch.cuda.current_stream() of either GPU type;
//  - torch 2.10-2.12's table answers either GPU type with getCurrentCUDAStream();
//  - torch 2.13+ answers only its accelerator's own type (kDLCUDA on CUDA, kDLROCM on
//    ROCm) and NULL for the other: that one is refused here.
// A CPU build answers no GPU type (torch's: NULL, 2.10+).
constexpr bool AnswersStream(int32_t device_type, int torch_major = TORCH_VERSION_MAJOR,
                             int torch_minor = TORCH_VERSION_MINOR) noexcept {
  if (kOwnGpuType < 0) return false;
  if (device_type == kOwnGpuType) return true;
  const bool own_only = torch_major > 2 || (torch_major == 2 && torch_minor >= 13);
  return !own_only && (device_type == kDLCUDA || device_type == kDLROCM);
}

// The backend whose build would answer the stream of a GPU device type this build
// refuses to answer, or NULL when it answers it (or it is no GPU type).
constexpr const char* StreamBackendServing(int32_t device_type,
                                           int torch_major = TORCH_VERSION_MAJOR,
                                           int torch_minor = TORCH_VERSION_MINOR) noexcept {
  if (AnswersStream(device_type, torch_major, torch_minor)) return nullptr;
  return device_type == kDLCUDA ? "cuda" : device_type == kDLROCM ? "rocm" : nullptr;
}

// Whether a device id names a device c10 can index (-1: the current device). c10's
// DeviceIndex is 8 bits: a larger id would wrap to another device's index.
constexpr bool FitsDeviceIndex(int32_t device_id) noexcept {
  return static_cast<uint32_t>(device_id) + 1u <=
         static_cast<uint32_t>(std::numeric_limits<c10::DeviceIndex>::max()) + 1u;
}

// Whether a torch tensor on this ATen device type is GPU memory this build does
// not serve (see above). ROCm torch names its HIP devices "cuda".
constexpr bool IsUnservedGpu(c10::DeviceType type) noexcept {
#if defined(TCDE_BACKEND_CPU)
  return type == c10::DeviceType::CUDA || type == c10::DeviceType::HIP;
#else
  (void)type;
  return false;
#endif
}

// DLPack device of an ATen device; false for devices DLPack (or this build)
// cannot describe (meta, lazy, XLA, ...; GPUs in a CPU build). Pinned host
// memory is a CPU tensor in ATen and is reported as kDLCPU, as torch 2.13 does.
inline bool ToDLDevice(c10::Device device, DLDevice* out) noexcept {
  // CPU tensors have index -1 in ATen; DLPack wants 0.
  const int32_t index = device.has_index() ? static_cast<int32_t>(device.index()) : 0;
  if (IsUnservedGpu(device.type())) return false;
  switch (device.type()) {
    case c10::DeviceType::CPU:
      out->device_type = kDLCPU;
      out->device_id = 0;
      return true;
    case c10::DeviceType::CUDA:
#if defined(TCDE_BACKEND_ROCM)
      // ROCm torch names HIP devices "cuda".
      out->device_type = kDLROCM;
#else
      out->device_type = kDLCUDA;
#endif
      out->device_id = index;
      return true;
    case c10::DeviceType::MPS:
      // torch reports the Metal device as id 0 whatever its index.
      out->device_type = kDLMetal;
      out->device_id = 0;
      return true;
    case c10::DeviceType::PrivateUse1:
      out->device_type = kDLExtDev;
      out->device_id = index;
      return true;
    default:
      return false;
  }
}

// ATen device of a DLPack device; false for device types this build cannot
// create tensors on (BackendServing() names the GPU ones another build serves) and
// for ids c10 cannot index.
inline bool FromDLDevice(DLDevice device, c10::Device* out) {
  if (BackendServing(device.device_type) != nullptr) return false;
  switch (device.device_type) {
    case kDLCPU:
      *out = c10::Device(c10::DeviceType::CPU);
      return true;
    case kDLCUDA:
#if defined(TCDE_BACKEND_ROCM)
    // ROCm torch masquerades HIP devices as "cuda": a kDLROCM device is torch's "cuda".
    case kDLROCM:
#endif
      if (device.device_id < 0 ||
          device.device_id > std::numeric_limits<c10::DeviceIndex>::max()) {
        return false;
      }
      *out = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device.device_id));
      return true;
    default:
      return false;
  }
}

}  // namespace tcde
