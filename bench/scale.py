"""Scale: kvlab replay, mrc and plan beside libCacheSim's LRU and KVCache.AI's kvcache-simulator, per block access.

At each size of ``bench/scale_traces.py`` (Mooncake traces made by cycling the published two:
``1x`` is the conversation trace, 288,500 block accesses; ``4x`` 1,154,024; ``16x`` 4,616,002;
``100m`` on demand) it runs each row in its own process and reads the process's CPU time (user +
sys, its children included) and peak memory (``ru_maxrss``) from ``os.wait4``:

* ``replay``: ``python -m kvlab replay --workload mooncake --trace T --gpu-tokens G --block-tokens 512``,
  the whole command (the GPU tier only, LRU, tail first, last partial blocks dropped).
* ``libCacheSim, default table`` / ``libCacheSim, sized table``: libCacheSim's C LRU
  (``LRU(G / 512).process_trace``) over the same block accesses, unit-sized, already in memory in
  its oracleGeneral format: only the simulation is timed (``getrusage`` around ``process_trace``;
  best of 3), not the loading. With its default hash table (2^24 buckets: 128 MiB that random keys
  touch all over, faulted in during the simulation), and with one sized for the room
  (``hashpower`` = bits of G / 512, + 1). Accesses in kvlab's order, the order a tier of ``kvlab
  replay`` sees (each request's full blocks tail first; its last partial block never), and, in the
  row ``libCacheSim, sized, file order``, in the file's (every hash ID as written, head first).
* ``kvcache-sim``: ``kvcache-simulator`` 0.1.3 (PyPI, KVCache.AI; a batch C++ core it compiles
  with ``c++`` on first use) called as its ``run --policies lru --block-size 512`` command calls it,
  with a room of G / 512 blocks instead of a model's GiB: ``kvcache_sim.trace.parse_trace_file``,
  then ``kvcache_sim.cpp_backend.run_cpp_sweep`` with its default measurement window (the last half
  of the requests). The whole process is timed, its C++ child included. Skipped at a size where its
  projected peak (start-up + the larger of 116 bytes per access and the rate this run measured at
  smaller sizes) passes ``--peer-memory`` (default 16G) or 80% of the memory available, with the
  reason printed and in the table.
* ``mrc``: ``python -m kvlab mrc --workload mooncake --trace T --block-tokens 512``, the whole
  command (the exact curve of the GPU tier at every room).
* ``plan``: ``python -m kvlab plan --workload mooncake --trace T --model-config
  models/Qwen2.5-7B-Instruct/config.json --gpu-tokens G --cpu-gib 4 --write-policy write-through
  --chunk-tokens 512``, the whole command (``--plan-cpu-gib`` for another budget).

A kvlab command that fails (a stop by ``--max-memory``, a kill) is a row marked failed, with its last
line on stderr, not the end of the run. Every row runs first on a tiny trace (``1k``: 38 requests,
1,002 accesses), twice: the first run warms numba's cache (and compiles kvcache-simulator's core),
the second gives the row's start-up CPU and peak; "above start-up" is a size's figure less that.
Per access is per block access of the trace (its sum of ``len(hash_ids)``) in every row. The room
G defaults to 512 x a quarter of the 1x trace's distinct blocks: 45,697 blocks, 23,396,864 tokens
(block hit ratio 0.35 at 1x). Each command is started by a small Python process (``-S``) that
waits for it: a child started directly from this one would inherit its memory high-water mark
(Linux keeps it across fork and exec), so a peak would never read below this process's own.

Hit checks (each is printed; one that disagrees is printed loudly, and the run exits 1 at the end):

* libCacheSim in kvlab's order counts a block as a hit when it is cached at its access; the replay
  counts each request's cached prefix at its lookup. They can differ only by prefix blocks that
  the request's own new blocks (stored first, tail first) evict before they are touched: a Python
  reference LRU over the same order counts both ways and must equal both (libCacheSim with either
  hash table). In the file's order the hits are another LRU's (last partial blocks take slots, and
  tails are more recent than heads); a second reference splits them into full-block prefix hits,
  hits on last partial blocks and hits after a miss, and must equal libCacheSim's.
* kvcache-simulator keeps each last partial block (a whole slot), evicts leaves of a prefix tree,
  and counts hit tokens over its window only; its hits on the trace itself are reported, not
  compared. On the same trace with each last partial block dropped and a first request of G / 512
  new blocks that fills the cache (so its window, which starts after that request, is the whole
  trace on a cache that behaves as an empty one), its ``hitTokens`` must equal the replay's
  ``gpu_hit_tokens`` (= 512 x ``gpu_hit_blocks``).
* The plan's GPU hit tokens equal the replay's; its ``max_token_hit_ratio`` equals mrc's; a replay
  with ``--cpu-tokens`` the plan's CPU room counts the plan's GPU and CPU hit tokens; and a replay
  with ``--cpu-tokens`` the plan's ``cpu_tokens_for_full_reuse`` reaches mrc's ``reusable_tokens``.

Prints two markdown tables (per row; ratios with their targets, pass/fail) and writes all figures
as JSON to ``work/bench/scale.json``, with the commit and a sha256 of kvlab/ at the start and the
end (a warning if they differ). Needs the bench extra (``make bench-scale``). ``100m`` takes about
25 minutes on 2 cores, and kvcache-simulator's peak there is about 11 GB. Usage::

    .venv/bin/python bench/scale.py [--sizes 1x,4x,16x[,100m]] [--gpu-tokens G] [--repeat N]
        [--plan-cpu-gib GIB] [--peer-memory 16G] [--json FILE] [--traces DIR]
"""

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import scale_traces  # noqa: E402

