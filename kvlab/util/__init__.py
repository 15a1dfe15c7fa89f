"""Utilities with no domain knowledge: reading within limits and the one atomic writer, numbers, the memory meter,
the numba cache."""
