"""Private low-level kernels: numba pair sweeps and fixed-order products, BLAS thread control."""