BLOCK = 512
TINY = "1k"
DEFAULT_SIZES = "1x,4x,16x"
DEFAULT_JSON = ROOT / "work" / "bench" / "scale.json"
ORACLE_GENERAL = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
MODEL_CONFIG = ROOT / "models" / "Qwen2.5-7B-Instruct" / "config.json"
ROWS = (
    "replay",
    "libCacheSim, default table",
    "libCacheSim, sized table",
    "libCacheSim, sized, file order",
    "kvcache-sim",
    "mrc",
    "plan",
)
KVLAB_ROWS = ("replay", "mrc", "plan")
# Peak bytes per access above start-up of a peer, before this run measures it (2026-11 figures at 16x); a peer
# whose projected peak passes --peer-memory is skipped at that size, with the reason printed.
PEER_BYTES_PER_ACCESS = {"kvcache-sim": 116.0}
TARGETS = {
    "replay / libCacheSim default": ("<=", 2.0, "kvlab replay per access at most 2x libCacheSim's LRU (its defaults)"),
    "replay / libCacheSim sized": ("<=", 2.0, "the same beside libCacheSim with its hash table sized for the room"),
    "kvcache-sim / replay": (">=", 4.0, "kvcache-simulator at least 4x kvlab replay's time"),
    "mrc / replay": ("<=", 2.0, "the whole curve at most 2x one replay"),
    "mrc bytes/access above start-up": ("<=", 48.0, "kvlab mrc's memory above start-up per access"),
    "replay, mrc, plan complete": ("==", 1.0, "the whole replay, mrc and plan commands finish on this machine"),
}


# ---- the children: one tool each, run as ``scale.py --child NAME ARGS``; they print one JSON object


def child_libcachesim(path, capacity, table, runs=3):
    """libCacheSim's LRU over an oracleGeneral file of unit-sized blocks; only process_trace is timed (best of 3).
    ``table``: ``default`` (its 2^24 buckets) or ``sized`` (2^(bits of the room + 1) buckets)."""
    import libcachesim

    requests = Path(path).stat().st_size // ORACLE_GENERAL.itemsize
    best = {}
    for _ in range(int(runs)):
        reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
        if table == "sized":  # the default, 2^24 buckets, is 128 MiB that random keys touch all over
            cache = libcachesim.LRU(int(capacity), hashpower=max(10, int(capacity).bit_length() + 1))
        else:
            cache = libcachesim.LRU(int(capacity))
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        miss_ratio, _ = cache.process_trace(reader)
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        hits = round((1 - miss_ratio) * requests)
        if best and hits != best["hits"]:
            sys.exit(f"libCacheSim counted {hits:,} hits, then {best['hits']:,}")
        if not best or cpu < best["sim_cpu_s"]:
            best = {"requests": requests, "hits": hits, "sim_cpu_s": cpu, "sim_wall_s": wall}
        del cache, reader
    return best


def child_kvcache_sim(path, capacity):
    """kvcache-simulator's LRU as its ``run --policies lru --block-size 512`` runs it, at ``capacity`` blocks."""
    from kvcache_sim.simulator import warmup_requests_for_trace
    from kvcache_sim.trace import parse_trace_file

    trace = parse_trace_file(path, block_size=BLOCK)
    warmup = warmup_requests_for_trace(trace, 0.5)  # its default window: the last half of the requests
    return kvcache_sim_lru(trace, int(capacity), warmup)


