"""A roofline of one forward pass: where the measured database does not cover a model, system or engine.

Each part of a step takes the longer of its FLOPs over the GPU's dense tensor-core rate and its bytes over
the HBM bandwidth, each scaled by an efficiency (the way BLIS / inference-sim prices a step from
``config.json`` and a GPU table, and aiconfigurator-core's own speed-of-light mode): the linear layers (the
weights, read once per step; of a mixture of experts, the experts the step's tokens are routed to), attention
(causal: the i-th new token attends to the cached prefix and the i new tokens before it; a sliding-window
layer to at most its window), and the lm head of each request's last token. Tensor parallelism splits FLOPs,
weights and KV over the ranks and adds two all-reduces of the step's activations per layer (Megatron's
attention and MLP), a ring over NVLink plus one fixed latency.
A fixed ``overhead_ms`` per step stands for the scheduler and the kernel launches.
"""

from dataclasses import dataclass

__all__ = ["Efficiency", "decode_ms", "prefill_flops", "prefill_ms"]


@dataclass(frozen=True)
class Efficiency:
    """The roofline's factors: the fraction of peak FLOP/s and of HBM bandwidth a kernel reaches, and a fixed
    time per step. 1, 1, 0 is the speed of light (Mooncake's Eq. 2 assumes it)."""

    compute: float = 0.6
    memory: float = 0.8  # aiconfigurator-core's systems/*.yaml mem_bw_empirical_scaling_factor
    overhead_ms: float = 0.0

    def __post_init__(self):
        for name in ("compute", "memory"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"the {name} efficiency must be in (0, 1], got {value!r}")
        if not 0 <= self.overhead_ms <= 1e9:  # kvlab.latency.hardware.NUMBERS' range
            raise ValueError(f"the overhead must be 0 to 1e9 ms, got {self.overhead_ms!r}")


def attended(new, cached, window=None):
    """Sum over the ``new`` tokens of the tokens each attends to (itself included), after ``cached`` ones."""
    total = new * cached + new * (new + 1) // 2
    if window is None or cached + new <= window:
        return total
    # token i (1..new) attends to min(cached + i, window): those past the window are capped at it
    first_capped = max(1, window - cached + 1)
    capped = new - first_capped + 1
    over = sum(range(cached + first_capped, cached + new + 1)) - capped * window
    return total - over


def prefill_flops(shape, tokens, cached, batch=1):
    """``(linear, attention)`` FLOPs of a prefill of ``batch`` requests of ``tokens`` tokens whose first
    ``cached`` are cached (the whole model, before tensor parallelism)."""
    new = tokens - cached
    linear = 2 * batch * new * shape.active_params_per_token() + 2 * batch * shape.hidden * shape.vocab
    per_layer = 4 * shape.heads * shape.head_dim  # QK^T and AV, two FLOPs per multiply-add
    full = shape.kv.layers * attended(new, cached)
    windowed = shape.kv.window_layers * attended(new, cached, shape.kv.window) if shape.kv.window_layers else 0
    return linear, batch * per_layer * (full + windowed)


def all_reduce_ms(system, tokens, hidden, tp, layers, reduce="ring"):
    """Two ring all-reduces per layer of ``tokens x hidden`` 16-bit activations over ``tp`` ranks (``reduce``
    ``none``: none, as Mooncake's Eq. 2 assumes)."""
    if tp == 1 or reduce == "none":
        return 0.0
    size = tokens * hidden * 2
    one = 2 * (tp - 1) / tp * size / system.intra_node_bw + system.p2p_latency_s
    return 2 * layers * one * 1e3


def weights_read(shape, tokens):
    """Weights a step of ``tokens`` tokens reads: every weight but the input embedding's table (a row per token;
    tied, it is the lm head and read), and of each MoE layer's experts only those some token is routed to, in
    expectation under uniform routing (``E (1 - (1 - k / E) ** tokens)``: one decoded token reads ``k`` of them)."""
    read = shape.weights() - (0 if shape.tied else shape.vocab * shape.hidden)
    if shape.experts and shape.moe_layers:
        untouched = shape.experts * (1 - shape.experts_per_token / shape.experts) ** tokens
        read -= shape.moe_layers * untouched * shape.mlp_params(shape.expert_intermediate)
    return read


def step_ms(system, efficiency, linear_flops, weight_bytes, attention_flops, kv_bytes):
    flops = system.bf16_flops * efficiency.compute
    bandwidth = system.mem_bw * efficiency.memory
    linear = max(linear_flops / flops, weight_bytes / bandwidth)
    attention = max(attention_flops / flops, kv_bytes / bandwidth)
    return (linear + attention) * 1e3 + efficiency.overhead_ms


def prefill_ms(shape, system, efficiency, tokens, cached=0, batch=1, tp=1, reduce="ring", kv_dtype="auto"):
    """Milliseconds of one prefill step of ``batch`` requests of ``tokens`` tokens, ``cached`` of them cached."""
    linear, attention = prefill_flops(shape, tokens, cached, batch)
    weights = weights_read(shape, batch * (tokens - cached)) * shape.weight_bytes / tp
    kv = batch * shape.kv.bytes_for(tokens, tp, kv_dtype)  # the prefix read, the new tokens written
    time = step_ms(system, efficiency, linear / tp, weights, attention / tp, kv)
    return time + all_reduce_ms(system, batch * (tokens - cached), shape.hidden, tp, shape.layers, reduce)


def decode_ms(shape, system, efficiency, contexts, tp=1, reduce="ring", kv_dtype="auto"):
    """Milliseconds of one decode step of a batch whose requests hold ``contexts`` tokens each (one new token
    each): the weights once, every request's KV."""
    batch = len(contexts)
    linear = 2 * batch * (shape.active_params_per_token() + shape.hidden * shape.vocab)
    per_layer = 4 * shape.heads * shape.head_dim
    full = shape.kv.layers * sum(contexts)
    windowed = shape.kv.window_layers * sum(min(context, shape.kv.window) for context in contexts)
    kv = sum(shape.kv.bytes_for(context, tp, kv_dtype) for context in contexts)
    weights = weights_read(shape, batch) * shape.weight_bytes / tp
    time = step_ms(system, efficiency, linear / tp, weights, per_layer * (full + windowed) / tp, kv)
    return time + all_reduce_ms(system, batch, shape.hidden, tp, shape.layers, reduce)
