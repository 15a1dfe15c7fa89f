"""Blocks sized in bytes by layer group (kvlab/cache/costs.py): every design against the block-by-block model with
the window rule written out plainly, the rule's two limits (a window longer than every request: all layers; the
window layers costing nothing: full layers only), and the planner's ``in-window`` budgets, which no smaller room
reaches."""

import pytest
from conftest import ROOT, kvlab
from hypothesis import given, settings
from hypothesis import strategies as st
from test_write_policies import VARIANTS, ModelCache, contents, prefix_workloads

from kvlab.cache.costs import WindowCosts
from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
from kvlab.cache.write_policies import make_cache
from kvlab.sizing.model_size import read_model_config

GEMMA_3 = ROOT / "models" / "gemma-3-27b-it" / "config.json"  # 5 window layers of 1,024 tokens to 1 global


def window_rule(block, per_token, window_per_token, window):
    """A block's bytes, as the rule says it: every token's full layers, and the window layers for all its tokens
    when its last token is one of the request's last ``window - 1``."""

    def cost(index, length, tokens):
        last_token = index * block + length - 1  # 0-based position of the block's last token
        kept = last_token >= tokens - (window - 1)
        return length * per_token + (length * window_per_token if kept else 0)

    return cost


def named_by_length(workload, block):
    """The requests with a partial last block's key naming its length: a block's key names its contents, so that
    one key has one size (as in every workload kvlab reads), which the window rule relies on."""
    named = []
    for keys, tokens in workload:
        last = tokens - block * (len(keys) - 1)
        named.append((keys if last == block else [*keys[:-1], ("partial", keys[-1], last)], tokens))
    return named


class WindowModel(ModelCache):
    """The block-by-block model with vLLM's hybrid lookup written out: of all prefixes on the tiers (the GPU's
    first), the longest whose window is whole: every block holding one of the ``window - 1`` tokens before the
    hit's end is there with its window layers (a size above its full layers' bytes). A block computed inside the
    request's window and cached without them is dropped first, to be stored again."""

    def __init__(self, *args, block, per_token, window_per_token, window, **kwargs):
        super().__init__(*args, cost=window_rule(block, per_token, window_per_token, window), **kwargs)
        self.per_token, self.window_per_token, self.window = per_token, window_per_token, window

    def whole(self, tier, key, length):
        position = tier.index(key)
        if position is None:
            return False
        return self.window_per_token == 0 or tier.entries[position][1] > length * self.per_token

    def hit(self, tiers, keys, tokens, lengths, end):
        """Whether the first ``end`` blocks, block ``i`` from ``tiers[i]``, are a hit."""
        if not all(keys[index] in tiers[index] for index in range(end)):
            return False
        hit_tokens = sum(lengths[:end])
        for index in range(end):
            last_token = sum(lengths[: index + 1]) - 1
            if last_token >= hit_tokens - (self.window - 1) and not self.whole(
                tiers[index], keys[index], lengths[index]
            ):
                return False
        return True

    def lookup(self, keys, tokens, lengths):
        count = len(keys)
        gpu_end = max(end for end in range(count + 1) if self.hit([self.gpu] * count, keys, tokens, lengths, end))
        tiers = [self.gpu] * gpu_end + [self.cpu] * (count - gpu_end)
        cpu_end = max(end for end in range(gpu_end, count + 1) if self.hit(tiers, keys, tokens, lengths, end))
        stored = count if self.keep or lengths[-1] == self.block else count - 1
        for tier, start in ((self.gpu, gpu_end), (self.cpu, cpu_end)):
            for index in range(start, stored):
                inside = sum(lengths[: index + 1]) - 1 >= tokens - (self.window - 1)
                if inside and self.window_per_token and keys[index] in tier:
                    if not self.whole(tier, keys[index], lengths[index]):
                        tier.discard(keys[index])
        return gpu_end, cpu_end


