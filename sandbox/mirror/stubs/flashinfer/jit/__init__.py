"""Stand-in for ``flashinfer.jit``: where kernels come from (AOT jit-cache or JIT)."""
