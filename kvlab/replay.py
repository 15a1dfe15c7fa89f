"""Replay a workload through a GPU + CPU prefix cache of KV blocks: the reuse figures, whole and per round.

The rules of the cache are in ``kvlab/cache/prefix.py``, the write policies in
``kvlab/cache/write_policies.py``, the eviction policies in ``kvlab/cache/eviction/``; the sources in
``kvlab/workloads.py``. Reported for the whole replay and for each round (pass): requests, block
accesses, input tokens, tokens served from the GPU and the CPU and tokens computed, the token hit
ratio, and the same in blocks; optionally one row per request.
"""

__all__ = ["COUNTERS", "figures", "overall", "per_request_csv", "ratio", "replay", "report", "rows_of"]

# What a round adds up, per request: 1, blocks, input tokens, GPU blocks, CPU blocks, GPU tokens, CPU tokens.
COUNTERS = ("requests", "blocks", "tokens", "gpu_blocks", "cpu_blocks", "gpu_tokens", "cpu_tokens")


def replay(workload, cache, per_request=None, progress=None, meter=None):
    """Serve every request of ``workload`` through ``cache``; return one list of COUNTERS per round.

    A compiled cache (``kvlab/cache/compiled.py``) reads the workload's typed batches, any other its Python
    requests. With ``per_request`` (a list), append the per-request table's columns, as a dict of arrays per
    batch; ``progress(n)`` is called after every ``n`` requests (a progress bar's update). ``meter``
    (:class:`kvlab.memory.Meter`) stops a workload too large for the memory allowed, as it is read.
    """
    if getattr(cache, "columns", False):
        return _replay_batches(workload, cache, per_request, progress, meter)
    return _replay_requests(workload, cache, per_request, progress, meter)


def _replay_batches(workload, cache, per_request, progress, meter):
    import numpy as np

    totals = np.zeros((len(workload.rounds), len(COUNTERS)), dtype=np.int64)
    accesses = requests = keys = 0
    for columns in workload.batches():
        served = np.zeros((len(columns.counts), 4), dtype=np.int64) if per_request is not None else None
        if meter is not None:
            accesses += len(columns.keys)
            requests += len(columns.counts)
            keys = max(keys, int(columns.keys.max()) + 1 if len(columns.keys) else 0)
            meter.check(accesses, requests, keys, workload.read_fraction)
        cache.serve(columns, totals, served)
        if per_request is not None:
            per_request.append(_table(columns.rounds, columns.labels, columns.counts, columns.tokens, served))
        if progress is not None:
            progress(len(columns.counts))
    return totals.tolist()


def _metered(requests, meter, workload):
    """``requests``, checked against ``meter`` every 4,096 requests, whenever more of the input has been read,
    and at the end (distinct keys counted by the accesses)."""
    accesses, number, fraction = 0, 0, None
    for number, request in enumerate(requests, 1):
        accesses += len(request.keys)
        if not number % 4096 or workload.read_fraction != fraction:
            fraction = workload.read_fraction
            meter.check(accesses, number, accesses, fraction)
        yield request
    meter.check(accesses, number, accesses, workload.read_fraction)


def _replay_requests(workload, cache, per_request, progress, meter):
    totals = [[0] * len(COUNTERS) for _ in workload.rounds]
    if cache.offline:  # opt: learn the whole workload first (read once into typed arrays, served from them)
        from kvlab.stream import load, requests_of
        from kvlab.workloads import Request

        columns, _ = load(workload, meter)
        cache.foresee(columns)
        requests = (Request(*request) for request in requests_of(columns))
    else:
        requests = workload.requests()
        if meter is not None:
            requests = _metered(requests, meter, workload)
    serve = cache.serve
    rows = [] if per_request is not None else None
    for request in requests:
        keys, tokens = request.keys, request.tokens
        served = serve(keys, tokens)
        gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = served
        row = totals[request.round]
        row[0] += 1
        row[1] += len(keys)
        row[2] += tokens
        row[3] += gpu_blocks
        row[4] += cpu_blocks
        row[5] += gpu_tokens
        row[6] += cpu_tokens
        if rows is not None:
            rows.append(
                (request.round, request.label, len(keys), tokens, gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens)
            )
        if progress is not None:
            progress(1)
    if rows is not None:
        columns = list(zip(*rows, strict=True)) or [()] * 8
        per_request.append(_table(*columns[:4], _integers(columns[4:]).reshape(4, -1).T))
    return totals


def rows_of(parts):
    """``(round, label, blocks, tokens, gpu_tokens, cpu_tokens)`` of each request of ``replay``'s ``per_request``
    parts, as Python objects."""
    names = ("round", "label", "blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens")
    for part in parts:
        yield from zip(*(part[name].tolist() for name in names), strict=True)


def _integers(rows):
    """int64 where every value fits (always, but for absurd token counts), else Python ints."""
    import numpy as np

    try:
        return np.array(rows, dtype=np.int64)
    except OverflowError:
        return np.array(rows, dtype=object)


def _table(rounds, labels, blocks, tokens, served):
    """The per-request table's columns for a run of requests; ``served``: their GPU/CPU blocks and tokens."""
    import numpy as np

    return {
        "round": np.asarray(rounds),
        "label": np.asarray(labels),
        "blocks": np.asarray(blocks),
        "input_tokens": np.asarray(tokens),
        "gpu_hit_tokens": served[:, 2],
        "cpu_hit_tokens": served[:, 3],
    }


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


def per_request_csv(workload, parts):
    """The per-request table as CSV text (pandas), one row per request in replay order, from ``replay``'s
    ``per_request`` parts."""
    import numpy as np
    import pandas as pd

    columns = ["round", "label", "blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"]
    if parts:
        table = pd.DataFrame({name: np.concatenate([part[name] for part in parts]) for name in columns})
    else:
        table = pd.DataFrame(columns=columns)
    table = table.rename(columns={"label": workload.label_name})
    table.insert(0, "request", range(len(table)))
    table["round"] = table["round"].map(dict(enumerate(workload.rounds)))
    table["computed_tokens"] = table["input_tokens"] - table["gpu_hit_tokens"] - table["cpu_hit_tokens"]
    return table.to_csv(index=False, lineterminator="\n")
