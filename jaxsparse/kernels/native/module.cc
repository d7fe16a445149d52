// The Python extension module `jaxsparse.kernels.<JAXSPARSE_MODULE>` (setup.py builds it as
// `_native_ffi` for any CPU and, on x86-64, as `_native_ffi_avx2` with AVX2 and FMA): one
// PyCapsule per XLA FFI handler, in the dict `targets` (target name -> capsule), for
// `jax.ffi.register_ffi_target(name, capsule, platform="cpu")`. Which build this CPU
// runs is `_native_cpu`'s answer (cpu_features.cc).

#include <Python.h>

#include "handlers.h"

#ifndef JAXSPARSE_MODULE
#define JAXSPARSE_MODULE _native_ffi
#endif
#define JAXSPARSE_STRING_(name) #name
#define JAXSPARSE_STRING(name) JAXSPARSE_STRING_(name)
#define JAXSPARSE_INIT_(name) PyInit_##name
#define JAXSPARSE_INIT(name) JAXSPARSE_INIT_(name)

namespace {

struct Target {
  const char* name;
  XLA_FFI_Error* (*handler)(XLA_FFI_CallFrame*);
};

constexpr Target kTargets[] = {
    {"jaxsparse_csr_matmul", JaxsparseCsrMatmul},
    {"jaxsparse_csr_matmul_t", JaxsparseCsrMatmulT},
    {"jaxsparse_csr_sddmm", JaxsparseCsrSddmm},
    {"jaxsparse_csr_matmul_pullback", JaxsparseCsrMatmulPullback},
    {"jaxsparse_csr_transpose", JaxsparseCsrTranspose},
    {"jaxsparse_csr_union", JaxsparseCsrUnion},
    {"jaxsparse_csr_positions", JaxsparseCsrPositions},
    {"jaxsparse_csr_product_counts", JaxsparseCsrProductCounts},
    {"jaxsparse_csr_product_fill", JaxsparseCsrProductFill},
    {"jaxsparse_dia_matmul", JaxsparseDiaMatmul},
    {"jaxsparse_dia_matmul_t", JaxsparseDiaMatmulT},
    {"jaxsparse_dia_sddmm", JaxsparseDiaSddmm},
    {"jaxsparse_dia_banded_lu", JaxsparseDiaBandedLu},
    {"jaxsparse_banded_lu_solve", JaxsparseBandedLuSolve},
    {"jaxsparse_dia_banded_solve", JaxsparseDiaBandedSolve},
    {"jaxsparse_dia_banded_adjoint", JaxsparseDiaBandedAdjoint},
    {"jaxsparse_dia_banded_solve_keeping", JaxsparseDiaBandedSolveKeeping},
    {"jaxsparse_dia_banded_factored_solve", JaxsparseDiaBandedFactoredSolve},
    {"jaxsparse_dia_banded_factored_adjoint", JaxsparseDiaBandedFactoredAdjoint},
    {"jaxsparse_dia_tridiagonal_solve_keeping", JaxsparseDiaTridiagonalSolveKeeping},
    {"jaxsparse_dia_tridiagonal_kept_solve", JaxsparseDiaTridiagonalKeptSolve},
    {"jaxsparse_dia_tridiagonal_kept_adjoint", JaxsparseDiaTridiagonalKeptAdjoint},
    {"jaxsparse_ilu0_factor", JaxsparseIlu0Factor},
    {"jaxsparse_ilu0_apply", JaxsparseIlu0Apply},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, JAXSPARSE_STRING(JAXSPARSE_MODULE),
                       "jaxsparse's native CPU kernels as XLA FFI handlers.", -1, nullptr};

}  // namespace

PyMODINIT_FUNC JAXSPARSE_INIT(JAXSPARSE_MODULE)(void) {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  PyObject* targets = PyDict_New();
  if (targets == nullptr || PyModule_AddObject(module, "targets", targets) < 0) {
    Py_XDECREF(targets);
    Py_DECREF(module);
    return nullptr;
  }
  for (const Target& target : kTargets) {
    PyObject* capsule = PyCapsule_New(reinterpret_cast<void*>(target.handler), nullptr, nullptr);
    if (capsule == nullptr || PyDict_SetItemString(targets, target.name, capsule) < 0) {
      Py_XDECREF(capsule);
      Py_DECREF(module);
      return nullptr;
    }
    Py_DECREF(capsule);
  }
  return module;
}
