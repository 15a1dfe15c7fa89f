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
* SGLang 0.5.23 HiCache: ``--hicache-size`` is whole decimal GB per rank (``arg_groups/fields/memory.py`` l.113:
  an int, "in gigabytes"; ``mem_cache/pool_host/base.py`` l.221: ``hicache_size * 1e9 // size_per_token``
  tokens), so the budget is rounded DOWN to whole GB, never past it; 0 is no size at all (base.py l.221: only
  ``host_size > 0`` counts, else ``--hicache-ratio``'s pool, by default 2x the GPU's), so a budget under 1 GB sets no
  HiCache. Its write policy is named; a DeepSeek-V3.2 indexer's host pool holds as many tokens again, outside
  that size (``pool_host/dsa.py``).

Chunks: the engine gets its own chunk (page) size, the plan's ``--chunk-tokens`` when given, else its default
(LMCache's ``chunk_size`` 256, ``v1/config.py``; SGLang's ``--page-size`` 1 on CUDA unless its backend or
model sets one, ``arg_groups/overrides.py`` ``_page_size_default`` l.1341), never a trace's hashing
granularity; a note says so when the replay's unit is coarser than the engine's.
"""

import json
import math
from decimal import Decimal
from fractions import Fraction

from kvlab.util.numbers import GIB

__all__ = ["ENGINES", "disk_settings", "effective_bytes", "engine_settings"]


GB = 10**9  # SGLang's "gigabytes": decimal
VERSIONS = {"vllm": "0.33.0", "lmcache": "0.5.6", "sglang": "0.5.23"}
ENGINES = tuple(VERSIONS)
SGLANG_POLICIES = {"write-through": "write_through", "selective": "write_through_selective", "write-back": "write_back"}
LMCACHE_CHUNK = 256  # LMCache's chunk_size default (v1/config.py _CONFIG_DEFINITIONS)
SGLANG_PAGE = 1  # SGLang's --page-size on CUDA when neither the user nor its backend sets one (_page_size_default)


def gib_text(amount):
    """A GiB amount as an engine reads it: a plain decimal number, no exponent."""
    return format(Decimal(amount).normalize(), "f")


def shown_gib(amount):
    """An exact amount (of GiB or GB) to 4 decimals, as host_ram_gib is shown."""
    return round(float(amount), 4)


def hicache_gb(cpu_gib):
    """SGLang's ``--hicache-size`` for a budget of ``cpu_gib`` GiB per rank: whole decimal GB, rounded down
    (``hicache_size * 1e9`` bytes are all it pools; rounding up would pin more than the budget)."""
    return math.floor(Fraction(Decimal(str(cpu_gib))) * GIB / GB)


def effective_bytes(engine, cpu_gib):
    """The bytes per GPU the engine's setting for ``cpu_gib`` GiB per GPU really gives (exact): the budget for
    vLLM and LMCache, which read GiB with decimals; SGLang's whole GB, rounded down."""
    if engine == "sglang":
        return hicache_gb(cpu_gib) * GB
    return Fraction(Decimal(str(cpu_gib))) * GIB


def granularity_note(engine, chunks, engine_tokens, replay_tokens, trace_tokens):
    """A note when the replay's blocks are coarser than the engine's ``chunks``: the hit ratio is then for the
    replay's blocks (a trace cannot resolve finer ones than it was hashed in)."""
    if replay_tokens is None or replay_tokens <= engine_tokens:
        return None
    if trace_tokens == replay_tokens:
        why = f"the trace's {trace_tokens}-token hash blocks: it cannot resolve finer ones"
    else:
        why = f"{replay_tokens} tokens"
    return (
        f"the replay's unit ({why}) is coarser than {engine}'s {engine_tokens}-token {chunks}:"
        f" the hit ratio is for {replay_tokens}-token blocks"
    )


DISK_PATH = "/mnt/nvme/kvcache/"  # where the settings put a disk tier: a placeholder for the user's local NVMe drive


def disk_settings(engine, disk_gib, tp, flags, block_tokens):
    """``(flags, environment, notes)`` that give ``engine`` a disk tier of ``disk_gib`` GiB per GPU below the CPU tier
    that ``flags`` (the engine's CPU settings) set up; docs/tiers.md has each rule's source.

    * LMCache: ``local_disk`` (``file://`` path) and ``max_local_disk_size`` in GiB (``1024**3``,
      ``local_disk_backend.py``) per rank; every chunk is written to every backend (``StorageManager.batched_put``).
    * SGLang: HiCache's L3 ``--hicache-storage-backend file``, written through from host memory as each GPU->host copy
      completes (``hiradix_cache.py`` ``writing_check``), prefetched whole before the request runs
      (``--hicache-storage-prefetch-policy wait_complete``, as the Mooncake SSD benchmark ran it; the default
      ``timeout`` may run with part of it); its room ``SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE`` per rank, LRU (the
      file backend's ``LRUFileEvictor``: unset, it is unbounded).
    * vLLM: ``OffloadingConnector`` with ``TieringOffloadingSpec``: a CPU tier of ``cpu_bytes_to_use`` (all ranks) and
      an ``fs`` secondary tier each stored block cascades to (``vllm/v1/kv_offload/tiering/manager.py``); the fs tier
      has no room setting and evicts nothing."""
    size = gib_text(Decimal(str(disk_gib)))
    notes = [f"the disk path {DISK_PATH} is a placeholder: point it at a local NVMe drive"]
    if engine == "lmcache":
        return flags, {"LMCACHE_LOCAL_DISK": f"file://{DISK_PATH}", "LMCACHE_MAX_LOCAL_DISK_SIZE": size}, notes
    if engine == "sglang":
        flags = [*flags, "--hicache-storage-backend", "file", "--hicache-storage-prefetch-policy", "wait_complete"]
        environment = {
            "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": DISK_PATH,
            "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": f"{size}Gi",
        }
        notes.append(
            "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE is per rank; SGLang versions before its file evictor ignore it"
        )
        return flags, environment, notes
    if engine == "vllm":
        total = Decimal(flags[flags.index("--kv-offloading-size") + 1])
        spec = {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": int(total * GIB),
            "block_size": block_tokens,
            "eviction_policy": "lru",
            "secondary_tiers": [{"type": "fs", "root_dir": DISK_PATH}],
        }
        connector = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": spec}
        notes.append(
            f"vLLM's fs tier has no room setting and never evicts: give it {size} GiB per GPU"
            f" ({gib_text(Decimal(size) * tp)} GiB in all) of its own disk, or use LMCache's capped disk"
            " (--engine lmcache)"
        )
        return ["--kv-transfer-config", json.dumps(connector)], {}, notes
    raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")


