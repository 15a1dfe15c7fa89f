"""Measurements in the lab's schema: the SYNTHETIC example (``example``)."""
