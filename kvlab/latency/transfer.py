"""Moving KV between tiers: a fixed latency, a fixed cost per copy, and the bytes over the link's peak.

Loading ``K`` bytes in copies of ``u`` bytes costs ``latency + ceil(K / u) * copy_us + K / peak``, so the
effective bandwidth ``u / (u / peak + copy_us)`` grows with the transfer unit: what vllm#33398 measured
(about 5 GB/s CPU->GPU for Llama-3.1-8B's 16-token blocks on an H100, against PCIe 5.0's 64 GB/s).
The unit is each engine's (:data:`UNITS`): vLLM's offload copies each block of each layer's K and V
apart, LMCache's GPU connector one chunk of every layer in one kernel, SGLang HiCache one layer of a
request's pages per kernel.
"""

import math
from dataclasses import dataclass

__all__ = ["COPY_US", "DISK_HARDWARE", "DISK_MEDIA", "UNITS", "Link", "transfer_unit"]

# Per copy, microseconds: vLLM's fitted so that its 16-token blocks of Llama-3.1-8B (32 KiB per layer's K or V)
# move at vllm#33398's 5 GB/s over a 64 GB/s link: 32768 / 5e9 - 32768 / 64e9 = 6.04 us; a kernel launch for
# the kernel-based connectors (LMCache, SGLang HiCache).
COPY_US = {"vllm": 6.04, "lmcache": 5.0, "sglang": 5.0}
# A disk or remote tier's read into host memory, by medium: (peak GB/s, microseconds per block read), each block one
# read (LMCache's local disk: a file per chunk, local_disk_backend.py; HiCache's file backend: a file per page).
# nvme: a PCIe Gen4 NVMe SSD at Samsung PM1733's 7,000 MB/s sequential read (Mooncake's SSD offload benchmark rig,
# kvcache-ai/Mooncake docs/source/performance/mooncake/ssd-offload-benchmark-results.md); 80 us a read is an assumed
# figure (no source at hand states one). rdma: a Mooncake store over one 200 Gb/s NIC, 21.8 GB/s (its README: 87 GB/s
# on 4 x 200 Gbps); 5 us a transfer is an assumed figure (its docs give no small-message latency).
DISK_MEDIA = {"nvme": (7.0, 80.0), "rdma": (21.8, 5.0)}
DISK_HARDWARE = ("disk_medium", "disk_gbps", "disk_us")  # HardwareSettings' fields that price a disk tier's reads
UNITS = {
    "vllm": "a block of one layer's K or V (block_tokens x kv heads x head dim)",
    "lmcache": "a chunk of every layer (chunk tokens x KV bytes per token)",
    "sglang": "one layer of the request's tokens",
}


def transfer_unit(engine, block_tokens, tokens, bytes_per_token, layers):
    """Bytes one copy moves when ``engine`` loads ``tokens`` tokens stored in ``block_tokens``-token blocks."""
    if engine == "vllm":
        return block_tokens * bytes_per_token / (2 * layers)
    if engine == "lmcache":
        return block_tokens * bytes_per_token
    return max(tokens, 1) * bytes_per_token / layers


@dataclass(frozen=True)
class Link:
    """A one-direction link: ``peak_gbps`` (10**9 bytes/s), ``copy_us`` per copy, ``latency_ms`` per load."""

    peak_gbps: float
    copy_us: float
    latency_ms: float = 0.0

    def effective_gbps(self, unit_bytes):
        return unit_bytes / (unit_bytes / (self.peak_gbps * 1e9) + self.copy_us * 1e-6) / 1e9

    def ms(self, size, unit_bytes):
        """Milliseconds to move ``size`` bytes in copies of ``unit_bytes``; 0 for nothing."""
        if size <= 0:
            return 0.0
        copies = math.ceil(size / unit_bytes)
        return self.latency_ms + copies * self.copy_us * 1e-3 + size / (self.peak_gbps * 1e6)

    def describe(self):
        return {"peak_gbps": round(self.peak_gbps, 3), "copy_us": round(self.copy_us, 3), "latency_ms": self.latency_ms}
