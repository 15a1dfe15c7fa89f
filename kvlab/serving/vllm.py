"""vLLM: what kvlab knows of it (:class:`VLLM`), its scheduler's rules by version (:func:`rules_for`), and its GPU
pool's size (:func:`gpu_pool`).

**Rules by version**: what ``--engine-version`` chooses where the rules changed, each read from that version's
wheel (PyPI ``vllm==X``; the files and lines are 0.33.0's unless said).

Every version kvlab models keeps block 0 out of use (``vllm/v1/core/block_pool.py:191``, ``null_block``), caps a
prefix hit at ``num_tokens - 1`` in whole blocks (``vllm/v1/core/kv_cache_manager.py:302``) and caches full blocks
only (``block_pool.py`` ``cache_full_blocks``, called with ``num_tokens_to_cache`` at ``kv_cache_manager.py:621``).
What changed:

- **0.24.0** (PR #37307): a waiting or preempted request is admitted only if its whole sequence fits in the free
  blocks (``SchedulerConfig.scheduler_reserve_full_isl``, default on: ``vllm/config/scheduler.py:190``;
  ``KVCacheManager.allocate_slots(full_sequence_must_fit=...)``, ``kv_cache_manager.py:531``). 0.14.0 admits a
  request when its first chunk fits.
- **0.33.0**: the CPU tier is the OffloadingConnector's (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/
  scheduler.py``), and waiting requests that hold blocks are scheduled first (``Scheduler.kv_holding_waiting``,
  ``vllm/v1/core/sched/scheduler.py:1065``). Before it, kvlab's CPU tier is its write-through policy
  (``kvlab/cache/write_policies.py``), checked beside aisimulate, not beside vLLM's own connector.

``make bench-vllm`` (``bench/vllm_side_by_side.py``) holds 0.33.0's rules against vLLM 0.33.0's own scheduler, KV
cache manager and offloading connector, request by request.

**The GPU pool**, vLLM's rule as aiconfigurator-core prices it: vLLM gives the KV cache what is left of
``gpu_memory_utilization`` x the GPU's memory after the weights, the peak activations of a profiling pass of
``max_num_batched_tokens`` tokens and the runtime's own (``vllm/v1/worker/gpu_worker.py``
``determine_available_memory``). aiconfigurator-core 0.12.0 estimates the parts (``sdk/backends/base_backend.py``
``_get_memory_usage``: activations ``2 x tokens x heads x head_dim x`` a coefficient per model family and TP degree,
``trtllm_backend.py`` ``ACTIVATION_COEFFICIENTS``, which its vLLM backend shares; ``nccl_mem`` and ``other_mem``
from the system's file), and aisimulate sizes its pool so: 6,765 blocks of 64 tokens for Llama-3.1-8B on one
h100_sxm.
"""

import json
import re
from dataclasses import dataclass
from decimal import Decimal

from kvlab.serving.base import DISK_PATH, ServingEngine, gib_text
from kvlab.util.errors import SettingError
from kvlab.util.numbers import GIB

__all__ = ["ENGINE", "NEWEST", "RULES", "VLLM", "PoolRule", "Rules", "gpu_pool", "rules_for"]


@dataclass(frozen=True)
class Rules:
    """The rules of vLLM from ``version`` on (until the next entry of :data:`RULES`)."""

    version: str
    full_sequence_admission: bool  # scheduler_reserve_full_isl: the whole sequence must fit to be admitted
    offloading_connector: bool  # the CPU tier is vLLM's OffloadingConnector (else kvlab's write-through)


RULES = (
    Rules("0.14.0", full_sequence_admission=False, offloading_connector=False),
    Rules("0.24.0", full_sequence_admission=True, offloading_connector=False),
    Rules("0.33.0", full_sequence_admission=True, offloading_connector=True),
)
NEWEST = RULES[-1].version


def _parts(version):
    match = re.fullmatch(r"(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?", str(version))
    if match is None:
        raise SettingError(f"--engine-version: expected a vLLM version such as {NEWEST}, got {version!r}")
    return tuple(int(part or 0) for part in match.groups())


def rules_for(version):
    """The rules of ``version`` (a string such as ``0.33.0``): the newest entry of :data:`RULES` not after it (the
    oldest for a version before them all)."""
    wanted = _parts(version)
    chosen = RULES[0]
    for rules in RULES:
        if _parts(rules.version) <= wanted:
            chosen = rules
    return chosen


