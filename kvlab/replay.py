"""Replay a workload through a GPU + CPU prefix cache of KV blocks: the reuse figures, whole and per round.

The rules of the cache are in ``kvlab/cache/prefix.py``, the write policies in
``kvlab/cache/write_policies.py``, the eviction policies in ``kvlab/cache/eviction/``; the sources in
``kvlab/workloads.py``. Reported for the whole replay and for each round (pass): requests, block
accesses, input tokens, tokens served from the GPU and the CPU and tokens computed, the token hit
ratio, and the same in blocks; optionally one row per request.
"""

__all__ = ["COUNTERS", "figures", "overall", "per_request_csv", "ratio", "replay", "report"]

# What a round adds up, per request: 1, blocks, input tokens, GPU blocks, CPU blocks, GPU tokens, CPU tokens.
COUNTERS = ("requests", "blocks", "tokens", "gpu_blocks", "cpu_blocks", "gpu_tokens", "cpu_tokens")


def replay(workload, cache, per_request=None, progress=None):
    """Serve every request of ``workload`` through ``cache``; return one list of COUNTERS per round.

    With ``per_request`` (a list), append ``(round, label, blocks, tokens, gpu_tokens, cpu_tokens)``
    for each request; ``progress()`` is called after each request (a progress bar's update).
    """
    totals = [[0] * len(COUNTERS) for _ in workload.rounds]
    requests = workload.requests()
    if cache.offline:  # opt: learn the whole workload first (read once, served from memory)
        requests = list(requests)
        cache.foresee((request.keys, request.tokens) for request in requests)
    serve = cache.serve
    update = progress
    for request in requests:
        keys, tokens = request.keys, request.tokens
        gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = serve(keys, tokens)
        row = totals[request.round]
        row[0] += 1
        row[1] += len(keys)
        row[2] += tokens
        row[3] += gpu_blocks
        row[4] += cpu_blocks
        row[5] += gpu_tokens
        row[6] += cpu_tokens
        if per_request is not None:
            per_request.append((request.round, request.label, len(keys), tokens, gpu_tokens, cpu_tokens))
        if update is not None:
            update()
    return totals


def figures(counts):
    """The reported figures of one round (or of all): counts in tokens and blocks, hit ratios rounded to 6."""
    requests, blocks, tokens, gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = counts
    return {
        "requests": requests,
        "block_accesses": blocks,
        "input_tokens": tokens,
        "gpu_hit_tokens": gpu_tokens,
        "cpu_hit_tokens": cpu_tokens,
        "computed_tokens": tokens - gpu_tokens - cpu_tokens,
        "token_hit_ratio": ratio(gpu_tokens + cpu_tokens, tokens),
        "gpu_hit_blocks": gpu_blocks,
        "cpu_hit_blocks": cpu_blocks,
        "computed_blocks": blocks - gpu_blocks - cpu_blocks,
        "block_hit_ratio": ratio(gpu_blocks + cpu_blocks, blocks),
    }


def overall(totals):
    """The counters of the whole replay: the rounds' added up."""
    return [sum(column) for column in zip(*totals, strict=True)] if totals else [0] * len(COUNTERS)


def ratio(part, whole):
    return round(part / whole, 6) if whole else None


def report(workload, settings, totals):
    """The JSON object the command prints: the workload, the cache settings, the figures of all and per round."""
    return {
        "workload": workload.describe(),
        "cache": settings,
        **figures(overall(totals)),
        "rounds": [{"round": name, **figures(row)} for name, row in zip(workload.rounds, totals, strict=True)],
    }


def per_request_csv(workload, rows):
    """The per-request table as CSV text (pandas), one row per request in replay order."""
    import pandas as pd

    columns = ["round", workload.label_name, "blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"]
    table = pd.DataFrame(rows, columns=columns)
    table.insert(0, "request", range(len(table)))
    table["round"] = table["round"].map(dict(enumerate(workload.rounds)))
    table["computed_tokens"] = table["input_tokens"] - table["gpu_hit_tokens"] - table["cpu_hit_tokens"]
    return table.to_csv(index=False, lineterminator="\n")
