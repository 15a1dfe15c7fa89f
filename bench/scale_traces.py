"""Mooncake-format traces of any size for the scale benchmark, made from the two published traces.

The published traces (``data/traces/mooncake/{conversation,synthetic}_trace.jsonl.gz``) are
cycled, conversation first: copy ``k`` is the conversation trace for even ``k``, the synthetic one
for odd ``k``; it adds ``k * (max id + 1)`` to every hash ID (the max over both traces, so no two
copies share a block, and an ID still always follows the same predecessor) and shifts its
timestamps so that it starts 1 ms after the previous copy's last request. Requests are written
until the block accesses (the sum of ``len(hash_ids)``) reach the size's target; the request that
reaches it is the last. Sizes:

* ``Nx``: N times the conversation trace's 288,500 block accesses. ``1x`` is the conversation
  trace itself, byte for byte (checked against the sha256 of the uncompressed file);
  ``4x``: 45,929 requests, 1,154,024 accesses; ``16x``: 180,094 requests, 4,616,002 accesses.
* ``Nk`` / ``Nm``: at least N thousand / million accesses (``100m``: 3,905,414 requests, exactly
  100,000,000 accesses, 1.3 GB, written in about 25 s on 2 cores; ``1k``: the scale bench's tiny trace).

Each trace is written as ``<folder>/mooncake-<size>.jsonl`` (plain JSONL, the published traces'
exact formatting) with a sidecar ``mooncake-<size>.jsonl.meta.json`` (its requests, accesses,
distinct blocks, bytes and sha256, the sources' sha256). A trace whose sidecar matches (the same
sources, size and generator; the file's size as recorded) is kept, not rewritten; ``--verify``
also compares its sha256. Standard library and numpy only; deterministic (no randomness at all).

Usage: ``.venv/bin/python bench/scale_traces.py [--out work/bench/traces] [--verify] [SIZE ...]``
(default sizes: 1x 4x 16x). Prints one line per trace.
"""

import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIR = ROOT / "data" / "traces" / "mooncake"
SOURCES = ("conversation_trace.jsonl.gz", "synthetic_trace.jsonl.gz")  # cycled in this order
DEFAULT_OUT = ROOT / "work" / "bench" / "traces"
DEFAULT_SIZES = ("1x", "4x", "16x")
GENERATOR = 1  # bump when the output for the same size changes
CHUNK = 1 << 22  # characters per write


class Source:
    """One published trace, read into flat arrays: per request timestamp, lengths, the slice of ``ids``."""

    def __init__(self, path):
        raw = gzip.decompress(Path(path).read_bytes())
        self.name = Path(path).name
        self.sha256 = hashlib.sha256(raw).hexdigest()  # of the uncompressed file, as its README lists
        records = [json.loads(line) for line in raw.splitlines() if line.strip()]
        self.timestamps = [record["timestamp"] for record in records]
        self.input_lengths = [record["input_length"] for record in records]
        self.output_lengths = [record["output_length"] for record in records]
        lengths = [len(record["hash_ids"]) for record in records]
        self.ids = np.fromiter((i for record in records for i in record["hash_ids"]), np.int64, sum(lengths))
        self.ends = np.cumsum(lengths, dtype=np.int64)
        self.distinct = len(np.unique(self.ids))
        if any(type(t) is not int for t in self.timestamps) or self.timestamps != sorted(self.timestamps):
            sys.exit(f"{self.name}: timestamps must be whole numbers in order")
        if len(self.ids) and self.ids.min() < 0:
            sys.exit(f"{self.name}: negative hash IDs")

    @property
    def accesses(self):
        return int(self.ends[-1]) if len(self.ends) else 0


def load_sources():
    return [Source(SOURCE_DIR / name) for name in SOURCES]


def target_accesses(size, sources):
    """The block accesses a size asks for: ``Nx`` (times the first trace's), ``Nk``, ``Nm``."""
    match = re.fullmatch(r"(\d+)([xkm])", size)
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"a size is Nx, Nk or Nm with N >= 1, got {size!r}")
    count, unit = int(match.group(1)), match.group(2)
    return count * {"x": sources[0].accesses, "k": 1_000, "m": 1_000_000}[unit]


