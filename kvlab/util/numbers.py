"""The numbers every layer shares, defined once (the lab's three standard-library files keep their own copies:
they must run alone)."""

__all__ = ["GIB", "MAX_WHOLE"]

MAX_WHOLE = 2**53  # any count of tokens, blocks, documents or bytes, and timestamps: exact as a float and in int64 sums
GIB = 2**30  # a GiB (gibibyte): every budget in kvlab is in GiB of 2**30 bytes
