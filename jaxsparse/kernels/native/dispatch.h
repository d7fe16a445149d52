// Calling a kernel template with the C++ types of a call's value and index dtypes.

#ifndef JAXSPARSE_NATIVE_DISPATCH_H_
#define JAXSPARSE_NATIVE_DISPATCH_H_

#include <complex>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace jaxsparse {

namespace ffi = xla::ffi;

// Calls `fn(T{})` with T the C++ type of `dtype` (float32, float64, complex64,
// complex128); any other dtype is an InvalidArgument error naming `what`.
template <typename F>
ffi::Error WithValueType(ffi::DataType dtype, const char* what, const F& fn) {
  switch (dtype) {
    case ffi::DataType::F32:
      return fn(float{});
    case ffi::DataType::F64:
      return fn(double{});
    case ffi::DataType::C64:
      return fn(std::complex<float>{});
    case ffi::DataType::C128:
      return fn(std::complex<double>{});
    default:
      return ffi::Error::InvalidArgument(std::string(what) +
                                         " must be float32, float64, complex64 or complex128");
  }
}

// Calls `fn(I{})` with I the C++ type of `dtype` (int32 or int64).
template <typename F>
ffi::Error WithIndexType(ffi::DataType dtype, const F& fn) {
  switch (dtype) {
    case ffi::DataType::S32:
      return fn(int32_t{});
    case ffi::DataType::S64:
      return fn(int64_t{});
    default:
      return ffi::Error::InvalidArgument("indices and indptr must be int32 or int64");
  }
}

template <typename T>
const T* Data(const ffi::AnyBuffer& buffer) {
  return reinterpret_cast<const T*>(buffer.untyped_data());
}

template <typename T>
T* Data(ffi::Result<ffi::AnyBuffer>& buffer) {
  return reinterpret_cast<T*>(buffer->untyped_data());
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_DISPATCH_H_
