"""Each replayed request priced by a :class:`kvlab.latency.hardware.HardwareModel`, and the percentiles of the
times: what ``kvlab plan --gpu-system`` adds to a plan (``kvlab/api/plans.py``) and ``kvlab ttft predict``
reports, from one pricing.

A request is priced from the tiers the replay says served it (``kvlab.loop.replay``'s per-request parts: its
tokens, its GPU hits, its CPU hits) through ``model.parts_ms``; the percentiles are numpy's default (linear)
ones, the median the p50, every time rounded to 0.1 ms.
"""

__all__ = ["PERCENTILES", "percentiles", "price_requests", "round_times"]

PERCENTILES = (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99))
DECIMALS = 1  # ms


def price_requests(model, parts, has_cpu=False):
    """``(round index, tokens, gpu_tokens, cpu_tokens, load_ms, prefill_ms, ttft_ms)`` of each request of
    ``parts`` (:func:`kvlab.loop.replay`'s ``per_request`` list), in replay order; ``model`` has
    ``parts_ms(tokens, gpu_tokens, cpu_tokens, has_cpu) -> (load_ms, prefill_ms, ttft_ms)``; ``has_cpu``: the cache
    has a CPU tier (LMCache's blocking store then counts)."""
    from kvlab.loop import ROW, rows_of

    below = ("disk_hit_tokens",) if parts and "disk_hit_tokens" in parts[0] else ()  # a disk tier (cache/tiers.py)
    priced = []
    for index, _, _, tokens, gpu, cpu, *disk in rows_of(parts, (*ROW, *below)):
        read = disk[0] if disk else 0  # tokens from the disk: read into host memory, then loaded as the CPU's
        priced.append((index, tokens, gpu, cpu + read, *model.parts_ms(tokens, gpu, cpu, has_cpu, read)))
    return priced


def percentiles(values):
    """``{"p50_ms", "p90_ms", "p99_ms", "mean_ms"}`` of ``values`` (ms), each rounded to 0.1 ms; None each when
    there are none."""
    import numpy as np

    if not len(values):
        return {**{key: None for key, _ in PERCENTILES}, "mean_ms": None}
    times = np.asarray(values, dtype=float)
    found = np.percentile(times, [q for _, q in PERCENTILES])
    shown = {key: round(float(value), DECIMALS) for (key, _), value in zip(PERCENTILES, found, strict=True)}
    return {**shown, "mean_ms": round(float(times.mean()), DECIMALS)}


def round_times(priced, rounds, column=6):
    """``(all, [per round])``: the percentiles of ``priced``'s ``column`` (6: the TTFT) over every request, then
    over each round's (``rounds``: the workload's round names, in order), each a dict led by its ``round``."""
    by_round = [[] for _ in rounds]
    for row in priced:
        by_round[row[0]].append(row[column])
    everything = percentiles([row[column] for row in priced])
    return everything, [{"round": name, **percentiles(mine)} for name, mine in zip(rounds, by_round, strict=True)]
