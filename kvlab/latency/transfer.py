"""Moving KV between tiers: a fixed latency, a fixed cost per copy, and the bytes over the link's peak.

Loading ``K`` bytes in copies of ``u`` bytes costs ``latency + ceil(K / u) * copy_us + K / peak``, so the
effective bandwidth ``u / (u / peak + copy_us)`` grows with the transfer unit: what vllm#33398 measured
(about 5 GB/s CPU->GPU for Llama-3.1-8B's 16-token blocks on an H100, against PCIe 5.0's 64 GB/s).
The unit and the cost per copy are each serving engine's (``kvlab/serving/``).
"""

import math
from dataclasses import dataclass

__all__ = ["DISK_HARDWARE", "DISK_MEDIA", "Link"]

# A disk or remote tier's read into host memory, by medium: (peak GB/s, microseconds per block read), each block one
# read (LMCache's local disk: a file per chunk, local_disk_backend.py; HiCache's file backend: a file per page).
# nvme: a PCIe Gen4 NVMe SSD at Samsung PM1733's 7,000 MB/s sequential read (Mooncake's SSD offload benchmark rig,
# kvcache-ai/Mooncake docs/source/performance/mooncake/ssd-offload-benchmark-results.md); 80 us a read is an assumed
# figure (no source at hand states one). rdma: a Mooncake store over one 200 Gb/s NIC, 21.8 GB/s (its README: 87 GB/s
# on 4 x 200 Gbps); 5 us a transfer is an assumed figure (its docs give no small-message latency).
DISK_MEDIA = {"nvme": (7.0, 80.0), "rdma": (21.8, 5.0)}
DISK_HARDWARE = ("disk_medium", "disk_gbps", "disk_us")  # HardwareSettings' fields that price a disk tier's reads


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
