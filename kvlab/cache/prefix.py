"""A GPU and a CPU tier of KV blocks that serve each request's longest cached prefix.

What every design shares (the write policies in ``kvlab/cache/write_policies.py`` add how the tiers are
filled):

* Lookup: the request's leading blocks found on the GPU, continued by the leading blocks after
  them found on the CPU, are reused; everything from the first block found on neither tier is
  recomputed (a cached block after a missing one cannot be used: its KV depends on the prefix).
* The GPU: every block of the request is accessed there (a GPU hit refreshed, a CPU load placed
  there, a computed block stored there).
* Only full blocks are stored unless ``partial_blocks="keep"``: vLLM caches only full blocks, and
  LMCache does not save the last partial chunk.
* Order within a request (``eviction_order``): ``tail-first`` (default) accesses the blocks tail
  to head, so the head is the most recent and a request's tail is evicted before its head, as
  vLLM frees a finished request's blocks tail first and LMCache touches a hit prefix tail to
  head; the reusable prefix survives longest. ``head-first`` accesses them head to tail.
* Each tier's eviction policy is chosen by name (``kvlab/cache/eviction``); ``opt`` needs the whole
  workload first (``foresee``).

Tier calls are batched: one per request, tier and run of blocks with the same treatment.
"""

from kvlab.util.settings import setting as declared

from .eviction import EVICTION_POLICIES
from .eviction.opt import Future

__all__ = ["EVICTION_ORDERS", "PARTIAL_BLOCKS", "PrefixCache", "apply_runs", "tier_policies"]

EVICTION_ORDERS = ("tail-first", "head-first")
PARTIAL_BLOCKS = ("drop", "keep")


