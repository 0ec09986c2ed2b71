#pragma once
// Element types of the plugins' CUDA kernels: conversions to and from the
// fp32 the kernels compute in, and packs of neighbouring elements moved as
// one (up to 16 bytes) load or store. Device code only (nvcc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace trainbench::cuda {

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

/// Rounds a float to T's precision and back.
template <typename T>
__device__ __forceinline__ float Round(float v) {
  return ToFloat<T>(FromFloat<T>(v));
}

/// kVec neighbouring elements, aligned so that they move as one access.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

template <typename T, int kVec, typename Index>
__device__ __forceinline__ Pack<T, kVec> LoadPack(const T* base, Index at) {
  return *reinterpret_cast<const Pack<T, kVec>*>(base + at);
}

template <typename T, int kVec, typename Index>
__device__ __forceinline__ void StorePack(T* base, Index at, const Pack<T, kVec>& pack) {
  *reinterpret_cast<Pack<T, kVec>*>(base + at) = pack;
}

/// An element type as a value: ForElementType's argument.
template <typename T>
struct ElementType {
  using type = T;
};

/// f(ElementType<T>{}) for the T that `dtype` names: __nv_bfloat16 for
/// kBFloat16, __half for kHalf, float for kFloat (`DType`: a kernel header's
/// enum of the three). A launcher's one switch over its element types; host
/// code. In f, `typename decltype(t)::type` is the type.
template <typename DType, typename F>
decltype(auto) ForElementType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBFloat16:
      return f(ElementType<__nv_bfloat16>{});
    case DType::kHalf:
      return f(ElementType<__half>{});
    case DType::kFloat:
      break;
  }
  return f(ElementType<float>{});
}

}  // namespace trainbench::cuda
