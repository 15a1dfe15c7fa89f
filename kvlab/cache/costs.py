"""Blocks sized in bytes by layer group, for models whose cached bytes are not proportional to tokens.

A sliding-window layer needs a request's KV only for its last ``window - 1`` tokens: vLLM's hybrid KV-cache
manager frees a window layer's blocks once no later token can attend to them (``SlidingWindowManager``,
``remove_skipped_blocks``, ``vllm/v1/core/single_type_kv_cache_manager.py``; docs/engines.md, section 4). The
rule modelled here, on both tiers: a block costs its full-attention (and indexer) bytes for every token, and
the window layers' bytes only when it holds one of the last ``window - 1`` tokens of the request that stored
it (pages are whole: such a block costs the window layers for all its tokens).

A cached prefix is a hit only where the window layers' blocks before its end are there too: a hit of ``n``
tokens needs, in whichever tier serves them, the window layers of every block holding one of the
``window - 1`` tokens before token ``n`` (``SlidingWindowManager.find_longest_cache_hit``; the hybrid
coordinator takes the longest prefix every group can serve), so a hit shrinks to the longest prefix whose
window is whole. A block's key names its contents, so one key has one length, and its size tells whether the
window layers came with it. A block the request computes inside its window, cached without its window
layers, is stored again with them.

For the CPU tier this assumes vLLM's offloading keeps what the GPU keeps: its per-group store skips the window
group's freed blocks (PR #39403), but whether a long prefill's blocks are stored before they leave the window
depends on the chunked-prefill step, which is not modelled (docs/engines.md, "Not verified"). LMCache's chunks
hold every layer for every token: there :class:`~kvlab.cache.prefix.Blocks` in tokens times all layers' bytes
is exact.
"""

from .prefix import Blocks

__all__ = ["WINDOW_RULES", "WindowCosts"]

WINDOW_RULES = ("all-layers", "in-window")  # LMCache's rule, and vLLM's hybrid allocator's


class WindowCosts:
    """Makes a request's :class:`WindowBlocks`: ``per_token`` bytes of the layers every token keeps, and
    ``window_per_token`` bytes of the window layers, kept for the last ``window - 1`` tokens."""

    def __init__(self, per_token, window_per_token, window):
        if per_token < 0 or window_per_token < 0 or window < 1:
            raise ValueError(f"bad costs: {per_token}, {window_per_token} bytes per token, window {window}")
        self.per_token = per_token
        self.window_per_token = window_per_token
        self.window = window

    def __call__(self, keys, tokens, block, keep_partial):
        return WindowBlocks(keys, tokens, block, keep_partial, self)

    def lookup(self, keys, tokens, block, keep_partial, gpu, cpu):
        """``(gpu_end, cpu_end)``: the blocks the GPU serves, then the CPU after them (the rule in the module's
        docstring); copies without the window layers of blocks this request computes inside its window are
        dropped, to be stored again with them."""
        count = len(keys)
        last = tokens - block * (count - 1)
        retained = self.window - 1

        def whole(tier, index):  # the block is in the tier with its window layers
            size = tier.size_of(keys[index])
            length = block if index < count - 1 else last
            return size is not None and (not self.window_per_token or size > length * self.per_token)

        def usable(end, floor, tier_of):  # the longest hit up to ``end`` whose window is whole (at least floor)
            while end > floor:
                first = max(0, min(end * block, tokens) - retained) // block if retained else end
                missing = [index for index in range(first, end) if not whole(tier_of(index), index)]
                if not missing:
                    return end
                end = max(missing[-1], floor)
            return floor

        gpu_end = usable(gpu.prefix_end(keys), 0, lambda index: gpu)
        cpu_end = usable(cpu.prefix_end(keys, gpu_end), gpu_end, lambda index: gpu if index < gpu_end else cpu)
        if self.window_per_token:
            blocks = WindowBlocks(keys, tokens, block, keep_partial, self)
            for tier, start in ((gpu, gpu_end), (cpu, cpu_end)):
                for index in range(max(start, blocks.inside), blocks.stored):
                    if tier.size_of(keys[index]) is not None and not whole(tier, index):
                        tier.discard(keys[index])
        return gpu_end, cpu_end

    def most(self, tokens):
        """The most bytes a block of ``tokens`` tokens can cost."""
        return tokens * (self.per_token + self.window_per_token)

    def __repr__(self):
        return f"WindowCosts({self.per_token}, {self.window_per_token}, {self.window})"


class WindowBlocks(Blocks):
    """A request's blocks with sizes in bytes: those before ``inside`` without the window layers."""

    __slots__ = ("costs", "inside")

    def __init__(self, keys, tokens, block, keep_partial, costs):
        super().__init__(keys, tokens, block, keep_partial)
        self.costs = costs
        retained = costs.window - 1  # the request's last tokens the window layers keep
        self.inside = max(0, tokens - retained) // block if retained else len(keys)  # the first block holding one

    def runs(self, method, start, end):
        costs, inside = self.costs, self.inside
        split = []
        for call, first, last, size in super().runs(method, start, end):
            if first < inside:
                split.append((call, first, min(last, inside), size * costs.per_token))
            if last > inside:
                split.append((call, max(first, inside), last, costs.most(size)))
        return split
