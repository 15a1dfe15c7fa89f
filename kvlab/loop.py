"""Replay a workload through a GPU + CPU prefix cache of KV blocks: the reuse figures, whole and per round.

The rules of the cache are in ``kvlab/cache/prefix.py``, the write policies in
``kvlab/cache/write_policies.py``, the eviction policies in ``kvlab/cache/eviction/``; the sources in
``kvlab/workloads/__init__.py``. Reported for the whole replay and for each round (pass): requests, block
accesses, input tokens, tokens served from the GPU and the CPU and tokens computed, the token hit
ratio, and the same in blocks; optionally one row per request.
"""

__all__ = [
    "COUNTERS",
    "DISK_COUNTERS",
    "DocumentReads",
    "figures",
    "overall",
    "per_request_csv",
    "ratio",
    "replay",
    "report",
    "rows_of",
    "tiers",
]

# What a round adds up, per request: 1, blocks, input tokens, GPU blocks, CPU blocks, GPU tokens, CPU tokens; and
# with a disk tier (kvlab/cache/tiers.py), its blocks and tokens.
COUNTERS = ("requests", "blocks", "tokens", "gpu_blocks", "cpu_blocks", "gpu_tokens", "cpu_tokens")
DISK_COUNTERS = ("disk_blocks", "disk_tokens")


def replay(workload, cache, per_request=None, progress=None, meter=None):
    """Serve every request of ``workload`` through ``cache`` (a :class:`kvlab.cache.interface.Cache`); return one
    list of COUNTERS per round.

    A cache that serves typed batches (a :class:`kvlab.cache.interface.BatchCache`: the compiled one,
    ``kvlab/cache/compiled.py``) reads the workload's batches, any other its Python requests. With ``per_request``
    (a list), append the per-request table's columns, as a dict of arrays per batch (:func:`rows_of` reads them);
    ``progress(n)`` is called after every ``n`` requests (a progress bar's update). ``meter``
    (:class:`kvlab.util.memory.Meter`) stops a workload too large for the memory allowed, as it is read.
    """
    from kvlab.cache.interface import BatchCache, Cache

    if isinstance(cache, BatchCache):
        return _replay_batches(workload, cache, per_request, progress, meter)
    if not isinstance(cache, Cache):
        raise TypeError(f"{type(cache).__name__} is not a two-tier cache (kvlab/cache/interface.py)")
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
        cache.serve_batch(columns, totals, served)
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
    disk = getattr(cache, "has_disk", False)  # a disk tier below (kvlab/cache/tiers.py), or a fleet's
    totals = [[0] * (len(COUNTERS) + disk * len(DISK_COUNTERS)) for _ in workload.rounds]
    if cache.offline:  # opt: learn the whole workload first (read once into typed arrays, served from them)
        from kvlab.workloads import Request
        from kvlab.workloads.stream import load, requests_of

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
        gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = served[:4]
        row = totals[request.round]
        row[0] += 1
        row[1] += len(keys)
        row[2] += tokens
        row[3] += gpu_blocks
        row[4] += cpu_blocks
        row[5] += gpu_tokens
        row[6] += cpu_tokens
        if disk:
            row[7] += served[4]
            row[8] += served[5]
        if rows is not None:
            rows.append((request.round, request.label, len(keys), tokens, *served))
        if progress is not None:
            progress(1)
    if rows is not None:
        width = 6 if disk else 4
        columns = list(zip(*rows, strict=True)) or [()] * (4 + width)
        per_request.append(_table(*columns[:4], _integers(columns[4:]).reshape(width, -1).T))
    return totals


ROW = ("round", "label", "blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens")


def rows_of(parts, names=ROW):
    """``(round, label, blocks, tokens, gpu_tokens, cpu_tokens)`` of each request of ``replay``'s ``per_request``
    parts, as Python objects; or the columns ``names`` (:data:`ROW`'s, ``gpu_hit_blocks``, ``cpu_hit_blocks``)."""
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
    """The per-request table's columns for a run of requests; ``served``: their GPU/CPU blocks and tokens (and, with
    six columns, the disk's blocks and tokens)."""
    import numpy as np

    table = {
        "round": np.asarray(rounds),
        "label": np.asarray(labels),
        "blocks": np.asarray(blocks),
        "input_tokens": np.asarray(tokens),
        "gpu_hit_tokens": served[:, 2],
        "cpu_hit_tokens": served[:, 3],
        "gpu_hit_blocks": served[:, 0],
        "cpu_hit_blocks": served[:, 1],
    }
    if served.shape[1] > 4:
        table |= {"disk_hit_tokens": served[:, 5], "disk_hit_blocks": served[:, 4]}
    return table


