// Checks of a call's buffers against what a kernel reinterprets them as. An FFI target is
// global, so any caller can hand it any buffers: each handler checks every buffer's element
// type, rank and the axes it reads before the first read, and returns an InvalidArgument
// error naming the argument, never reading out of bounds.

#ifndef JAXSPARSE_NATIVE_BUFFER_CHECKS_H_
#define JAXSPARSE_NATIVE_BUFFER_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "xla/ffi/api/ffi.h"

// Returns the error of `expr` from the calling function unless it is a success.
#define JAXSPARSE_RETURN_IF_ERROR(expr)                         \
  do {                                                          \
    if (::xla::ffi::Error error_ = (expr); !error_.success()) { \
      return error_;                                            \
    }                                                           \
  } while (false)

namespace jaxsparse {

namespace ffi = xla::ffi;

// numpy's name of an element type, for error messages.
inline std::string TypeName(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::PRED:
      return "bool";
    case ffi::DataType::S8:
      return "int8";
    case ffi::DataType::S16:
      return "int16";
    case ffi::DataType::S32:
      return "int32";
    case ffi::DataType::S64:
      return "int64";
    case ffi::DataType::U8:
      return "uint8";
    case ffi::DataType::U16:
      return "uint16";
    case ffi::DataType::U32:
      return "uint32";
    case ffi::DataType::U64:
      return "uint64";
    case ffi::DataType::F16:
      return "float16";
    case ffi::DataType::BF16:
      return "bfloat16";
    case ffi::DataType::F32:
      return "float32";
    case ffi::DataType::F64:
      return "float64";
    case ffi::DataType::C64:
      return "complex64";
    case ffi::DataType::C128:
      return "complex128";
    default:
      return "type " + std::to_string(static_cast<int>(type));
  }
}

// A buffer of a call with its argument's name and its rank for one matrix; a batched
// call's buffer may have one leading axis more.
struct NamedBuffer {
  const ffi::AnyBuffer& buffer;
  const char* name;
  size_t rank;

  bool Batched() const { return buffer.dimensions().size() == rank + 1; }
  // The size of an axis of the unbatched shape.
  int64_t Axis(size_t axis) const {
    const auto dims = buffer.dimensions();
    return dims[dims.size() - rank + axis];
  }
};

// `named` holds `type` values and has its rank, or one axis more where `may_batch`.
inline ffi::Error CheckBuffer(const NamedBuffer& named, ffi::DataType type, bool may_batch) {
  if (named.buffer.element_type() != type) {
    return ffi::Error::InvalidArgument(std::string(named.name) + " must be " + TypeName(type) +
                                       ", got " + TypeName(named.buffer.element_type()));
  }
  const size_t rank = named.buffer.dimensions().size();
  if (rank != named.rank && !(may_batch && rank == named.rank + 1)) {
    return ffi::Error::InvalidArgument(
        std::string(named.name) + " must have " + std::to_string(named.rank) +
        (named.rank == 1 ? " axis" : " axes") +
        (may_batch ? " (" + std::to_string(named.rank + 1) + " with a batch axis)" : "") +
        ", got " + std::to_string(rank));
  }
  return ffi::Error::Success();
}

// Axis `axis` of `named`'s unbatched shape is `expected`, the size `what` gives it.
inline ffi::Error CheckAxis(const NamedBuffer& named, size_t axis, int64_t expected,
                            const char* what) {
  const int64_t size = named.Axis(axis);
  if (size == expected) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string(named.name) + " has " + std::to_string(size) +
                                     " along axis " + std::to_string(axis) + ", expected " +
                                     std::to_string(expected) + " (" + what + ")");
}

// A batched input's batch axis matches the batched result `out`; an unbatched result takes
// no batched input.
inline ffi::Error CheckBatch(const NamedBuffer& input, const NamedBuffer& out) {
  if (!input.Batched()) return ffi::Error::Success();
  if (!out.Batched()) {
    return ffi::Error::InvalidArgument(std::string(input.name) + " has a batch axis and " +
                                       out.name + " has none");
  }
  const int64_t batch = input.buffer.dimensions()[0], out_batch = out.buffer.dimensions()[0];
  if (batch == out_batch) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string(input.name) + " has a batch of " +
                                     std::to_string(batch) + ", " + out.name + " of " +
                                     std::to_string(out_batch));
}

// A CSR structure for one matrix: `indices` `(nnz,)` and `indptr` `(m + 1,)`, both int32 or
// both int64.
inline ffi::Error CheckStructure(const ffi::AnyBuffer& indices, const ffi::AnyBuffer& indptr) {
  const ffi::DataType type = indices.element_type();
  if (type != ffi::DataType::S32 && type != ffi::DataType::S64) {
    return ffi::Error::InvalidArgument("indices must be int32 or int64, got " + TypeName(type));
  }
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer({indices, "indices", 1}, type, /*may_batch=*/false));
  JAXSPARSE_RETURN_IF_ERROR(CheckBuffer({indptr, "indptr", 1}, type, /*may_batch=*/false));
  if (indptr.dimensions()[0] < 1) {
    return ffi::Error::InvalidArgument("indptr must hold m + 1 >= 1 values, got none");
  }
  return ffi::Error::Success();
}

// The index buffers of a CSR structure kernel: the first holds int32 or int64, and every one
// holds its type with one axis and a batch axis of its size or none.
template <size_t N>
ffi::Error CheckIndexBuffers(const NamedBuffer (&named)[N]) {
  const ffi::DataType type = named[0].buffer.element_type();
  if (type != ffi::DataType::S32 && type != ffi::DataType::S64) {
    return ffi::Error::InvalidArgument(std::string(named[0].name) +
                                       " must be int32 or int64, got " + TypeName(type));
  }
  for (const NamedBuffer& buffer : named) {
    JAXSPARSE_RETURN_IF_ERROR(CheckBuffer(buffer, type, /*may_batch=*/true));
    if (buffer.Batched() != named[0].Batched() ||
        (buffer.Batched() && buffer.buffer.dimensions()[0] != named[0].buffer.dimensions()[0])) {
      return ffi::Error::InvalidArgument(std::string(buffer.name) +
                                         " must have the batch axis of " + named[0].name);
    }
  }
  return ffi::Error::Success();
}

// Every extent (a count of entries or rows) fits index type `type`, so positions and rows
// counted in it never overflow.
inline ffi::Error CheckFitsIndexType(ffi::DataType type, std::initializer_list<int64_t> extents) {
  const int64_t largest = type == ffi::DataType::S32 ? std::numeric_limits<int32_t>::max()
                                                     : std::numeric_limits<int64_t>::max();
  for (const int64_t extent : extents) {
    if (extent > largest) {
      return ffi::Error::InvalidArgument("the entries and rows must fit the index type " +
                                         TypeName(type));
    }
  }
  return ffi::Error::Success();
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_BUFFER_CHECKS_H_