def child_kvcache_sim_check(path, capacity):
    """The same on kvlab's terms: last partial blocks dropped, a first request that fills the cache."""
    from kvcache_sim.trace import parse_trace_lines

    capacity = int(capacity)

    def lines():
        yield json.dumps({"hash_ids": [f"fill-{i}" for i in range(capacity)], "input_length": capacity * BLOCK})
        with open(path, "rb") as handle:
            for raw in handle:
                record = json.loads(raw)
                full = record["input_length"] // BLOCK
                if full:
                    yield json.dumps({"hash_ids": record["hash_ids"][:full], "input_length": full * BLOCK})

    trace = parse_trace_lines(lines(), block_size=BLOCK)
    return kvcache_sim_lru(trace, capacity, 1)


def kvcache_sim_lru(trace, capacity, warmup):
    from kvcache_sim.cpp_backend import run_cpp_sweep

    result = run_cpp_sweep(trace, capacities=[capacity], policies=["lru"], warmup_requests=warmup)
    lru = result.results[("lru", capacity)]
    own, core = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "python_cpu_s": own.ru_utime + own.ru_stime,  # reading the trace, interning the IDs, writing them out
        "cpp_cpu_s": core.ru_utime + core.ru_stime,  # its C++ core (and the compiler, on a first run)
        "requests": trace.request_count,
        "block_events": len(trace.ids),
        "unique_blocks": result.unique_blocks,
        "warmup_requests": warmup,
        "measurement": lru.measurementMode,
        "hit_tokens": lru.hitTokens,
        "total_tokens": lru.totalTokens,
        "hit_rate": lru.hitRate,
    }


CHILDREN = {
    "libcachesim": child_libcachesim,
    "kvcache-sim": child_kvcache_sim,
    "kvcache-sim-check": child_kvcache_sim_check,
}


# ---- the parent


# Started from a big parent, a child's ru_maxrss starts at the parent's RSS (Linux keeps the old memory's high-water
# mark across fork and exec): a small Python process (-S, standard library) starts each measured command instead,
# waits for it and writes its rusage to a file.
SPAWNER = """
import json, os, sys
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"cpu_s": usage.ru_utime + usage.ru_stime, "peak_bytes": usage.ru_maxrss * 1024}, out)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(command, repeat=1):
    """Run ``command`` ``repeat`` times in the repository root; return ``{cpu_s, peak_bytes, stdout, error}``: the
    least CPU seconds, the largest peak bytes (from os.wait4, its children included), the last stdout, and for a
    command that failed (a stop by ``--max-memory``, a kill) its exit status and last line on stderr (else None)."""
    best_cpu, top_peak = math.inf, 0
    for _ in range(repeat):
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as folder:
            usage_path = Path(folder) / "usage.json"
            spawner = [sys.executable, "-S", "-c", SPAWNER, str(usage_path), *map(str, command)]
            done = subprocess.run(spawner, stdout=out, stderr=err, cwd=ROOT, check=False)
            out.seek(0), err.seek(0)
            stdout, stderr = out.read().decode(), err.read().decode()
            usage = json.loads(usage_path.read_text())
        best_cpu, top_peak = min(best_cpu, usage["cpu_s"]), max(top_peak, usage["peak_bytes"])
        if done.returncode:
            lines = [line for line in stderr.strip().splitlines() if line.strip()]
            error = f"exit {done.returncode}: {lines[-1].strip() if lines else '(nothing on stderr)'}"
            print(f"failed: {' '.join(map(str, command))}\n{stderr.strip()[-4000:]}", file=sys.stderr, flush=True)
            return {"cpu_s": usage["cpu_s"], "peak_bytes": usage["peak_bytes"], "stdout": stdout, "error": error}
    return {"cpu_s": best_cpu, "peak_bytes": top_peak, "stdout": stdout, "error": None}


def child_command(name, *args):
    return [sys.executable, str(Path(__file__).resolve()), "--child", name, *map(str, args)]


def kvlab_command(command, trace, *flags):
    size_flag = "--chunk-tokens" if command == "plan" else "--block-tokens"
    flags = [*flags, size_flag, str(BLOCK)]
    return [sys.executable, "-m", "kvlab", command, "--workload", "mooncake", "--trace", str(trace), *flags]


def plan_command(trace, gpu_tokens, cpu_gib):
    flags = ["--model-config", MODEL_CONFIG, "--gpu-tokens", gpu_tokens, "--cpu-gib", f"{cpu_gib:g}"]
    return kvlab_command("plan", trace, *map(str, flags), "--write-policy", "write-through")


def load_trace(path):
    """``(ids, ends, full)``: every hash ID in file order, each request's end in ``ids``, its full blocks."""
    try:
        import orjson

        loads = orjson.loads
    except ImportError:
        loads = json.loads
    ids, ends, full = [], [], []
    chunk, count = [], 0
    with open(path, "rb") as handle:
        for raw in handle:
            record = loads(raw)
            chunk.extend(record["hash_ids"])
            count += len(record["hash_ids"])
            ends.append(count)
            full.append(record["input_length"] // BLOCK)
            if len(chunk) >= 1 << 22:
                ids.append(np.array(chunk, dtype=np.int64))
                chunk = []
    ids.append(np.array(chunk, dtype=np.int64))
    return np.concatenate(ids), np.array(ends, dtype=np.int64), np.array(full, dtype=np.int64)


def kvlab_order(ids, ends, full):
    """The accesses a replay tier sees: each request's full blocks, tail first (its last partial block never)."""
    starts = ends - np.diff(ends, prepend=0)
    total = int(full.sum())
    first = np.repeat(starts + full - 1, full)  # each access's request's last full block
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)
    return ids[first - within]