class DocumentReads:
    """Whole documents read one after another, one request each: ``reads`` are ``(doc, tokens)``, and a document
    is one block keyed by its number, as long as the document (blocks are as long as the longest; with
    ``partial_blocks="keep"`` each is stored whatever its length, an empty document as an empty block). The lab's
    requests as its simulator (``kvlab/kvsim.py``) serves them: one entry per document, of the document's size."""

    rounds = ["reads"]
    label_name = "document"
    read_fraction = None

    def __init__(self, reads):
        self.reads = list(reads)
        self.block_tokens = max((tokens for _, tokens in self.reads), default=0) or 1

    def requests(self):
        from kvlab.workloads import Request

        return (Request(0, doc, [doc], tokens) for doc, tokens in self.reads)

    def batches(self):
        from kvlab.workloads.stream import columns_of

        return columns_of(self.requests())

    def __len__(self):
        return len(self.reads)

    def accesses(self):
        return len(self.reads)

    def token_bound(self):
        return sum(tokens for _, tokens in self.reads)


TIERS = ("gpu", "cpu", "miss")  # what served a request of one block (the lab simulator's answers)
TIER_COLUMNS = ("gpu_hit_blocks", "cpu_hit_blocks")


def tiers(workload, cache):
    """What served each request of ``workload``, whose requests are of one block (:class:`DocumentReads`), through
    ``cache``: ``"gpu"``, ``"cpu"`` or ``"miss"``, in order."""
    parts = []
    replay(workload, cache, parts)
    return [TIERS[0] if gpu else TIERS[1] if cpu else TIERS[2] for gpu, cpu in rows_of(parts, TIER_COLUMNS)]


def figures(counts):
    """The reported figures of one round (or of all): counts in tokens and blocks, hit ratios rounded to 6; the disk
    tier's where ``counts`` have them (:data:`DISK_COUNTERS`)."""
    requests, blocks, tokens, gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = counts[: len(COUNTERS)]
    disk_blocks, disk_tokens = counts[len(COUNTERS) :] or (0, 0)
    disk = len(counts) > len(COUNTERS)
    hit_tokens, hit_blocks = gpu_tokens + cpu_tokens + disk_tokens, gpu_blocks + cpu_blocks + disk_blocks
    return {
        "requests": requests,
        "block_accesses": blocks,
        "input_tokens": tokens,
        "gpu_hit_tokens": gpu_tokens,
        "cpu_hit_tokens": cpu_tokens,
        **({"disk_hit_tokens": disk_tokens} if disk else {}),
        "computed_tokens": tokens - hit_tokens,
        "token_hit_ratio": ratio(hit_tokens, tokens),
        "gpu_hit_blocks": gpu_blocks,
        "cpu_hit_blocks": cpu_blocks,
        **({"disk_hit_blocks": disk_blocks} if disk else {}),
        "computed_blocks": blocks - hit_blocks,
        "block_hit_ratio": ratio(hit_blocks, blocks),
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


def per_request_csv(workload, parts, instances=None):
    """The per-request table as CSV text (pandas), one row per request in replay order, from ``replay``'s
    ``per_request`` parts; with ``instances`` (a fleet's, ``kvlab/fleet/``), the instance that served each."""
    import numpy as np
    import pandas as pd

    columns = ["round", "label", "blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"]
    if parts and "disk_hit_tokens" in parts[0]:
        columns.append("disk_hit_tokens")
    if parts:
        table = pd.DataFrame({name: np.concatenate([part[name] for part in parts]) for name in columns})
    else:
        table = pd.DataFrame(columns=columns)
    table = table.rename(columns={"label": workload.label_name})
    table.insert(0, "request", range(len(table)))
    ids = workload.request_ids()
    if ids is not None and len(ids) == len(table):  # the trace's own ids, beside kvlab's numbers
        table.insert(1, "request_id", ["" if value is None else value for value in ids])
    if instances is not None:
        table.insert(1, "instance", instances)
    table["round"] = table["round"].map(dict(enumerate(workload.rounds)))
    computed = table["input_tokens"] - table["gpu_hit_tokens"] - table["cpu_hit_tokens"]
    table["computed_tokens"] = computed - table["disk_hit_tokens"] if "disk_hit_tokens" in table else computed
    from kvlab.util.files import frame_csv

    return frame_csv(table)