def copies(sources, target):
    """``(source, id offset, timestamp shift, requests to take)`` per copy until ``target`` accesses."""
    stride = max(int(source.ids.max()) for source in sources) + 1
    taken = 0
    last_timestamp = None
    k = 0
    while taken < target:
        source = sources[k % len(sources)]
        shift = 0 if last_timestamp is None else last_timestamp + 1 - source.timestamps[0]
        requests = len(source.ends)
        if taken + source.accesses >= target:  # the last copy: up to the request that reaches the target
            requests = int(np.searchsorted(source.ends, target - taken)) + 1
        yield source, k * stride, shift, requests
        taken += int(source.ends[requests - 1])
        last_timestamp = source.timestamps[requests - 1] + shift
        k += 1


def write_trace(path, sources, target):
    """Write the trace of ``target`` accesses to ``path`` (atomically); return its sidecar's figures."""
    digest = hashlib.sha256()
    requests = accesses = distinct = written = 0
    partial = path.with_name(path.name + ".tmp")
    with open(partial, "wb", buffering=0) as out:
        pending, pending_chars = [], 0
        for source, offset, shift, count in copies(sources, target):
            end = int(source.ends[count - 1])
            ids = (source.ids[:end] + offset).tolist()
            distinct += len(np.unique(source.ids[:end])) if count < len(source.ends) else source.distinct
            start = 0
            for i in range(count):
                stop = int(source.ends[i])
                blocks = ", ".join(map(str, ids[start:stop]))
                line = (
                    f'{{"timestamp": {source.timestamps[i] + shift}, "input_length": {source.input_lengths[i]},'
                    f' "output_length": {source.output_lengths[i]}, "hash_ids": [{blocks}]}}\n'
                )
                start = stop
                pending.append(line)
                pending_chars += len(line)
                if pending_chars >= CHUNK:
                    data = "".join(pending).encode()
                    digest.update(data)
                    out.write(data)
                    written += len(data)
                    pending, pending_chars = [], 0
            requests += count
            accesses += end
        data = "".join(pending).encode()
        digest.update(data)
        out.write(data)
        written += len(data)
    os.replace(partial, path)
    sha256 = digest.hexdigest()
    return {"requests": requests, "accesses": accesses, "distinct_blocks": distinct, "bytes": written, "sha256": sha256}


def sidecar_path(path):
    return path.with_name(path.name + ".meta.json")


def ensure(size, out=DEFAULT_OUT, sources=None, verify=False, log=print):
    """The trace of ``size`` in ``out``, written unless its sidecar says it is already there; return the
    sidecar (a dict with ``path``)."""
    sources = sources or load_sources()
    target = target_accesses(size, sources)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mooncake-{size}.jsonl"
    wanted = {
        "generator": GENERATOR,
        "size": size,
        "target_accesses": target,
        "sources": {source.name: source.sha256 for source in sources},
    }
    meta_path = sidecar_path(path)
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = None
    if meta and {key: meta.get(key) for key in wanted} == wanted and path.is_file():
        if path.stat().st_size == meta["bytes"] and (not verify or file_sha256(path) == meta["sha256"]):
            log(f"{path}: present ({meta['requests']:,} requests, {meta['accesses']:,} accesses)")
            return {**meta, "path": str(path)}
    start = time.perf_counter()
    meta_path.unlink(missing_ok=True)  # no sidecar for a half-written trace
    meta = {**wanted, **write_trace(path, sources, target)}
    if size == "1x" and meta["sha256"] != sources[0].sha256:
        sys.exit(f"{path}: the 1x trace should be {sources[0].name} byte for byte, and is not")
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    log(
        f"{path}: written in {time.perf_counter() - start:.1f} s ({meta['requests']:,} requests,"
        f" {meta['accesses']:,} accesses, {meta['distinct_blocks']:,} distinct blocks,"
        f" {meta['bytes'] / 2**20:,.1f} MiB)"
    )
    return {**meta, "path": str(path)}


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", default=list(DEFAULT_SIZES), help="Nx, Nk or Nm (default: 1x 4x 16x)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the folder (default work/bench/traces)")
    parser.add_argument("--verify", action="store_true", help="also check a present trace's sha256")
    args = parser.parse_args(argv)
    sources = load_sources()
    for size in args.sizes:
        try:
            target_accesses(size, sources)
        except ValueError as error:
            parser.error(str(error))
    for size in args.sizes:
        ensure(size, args.out, sources, args.verify)


if __name__ == "__main__":
    main()