def write_oracle_general(path, keys):
    """Unit-sized requests in libCacheSim's binary oracleGeneral format, written in chunks."""
    with open(path, "wb") as out:
        for start in range(0, len(keys), 1 << 23):
            part = keys[start : start + (1 << 23)]
            records = np.zeros(len(part), dtype=ORACLE_GENERAL)
            records["time"] = np.arange(start, start + len(part)) & 0xFFFFFFFF
            records["id"] = part
            records["size"] = 1
            records["next"] = -1
            records.tofile(out)


def reference_lru(ids, ends, full, capacity):
    """A bare LRU over kvlab's order: ``(prefix hits at lookup, hits at access)``: the replay's and libCacheSim's."""
    cache = OrderedDict()
    move, pop = cache.move_to_end, cache.popitem
    prefix_hits = access_hits = 0
    starts = (ends - np.diff(ends, prepend=0)).tolist()
    for first, count in zip(starts, full.tolist(), strict=True):
        keys = ids[first : first + count].tolist()
        for key in keys:
            if key not in cache:
                break
            prefix_hits += 1
        for key in reversed(keys):
            if key in cache:
                move(key)
                access_hits += 1
                continue
            if len(cache) >= capacity:
                pop(False)
            cache[key] = None
    return prefix_hits, access_hits


def reference_file_order(ids, ends, full, capacity):
    """A bare LRU over the file's order: its hits, split into full-block prefix hits, hits on last partial blocks,
    and full-block hits after a miss in the same request (cached, but of no use to a prefix cache)."""
    cache = OrderedDict()
    move, pop = cache.move_to_end, cache.popitem
    prefix = partial = after_miss = 0
    first = 0
    for end, count in zip(ends.tolist(), full.tolist(), strict=True):
        alive = True
        for position, key in enumerate(ids[first:end].tolist()):
            if key in cache:
                move(key)
                if position >= count:
                    partial += 1
                elif alive:
                    prefix += 1
                else:
                    after_miss += 1
                continue
            alive = False
            if len(cache) >= capacity:
                pop(False)
            cache[key] = None
        first = end
    return {"hits": prefix + partial + after_miss, "prefix": prefix, "partial": partial, "after_miss": after_miss}


def row_of(run, hits):
    """A table row from a :func:`measured` run: its figures, or its failure."""
    row = {"cpu_s": run["cpu_s"], "peak_bytes": run["peak_bytes"], "status": "ok", "hits": hits}
    if run["error"]:
        row.update(status="failed", note=run["error"], hits=f"failed, {run['error']}")
    return row


def skipped_row(reason):
    return {"cpu_s": None, "peak_bytes": None, "status": "skipped", "note": reason, "hits": f"skipped: {reason}"}


def agree(checks, name, **values):
    """Record whether ``values`` are all equal under ``checks[name]``; print a loud line when they are not."""
    same = len({json.dumps(value) for value in values.values()}) == 1
    checks[name] = {**values, "agree": same}
    if not same:
        print(f"CHECK FAILED: {name}: {values}", file=sys.stderr, flush=True)
    return same