class PrefixCache:
    """Two tiers of blocks of ``block_tokens`` tokens; rooms in tokens (a CPU room of 0: no CPU tier), or in the
    unit of ``blocks``' sizes where it is given (:mod:`kvlab.cache.costs`).

    Subclasses are the write policies: the CPU's part before and after the GPU's (:meth:`cpu_before`,
    :meth:`cpu_after`), which the time-aware replay (``kvlab/simulator``) also calls on its own GPU pool.
    """

    takes_victims = False  # whether cpu_after takes what left the GPU (write-back)

    name = ""

    def __init__(
        self,
        gpu_room,
        cpu_room,
        block_tokens,
        partial_blocks="drop",
        eviction_order="tail-first",
        gpu_eviction="lru",
        cpu_eviction="lru",
        blocks=None,
        cpu_tier=None,
    ):
        tiers = (("gpu_eviction", gpu_eviction, gpu_room), ("cpu_eviction", cpu_eviction, cpu_room))
        gpu, cpu = check_settings(block_tokens, partial_blocks, eviction_order, tiers)
        self.gpu = gpu(gpu_room)
        self.cpu = cpu(cpu_room) if cpu_tier is None else cpu_tier  # a tier several caches share (kvlab/fleet/)
        self.block_tokens = block_tokens
        self.keep_partial = partial_blocks == "keep"
        self.tail_first = eviction_order == "tail-first"
        self.blocks = blocks or Blocks  # makes a request's Blocks: their sizes (kvlab/cache/costs.py: bytes)
        self._offline = [tier for tier in (self.gpu, self.cpu) if tier.offline]
        self._futures = None

    @property
    def offline(self):
        """True when a tier needs the workload's future: call ``foresee`` before serving."""
        return bool(self._offline)

    def tiers(self):
        """The tiers a lookup walks, in order (a router reads them: kvlab/fleet/routers/prefix.py)."""
        return self.gpu, self.cpu

    def foresee(self, requests):
        """Learn the whole workload for the offline tiers: :class:`kvlab.workloads.stream.Columns` (dense keys, as the
        replay gives them) or ``(keys, tokens)`` per request in serving order.

        The GPU's future is every next request of a block. The CPU's is every next request that
        needs the block from the CPU, past the prefix the GPU will serve then: the GPU evolves the
        same way whatever the CPU does, so a GPU-only replay tells.
        """
        from kvlab.workloads.stream import Columns

        typed = isinstance(requests, Columns)
        if not typed:
            requests = list(requests)

        def future(skips=None):
            if typed:
                return Future.of_columns(requests.keys, requests.counts, skips)
            return Future([keys for keys, _ in requests], skips)

        futures = {}
        if self.gpu.offline:
            futures[self.gpu] = future()
        if self.cpu.offline:
            futures[self.cpu] = future(self._gpu_prefixes(requests))
        for tier, future in futures.items():
            tier.future = future
        self._futures = list(futures.values())

    def _gpu_prefixes(self, requests):
        """The GPU prefix of every request, from a replay of this cache's GPU tier alone."""
        from kvlab.workloads.stream import Columns, requests_of

        gpu_only = type(self)(
            self.gpu.capacity,
            0,
            self.block_tokens,
            partial_blocks="keep" if self.keep_partial else "drop",
            eviction_order="tail-first" if self.tail_first else "head-first",
            gpu_eviction=self.gpu.name,
        )
        if gpu_only.offline:
            gpu_only.foresee(requests)
        if isinstance(requests, Columns):
            requests = ((keys, tokens) for _, _, keys, tokens in requests_of(requests))
        return [gpu_only.serve(keys, tokens)[0] for keys, tokens in requests]

    def serve(self, keys, tokens):
        """Serve one request; return ``(gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens)`` it reused.

        ``keys`` are the request's block keys head first; ``tokens`` its length, which makes every
        block ``block_tokens`` long except perhaps the last.
        """
        count = len(keys)
        if not count:
            return 0, 0, 0, 0
        block = self.block_tokens
        if self.blocks is Blocks:
            gpu_end = self.gpu.prefix_end(keys)
            cpu_end = self.cpu.prefix_end(keys, gpu_end)
        else:  # blocks of layer groups: their own lookup (kvlab/cache/costs.py)
            gpu_end, cpu_end = self.blocks.lookup(keys, tokens, block, self.keep_partial, self.gpu, self.cpu)
        gpu_tokens = min(gpu_end * block, tokens)
        cpu_tokens = min(cpu_end * block, tokens) - gpu_tokens
        if self._offline:
            if self._futures is None:
                raise RuntimeError("an opt tier needs the workload first: call foresee()")
            for future in self._futures:
                future.advance(keys)
            for tier in self._offline:
                tier.reprioritize(keys)
        self._write(self.blocks(keys, tokens, block, self.keep_partial), gpu_end, cpu_end)
        return gpu_end, cpu_end - gpu_end, gpu_tokens, cpu_tokens

    def _write(self, blocks, gpu_end, cpu_end):
        """Fill the tiers after the lookup: GPU blocks ``[0, gpu_end)``, CPU blocks ``[gpu_end, cpu_end)``."""
        self.cpu_before(blocks, gpu_end, cpu_end)
        victims = None
        if self.takes_victims:
            victims = self.gpu.victims = []
        self._fill_gpu(blocks, gpu_end)
        self.gpu.victims = None
        self.cpu_after(blocks, gpu_end, cpu_end, victims)

    def cpu_before(self, blocks, gpu_end, cpu_end):
        """The CPU's part before the GPU takes the request's blocks (nothing, but in write-back)."""

    def cpu_after(self, blocks, gpu_end, cpu_end, victims=None, gpu=None):
        """The CPU's part after the GPU took them; ``victims``: ``(key, size)`` of what left the GPU meanwhile (with
        :attr:`takes_victims`), ``gpu`` what holds the GPU's blocks (the GPU tier, or the engine's pool)."""
        raise NotImplementedError

    def _apply(self, keys, runs):
        apply_runs(keys, runs, self.tail_first)

    def _fill_gpu(self, blocks, gpu_end):
        """The GPU's part, the same in every design: refresh its hits, store everything else."""
        gpu, stored = self.gpu, blocks.stored
        hit = gpu_end if gpu_end < stored else stored
        self._apply(blocks.keys, blocks.runs(gpu.touch_all, 0, hit) + blocks.runs(gpu.access_all, hit, stored))

    def __repr__(self):
        return f"{type(self).__name__}(gpu={self.gpu!r}, cpu={self.cpu!r})"


