"""Block sources, the pair-sweep objectives (fun, grad, hessp) and their preconditioners."""