def measure_size(trace, capacity, gpu_tokens, folder, plan_cpu_gib=4.0, check=True, repeat=1, skip=None):
    """Every row's CPU seconds, peak bytes and hits on one trace, and the checks' figures. ``skip``: ``{row:
    reason}`` for peers not run at this size."""
    skip = skip or {}
    rows, checks, out = {}, {}, {}
    # The whole commands first, while this process holds no trace.
    commands = {
        "replay": kvlab_command("replay", trace, "--gpu-tokens", str(gpu_tokens)),
        "mrc": kvlab_command("mrc", trace),
        "plan": plan_command(trace, gpu_tokens, plan_cpu_gib),
    }
    for name, command in commands.items():
        run = measured(command, repeat)
        out[name] = None if run["error"] else json.loads(run["stdout"])
        if out[name] is None:
            hits = ""
        elif name == "replay":
            hits = f"{out[name]['gpu_hit_blocks']:,} blocks"
        elif name == "mrc":
            hits = "(every room)"
        else:
            hits = f"{out[name]['gpu_hit_tokens']:,} GPU + {out[name]['cpu_hit_tokens']:,} CPU hit tokens"
        rows[name] = row_of(run, hits)
    replay, mrc, plan = out["replay"], out["mrc"], out["plan"]

    kvsim = None
    if "kvcache-sim" in skip:
        rows["kvcache-sim"] = skipped_row(skip["kvcache-sim"])
    else:
        run = measured(child_command("kvcache-sim", trace, capacity), repeat)
        kvsim = None if run["error"] else json.loads(run["stdout"])
        window = ""
        if kvsim:
            window = "(underfilled)"
            if kvsim["measurement"] == "fixed_window":
                window = f"{kvsim['hit_tokens']:,} tokens in its window"
        rows["kvcache-sim"] = {**row_of(run, window), "result": kvsim}

    not_checked = []
    if check and replay and kvsim:
        run = measured(child_command("kvcache-sim-check", trace, capacity))
        same_terms = None if run["error"] else json.loads(run["stdout"])
        if same_terms is None or same_terms["measurement"] != "fixed_window":
            not_checked.append(f"kvcache-sim on kvlab's terms: {run['error'] or same_terms['measurement']}")
        else:
            agree(
                checks,
                "kvcache-sim",
                replay_gpu_hit_tokens=replay["gpu_hit_tokens"],
                kvcache_sim_hit_tokens_same_terms=same_terms["hit_tokens"],
            )
            checks["kvcache-sim"].update(
                replay_gpu_hit_blocks=replay["gpu_hit_blocks"],
                kvcache_sim_hit_tokens_own_window=kvsim["hit_tokens"],
                kvcache_sim_window_requests=kvsim["requests"] - kvsim["warmup_requests"],
            )
    elif check:
        not_checked.append("kvcache-sim (" + ("skipped" if "kvcache-sim" in skip else "no replay or no run") + ")")

    if check and plan and replay and mrc:
        # The plan's GPU and CPU hits at its rooms are a replay's with the CPU room it names; its full reuse is the
        # curve's, and a replay with the CPU room it says full reuse takes reaches it.
        agree(checks, "plan GPU hits", plan=plan["gpu_hit_tokens"], replay=replay["gpu_hit_tokens"])
        agree(checks, "plan max hit ratio", plan=plan["max_token_hit_ratio"], mrc=mrc["max_token_hit_ratio"])
        for name, cpu_tokens in (
            ("plan at its CPU room", plan["cache"]["cpu_tokens"]),
            ("plan full reuse", plan["cpu_tokens_for_full_reuse"]),
        ):
            run = measured(kvlab_command("replay", trace, "--gpu-tokens", str(gpu_tokens), "--cpu-tokens", cpu_tokens))
            if run["error"]:
                not_checked.append(f"{name}: the replay with --cpu-tokens {cpu_tokens}: {run['error']}")
                continue
            tiered = json.loads(run["stdout"])
            got = [tiered["gpu_hit_tokens"], tiered["cpu_hit_tokens"]]
            if name == "plan at its CPU room":
                agree(checks, name, plan=[plan["gpu_hit_tokens"], plan["cpu_hit_tokens"]], replay=got)
            else:
                agree(checks, name, mrc_reusable_tokens=mrc["reusable_tokens"], replay_hit_tokens=sum(got))
            checks[name]["cpu_tokens"] = cpu_tokens
    elif check:
        not_checked.append("plan (the replay, mrc or plan failed)")

    # Then libCacheSim over the trace's accesses, read here.
    ids, ends, full = load_trace(trace)
    files = {}
    for order, keys in (("kvlab", lambda: kvlab_order(ids, ends, full)), ("file", lambda: ids)):
        files[order] = Path(folder) / f"accesses-{order}.oracleGeneral"
        write_oracle_general(files[order], keys())
    lib = {}
    for row, order, table in (
        ("libCacheSim, default table", "kvlab", "default"),
        ("libCacheSim, sized table", "kvlab", "sized"),
        ("libCacheSim, sized, file order", "file", "sized"),
    ):
        run = measured(child_command("libcachesim", files[order], capacity, table))
        simulated = None if run["error"] else json.loads(run["stdout"])
        lib[row] = simulated and simulated["hits"]
        rows[row] = row_of(run, simulated and f"{simulated['hits']:,} blocks")
        if simulated:  # only process_trace's CPU time counts, not the loading
            rows[row].update(cpu_s=simulated["sim_cpu_s"], accesses_simulated=simulated["requests"])
    for path in files.values():
        path.unlink()

    if replay:
        agree(checks, "accesses", trace=len(ids), replay=replay["block_accesses"])
    if check and replay and all(lib.values()):
        prefix_hits, access_hits = reference_lru(ids, ends, full, capacity)
        file_order = reference_file_order(ids, ends, full, capacity)
        agree(checks, "replay = reference prefix hits", replay=replay["gpu_hit_blocks"], reference=prefix_hits)
        agree(
            checks,
            "libCacheSim = reference access hits",
            default_table=lib["libCacheSim, default table"],
            sized_table=lib["libCacheSim, sized table"],
            reference=access_hits,
        )
        agree(
            checks,
            "libCacheSim file order = reference",
            libcachesim=lib["libCacheSim, sized, file order"],
            reference=file_order["hits"],
        )
        checks["libCacheSim = reference access hits"]["self_evicted_prefix_blocks"] = prefix_hits - access_hits
        checks["libCacheSim file order = reference"]["split"] = file_order
    elif check:
        not_checked.append("libCacheSim (the replay or a libCacheSim run failed)")
    if check:
        checks["not_checked"] = not_checked
        for line in not_checked:
            print(f"not checked: {line}", file=sys.stderr, flush=True)
    return rows, checks


