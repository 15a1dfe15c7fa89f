"""Eviction policies of a cache tier, by name (adding one: a class in its own module, a line here)."""

from .arc import ARC
from .base import EvictionPolicy
from .fifo import FIFO
from .lfu import LFU
from .lru import LRU
from .opt import OPT, Future

__all__ = ["EVICTION_POLICIES", "EvictionPolicy", "Future", "ARC", "FIFO", "LFU", "LRU", "OPT"]

EVICTION_POLICIES = {
    LRU.name: LRU,
    FIFO.name: FIFO,
    LFU.name: LFU,
    ARC.name: ARC,
    OPT.name: OPT,
}