def engine_settings(
    engine,
    cpu_gib,
    tp,
    chunk_tokens,
    write_policy,
    shape,
    kv_dtype="auto",
    replay_tokens=None,
    trace_tokens=None,
):
    """What to pass ``engine`` for a CPU budget of ``cpu_gib`` GiB per GPU, and the host memory it allocates.

    ``chunk_tokens`` is the engine's chunk (page) size to set, the plan's ``--chunk-tokens``; None leaves the
    engine's default. ``replay_tokens`` is the block size the plan replayed (``trace_tokens``: the trace's hash
    blocks, where it is a trace), for the note when it is coarser than the engine's."""
    budget = Decimal(str(cpu_gib))  # a float as its text: 0.1 is 0.1
    notes = []
    if engine == "vllm":
        replicated = shape.latent  # one copy serves every rank (single node, TP only)
        total = budget if replicated else budget * tp
        if replicated:
            notes.append("MLA on one node: the size holds one copy of the latent for all ranks (replicated_layout)")
        if write_policy != "write-through":
            notes.append(f"vLLM's offload writes through: it has no {write_policy} policy")
        engine_tokens = None  # vLLM offloads its own blocks (--block-size): not set here
        found = {
            "flags": ["--kv-offloading-backend", "native", "--kv-offloading-size", gib_text(total)],
            "environment": {},
            "host_ram_gib": float(total),
            "per": "engine (all ranks together)",
        }
        note = None
    elif engine == "lmcache":
        if write_policy != "write-through":
            notes.append(f"LMCache writes through: it has no {write_policy} policy")
        if shape.latent:
            notes.append("MLA: LMCache saves from the first rank only; whether the others still reserve is unverified")
        engine_tokens = LMCACHE_CHUNK if chunk_tokens is None else chunk_tokens
        if chunk_tokens is None:
            notes.append(f"LMCACHE_CHUNK_SIZE is LMCache's default, {LMCACHE_CHUNK} tokens (--chunk-tokens sets it)")
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
        note = granularity_note("LMCache", "chunks", engine_tokens, replay_tokens, trace_tokens)
    elif engine == "sglang":
        size = hicache_gb(budget)
        host = Decimal(size * GB * tp) / GIB
        if shape.indexer_layers and size:
            per_token = shape.bytes_per_token(tp, kv_dtype, windows=True)
            tokens = size * GB // per_token if per_token else 0
            host += Decimal(tokens * shape.indexer_layers * shape.indexer_bytes() * tp) / GIB
            notes.append("the indexer's host pool holds as many tokens again, outside --hicache-size")
        if 0 < size * GB < Fraction(budget) * GIB:
            given, asked = shown_gib(Fraction(size * GB, GIB)), shown_gib(Fraction(budget) * GIB / GB)
            notes.append(
                f"--hicache-size is whole decimal GB per rank, rounded down: {size} GB = {given} GiB"
                f" of the {gib_text(budget)} GiB budget ({asked} GB)"
            )
        flags = ["--enable-hierarchical-cache", "--hicache-size", str(size)]
        flags += ["--hicache-write-policy", SGLANG_POLICIES[write_policy]]
        if not size:  # 0 is no size: SGLang would pool --hicache-ratio x the GPU's instead
            flags = []
            notes.append(
                "no HiCache: a budget under 1 GB per rank has no --hicache-size (0 means --hicache-ratio's pool,"
                " by default up to 2x the GPU's), so the setting gives the GPU alone"
            )
        engine_tokens = chunk_tokens
        if chunk_tokens is not None:
            flags += ["--page-size", str(chunk_tokens)]
        else:
            notes.append(
                f"no --page-size: SGLang's default ({SGLANG_PAGE} token on CUDA, unless its attention backend sets one)"
            )
        found = {
            "flags": flags,
            "environment": {},
            "host_ram_gib": round(float(host), 4),
            "per": "rank (decimal GB, whole, rounded down)",
        }
        default = SGLANG_PAGE if chunk_tokens is None else chunk_tokens
        note = granularity_note("SGLang", "pages", default, replay_tokens, trace_tokens)
    else:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if note:
        notes.append(note)
    found["chunk_tokens"] = engine_tokens
    found["cpu_gib_effective"] = shown_gib(effective_bytes(engine, budget) / GIB)
    return {"engine": engine, "version": VERSIONS[engine], **found, "notes": notes}