def startup(capacity, gpu_tokens, folder, repeat, traces, plan_cpu_gib):
    """Each row's command on the tiny trace, twice (warm-up, then measured): its start-up peak and CPU."""
    trace = scale_traces.ensure(TINY, traces, log=lambda line: None)["path"]
    measure_size(trace, capacity, gpu_tokens, folder, plan_cpu_gib, check=False)  # warm-up
    rows = measure_size(trace, capacity, gpu_tokens, folder, plan_cpu_gib, check=False, repeat=repeat)[0]
    failed = {row: f["note"] for row, f in rows.items() if f["status"] != "ok"}
    if failed:
        sys.exit(f"start-up runs on the tiny trace failed: {failed}")
    return rows


def code_stamp():
    """The commit and a sha256 of every file under kvlab/ (``*.py`` and the compiled cores' sources) as they are
    now: a run whose stamp at the end differs from its start measured code that changed under it."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    digest = hashlib.sha256()
    for path in sorted((ROOT / "kvlab").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {"commit": commit.stdout.strip() or None, "kvlab_sha256": digest.hexdigest()}


def available_bytes():
    """MemAvailable now (bytes), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peers_to_skip(accesses, base, done, limit):
    """``{peer: reason}`` for each peer whose projected peak at ``accesses`` passes ``limit`` bytes (or 80% of the
    memory available now): its start-up peak plus bytes per access (the largest of the assumed rate and the rates
    this run measured at smaller sizes) times the accesses."""
    now = available_bytes()
    cap = min(limit, int(0.8 * now)) if now else limit
    skip = {}
    for peer, assumed in PEER_BYTES_PER_ACCESS.items():
        rates = [
            figures["rows"][peer]["above_startup_bytes"] / figures["accesses"]
            for figures in done.values()
            if figures["rows"][peer]["status"] == "ok" and figures["accesses"] >= 1_000_000
        ]
        rate = max([assumed, *rates])
        projected = base[peer]["peak_bytes"] + rate * accesses
        if projected > cap:
            skip[peer] = (
                f"its projected peak, {projected / 1e9:,.1f} GB ({rate:.0f} B/access x {accesses:,} accesses"
                f" + start-up), passes the {cap / 1e9:.3g} GB allowed"
                f" (--peer-memory {limit / 1e9:,.3g} GB; 80% of the {(now or 0) / 1e9:,.1f} GB available now)"
            )
    return skip


def over(figures, a, b):
    return None if figures[a] is None or figures[b] is None else figures[a] / figures[b]


