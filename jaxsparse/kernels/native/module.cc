// The Python extension module `jaxsparse.kernels._native_ffi`: one PyCapsule per XLA FFI
// handler, in the dict `targets` (target name -> capsule), for
// `jax.ffi.register_ffi_target(name, capsule, platform="cpu")`.

#include <Python.h>

#include "handlers.h"

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
    {"jaxsparse_dia_matmul", JaxsparseDiaMatmul},
    {"jaxsparse_dia_matmul_t", JaxsparseDiaMatmulT},
    {"jaxsparse_dia_sddmm", JaxsparseDiaSddmm},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native_ffi",
                       "jaxsparse's native CPU kernels as XLA FFI handlers.", -1, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__native_ffi(void) {
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
