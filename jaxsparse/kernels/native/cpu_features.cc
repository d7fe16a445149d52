// The Python extension module `jaxsparse.kernels._native_cpu`: `has_avx2_fma()`, whether
// this CPU (and its operating system) runs AVX2 and FMA instructions, so that
// `kernels/_native_library.py` picks the kernel build to load. Built apart from the
// kernels, for any CPU, so it answers wherever either kernel build is installed.

#include <Python.h>

namespace {

PyObject* HasAvx2Fma(PyObject*, PyObject*) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return PyBool_FromLong(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
  Py_RETURN_FALSE;
#endif
}

PyMethodDef kMethods[] = {
    {"has_avx2_fma", HasAvx2Fma, METH_NOARGS,
     "Whether this CPU runs AVX2 and FMA instructions (the `_native_ffi_avx2` build)."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native_cpu",
                       "The CPU features that choose jaxsparse's native kernel build.", -1,
                       kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__native_cpu(void) { return PyModule_Create(&kModule); }
