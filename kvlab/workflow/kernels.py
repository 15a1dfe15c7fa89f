"""A warm-up that compiles every cached kernel once (``python -m kvlab.workflow.kernels``): ``kvlab run`` calls it
before the jobs start, so parallel jobs load what it compiled instead of each compiling the same kernels."""


def warm():
    """Run every compiled path once on tiny workloads, compiling (and caching) what the cache lacks."""
    import numpy as np

    from kvlab.cache.compiled import CompiledLRU
    from kvlab.curves.mrc import lru_curve, tier_curve
    from kvlab.loop import replay
    from kvlab.workloads import LabWorkload
    from kvlab.workloads.dense import Interner
    from kvlab.workloads.scan import scan

    lab = LabWorkload(4, docs=2, tokens=10, passes="fwd,rev")
    for rules in ({}, {"partial_blocks": "keep", "eviction_order": "head-first", "touch_cpu_on_gpu_hit": True}):
        replay(lab, CompiledLRU(8, 8, 4, **rules), [])
    for gpu in (None, 4):
        tier_curve(lab, "drop", gpu_tokens=gpu)
        tier_curve(lab, "keep", gpu_tokens=gpu)
    lru_curve([1, 2, 1], [1, 2, 1])
    Interner(slots=2).dense(np.arange(4, dtype=np.int64))
    scan(b'{"a": 1, "b": [2]}', ("a", "b"), 1)


if __name__ == "__main__":
    warm()
