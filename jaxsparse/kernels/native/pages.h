// Asking the operating system for huge pages for a kernel's large results.
//
// XLA's CPU runtime allocates every result anew with malloc, whose large blocks are fresh
// mappings: the first write to each 4 KiB page faults it in, which can be slower than the
// products themselves. numpy asks for transparent huge pages for its arrays of 4 MiB and
// more; the kernels ask the same for their results before writing them, so a fault brings
// in 2 MiB. It is a hint: where transparent huge pages are off, or the pages are already in
// (a result buffer reused in a loop), nothing changes, and the values written are the same
// either way. Like numpy's own, it has a cost: the first huge pages a process faults in
// can come slowly. JAXSPARSE_MADVISE_HUGEPAGE=0 in the environment turns the advice off,
// as NUMPY_MADVISE_HUGEPAGE=0 does numpy's; it is read at the first large result. The
// measurements: benchmarks/results/native-kernels.md.

#ifndef JAXSPARSE_NATIVE_PAGES_H_
#define JAXSPARSE_NATIVE_PAGES_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "xla/ffi/api/ffi.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace jaxsparse {

// Results smaller than this keep the allocator's pages (numpy's threshold).
inline constexpr int64_t kHugePageMinBytes = int64_t{4} << 20;

// Whether JAXSPARSE_MADVISE_HUGEPAGE, read once, leaves the advice on (unset or not "0").
inline bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* setting = std::getenv("JAXSPARSE_MADVISE_HUGEPAGE");
    return setting == nullptr || std::strcmp(setting, "0") != 0;
  }();
  return wanted;
}

// Advises MADV_HUGEPAGE on the whole pages inside the `bytes` at `data` when they span at
// least kHugePageMinBytes and HugePagesWanted() (Linux; elsewhere nothing). A refused
// advice is ignored.
inline void AdviseHugePages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageMinBytes || !HugePagesWanted()) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t last = (start + static_cast<uintptr_t>(bytes)) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// AdviseHugePages on a kernel's result.
inline void AdviseHugePages(xla::ffi::Result<xla::ffi::AnyBuffer>& result) {
  AdviseHugePages(result->untyped_data(), static_cast<int64_t>(result->size_bytes()));
}

}  // namespace jaxsparse

#endif  // JAXSPARSE_NATIVE_PAGES_H_
