// Shared pieces of the native kernels: shapes of a call's buffers, batched or not; blocks
// of columns of compile-time width; stores that bypass the cache; dot products in a fixed
// order.

#ifndef JAXSPARSE_NATIVE_ARRAYS_H_
#define JAXSPARSE_NATIVE_ARRAYS_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "xla/ffi/api/ffi.h"

#if defined(__AVX__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#define JAXSPARSE_INLINE inline __attribute__((always_inline))

namespace jaxsparse {

// Elements per member of `buffer` if it has a leading batch axis (one more axis than its
// unbatched `rank`), else 0: the stride between members, 0 for an operand shared by the
// batch.
inline int64_t MemberStride(const xla::ffi::AnyBuffer& buffer, size_t rank) {
  const auto dims = buffer.dimensions();
  if (dims.size() != rank + 1) return 0;
  int64_t size = 1;
  for (size_t axis = 1; axis < dims.size(); ++axis) size *= dims[axis];
  return size;
}

// The product of the first `rank - trailing` axes of a buffer (1 when there are none): the
// batch of a buffer whose last `trailing` axes are one member's.
inline int64_t LeadingSize(const xla::ffi::AnyBuffer& buffer, size_t trailing) {
  const auto dims = buffer.dimensions();
  int64_t size = 1;
  for (size_t axis = 0; axis + trailing < dims.size(); ++axis) size *= dims[axis];
  return size;
}

// The batch size of a call from its result of unbatched rank `rank` (1 if unbatched).
inline int64_t BatchOf(const xla::ffi::AnyBuffer& out, size_t rank) {
  const auto dims = out.dimensions();
  return dims.size() == rank + 1 ? dims[0] : 1;
}

// The size of a trailing axis, counted from the end (1: the last).
inline int64_t Trailing(const xla::ffi::AnyBuffer& buffer, size_t from_end) {
  const auto dims = buffer.dimensions();
  return dims[dims.size() - from_end];
}

// The widest block of columns a kernel sums in registers: 64 bytes of values, one cache
// line; wider blocks spill the sums, narrower ones load each entry's value more often.
template <typename T>
constexpr int kWidestBlock = 64 / sizeof(T);

// Calls block(std::integral_constant<int, W>(), c0) for blocks of columns [c0, c0 + W)
// covering [c0, k), W a compile-time width so that a block's W sums stay in registers:
// blocks of the widest W while they fit, then at most one each of W / 2, ..., 1.
template <typename T, int W = kWidestBlock<T>, typename F>
JAXSPARSE_INLINE void ForColumnBlocks(int64_t k, int64_t c0, const F& block) {
  if constexpr (W == kWidestBlock<T>) {
    for (; c0 + W <= k; c0 += W) block(std::integral_constant<int, W>(), c0);
  } else if (c0 + W <= k) {
    block(std::integral_constant<int, W>(), c0);
    c0 += W;
  }
  if constexpr (W > 1) ForColumnBlocks<T, W / 2>(k, c0, block);
}

// Bytes of the widest vector register the build may use.
#if defined(__AVX__)
constexpr int kVectorBytes = 32;
#else
constexpr int kVectorBytes = 16;
#endif

// L values of T (float or double) as one vector of the GCC/Clang vector extension:
// arithmetic on it compiles to whole-register instructions. `unaligned` is the same
// vector at T's alignment, for loads and stores at any element.
template <typename T, int L>
struct VectorOf {
  typedef T type __attribute__((vector_size(L * sizeof(T))));
  typedef T unaligned __attribute__((vector_size(L * sizeof(T)), aligned(alignof(T)), may_alias));
};

// Values per vector register, for W values of T.
template <int W, typename T>
constexpr int kLanes = W * sizeof(T) < kVectorBytes ? W : kVectorBytes / sizeof(T);

// W running sums held in registers, `Add(scale, row)` adding scale * row[0:W]. For float
// and double the sums are whole vector registers, so each row added is one broadcast and
// W / lanes multiply-adds; left to itself the compiler mixes scalar and two-wide
// multiply-adds. Loads and stores are whole unaligned vectors, not std::memcpy, which GCC
// compiles into 8-byte moves through the stack where AddScaled runs over many rows.
template <int W, typename T, bool kVector = std::is_floating_point_v<T> && (W > 1)>
struct RowAccumulator {
  T sums[W] = {};

