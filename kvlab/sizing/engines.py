"""A plan's CPU budget as each engine's own settings, and the host memory each really allocates for them.

The planner's budget is per GPU (every room is). The engines read theirs differently, by their source at the
versions named (docs/engines.md has each rule with its file and line):

* vLLM 0.33.0 native offloading: ``--kv-offloading-size`` is GiB in total over the engine's tensor-parallel
  ranks (``config/cache.py``), one ``/dev/shm`` region pinned with ``cudaHostRegister`` on CUDA, at most the
  size asked for (``kv_offload/cpu/shared_offload_region.py``); with MLA on one node it holds one copy for
  all ranks (``replicated_layout``, ``kv_offload/cpu/spec.py``). It writes through.
* LMCache 0.5.6 (through vLLM's ``LMCacheConnectorV1``): ``max_local_cpu_size`` is GiB per rank, each rank
  pins its own (``v1/storage_backend/local_cpu_backend.py``; confirmed in LMCache #2901); ``chunk_size``
  its chunk. It writes through.
* SGLang 0.5.23 HiCache: ``--hicache-size`` is whole decimal GB per rank (``mem_cache/pool_host/base.py``:
  ``hicache_size * 1e9 // size_per_token`` tokens), with its write policy; a DeepSeek-V3.2 indexer's host pool
  holds as many tokens again, outside that size (``pool_host/dsa.py``).
"""

import json
import math
from decimal import Decimal
from fractions import Fraction

__all__ = ["ENGINES", "engine_settings"]

GIB = 2**30
VERSIONS = {"vllm": "0.33.0", "lmcache": "0.5.6", "sglang": "0.5.23"}
ENGINES = tuple(VERSIONS)
SGLANG_POLICIES = {"write-through": "write_through", "selective": "write_through_selective", "write-back": "write_back"}


def gib_text(amount):
    """A GiB amount as an engine reads it: a plain decimal number, no exponent."""
    return format(Decimal(amount).normalize(), "f")


def engine_settings(engine, cpu_gib, tp, chunk_tokens, write_policy, shape, kv_dtype="auto"):
    """What to pass ``engine`` for a CPU budget of ``cpu_gib`` GiB per GPU, and the host memory it allocates."""
    budget = Decimal(cpu_gib)
    notes = []
    if engine == "vllm":
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
    elif engine == "lmcache":
        if write_policy != "write-through":
            notes.append(f"LMCache writes through: it has no {write_policy} policy")
        if shape.latent:
            notes.append("MLA: LMCache saves from the first rank only; whether the others still reserve is unverified")
        connector = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
        found = {
            "flags": ["--kv-transfer-config", connector],
            "environment": {
                "LMCACHE_CHUNK_SIZE": str(chunk_tokens),
                "LMCACHE_LOCAL_CPU": "True",
                "LMCACHE_MAX_LOCAL_CPU_SIZE": gib_text(budget),
            },
            "host_ram_gib": float(budget * tp),
            "per": "rank (each of the tp ranks pins its own)",
        }
    elif engine == "sglang":
        size = math.ceil(Fraction(budget) * GIB / 10**9)  # whole decimal GB, at least the budget
        host = Decimal(size * 10**9 * tp) / GIB
        if shape.indexer_layers:
            per_token = shape.bytes_per_token(tp, kv_dtype, windows=True)
            tokens = size * 10**9 // per_token if per_token else 0
            host += Decimal(tokens * shape.indexer_layers * shape.indexer_bytes() * tp) / GIB
            notes.append("the indexer's host pool holds as many tokens again, outside --hicache-size")
        found = {
            "flags": [
                "--enable-hierarchical-cache",
                "--hicache-size",
                str(size),
                "--hicache-write-policy",
                SGLANG_POLICIES[write_policy],
                "--page-size",
                str(chunk_tokens),
            ],
            "environment": {},
            "host_ram_gib": round(float(host), 4),
            "per": "rank (decimal GB, whole)",
        }
    else:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return {"engine": engine, "version": VERSIONS[engine], **found, "notes": notes}
