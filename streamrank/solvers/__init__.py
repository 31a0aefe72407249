"""TRON and Newton-Cholesky: they see only a function object."""
