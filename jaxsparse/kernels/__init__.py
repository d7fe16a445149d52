"""Kernels on plain arrays and static Python ints: Pallas kernels per format and the
pure `jax.numpy` reference that serves as the CPU path and the test oracle."""
