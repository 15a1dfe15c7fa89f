"""How many KV blocks the engine's GPU pool holds: vLLM's rule as aiconfigurator-core prices it.

vLLM gives the KV cache what is left of ``gpu_memory_utilization`` x the GPU's memory after the weights, the peak
activations of a profiling pass of ``max_num_batched_tokens`` tokens and the runtime's own (``vllm/v1/worker/
gpu_worker.py`` ``determine_available_memory``). aiconfigurator-core 0.12.0 estimates the parts
(``sdk/backends/base_backend.py`` ``_get_memory_usage``: activations ``2 x tokens x heads x head_dim x`` a
coefficient per model family and TP degree, ``trtllm_backend.py`` ``ACTIVATION_COEFFICIENTS``, which its vLLM
backend shares; ``nccl_mem`` and ``other_mem`` from the system's file), and aisimulate sizes its pool so: 6,765
blocks of 64 tokens for Llama-3.1-8B on one h100_sxm.
"""

from dataclasses import dataclass

from kvlab.util.errors import SettingError

__all__ = ["PoolRule", "gpu_pool"]

# aiconfigurator-core 0.12.0 sdk/backends/trtllm_backend.py ACTIVATION_COEFFICIENTS (vllm_backend.py shares them)
ACTIVATION_COEFFICIENTS = {
    "llama": {1: 11, 2: 6.5, 4: 5, 8: 5},
    "moe": {1: 22, 2: 13, 4: 10, 8: 10},
    "default": {1: 10, 2: 6, 4: 5, 8: 5},
}
MIN_ACTIVATION_BYTES = 70 * 1024 * 1024  # base_backend.py's floor (TRT-LLM's 70 MiB)
NCCL_DEFAULT = {1: 0, 2: 358612992, 4: 411041792, 8: 411041792}  # h100_sxm.yaml misc.nccl_mem, where a file has none


@dataclass(frozen=True)
class PoolRule:
    """The parts of the rule, in bytes per GPU, and the blocks they leave."""

    budget: float
    weights: float
    activations: float
    runtime: float
    block_bytes: int
    blocks: int

    def describe(self):
        gib = 1 << 30
        return {
            "rule": "gpu_memory_utilization x memory - weights - activations - runtime (vLLM; aiconfigurator-core's"
            " estimates: kvlab/engine/memory.py)",
            "budget_gib": round(self.budget / gib, 3),
            "weights_gib": round(self.weights / gib, 3),
            "activations_gib": round(self.activations / gib, 3),
            "runtime_gib": round(self.runtime / gib, 3),
            "blocks": self.blocks,
        }


def gpu_pool(model, block_tokens, utilization, batched_tokens):
    """The :class:`PoolRule` of a :class:`kvlab.latency.hardware.HardwareModel`'s model and system."""
    from kvlab.latency.shape import HeadsOnly, read_compute_shape
    from kvlab.sizing.model_size import ModelConfigError

    settings, system = model.settings, model.system
    if not system.mem_capacity:
        raise SettingError(f"--gpu-system {system.name}: its file gives no gpu.mem_capacity: give --gpu-blocks")
    try:
        shape = model.shape or read_compute_shape(settings.model_config)
    except HeadsOnly:
        raise SettingError(
            f"{settings.model_config}: vLLM's GPU memory rule needs the model's weights, which kvlab reads for"
            " attention models with heads only (not latent attention, a recurrent state or an indexer):"
            " give --gpu-blocks"
        ) from None
    except (ModelConfigError, ValueError) as error:
        raise SettingError(f"--model-config: {error}") from None
    tp = settings.tp
    weights = shape.weights() * shape.weight_bytes / tp
    family = "moe" if shape.experts > 1 else "llama" if shape.model_type == "llama" else "default"
    clamped = min(tp, 8)
    coefficients = ACTIVATION_COEFFICIENTS[family]
    coefficient = coefficients.get(clamped, coefficients[max(key for key in coefficients if key <= clamped)])
    activations = max(2 * batched_tokens * shape.heads * shape.head_dim * coefficient, MIN_ACTIVATION_BYTES)
    runtime = system.other_mem + NCCL_DEFAULT.get(clamped, NCCL_DEFAULT[8])
    budget = utilization * system.mem_capacity
    block_bytes = model.bytes_per_token * block_tokens
    blocks = int((budget - weights - activations - runtime) // block_bytes)
    if blocks < 1:
        gib = 1 << 30
        figures = (
            f"the budget of {budget / gib:,.1f} GiB (--gpu-memory-utilization x memory) less the weights'"
            f" {weights / gib:,.1f} GiB, the activations' {activations / gib:,.1f} GiB and the runtime's"
            f" {runtime / gib:,.1f} GiB"
        )
        if budget - weights - MIN_ACTIVATION_BYTES - runtime >= block_bytes:  # the step's budget sized them past room
            remedy = f"a smaller --max-num-batched-tokens than {batched_tokens:,} (the activations are sized by it)"
        else:
            remedy = "a larger --tp"
        raise SettingError(
            f"{settings.model_config}: on {system.name} at tp {tp} no KV block fits in {figures}: give {remedy} or"
            " --gpu-blocks"
        )
    return PoolRule(budget, weights, activations, runtime, block_bytes, blocks)
