"""SGLang 0.5.23 with HiCache: what kvlab knows of it.

- CPU settings: ``--hicache-size`` is whole decimal GB per rank (``arg_groups/fields/memory.py`` l.113: an int, "in
  gigabytes"; ``mem_cache/pool_host/base.py`` l.221: ``hicache_size * 1e9 // size_per_token`` tokens), so the budget
  is rounded DOWN to whole GB, never past it; 0 is no size at all (base.py l.221: only ``host_size > 0`` counts, else
  ``--hicache-ratio``'s pool, by default 2x the GPU's), so a budget under 1 GB sets no HiCache. Its write policy is
  named; a DeepSeek-V3.2 indexer's host pool holds as many tokens again, outside that size (``pool_host/dsa.py``).
  Its page: ``--page-size`` 1 on CUDA unless its backend or model sets one (``arg_groups/overrides.py``
  ``_page_size_default`` l.1341).
- A disk tier: HiCache's L3 ``--hicache-storage-backend file``, written through from host memory as each GPU->host
  copy completes (``hiradix_cache.py`` ``writing_check``), prefetched whole before the request runs
  (``--hicache-storage-prefetch-policy wait_complete``, as the Mooncake SSD benchmark ran it; the default ``timeout``
  may run with part of it); its room ``SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE`` per rank, LRU (the file backend's
  ``LRUFileEvictor``: unset, it is unbounded).
- Copies: one layer of a request's pages per kernel; a kernel launch per copy (5 us, assumed).
- HiCache starts loading the host pages before the prefill and each layer waits for its own (``LayerDoneCounter`` in
  ``sglang/srt/managers/cache_controller.py``; docs ``hicache_design.md``: "loading the KV Cache of layer N+1 while
  computing layer N"): layer by layer; its write-through backups to host run beside, off the TTFT.
- Its scheduler (prefill batches first, decode reserved at admission): ``kvlab simulate --scheduler sglang``.
"""

import math
from decimal import Decimal
from fractions import Fraction

from kvlab.serving.base import DISK_PATH, ServingEngine, gib_text, shown_gib
from kvlab.util.numbers import GIB

__all__ = ["ENGINE", "PAGE", "SGLang", "hicache_gb"]

GB = 10**9  # SGLang's "gigabytes": decimal
POLICIES = {"write-through": "write_through", "selective": "write_through_selective", "write-back": "write_back"}
PAGE = 1  # SGLang's --page-size on CUDA when neither the user nor its backend sets one (_page_size_default)


def hicache_gb(cpu_gib):
    """SGLang's ``--hicache-size`` for a budget of ``cpu_gib`` GiB per rank: whole decimal GB, rounded down
    (``hicache_size * 1e9`` bytes are all it pools; rounding up would pin more than the budget)."""
    return math.floor(Fraction(Decimal(str(cpu_gib))) * GIB / GB)


class SGLang(ServingEngine):
    name = "sglang"
    title = "SGLang"
    version = "0.5.23"
    block_tokens = PAGE
    copy_us = 5.0
    copy_source = "kvlab/serving/sglang.py (a kernel launch, assumed)"
    unit = "one layer of the request's tokens"
    composition = "load beside prefill, layer by layer (sglang/srt/managers/cache_controller.py LayerDoneCounter)"
    layer_by_layer = True
    scheduler = "sglang"

    def transfer_unit(self, block_tokens, tokens, bytes_per_token, layers):
        return max(tokens, 1) * bytes_per_token / layers

    def effective_bytes(self, cpu_gib):
        return hicache_gb(cpu_gib) * GB

    def cpu_settings(self, budget, tp, chunk_tokens, write_policy, shape, kv_dtype):
        notes = []
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
        flags += ["--hicache-write-policy", POLICIES[write_policy]]
        if not size:  # 0 is no size: SGLang would pool --hicache-ratio x the GPU's instead
            flags = []
            notes.append(
                "no HiCache: a budget under 1 GB per rank has no --hicache-size (0 means --hicache-ratio's pool,"
                " by default up to 2x the GPU's), so the setting gives the GPU alone"
            )
        if chunk_tokens is not None:
            flags += ["--page-size", str(chunk_tokens)]
        else:
            notes.append(
                f"no --page-size: SGLang's default ({PAGE} token on CUDA, unless its attention backend sets one)"
            )
        found = {
            "flags": flags,
            "environment": {},
            "host_ram_gib": round(float(host), 4),
            "per": "rank (decimal GB, whole, rounded down)",
        }
        return found, chunk_tokens, ("pages", PAGE if chunk_tokens is None else chunk_tokens), notes

    def disk_settings(self, size, tp, flags, block_tokens):
        flags = [*flags, "--hicache-storage-backend", "file", "--hicache-storage-prefetch-policy", "wait_complete"]
        environment = {
            "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": DISK_PATH,
            "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE": f"{size}Gi",
        }
        note = "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE is per rank; SGLang versions before its file evictor ignore it"
        return flags, environment, [note]


ENGINE = SGLang()