def apply_runs(keys, runs, tail_first):
    """Run the ``(method, start, end, size)`` calls, given head to tail, on ``keys[start:end]`` in the eviction
    order (``tail_first``: each run and the runs themselves tail to head)."""
    if tail_first:
        for method, start, end, size in reversed(runs):
            method(keys[end - 1 : start - 1 if start else None : -1], size)
    else:
        for method, start, end, size in runs:
            method(keys[start:end], size)


class Blocks:
    """A request's blocks: ``stored`` of them can be cached (all full ones, and the last partial one if kept)."""

    __slots__ = ("keys", "block", "last", "full", "stored")

    def __init__(self, keys, tokens, block, keep_partial):
        count = len(keys)
        self.keys = keys
        self.block = block
        self.last = tokens - block * (count - 1)  # size of the last block
        self.full = count if self.last == block else count - 1  # blocks before a last partial one
        self.stored = count if keep_partial else self.full

    def runs(self, method, start, end):
        """``(method, start, end, size)`` for blocks ``[start, end)`` (``end <= stored``): the full ones, then
        the partial one."""
        if start >= end:
            return []
        full = self.full
        if end <= full:
            return [(method, start, end, self.block)]
        partial = (method, full, end, self.last)  # end is full + 1: the kept partial block
        return [(method, start, full, self.block), partial] if start < full else [partial]


def partial_blocks_setting(group=None):
    """The ``partial_blocks`` setting, as every command that takes it declares it (kvlab/util/settings.py)."""
    return declared(
        "drop",
        choices=PARTIAL_BLOCKS,
        group=group,
        help="store a request's last partial block or not (default %(default)s: only full blocks are cached)",
    )


def eviction_order_setting(group=None):
    """The ``eviction_order`` setting, as every command that takes it declares it."""
    return declared(
        "tail-first",
        choices=EVICTION_ORDERS,
        group=group,
        help="within a request, evict the tail before the head (default %(default)s, as vLLM and LMCache) or the"
        " head first",
    )


def check_settings(block_tokens, partial_blocks, eviction_order, tiers):
    """The block rules and each tier's ``(setting, eviction policy, room)`` checked, in the order a cache is made:
    a bad one is a ValueError naming it. Return the tiers' eviction policies (classes)."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens!r}")
    choose("partial_blocks", partial_blocks, PARTIAL_BLOCKS)
    choose("eviction_order", eviction_order, EVICTION_ORDERS)
    return tier_policies(partial_blocks, tiers)


def tier_policies(partial_blocks, tiers):
    """Each tier's ``(setting, eviction policy, room)`` checked (a known policy, a room >= 0, one that counts entries
    only with blocks of one size); its eviction policies (classes)."""
    policies = []
    for setting, name, room in tiers:
        policies.append(choose(setting, name, EVICTION_POLICIES))
        if room < 0:  # as the tier itself says (kvlab/cache/eviction/base.py)
            raise ValueError(f"capacity must be >= 0, got {room!r}")
    if partial_blocks == "keep":
        for (setting, _, _), policy in zip(tiers, policies, strict=True):
            if policy.equal_sizes:
                raise ValueError(f"{setting} {policy.name} needs equal-sized blocks: partial_blocks drop")
    return policies


def choose(setting, value, valid):
    """``valid[value]`` (or ``value`` if valid is a sequence); a bad name: ValueError listing the valid ones."""
    if value not in valid:
        raise ValueError(f"{setting} must be one of {', '.join(valid)}, got {value!r}")
    return valid[value] if isinstance(valid, dict) else value
