"""Exact LRU curves: the hits at every room from one pass (``stack_distance``), per tier and round (``mrc``)."""