  JAXSPARSE_INLINE void Load(const T* row) {
    for (int c = 0; c < W; ++c) sums[c] = row[c];
  }
  JAXSPARSE_INLINE void Add(T scale, const T* row) {
    for (int c = 0; c < W; ++c) sums[c] += scale * row[c];
  }
  JAXSPARSE_INLINE void CopyTo(T* out) const {
    for (int c = 0; c < W; ++c) out[c] = sums[c];
  }
};

template <int W, typename T>
struct RowAccumulator<W, T, true> {
  static constexpr int L = kLanes<W, T>;
  using Vector = typename VectorOf<T, L>::type;
  using Unaligned = typename VectorOf<T, L>::unaligned;
  Vector sums[W / L] = {};

  JAXSPARSE_INLINE void Load(const T* row) {
    for (int q = 0; q < W / L; ++q) sums[q] = reinterpret_cast<const Unaligned*>(row)[q];
  }
  JAXSPARSE_INLINE void Add(T scale, const T* row) {
    for (int q = 0; q < W / L; ++q) sums[q] += scale * reinterpret_cast<const Unaligned*>(row)[q];
  }
  JAXSPARSE_INLINE void CopyTo(T* out) const {
    for (int q = 0; q < W / L; ++q) reinterpret_cast<Unaligned*>(out)[q] = sums[q];
  }
};

// row[0:W] += scale * source[0:W] (whole vectors for float and double).
template <int W, typename T>
JAXSPARSE_INLINE void AddScaledBlock(T* row, T scale, const T* source) {
  RowAccumulator<W, T> block;
  block.Load(row);
  block.Add(scale, source);
  block.CopyTo(row);
}

// row[0:k] += scale * source[0:k], in the blocks of ForColumnBlocks.
template <typename T>
JAXSPARSE_INLINE void AddScaled(T* row, T scale, const T* source, int64_t k) {
  ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
    AddScaledBlock<decltype(width)::value>(row + c0, scale, source + c0);
  });
}

// out[0:W] = values[0:W], written past the cache where the CPU can (SSE2) and the block
// is whole aligned 16-byte pieces: a kernel writing rows of at least a cache line once
// saves reading each line before writing it. Callers end with StreamFence().
template <int W, typename T>
JAXSPARSE_INLINE void StreamStore(T* out, const T* values) {
#if defined(__SSE2__)
  if constexpr (W * sizeof(T) % 16 == 0) {
    if (reinterpret_cast<uintptr_t>(out) % 16 == 0) {
      for (size_t byte = 0; byte < W * sizeof(T); byte += 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(reinterpret_cast<char*>(out) + byte),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(
                             reinterpret_cast<const char*>(values) + byte)));
      }
      return;
    }
  }
#endif
  for (int c = 0; c < W; ++c) out[c] = values[c];
}

// Orders the stores of StreamStore before the kernel returns.
inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// `value`, computed on its own: the compiler may not fuse a multiply that makes it into
// the add that takes it, so two kernels adding the same block sums in the same order get
// the same bits however each is inlined (a one-column block's product was fused into the
// running sum in one kernel and not in the other).
template <typename T>
JAXSPARSE_INLINE T Opaque(T value) {
  if constexpr (std::is_floating_point_v<T>) {
#if defined(__x86_64__) || defined(__i386__)
    asm("" : "+x"(value));
#elif defined(__aarch64__)
    asm("" : "+w"(value));
#endif
  }
  return value;
}

#if defined(__SSE2__)
// An SSE or AVX register, Opaque as a float is.
template <typename V>
JAXSPARSE_INLINE V OpaqueRegister(V value) {
  asm("" : "+x"(value));
  return value;
}

// FixedDot (below) for float32 and W >= 4 in SSE registers: the same tree of halves, so
// the same bits, without moving the last four sums through memory as the compiler does for
// the generic one. The products are Opaque, so no add of the tree becomes a fused
// multiply-add and EightFixedDots gets the same bits.
template <int W>
JAXSPARSE_INLINE float FixedDotFloat(const float* a, const float* b) {
  __m128 quads[W / 4];
  for (int q = 0; q < W / 4; ++q) {
    quads[q] = OpaqueRegister(_mm_mul_ps(_mm_loadu_ps(a + 4 * q), _mm_loadu_ps(b + 4 * q)));
  }
  for (int width = W / 8; width >= 1; width /= 2) {
    for (int q = 0; q < width; ++q) quads[q] = _mm_add_ps(quads[q], quads[q + width]);
  }
  const __m128 pairs = _mm_add_ps(quads[0], _mm_movehl_ps(quads[0], quads[0]));
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, _MM_SHUFFLE(1, 1, 1, 1))));
}
#endif

