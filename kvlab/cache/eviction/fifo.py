"""First in, first out: a hit changes nothing."""

from collections import OrderedDict

from .base import EvictionPolicy

__all__ = ["FIFO"]


class FIFO(EvictionPolicy):
    """Evict the entry stored longest ago, however often it was used since."""

    name = "fifo"

    def _new_store(self):
        # Insertion order; an OrderedDict finds its oldest entry in O(1), where a dict whose front
        # was deleted again and again scans the holes.
        return OrderedDict()

    def _hit(self, key):
        pass

    def _victim(self):
        return next(iter(self._sizes))
