"""The offload designs side by side: write policies x eviction policies over grids of rooms, in one process.

Two artifacts (``kvlab policies cliff`` and ``kvlab policies table``):

* ``cliff``: the lab's CPU cliff per write policy, ``{"<write policy>": {"<cpu room>": misses}}``
  (misses of one pass), one block per document and LRU tiers as in the lab: the write-through
  row is the lab's results/cpu_cliff.json, the others answer step 7 for their designs.
* ``table``: token hit ratios per (rooms, write policy, eviction policy, round) of one replay
  workload, the eviction policy the same on both tiers, beside ``bound_token_hit_ratio`` (on the
  "all" rows, with partial blocks dropped): what one tier of ``G//B + C//B`` blocks reuses under
  Belady's MIN. No design at
  those rooms reuses more over the whole workload: its two tiers hold at most that many blocks,
  and a block enters them only when requested. (Per round there is no such bound: a design may
  give up reuse in one round for more in another.)
"""

from kvlab.cache.interface import CacheSettings
from kvlab.loop import COUNTERS, figures, overall, replay
from kvlab.workloads import LabWorkload

__all__ = ["TABLE_COLUMNS", "bound_ratio", "cpu_cliff", "hit_table", "rounds", "table_csv"]

ROUND_FIGURES = ("gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "token_hit_ratio")
TABLE_COLUMNS = (
    "block_tokens",
    "gpu_tokens",
    "cpu_tokens",
    "write_policy",
    "eviction",
    "round",
    *ROUND_FIGURES,
    "bound_token_hit_ratio",
)


def cpu_cliff(docs, tokens, passes, gpu_tokens, cpu_rooms, write_policies, record_pass):
    """Misses of pass ``record_pass`` per write policy and CPU room: the lab's scenario, one block per document."""
    cliff = {}
    for policy in write_policies:
        cliff[policy] = {}
        for cpu_tokens in cpu_rooms:
            workload = LabWorkload(tokens, docs=docs, tokens=tokens, passes=passes)
            sizes = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "block_tokens": tokens}
            totals = replay(workload, CacheSettings(**sizes, write_policy=policy).build())
            row = dict(zip(COUNTERS, totals[record_pass - 1], strict=True))
            cliff[policy][str(cpu_tokens)] = row["blocks"] - row["gpu_blocks"] - row["cpu_blocks"]
    return cliff


def hit_table(make, rooms, write_policies, evictions, block_rules, switches, meter=None):
    """Rows of the policy table for the workload ``make(block_tokens)`` builds, in grid order; ``meter``
    (:class:`kvlab.util.memory.Meter`) checks every replay, so a workload too large stops in the first."""
    rows = []
    for block in rooms["block_tokens"]:
        for gpu in rooms["gpu_tokens"]:
            for cpu in rooms["cpu_tokens"]:
                bound = bound_ratio(make(block), gpu, cpu, block, **block_rules, meter=meter)
                for policy in write_policies:
                    extra = switches if policy == "write-through" else {}
                    for eviction in evictions:
                        tiers = {"gpu_eviction": eviction, "cpu_eviction": eviction}
                        sizes = {"gpu_tokens": gpu, "cpu_tokens": cpu, "block_tokens": block}
                        settings = CacheSettings(**sizes, write_policy=policy, **block_rules, **tiers, **extra)
                        cache = settings.build()  # the reference engine: one replay at a time, each design's own
                        for name, one in rounds(make(block), cache, meter):
                            rows.append(
                                {
                                    "block_tokens": block,
                                    "gpu_tokens": gpu,
                                    "cpu_tokens": cpu,
                                    "write_policy": policy,
                                    "eviction": eviction,
                                    "round": name,
                                    **{key: one[key] for key in ROUND_FIGURES},
                                    "bound_token_hit_ratio": bound if name == "all" else None,
                                }
                            )
    return rows


def bound_ratio(workload, gpu_tokens, cpu_tokens, block, partial_blocks, eviction_order, meter=None):
    """Token hit ratio of one ``opt`` tier of ``G//B + C//B`` blocks; None when partial blocks are kept
    (blocks of different sizes: MIN is not optimal then, and there is no bound)."""
    if partial_blocks != "drop":
        return None
    room = (gpu_tokens // block + cpu_tokens // block) * block
    settings = CacheSettings(gpu_tokens=room, block_tokens=block, eviction_order=eviction_order, gpu_eviction="opt")
    cache = settings.build()
    return rounds(workload, cache, meter)[0][1]["token_hit_ratio"]


def rounds(workload, cache, meter=None):
    """``[(round, figures)]`` of one replay: "all" first, then each round."""
    totals = replay(workload, cache, meter=meter)
    per_round = [(name, figures(row)) for name, row in zip(workload.rounds, totals, strict=True)]
    return [("all", figures(overall(totals))), *per_round]


def table_csv(rows):
    import pandas as pd

    from kvlab.util.files import frame_csv

    return frame_csv(pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
