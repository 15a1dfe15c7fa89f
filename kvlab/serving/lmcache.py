"""LMCache 0.5.6 through vLLM's ``LMCacheConnectorV1``: what kvlab knows of it.

- CPU settings: ``max_local_cpu_size`` is GiB per rank, each rank pins its own
  (``v1/storage_backend/local_cpu_backend.py``; confirmed in LMCache #2901); ``chunk_size`` its chunk, 256 by default
  (``v1/config.py`` ``_CONFIG_DEFINITIONS``). It writes through.
- A disk tier: ``local_disk`` (``file://`` path) and ``max_local_disk_size`` in GiB (``1024**3``,
  ``local_disk_backend.py``) per rank; every chunk is written to every backend (``StorageManager.batched_put``).
- Copies: one chunk of every layer in one kernel; a kernel launch per copy (5 us, assumed).
- ``start_load_kv`` loads before the forward pass and ``wait_for_save`` blocks until the new tokens are stored
  (write-through, ``lmcache/integration/vllm/vllm_v1_adapter.py``): ``load + prefill + store``; with its
  ``use_layerwise`` (default false, ``lmcache/v1/config.py``) both run layer by layer beside the compute.
"""

import json

from kvlab.serving.base import DISK_PATH, ServingEngine, gib_text

__all__ = ["CHUNK", "ENGINE", "LMCache"]

CHUNK = 256  # LMCache's chunk_size default (v1/config.py _CONFIG_DEFINITIONS)


class LMCache(ServingEngine):
    name = "lmcache"
    title = "LMCache"
    version = "0.5.6"
    block_tokens = CHUNK
    copy_us = 5.0
    copy_source = "kvlab/serving/lmcache.py (a kernel launch, assumed)"
    unit = "a chunk of every layer (chunk tokens x KV bytes per token)"
    composition = (
        "load, prefill, then the blocking store (lmcache/integration/vllm/vllm_v1_adapter.py start_load_kv,"
        " wait_for_save)"
    )
    layerwise = "load and store beside prefill, layer by layer (LMCache use_layerwise: vllm_v1_adapter.py)"
    blocking_store = True
    scheduler = "vllm"  # it runs inside vLLM

    def transfer_unit(self, block_tokens, tokens, bytes_per_token, layers):
        return block_tokens * bytes_per_token

    def cpu_settings(self, budget, tp, chunk_tokens, write_policy, shape, kv_dtype):
        notes = []
        if write_policy != "write-through":
            notes.append(f"LMCache writes through: it has no {write_policy} policy")
        if shape.latent:
            notes.append("MLA: LMCache saves from the first rank only; whether the others still reserve is unverified")
        engine_tokens = CHUNK if chunk_tokens is None else chunk_tokens
        if chunk_tokens is None:
            notes.append(f"LMCACHE_CHUNK_SIZE is LMCache's default, {CHUNK} tokens (--chunk-tokens sets it)")
        connector = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
        found = {
            "flags": ["--kv-transfer-config", connector],
            "environment": {
                "LMCACHE_CHUNK_SIZE": str(engine_tokens),
                "LMCACHE_LOCAL_CPU": "True",
                "LMCACHE_MAX_LOCAL_CPU_SIZE": gib_text(budget),
            },
            "host_ram_gib": float(budget * tp),
            "per": "rank (each of the tp ranks pins its own)",
        }
        return found, engine_tokens, ("chunks", engine_tokens), notes

    def disk_settings(self, size, tp, flags, block_tokens):
        return flags, {"LMCACHE_LOCAL_DISK": f"file://{DISK_PATH}", "LMCACHE_MAX_LOCAL_DISK_SIZE": size}, []


ENGINE = LMCache()
