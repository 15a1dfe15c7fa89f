"""A warm-up that compiles every cached kernel once (``python -m kvlab.workflow.kernels [PART...]``): ``kvlab run``
calls it, a process per part, before the jobs start, so parallel jobs load what it compiled instead of each compiling
the same kernels."""

import sys


def _jit():
    """Every JIT path but kvlab simulate's loop, once."""
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


class _FlatCost:
    """A step's prices for the warm-up (kvlab.simulator.cost.StepCost's interface)."""

    def prefill_ms(self, tokens, cached):
        return 1.0

    def decode_ms(self, batch, context):
        return 1.0

    def copy_ms(self, blocks):
        return float(blocks)

    def known(self):
        import numpy as np

        return np.array([[8, 0]]), np.array([1.0]), np.array([[1, 256]]), np.array([1.0])


def _simulate():
    """kvlab simulate's compiled loop on two requests, a trace's own ids and ids cut from its blocks."""
    import tempfile
    from pathlib import Path

    from kvlab.serving.vllm import NEWEST, rules_for
    from kvlab.simulator import compiled
    from kvlab.simulator.arrivals import Arrivals
    from kvlab.simulator.settings import EngineSettings
    from kvlab.util.memory import Footprint, Meter
    from kvlab.workloads import MooncakeWorkload

    lines = [f'{{"timestamp": {t}, "input_length": 600, "output_length": 3, "hash_ids": [1, {t + 2}]}}' for t in (0, 1)]
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "warm.jsonl"
        trace.write_text("\n".join(lines) + "\n")
        for block in (512, 64):
            workload = MooncakeWorkload(block, trace=str(trace))
            meter = Meter(2**40, Footprint())
            rules = rules_for(NEWEST)
            compiled.run(workload, EngineSettings(), rules, 32, 8, block, _FlatCost(), Arrivals(), True, True, meter)


PARTS = {"jit": _jit, "simulate": _simulate}  # what each part compiles: about the same time each


def warm(parts=PARTS):
    """Run the compiled paths of ``parts`` once on tiny workloads, compiling (and caching) what the cache lacks."""
    for part in parts:
        PARTS[part]()


if __name__ == "__main__":
    warm(sys.argv[1:] or PARTS)