# --- the GPU pool's rule ---------------------------------------------------------------------------------------

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
            " estimates: kvlab/serving/vllm.py)",
            "budget_gib": round(self.budget / gib, 3),
            "weights_gib": round(self.weights / gib, 3),
            "activations_gib": round(self.activations / gib, 3),
            "runtime_gib": round(self.runtime / gib, 3),
            "blocks": self.blocks,
        }


def gpu_pool(model, block_tokens, utilization, batched_tokens):
    """The :class:`PoolRule` of a :class:`kvlab.latency.hardware.HardwareModel`'s model and system."""
    settings, system = model.settings, model.system
    if not system.mem_capacity:
        raise SettingError(f"--gpu-system {system.name}: its file gives no gpu.mem_capacity: give --gpu-blocks")
    shape = model.weights_shape("vLLM's GPU memory rule")
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


# --- the engine --------------------------------------------------------------------------------------------------


class VLLM(ServingEngine):
    """vLLM 0.33.0 with its native CPU offload (the OffloadingConnector's CPU backend).

    - CPU settings: ``--kv-offloading-size`` is GiB in total over the engine's tensor-parallel ranks
      (``config/cache.py``), one ``/dev/shm`` region pinned with ``cudaHostRegister`` on CUDA, at most the size asked
      for (``kv_offload/cpu/shared_offload_region.py``); with MLA on one node it holds one copy for all ranks
      (``replicated_layout``, ``kv_offload/cpu/spec.py``). It writes through.
    - A disk tier: ``OffloadingConnector`` with ``TieringOffloadingSpec``: a CPU tier of ``cpu_bytes_to_use`` (all
      ranks) and an ``fs`` secondary tier each stored block cascades to (``vllm/v1/kv_offload/tiering/manager.py``);
      the fs tier has no room setting and evicts nothing.
    - Copies: each block of each layer's K and V apart; the cost per copy fitted so that Llama-3.1-8B's 16-token
      blocks (32 KiB per layer's K or V) move at vllm#33398's 5 GB/s over a 64 GB/s link:
      ``32768 / 5e9 - 32768 / 64e9`` = 6.04 us.
    - A load, then the prefill: the scheduler keeps the request in ``WAITING_FOR_REMOTE_KVS`` until the load is
      reported done (``v1/core/sched/scheduler.py``; the connector's ``wait_for_layer_load`` is a no-op, so nothing
      overlaps); its stores run after the step, off the TTFT.
    """

    name = "vllm"
    title = "vLLM"
    version = "0.33.0"
    block_tokens = 16  # --block-size's default (vllm/config/cache.py)
    copy_us = 6.04
    copy_source = "kvlab/serving/vllm.py (a fit to vllm#33398)"
    unit = "a block of one layer's K or V (block_tokens x kv heads x head dim)"
    scheduler = "vllm"
    window_rule = "in-window"  # its hybrid allocator keeps a sliding-window layer's window only
    composition = "load, then prefill (vllm v1/core/sched/scheduler.py: WAITING_FOR_REMOTE_KVS until the load finishes)"

    def transfer_unit(self, block_tokens, tokens, bytes_per_token, layers):
        return block_tokens * bytes_per_token / (2 * layers)

    def cpu_settings(self, budget, tp, chunk_tokens, write_policy, shape, kv_dtype):
        notes = []
        replicated = shape.latent  # one copy serves every rank (single node, TP only)
        total = budget if replicated else budget * tp
        if replicated:
            notes.append("MLA on one node: the size holds one copy of the latent for all ranks (replicated_layout)")
        if write_policy != "write-through":
            notes.append(f"vLLM's offload writes through: it has no {write_policy} policy")
        found = {
            "flags": ["--kv-offloading-backend", "native", "--kv-offloading-size", gib_text(total)],
            "environment": {},
            "host_ram_gib": float(total),
            "per": "engine (all ranks together)",
        }
        return found, None, None, notes  # vLLM offloads its own blocks (--block-size): not set here

    def disk_settings(self, size, tp, flags, block_tokens):
        total = Decimal(flags[flags.index("--kv-offloading-size") + 1])
        spec = {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": int(total * GIB),
            "block_size": block_tokens,
            "eviction_policy": "lru",
            "secondary_tiers": [{"type": "fs", "root_dir": DISK_PATH}],
        }
        connector = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": spec}
        note = (
            f"vLLM's fs tier has no room setting and never evicts: give it {size} GiB per GPU"
            f" ({gib_text(Decimal(size) * tp)} GiB in all) of its own disk, or use LMCache's capped disk"
            " (--engine lmcache)"
        )
        return ["--kv-transfer-config", json.dumps(connector)], {}, [note]


ENGINE = VLLM()
