"""Adaptive Replacement Cache (Megiddo & Modha, FAST 2003), the policy vLLM offers for CPU offload.

The published algorithm counts pages: here ``c`` is the number of equal-sized blocks that fit in
the room. T1/T2 hold the cached blocks seen once/at least twice recently, B1/B2 the ghosts of
those evicted from them; the target size ``p`` of T1 adapts on ghost hits (exactly, as a
fraction). One addition: ``discard`` (a write-back CPU hit moving to the GPU) removes a block
without a ghost, and REPLACE then runs only when the cache is full, which is always the case in
the published algorithm, where nothing leaves but by REPLACE.
"""

from collections import OrderedDict
from fractions import Fraction

from .base import EvictionPolicy

__all__ = ["ARC"]


class ARC(EvictionPolicy):
    """ARC over equal-sized blocks; ``p`` is the adaptive target for T1, in blocks."""

    name = "arc"
    equal_sizes = True

    def __init__(self, capacity):
        super().__init__(capacity)
        self._set_p(Fraction(0))
        self.t1, self.t2 = OrderedDict(), OrderedDict()  # cached; least recently used first
        self.b1, self.b2 = OrderedDict(), OrderedDict()  # ghosts (keys only)

    def _check_size(self, size):
        super()._check_size(size)
        if size == 0:
            raise ValueError("arc counts blocks of at least one token, got size 0")

    def _hit(self, key):  # Case I: x in T1 or T2 -> MRU of T2
        if key in self.t1:
            del self.t1[key]
            self.t2[key] = None
        else:
            self.t2.move_to_end(key)

    def _admit(self, key, size):
        c = self.capacity // size
        t1, t2, b1, b2 = self.t1, self.t2, self.b1, self.b2
        if key in b1:  # Case II: adapt towards recency
            self._set_p(min(self.p + (1 if len(b1) >= len(b2) else Fraction(len(b2), len(b1))), c))
            self._replace(c, False)
            del b1[key]
            t2[key] = None
        elif key in b2:  # Case III: adapt towards frequency
            self._set_p(max(self.p - (1 if len(b2) >= len(b1) else Fraction(len(b1), len(b2))), 0))
            self._replace(c, True)
            del b2[key]
            t2[key] = None
        else:  # Case IV: a new block
            in_l1 = len(t1) + len(b1)
            total = in_l1 + len(t2) + len(b2)
            if in_l1 == c:
                if len(t1) < c:
                    b1.popitem(last=False)
                    self._replace(c, False)
                else:  # B1 is empty: T1's least recent block leaves without a ghost
                    self._evict(next(iter(t1)))
            elif total >= c:
                if total == 2 * c:
                    b2.popitem(last=False)
                self._replace(c, False)
            t1[key] = None
        EvictionPolicy._store(self, key, size)

    def _replace(self, c, in_b2):
        """REPLACE(x, p): demote T1's or T2's least recent block to its ghost list (when the cache is full)."""
        t1 = self.t1
        size = len(t1)
        if size + len(self.t2) < c:
            return
        # |T1| > p and |T1| == p, in integers: for a whole |T1|, |T1| > p exactly when |T1| > floor(p).
        if size and (size > self._p_floor or (in_b2 and self._p_whole and size == self._p_floor)):
            key = next(iter(t1))
            self._evict(key)
            self.b1[key] = None
        else:
            key = next(iter(self.t2))
            self._evict(key)
            self.b2[key] = None

    def _set_p(self, p):
        self.p = p
        self._p_floor = p.numerator // p.denominator
        self._p_whole = p.denominator == 1

    def _remove(self, key):
        if key in self.t1:
            del self.t1[key]
        else:
            del self.t2[key]
        return super()._remove(key)