@pytest.mark.parametrize("partial", PARTIAL_BLOCKS)
@pytest.mark.parametrize("order", EVICTION_ORDERS)
@pytest.mark.parametrize(("design", "touch", "re_store"), VARIANTS)
@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    block=st.integers(1, 4),
    per_token=st.integers(1, 3),  # every block costs something, as a model's full layers make it
    window_per_token=st.integers(0, 3),
    window=st.integers(1, 12),
    gpu=st.integers(0, 60),
    cpu=st.integers(0, 60),
)
def test_window_costs_equal_the_block_by_block_model(
    design, touch, re_store, order, partial, data, block, per_token, window_per_token, window, gpu, cpu
):
    workload = named_by_length(data.draw(prefix_workloads(block, uniform=False)), block)
    switches = {"touch_cpu_on_gpu_hit": True} if touch else {}
    if re_store:
        switches["re_store_on_gpu_hit"] = True
    costs = WindowCosts(per_token, window_per_token, window)
    cache = make_cache(design, gpu, cpu, block, partial_blocks=partial, eviction_order=order, blocks=costs, **switches)
    model = WindowModel(
        design,
        gpu,
        cpu,
        block,
        partial == "keep",
        order == "tail-first",
        touch,
        re_store,
        block=block,
        per_token=per_token,
        window_per_token=window_per_token,
        window=window,
    )
    for keys, tokens in workload:
        assert cache.serve(keys, tokens) == model.serve(keys, tokens), (keys, tokens)
        assert contents(cache.gpu) == contents(model.gpu)
        assert contents(cache.cpu) == contents(model.cpu)


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    design=st.sampled_from(["write-through", "write-back", "selective"]),
    block=st.integers(1, 4),
    per_token=st.integers(1, 3),
    window_per_token=st.integers(1, 3),
    gpu=st.integers(0, 24),
    cpu=st.integers(0, 24),
)
def test_the_rule_between_its_limits(data, design, block, per_token, window_per_token, gpu, cpu):
    """A window no request fills is all layers for every token (rooms scaled by the bytes of a token); window layers
    of no bytes are the full layers alone: both as a cache in tokens."""
    workload = named_by_length(data.draw(prefix_workloads(block, uniform=False)), block)
    longest = max((tokens for _, tokens in workload), default=0)
    every = per_token + window_per_token
    limits = [
        (WindowCosts(per_token, window_per_token, longest + 1), every),
        (WindowCosts(per_token, 0, 1), per_token),
    ]
    for costs, scale in limits:
        costed = make_cache(design, gpu * scale, cpu * scale, block, partial_blocks="keep", blocks=costs)
        plain = make_cache(design, gpu, cpu, block, partial_blocks="keep")
        for keys, tokens in workload:
            assert costed.serve(keys, tokens) == plain.serve(keys, tokens)
        assert costed.gpu.used == plain.gpu.used * scale and costed.cpu.used == plain.cpu.used * scale


def test_bad_costs_are_refused():
    for args in ((-1, 1, 1), (1, -1, 1), (1, 1, 0)):
        with pytest.raises(ValueError, match="bad costs"):
            WindowCosts(*args)


PLAN = ["plan", "--workload", "lab", "--model-config", GEMMA_3, "--gpu-gib", "1", "--cpu-gib", "2"]


def plan(*args):
    import json

    done = kvlab(*PLAN, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_in_window_budgets_are_the_smallest_rooms_that_reach_them():
    """The ``in-window`` plan of a window model: its figures are a replay in bytes at its rooms, its budgets reach
    their hits and one byte less does not, and it needs less CPU than ``all-layers``."""
    from kvlab.loop import overall, replay
    from kvlab.workloads import LabWorkload

    result = plan("--window-rule", "in-window", "--target-hit-ratio", "0.5")
    shape = read_model_config(GEMMA_3)
    per_token = shape.bytes_per_token(windows=True)
    window = shape.window_layers * shape.attention_bytes()
    costs = WindowCosts(per_token - window, window, shape.window)
    workload = LabWorkload(result["cache"]["chunk_tokens"])  # the plan's: the lab's defaults
    gpu = result["cache"]["gpu_tokens"] * per_token

    def hits(cpu):
        cache = make_cache("write-through", gpu, cpu, workload.block_tokens, blocks=costs)
        counters = overall(replay(workload, cache))
        return counters[5] + counters[6], counters[2]

    got, inputs = hits(2 * 2**30)
    assert got == result["gpu_hit_tokens"] + result["cpu_hit_tokens"] and inputs == result["input_tokens"]
    most, _ = hits(10**15)
    assert round(most / inputs, 6) == result["max_token_hit_ratio"]
    for tokens, goal in ((result["cpu_tokens_for_full_reuse"], most), (result["cpu_tokens_for_target"], inputs / 2)):
        room = None
        low, high = 0, tokens * per_token  # the byte budget lies in the token figure's last token
        assert hits(high)[0] >= goal
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if hits(middle)[0] >= goal else (middle + 1, high)
        room = low
        assert -(-room // per_token) == tokens and hits(room - 1)[0] < goal <= hits(room)[0]
    everything = plan("--window-rule", "all-layers")
    assert result["cpu_gib_for_full_reuse"] < everything["cpu_gib_for_full_reuse"]
    assert result["cache"]["window_rule"] == "in-window" and everything["cache"]["window_rule"] == "all-layers"


def test_the_engine_chooses_the_rule():
    assert plan("--engine", "vllm")["cache"]["window_rule"] == "in-window"
    for engine in ("lmcache", "sglang"):
        assert plan("--engine", engine)["cache"]["window_rule"] == "all-layers"
    assert plan()["cache"]["window_rule"] == "all-layers"
