// ATen <-> DLPack dtype and device mapping, written against the ATen API that
// exists in every supported torch (2.4-2.9 and 2.13), so the library reports the
// same codes on every torch. Where torch >= 2.10 has its own DLPack export, the
// choices here follow what that export produces (checked field by field by
// tests/exchange_suite).
#pragma once

#include "tcde_dlpack.h"  // must precede ATen: see the comment in that header

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <limits>

namespace tcde {

// DLPack dtype of an ATen scalar type. Returns false for types DLPack cannot
// express (quantized, bit-packed "bits" types). The rule; ToDLDataType() below
// answers from a table computed from it.
constexpr bool ToDLDataTypeRule(c10::ScalarType type, DLDataType* out) noexcept {
  using c10::ScalarType;
  uint8_t code = 0;
  uint8_t bits = 0;
  uint16_t lanes = 1;
  switch (type) {
    case ScalarType::Bool: code = kDLBool; bits = 8; break;
    case ScalarType::Byte: code = kDLUInt; bits = 8; break;
    case ScalarType::Char: code = kDLInt; bits = 8; break;
    case ScalarType::Short: code = kDLInt; bits = 16; break;
    case ScalarType::Int: code = kDLInt; bits = 32; break;
    case ScalarType::Long: code = kDLInt; bits = 64; break;
    case ScalarType::UInt16: code = kDLUInt; bits = 16; break;
    case ScalarType::UInt32: code = kDLUInt; bits = 32; break;
    case ScalarType::UInt64: code = kDLUInt; bits = 64; break;
    case ScalarType::Half: code = kDLFloat; bits = 16; break;
    case ScalarType::Float: code = kDLFloat; bits = 32; break;
    case ScalarType::Double: code = kDLFloat; bits = 64; break;
    case ScalarType::BFloat16: code = kDLBfloat; bits = 16; break;
    case ScalarType::ComplexHalf: code = kDLComplex; bits = 32; break;
    case ScalarType::ComplexFloat: code = kDLComplex; bits = 64; break;
    case ScalarType::ComplexDouble: code = kDLComplex; bits = 128; break;
    case ScalarType::Float8_e5m2: code = kDLFloat8_e5m2; bits = 8; break;
    case ScalarType::Float8_e4m3fn: code = kDLFloat8_e4m3fn; bits = 8; break;
    case ScalarType::Float8_e5m2fnuz: code = kDLFloat8_e5m2fnuz; bits = 8; break;
    case ScalarType::Float8_e4m3fnuz: code = kDLFloat8_e4m3fnuz; bits = 8; break;
    // Sub-byte integer types are stored one element per byte; torch 2.13
    // exports them as 8-bit (u)ints, and so do we.
    case ScalarType::UInt1:
    case ScalarType::UInt2:
    case ScalarType::UInt3:
    case ScalarType::UInt4:
    case ScalarType::UInt5:
    case ScalarType::UInt6:
    case ScalarType::UInt7: code = kDLUInt; bits = 8; break;
#if TCDE_TORCH_AT_LEAST(2, 6)
    case ScalarType::Int1:
    case ScalarType::Int2:
    case ScalarType::Int3:
    case ScalarType::Int4:
    case ScalarType::Int5:
    case ScalarType::Int6:
    case ScalarType::Int7: code = kDLInt; bits = 8; break;
#endif
#if TCDE_TORCH_AT_LEAST(2, 7)
    case ScalarType::Float8_e8m0fnu: code = kDLFloat8_e8m0fnu; bits = 8; break;
#endif
#if TCDE_TORCH_AT_LEAST(2, 8)
    // One byte holds two FP4 values: torch 2.13 reports bits=4, lanes=2.
    case ScalarType::Float4_e2m1fn_x2: code = kDLFloat4_e2m1fn; bits = 4; lanes = 2; break;
#endif
    default:
      return false;
  }
  out->code = code;
  out->bits = bits;
  out->lanes = lanes;
  return true;
}

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

// ATen scalar type of a DLPack dtype; false when ATen has no such type.
inline bool FromDLDataType(DLDataType dtype, c10::ScalarType* out) noexcept {
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

// Each build exchanges only the GPU memory whose streams its current_work_stream
// can report: a consumer (tvm-ffi) launches its work on the stream that answer
// names, and a NULL "no stream" for a GPU tensor would put it on the default
// stream, unordered against torch's current one (a silent race). So a CPU build
// serves no GPU, a CUDA build no ROCm device, a ROCm build no kDLCUDA device.
// CPU-accessible memory (host, pinned host, managed) is not a GPU device here.

// The backend ("cuda", "rocm") whose build would serve a DLPack device type
// this build refuses, or NULL when this build serves it (or it is no GPU type).
constexpr const char* BackendServing(int32_t device_type) noexcept {
#if defined(TCDE_BACKEND_CUDA)
  return device_type == kDLROCM ? "rocm" : nullptr;
#elif defined(TCDE_BACKEND_ROCM)
  return device_type == kDLCUDA ? "cuda" : nullptr;
#else
  return device_type == kDLCUDA ? "cuda" : device_type == kDLROCM ? "rocm" : nullptr;
#endif
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
// create tensors on (BackendServing() names the GPU ones another build serves).
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