def ratio_rows(sizes):
    ratios = {}
    for size, figures in sizes.items():
        rows = figures["rows"]
        us = {row: rows[row]["us_per_access"] for row in ROWS}
        mrc_above = rows["mrc"]["above_startup_bytes"]
        ratios[size] = {
            "replay / libCacheSim default": over(us, "replay", "libCacheSim, default table"),
            "replay / libCacheSim sized": over(us, "replay", "libCacheSim, sized table"),
            "kvcache-sim / replay": over(us, "kvcache-sim", "replay"),
            "mrc / replay": over(us, "mrc", "replay"),
            "mrc bytes/access above start-up": None if mrc_above is None else mrc_above / figures["accesses"],
            "replay, mrc, plan complete": float(all(rows[row]["status"] == "ok" for row in KVLAB_ROWS)),
        }
    return ratios


def passes(name, value):
    sign, target, _ = TARGETS[name]
    if value is None:
        return None
    return {"<=": value <= target, ">=": value >= target, "==": value == target}[sign]


def cell(value, spec, missing="—"):
    return missing if value is None else format(value, spec)


def markdown(result):
    lines = [
        "| size | accesses | row | µs/access | µs/access above start-up | CPU s | peak MB | MB above start-up | hits |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size, figures in result["sizes"].items():
        for row in ROWS:
            f = figures["rows"][row]
            peak = None if f["peak_bytes"] is None else f["peak_bytes"] / 1e6
            above = None if f["above_startup_bytes"] is None else f["above_startup_bytes"] / 1e6
            lines.append(
                f"| {size} | {figures['accesses']:,} | {row} | {cell(f['us_per_access'], '.3f')}"
                f" | {cell(f['us_per_access_above_startup'], '.3f')} | {cell(f['cpu_s'], '.2f')}"
                f" | {cell(peak, ',.1f')} | {cell(above, ',.1f')} | {f['hits']} |"
            )
    startup = ", ".join(
        f"{row} {f['cpu_s']:.2f} s, {f['peak_bytes'] / 1e6:,.1f} MB" for row, f in result["startup"].items()
    )
    lines += [
        "",
        f"Start-up (each command on the tiny trace {TINY}, after a warm-up run): {startup}.",
        "",
        "| size | " + " | ".join(f"{name} ({TARGETS[name][0]} {TARGETS[name][1]:g})" for name in TARGETS) + " |",
        "|---|" + "---:|" * len(TARGETS),
    ]
    for size, ratios in result["ratios"].items():
        cells = []
        for name, value in ratios.items():
            verdict = passes(name, value)
            shown = ("yes" if value else "no") if TARGETS[name][0] == "==" else cell(value, ".2f")
            cells.append(f"{shown} {'n/a' if verdict is None else 'pass' if verdict else 'FAIL'}")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated (default {DEFAULT_SIZES}; add 100m)")
    parser.add_argument("--gpu-tokens", type=int, help="the room G (default: a quarter of the 1x distinct blocks)")
    parser.add_argument(
        "--plan-cpu-gib", type=float, default=4.0, help="the plan row's --cpu-gib (GiB; default 4), model Qwen2.5-7B"
    )
    parser.add_argument("--plan-cpu-gb", dest="plan_cpu_gib", type=float, help=argparse.SUPPRESS)  # its former name
    parser.add_argument(
        "--peer-memory",
        default="16G",
        help="skip a peer (kvcache-simulator) at a size where its projected peak passes this (default 16G, and"
        " never more than 80%% of the memory available)",
    )
    parser.add_argument("--traces", default=str(scale_traces.DEFAULT_OUT), help="the traces' folder")
    parser.add_argument(
        "--json", default=str(DEFAULT_JSON), help="where the figures go (default work/bench/scale.json)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each whole command; the least CPU counts (default 1)"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, *rest = args.child
        print(json.dumps(CHILDREN[name](*rest)))
        return

    sources = scale_traces.load_sources()
    gpu_tokens = args.gpu_tokens or BLOCK * (sources[0].distinct // 4)
    if gpu_tokens < BLOCK or gpu_tokens % BLOCK:
        parser.error(f"--gpu-tokens must be a positive multiple of {BLOCK}")
    capacity = gpu_tokens // BLOCK
    try:
        peer_memory = memory_bytes(args.peer_memory)
    except ValueError as error:
        parser.error(str(error))
    sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    for size in sizes:
        try:
            scale_traces.target_accesses(size, sources)
        except ValueError as error:
            parser.error(str(error))
    print(
        f"room G = {gpu_tokens:,} tokens = {capacity:,} blocks of {BLOCK}"
        f" ({'given' if args.gpu_tokens else f'a quarter of the 1x trace distinct {sources[0].distinct:,} blocks'});"
        f" plan: {MODEL_CONFIG.relative_to(ROOT)}, --cpu-gib {args.plan_cpu_gib:g}; {os.cpu_count()} CPUs",
        flush=True,
    )
    work = Path(args.json).parent
    work.mkdir(parents=True, exist_ok=True)
    result = {
        "gpu_tokens": gpu_tokens,
        "capacity_blocks": capacity,
        "block_tokens": BLOCK,
        "plan": {"model_config": str(MODEL_CONFIG.relative_to(ROOT)), "cpu_gib": args.plan_cpu_gib},
        "peer_memory_bytes": peer_memory,
        "repeat": args.repeat,
        "code": code_stamp(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "targets": {
            name: {"sign": sign, "value": value, "what": what} for name, (sign, value, what) in TARGETS.items()
        },
        "sizes": {},
    }
    with tempfile.TemporaryDirectory(dir=work) as folder:
        start = time.perf_counter()
        base = startup(capacity, gpu_tokens, folder, args.repeat, args.traces, args.plan_cpu_gib)
        result["startup"] = {row: {"cpu_s": f["cpu_s"], "peak_bytes": f["peak_bytes"]} for row, f in base.items()}
        print(f"start-up runs on the tiny trace: {time.perf_counter() - start:.1f} s", flush=True)
        for size in sizes:
            meta = scale_traces.ensure(size, args.traces, sources)
            skip = peers_to_skip(meta["accesses"], base, result["sizes"], peer_memory)
            for peer, reason in skip.items():
                print(f"{size}: {peer} skipped: {reason}", flush=True)
            start = time.perf_counter()
            rows, checks = measure_size(
                meta["path"], capacity, gpu_tokens, folder, args.plan_cpu_gib, repeat=args.repeat, skip=skip
            )
            for row, f in rows.items():
                ok = f["status"] == "ok"
                f["us_per_access"] = f["cpu_s"] / meta["accesses"] * 1e6 if ok else None
                f["us_per_access_above_startup"] = (
                    (f["cpu_s"] - base[row]["cpu_s"]) / meta["accesses"] * 1e6 if ok else None
                )
                f["above_startup_bytes"] = f["peak_bytes"] - base[row]["peak_bytes"] if ok else None
            result["sizes"][size] = {
                "trace": Path(meta["path"]).name,
                "requests": meta["requests"],
                "accesses": meta["accesses"],
                "distinct_blocks": meta["distinct_blocks"],
                "seconds": time.perf_counter() - start,
                "rows": rows,
                "checks": checks,
            }
            print(f"{size}: {meta['accesses']:,} accesses in {time.perf_counter() - start:.1f} s", flush=True)
            for row in ROWS:
                f = rows[row]
                us = cell(f["us_per_access"], ".3f")
                print(f"  {row}: {us} us/access, {f['hits']}", flush=True)
            for name, figures in checks.items():
                if name != "not_checked":
                    print(f"  check {name}: {'agree' if figures['agree'] else 'DISAGREE'} {figures}", flush=True)
    result["code_at_end"] = code_stamp()
    result["code_changed_during_run"] = result["code_at_end"] != result["code"]
    result["ratios"] = ratio_rows(result["sizes"])
    verdicts = [passes(n, v) for ratios in result["ratios"].values() for n, v in ratios.items()]
    result["all_targets_pass"] = all(verdict is not False for verdict in verdicts)
    result["all_checks_agree"] = all(
        figures["agree"]
        for size in result["sizes"].values()
        for name, figures in size["checks"].items()
        if name != "not_checked"
    )
    table = markdown(result)
    result["table"] = table
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(table)
    print()
    for name, (sign, value, what) in TARGETS.items():
        print(f"target: {name} {sign} {value:g}: {what}")
    print(f"hit checks: {'all agree' if result['all_checks_agree'] else 'SOME DISAGREE (see above)'}")
    code = result["code"]
    print(f"kvlab: commit {code['commit']}, files sha256 {code['kvlab_sha256'][:16]}")
    if result["code_changed_during_run"]:
        print(f"WARNING: kvlab changed during the run (at the end: {result['code_at_end']})", file=sys.stderr)
    print(f"figures written to {args.json}")
    if not result["all_checks_agree"]:
        sys.exit(1)


def memory_bytes(text):
    """Bytes in ``16G``, ``512M``, ``2000000000`` (binary units)."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    number = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = number[-1:] if number[-1:] in units else ""
    try:
        return int(float(number[: len(number) - len(unit)]) * units[unit])
    except ValueError:
        raise ValueError(f"--peer-memory: expected an amount such as 16G, got {text!r}") from None


if __name__ == "__main__":
    main()
