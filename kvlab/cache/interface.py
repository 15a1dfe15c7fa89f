"""The one interface of a two-tier cache, and the settings that build one.

Every cache the replay (``kvlab/loop.py``) serves a workload through is a :class:`Cache`: the
reference (``PrefixCache`` and its write policies, ``kvlab/cache/prefix.py``, ``write_policies.py``), the
compiled (``CompiledLRU``, ``kvlab/cache/compiled.py``) and a server's own design (``LlamaCppServer``,
``kvlab/serving/llama_cpp.py``). Each serves one request at a time (``serve``); a cache that also serves a
typed batch at once (``serve_batch``) is a :class:`BatchCache`, and the replay reads it the workload's batches.

:class:`CacheSettings` are a cache's settings as the commands take them: its fields are the flags
(``--gpu-tokens`` ...) and the config keys (``gpu_tokens`` ...), in the order the replay reports them, checked
when made; :meth:`CacheSettings.build` makes the cache. They are defined beside the write policies they name
and build (``kvlab/cache/write_policies.py``, which the workflow reads the setting names from: it imports
nothing above it) and given here with the interface.
"""

from typing import Protocol, runtime_checkable

from .write_policies import CACHE_SETTINGS, ROOMS, CacheSettings

__all__ = ["CACHE_SETTINGS", "ROOMS", "BatchCache", "CacheSettings", "Cache"]


@runtime_checkable
class Cache(Protocol):
    """A GPU and a CPU tier of KV blocks that serve each request's cached prefix."""

    block_tokens: int  # tokens per block: a request's blocks are all this long but perhaps its last
    offline: bool  # True: ``foresee`` the whole workload before the first ``serve``

    def foresee(self, columns) -> None:
        """Learn the whole workload (:class:`kvlab.workloads.stream.Columns`) before serving it; only an
        offline engine needs to."""

    def serve(self, keys, tokens) -> tuple[int, int, int, int]:
        """Serve one request (its block keys head first, its length); return ``(gpu_blocks, cpu_blocks,
        gpu_tokens, cpu_tokens)`` it reused."""


@runtime_checkable
class BatchCache(Cache, Protocol):
    """A cache that serves typed batches of requests (dense keys) at once: the replay's fast path."""

    def serve_batch(self, columns, totals, served=None) -> None:
        """Serve a batch (:class:`kvlab.workloads.stream.Columns`): add each round's counters to ``totals`` (rounds
        x the replay's COUNTERS) and, with ``served`` (requests x 4), write what ``serve`` returns per request."""