// sum of a[c] * b[c] over c in [0, W), W a power of 2 known at compile time: the
// products added as a fixed tree of halves, which vectorizes.
template <int W, typename T>
JAXSPARSE_INLINE T FixedDot(const T* a, const T* b) {
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float> && W >= 4) {
    return FixedDotFloat<W>(a, b);
  } else
#endif
  {
    T products[W];
    for (int c = 0; c < W; ++c) products[c] = a[c] * b[c];
    for (int width = W / 2; width >= 1; width /= 2) {
      for (int c = 0; c < width; ++c) products[c] += products[c + width];
    }
    return products[0];
  }
}

// dots[s] = FixedDot<W>(a[s], b[s]) for s in [0, 8), bit for bit. For float32 blocks of
// 8 or 16 columns on AVX, the eight trees are summed side by side: each slot's products
// folded into one register of 8, the halves of slots s and s + 4 added in one register,
// then a 4 x 4 transpose puts each tree's last four sums in four registers, so that the
// final adds serve eight dot products at once.
template <int W, typename T>
JAXSPARSE_INLINE void EightFixedDots(const T* const (&a)[8], const T* const (&b)[8], T* dots) {
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float> && (W == 8 || W == 16)) {
    __m256 folded[8];
    for (int s = 0; s < 8; ++s) {
      folded[s] = OpaqueRegister(_mm256_mul_ps(_mm256_loadu_ps(a[s]), _mm256_loadu_ps(b[s])));
      if constexpr (W == 16) {
        const __m256 upper = _mm256_mul_ps(_mm256_loadu_ps(a[s] + 8), _mm256_loadu_ps(b[s] + 8));
        folded[s] = _mm256_add_ps(folded[s], OpaqueRegister(upper));
      }
    }
    // halves[s]: slot s's four sums in the low half, slot s + 4's in the high half.
    __m256 halves[4];
    for (int s = 0; s < 4; ++s) {
      halves[s] = _mm256_add_ps(_mm256_permute2f128_ps(folded[s], folded[s + 4], 0x20),
                                _mm256_permute2f128_ps(folded[s], folded[s + 4], 0x31));
    }
    const __m256 low01 = _mm256_unpacklo_ps(halves[0], halves[1]);
    const __m256 high01 = _mm256_unpackhi_ps(halves[0], halves[1]);
    const __m256 low23 = _mm256_unpacklo_ps(halves[2], halves[3]);
    const __m256 high23 = _mm256_unpackhi_ps(halves[2], halves[3]);
    // sums_q: the q-th of the four sums of every slot.
    const __m256 sums0 = _mm256_shuffle_ps(low01, low23, 0x44);
    const __m256 sums1 = _mm256_shuffle_ps(low01, low23, 0xEE);
    const __m256 sums2 = _mm256_shuffle_ps(high01, high23, 0x44);
    const __m256 sums3 = _mm256_shuffle_ps(high01, high23, 0xEE);
    _mm256_storeu_ps(dots, _mm256_add_ps(_mm256_add_ps(sums0, sums2), _mm256_add_ps(sums1, sums3)));
    return;
  }
#endif
  for (int s = 0; s < 8; ++s) dots[s] = FixedDot<W>(a[s], b[s]);
}

// Calls f(std::integral_constant<int, W>()) and returns true when k == W for a block width
// W whose dot products EightFixedDots sums side by side in vector registers; else returns
// false, calling nothing.
template <typename T, typename F>
JAXSPARSE_INLINE bool WithEightDotsBlock(int64_t k, const F& f) {
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    if (k == 8) {
      f(std::integral_constant<int, 8>());
      return true;
    }
    if (k == 16) {
      f(std::integral_constant<int, 16>());
      return true;
    }
  }
#endif
  return false;
}

// sum of a[c] * b[c] over c in [0, k): FixedDot over the column blocks of ForColumnBlocks,
// each Opaque, added in block order, so the result does not depend on the run.
template <typename T>
JAXSPARSE_INLINE T Dot(const T* a, const T* b, int64_t k) {
  T sum = T(0);
  ForColumnBlocks<T>(k, 0, [&](auto width, int64_t c0) {
    sum += Opaque(FixedDot<decltype(width)::value>(a + c0, b + c0));
  });
  return sum;
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_ARRAYS_H_
