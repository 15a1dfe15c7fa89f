"""llama.cpp's llama-server (--parallel slots, a host-RAM prompt cache) under Poisson long-document QA load.

A real engine: llama-server with ``--parallel`` slots and its host-RAM prompt cache (``--cache-ram``), serving the
tiny model of server/tiny_model.py a long-document QA workload.

The workload: ``--docs`` documents of ``--doc-tokens`` random token ids (each with its own first token, so no two
share a prefix), and ``--requests`` requests, each one document (uniform, or Zipf with ``--zipf S``) followed by
a fresh question of ``--question-tokens`` random ids, arriving as a Poisson process of ``--rate`` per second, all
drawn from ``--seed``. Prompts go to ``POST /completion`` as lists of token ids (no tokenizer involved, no BOS),
``n_predict`` = ``--output-tokens`` with ``ignore_eos``, ``cache_prompt: true``, streamed: TTFT is the time from
sending the request to the first streamed chunk that carries a token, e2e the time to the final chunk. The final
chunk gives the slot (``id_slot``) and the server's ``timings``: ``cache_n`` (prompt tokens reused: the slot's
KV or a state restored from the RAM cache) and ``prompt_n`` (prompt tokens computed).

The server's log (``-lv 4``: its trace level, which shows the slot selection and every RAM-cache save, restore
and eviction) is read after the run and joined to the requests (per slot, in order, checked on ``cache_n``):
how each request's slot was chosen (``lcp``: the idle slot whose tokens share the longest prefix, over
``--slot-prompt-similarity``; ``lru``: the least recently used idle slot; the request waited in the server's
queue when no slot was idle), whether its prompt was restored from the RAM cache (and with how many tokens), and
when its slot took it (``slot_start_s``, on the client's clock: ``queue_ms`` is the wait for a slot).

One untimed warm-up request first (64 tokens, sharing no prefix with any document): a fresh server's first
decode pays for its buffers. It leaves its 64+ tokens in one slot (and, once idle, in the RAM cache); no request
can reuse them. With ``--warm-docs`` every document follows it, alone and in order (its tokens only, the same
``n_predict``), also untimed: the timed run then starts from a server that has seen every document, as one in
service has, instead of from the documents' first prefills queued behind each other (a transient whose length
decides the heavy runs' upper percentiles).

``--server-cpus LIST`` runs the server on those CPUs and this client on the others (``sched_setaffinity``), and
the server then gets one thread per CPU: on a 2-core machine a 2-thread server shares its cores with the client's
threads, and its barriers (``OMP_WAIT_POLICY=PASSIVE``, below) sleep and wake at the scheduler's pace; pinned to
one core with one thread it has no barrier to wait at, and a step's time holds still within a few percent.

Writes to ``--out``: ``requests.jsonl`` (one record per request), ``summary.json`` (TTFT percentiles, reuse
counts, the RAM cache's activity, the server's flags), ``server.log``.

    python server/load.py --rate 2 --requests 60 --out work/server-load/light
    (build the server first: server/build_llama_server.sh)
"""

import argparse
import http.client
import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "server"))

import tiny_model  # noqa: E402

SERVER = ROOT / "build" / "llama-server" / "bin" / "llama-server"
# tiny_model's vocabulary: 3 control tokens, the space, the letters, the 1- and 2-letter words, then the 3-letter
# words (4,096 of them), which the prompts are made of
LETTERS = len(tiny_model.LETTERS)
FIRST_WORD = 4 + LETTERS + LETTERS + LETTERS**2
WORDS = range(FIRST_WORD, FIRST_WORD + LETTERS**3)
WARM_UP_TOKENS = 64

# The server's log lines that matter (llama.cpp b11434, tools/server/server-context.cpp, at -lv 4).
TIME = r"^(?P<m>\d+)\.(?P<s>\d+)\.(?P<ms>\d+)\.(?P<us>\d+) \w "
SLOT = r"slot +\S+: id +(?P<slot>\d+) \| task (?P<task>-?\d+) \| "
LOG_EVENTS = re.compile(
    TIME
    + r"(?:"
    + SLOT
    + r"(?:selected slot by (?P<how>LRU|LCP similarity|id)(?:, f_sim_best = (?P<sim>[\d.]+))?"
    + r"|(?P<proc>processing task)"
    + r"|cached n_tokens = (?P<cached>\d+)"
    + r"|prompt eval time = +(?P<pp_ms>[\d.]+) ms / +(?P<pp_n>\d+) tokens"
    + r"|stop processing: n_tokens = (?P<kept>\d+))"
    + r"|srv +\S+: +(?:- prompt with length +\d+, lcp = +(?P<c_lcp>\d+), "
    + r"f_keep = (?P<c_keep>[\d.]+), f_sim = (?P<c_sim>[\d.]+)"
    + r"|- found better prompt with f_keep = (?P<r_keep>[\d.]+), f_sim = (?P<r_sim>[\d.]+)"
    + r"|- saving prompt with length (?P<saved>\d+)"
    + r"|- prompt is already in the cache(?P<dup>)"
    + r"|- removing obsolete cached prompt(?P<obsolete>)"
    + r"|- (?P<evicted>making room|cache size limit reached|cache token limit)"
    + r"|- cache state: (?P<states>\d+) prompts, (?P<mib>[\d.]+) MiB))",
    re.MULTILINE,
)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def context_size(args):
    """``-c``: the total KV of all slots; without ``--kv-unified`` each slot gets ``-c / --parallel``, which must
    hold a document, a question and the output (rounded up to 256 tokens, plus 256 to spare)."""
    per_slot = 256 * math.ceil((args.doc_tokens + args.question_tokens + args.output_tokens + 256) / 256)
    return args.parallel * per_slot


def server_command(args, port):
    command = [str(args.server), "--model", str(args.model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--ctx-size", str(args.ctx), "--parallel", str(args.parallel), "--cache-ram", str(args.cache_ram)]
    command += ["--threads", str(args.threads), "--threads-batch", str(args.threads), "--threads-http", "64"]
    command += [
        "--slot-prompt-similarity",
        str(args.slot_prompt_similarity),
        "--kv-unified" if args.kv_unified else "--no-kv-unified",
    ]
    command += ["--no-ui", "--log-verbosity", "4", "--log-timestamps", "--log-colors", "off"]
    return command + args.server_arg


def start(args, port, log):
    """The server, started, answering ``/health``; its log in ``log``."""
    command = server_command(args, port)
    # ggml's OpenMP threads spin while they wait for each other; with any other work on the cores (a 2-core
    # machine running a test suite) that makes a 2-thread server 10x slower. Passive waiting does not.
    environment = os.environ | {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    # --server-cpus: the server on those CPUs, this client on the others, so that neither waits for the other
    pin = (lambda: os.sched_setaffinity(0, args.server_cpus)) if args.server_cpus else None
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment, preexec_fn=pin)
    if args.server_cpus and set(range(os.cpu_count())) - args.server_cpus:
        os.sched_setaffinity(0, set(range(os.cpu_count())) - args.server_cpus)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"load.py: the server stopped at start-up (see {log.name})")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return server, command
        except OSError:
            pass
        time.sleep(0.2)
    server.kill()
    raise SystemExit(f"load.py: the server did not answer within 60 s (see {log.name})")


def cpu_list(text):
    """``--server-cpus``: CPU ids as taskset writes them (``1``, ``0,2``, ``1-3``)."""
    cpus = set()
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise argparse.ArgumentTypeError(f"not a CPU list: {text!r} (e.g. 1, 0,2 or 1-3)")
        cpus.update(range(int(match[1]), int(match[2] or match[1]) + 1))
    if not cpus <= set(range(os.cpu_count())):
        raise argparse.ArgumentTypeError(f"{text!r}: this machine's CPUs are 0-{os.cpu_count() - 1}")
    return cpus


def workload(args):
    """``(documents, requests, warm_up)``: each request ``{"index", "doc", "arrival_s", "tokens"}``, the warm-up's
    tokens; from ``--seed`` alone."""
    rng = random.Random(args.seed)
    vocabulary = WORDS
    firsts = rng.sample(vocabulary, args.docs + 1)  # the last one is the warm-up's
    documents = [[firsts[d]] + rng.choices(vocabulary, k=args.doc_tokens - 1) for d in range(args.docs)]
    weights = [1 / (d + 1) ** args.zipf for d in range(args.docs)]
    requests, clock = [], 0.0
    for index in range(args.requests):
        clock += rng.expovariate(args.rate)
        doc = rng.choices(range(args.docs), weights)[0]
        question = rng.choices(vocabulary, k=args.question_tokens)
        requests.append({"index": index, "doc": doc, "arrival_s": clock, "tokens": documents[doc] + question})
    warm_up = [firsts[-1]] + rng.choices(vocabulary, k=WARM_UP_TOKENS - 1)
    return documents, requests, warm_up


def complete(port, tokens, output_tokens, t0):
    """One streamed completion: ``{"sent_s", "ttft_ms", "e2e_ms", "final"}`` (``final``: the last chunk's JSON), or
    ``{"error"}``. Times on ``time.perf_counter`` from ``t0``."""
    body = json.dumps(
        {"prompt": tokens, "n_predict": output_tokens, "ignore_eos": True, "cache_prompt": True, "stream": True}
    )
    sent = time.perf_counter()
    first = final = None
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        connection.request("POST", "/completion", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            return {"error": f"HTTP {response.status}: {response.read(300)!r}"}
        for line in response:
            if not line.startswith(b"data: "):
                continue
            chunk = json.loads(line[6:])
            if first is None and (chunk.get("tokens") or chunk.get("content")):
                first = time.perf_counter()
            if chunk.get("stop"):
                final = chunk
                break
        connection.close()
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    end = time.perf_counter()
    if final is None:
        return {"error": "the stream ended without a final chunk"}
    first = first if first is not None else end
    return {"sent_s": sent - t0, "ttft_ms": 1e3 * (first - sent), "e2e_ms": 1e3 * (end - sent), "final": final}


def send_all(port, requests, output_tokens):
    """Every request at its arrival time, each on its own thread; the answers, in request order, and the run's
    start on ``time.perf_counter``."""
    answers = [None] * len(requests)

    def worker(index, tokens):
        answers[index] = complete(port, tokens, output_tokens, t0)

    threads = []
    t0 = time.perf_counter()
    for request in requests:
        delay = t0 + request["arrival_s"] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        thread = threading.Thread(target=worker, args=(request["index"], request["tokens"]), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return answers, t0


def log_seconds(match):
    return int(match["m"]) * 60 + int(match["s"]) + int(match["ms"]) / 1e3 + int(match["us"]) / 1e6


def read_log(text):
    """The log, per task in the order the slots took them: ``{"task", "slot", "how", "sim", "restored",
    "cached", "computed", "pp_ms", "kept", "start"}`` (``restored``: tokens of the RAM-cache state loaded into
    the slot, ``None`` when none was; ``cached``: the slot's tokens kept for the prompt, the first time it is
    logged; ``start``: the log's clock when the slot took the task); and the RAM cache's activity."""
    tasks, by_id, pending = [], {}, {}
    cache = {"saved": 0, "duplicates_skipped": 0, "obsoleted": 0, "evicted": 0, "restored": 0, "states": 0, "mib": 0.0}
    for match in LOG_EVENTS.finditer(text):
        if match["how"]:
            pending = {"slot": int(match["slot"]), "how": match["how"].split()[0].lower()}
            pending["sim"] = float(match["sim"]) if match["sim"] else None
        elif match["c_lcp"]:
            pending.setdefault("candidates", {})[(match["c_keep"], match["c_sim"])] = int(match["c_lcp"])
        elif match["r_keep"]:
            pending["restored"] = pending.get("candidates", {}).get(
                (match["r_keep"], match["r_sim"]), -1
            )  # -1: unknown
            cache["restored"] += 1
        elif match["saved"]:
            cache["saved"] += 1
        elif match["dup"] is not None:
            cache["duplicates_skipped"] += 1
            cache["saved"] -= 1
        elif match["obsolete"] is not None:
            cache["obsoleted"] += 1
        elif match["evicted"]:
            cache["evicted"] += 1
        elif match["states"]:
            cache["states"], cache["mib"] = int(match["states"]), float(match["mib"])
        elif match["proc"]:
            task = {"task": int(match["task"]), "slot": int(match["slot"]), "how": None, "sim": None}
            task |= {"restored": None, "cached": None, "computed": None, "pp_ms": None, "kept": None}
            if pending.get("slot") == task["slot"]:
                task |= pending
                task.pop("candidates", None)
            task["start"] = log_seconds(match)
            pending = {}
            by_id[task["task"]] = task
            tasks.append(task)
        elif match["slot"] is not None and int(match["task"]) in by_id:
            task = by_id[int(match["task"])]
            if match["cached"] and task["cached"] is None:
                task["cached"] = int(match["cached"])
            elif match["pp_ms"]:
                task["pp_ms"], task["computed"] = float(match["pp_ms"]), int(match["pp_n"])
            elif match["kept"]:
                task["kept"] = int(match["kept"])
    return tasks, cache


def percentile(values, q):
    """The ``q``-th percentile (linear interpolation), ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rounded(value, digits=1):
    return None if value is None else round(value, digits)


def joined(requests, answers, tasks, doc_tokens):
    """The per-request records: each answer joined to the log's task of its slot, in order (a slot serves one
    request at a time, so its tasks in the log are its requests by the time they ended); ``mismatches``: how
    many joined pairs disagree on ``cache_n``. The log's clock is put on the client's by the request that waited
    least (the time from sending to its slot taking it, at least its HTTP parsing, is taken as 0): ``queue_ms``
    is exact to a millisecond or so."""
    records = []
    for request, answer in zip(requests, answers, strict=True):
        record = {"index": request["index"], "doc": request["doc"], "arrival_s": round(request["arrival_s"], 4)}
        record["prompt_tokens"] = len(request["tokens"])
        if "error" in answer:
            records.append(record | {"error": answer["error"]})
            continue
        final, timings = answer["final"], answer["final"].get("timings", {})
        record |= {"sent_s": round(answer["sent_s"], 4), "slot": final.get("id_slot")}
        record |= {"cached_tokens": timings.get("cache_n"), "computed_tokens": timings.get("prompt_n")}
        record |= {"ttft_ms": round(answer["ttft_ms"], 2), "e2e_ms": round(answer["e2e_ms"], 2)}
        record |= {"output_tokens": final.get("tokens_predicted"), "prompt_ms": timings.get("prompt_ms")}
        record["predicted_ms"] = timings.get("predicted_ms")
        cached = record["cached_tokens"] or 0
        record["reuse"] = "full" if cached >= doc_tokens else ("partial" if cached else "miss")
        records.append(record)
    by_slot = {}
    for record in sorted(records, key=lambda r: r.get("sent_s", 0) + r.get("e2e_ms", 0) / 1e3):
        if "error" not in record:
            by_slot.setdefault(record["slot"], []).append(record)
    tasks_by_slot = {}
    for task in tasks:
        tasks_by_slot.setdefault(task["slot"], []).append(task)
    mismatches, pairs = 0, []
    for slot, served in by_slot.items():
        pairs += zip(served, tasks_by_slot.get(slot, []), strict=False)
        mismatches += abs(len(tasks_by_slot.get(slot, [])) - len(served))
    t0_log = min((task["start"] - record["sent_s"] for record, task in pairs), default=0.0)
    for record, task in pairs:
        record["task"], record["slot_choice"] = task["task"], task["how"]
        record["ram_restore"] = task["restored"] is not None
        if task["restored"] is not None:
            record["ram_restored_tokens"] = task["restored"]  # the restored state's common prefix
        record["slot_start_s"] = round(task["start"] - t0_log, 4)
        record["queue_ms"] = round(1e3 * (record["slot_start_s"] - record["sent_s"]), 2)
        mismatches += task["cached"] != record["cached_tokens"]
    for record in records:
        record["source"] = (
            "ram" if record.get("ram_restore") else ("slot" if (record.get("cached_tokens") or 0) > 0 else "none")
        )
    return records, mismatches


def summarize(args, records, cache, mismatches, command, elapsed):
    done = [record for record in records if "error" not in record]
    ttft = [record["ttft_ms"] for record in done]
    e2e = [record["e2e_ms"] for record in done]
    queue = [record["queue_ms"] for record in done if "queue_ms" in record]
    by_window = {}
    for record in done:
        by_window.setdefault(int(record["arrival_s"] // 5), []).append(record["ttft_ms"])
    by_reuse = {}
    for record in done:
        by_reuse.setdefault(f"{record['reuse']}/{record['source']}", []).append(record["ttft_ms"])
    return {
        "rate": args.rate,
        "requests": args.requests,
        "completed": len(done),
        "errors": len(records) - len(done),
        "parallel": args.parallel,
        "docs": args.docs,
        "doc_tokens": args.doc_tokens,
        "question_tokens": args.question_tokens,
        "output_tokens": args.output_tokens,
        "zipf": args.zipf,
        "seed": args.seed,
        "warm_docs": args.warm_docs,
        "server_cpus": sorted(args.server_cpus) if args.server_cpus else None,
        "threads": args.threads,
        "ctx": args.ctx,
        "cache_ram_mib": args.cache_ram,
        "kv_unified": args.kv_unified,
        "wall_s": round(elapsed, 2),
        "offered_s": round(records[-1]["arrival_s"], 2) if records else 0,
        "ttft_ms": {f"p{q}": rounded(percentile(ttft, q)) for q in (50, 90, 99)}
        | {"mean": rounded(statistics.fmean(ttft)) if ttft else None},
        "ttft_ms_by_5s_of_arrival": [
            {
                "from_s": 5 * window,
                "n": len(values),
                "p50": rounded(percentile(values, 50)),
                "p90": rounded(percentile(values, 90)),
            }
            for window, values in sorted(by_window.items())
        ],
        "e2e_ms": {f"p{q}": rounded(percentile(e2e, q)) for q in (50, 90, 99)},
        "queue_ms": {f"p{q}": rounded(percentile(queue, q)) for q in (50, 90, 99)},
        "reuse": {kind: sum(record["reuse"] == kind for record in done) for kind in ("full", "partial", "miss")},
        "source": {kind: sum(record["source"] == kind for record in done) for kind in ("slot", "ram", "none")},
        "ttft_p50_by_reuse_source": {
            key: {"n": len(values), "p50": rounded(percentile(values, 50))} for key, values in sorted(by_reuse.items())
        },
        "slot_choice": dict(sorted(Counter(str(record.get("slot_choice")) for record in done).items())),
        "slots_used": dict(sorted(Counter(str(record.get("slot")) for record in done).items())),
        "cached_tokens_total": sum(record["cached_tokens"] or 0 for record in done),
        "computed_tokens_total": sum(record["computed_tokens"] or 0 for record in done),
        "ram_cache": cache,
        "log_join_mismatches": mismatches,
        "server_command": command,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals per second (default 2)")
    parser.add_argument("--requests", type=int, default=60, help="requests (default 60)")
    parser.add_argument("--parallel", type=int, default=4, help="the server's slots (default 4)")
    parser.add_argument("--docs", type=int, default=8, help="documents (default 8)")
    parser.add_argument("--doc-tokens", type=int, default=2000, help="tokens per document (default 2000)")
    parser.add_argument("--question-tokens", type=int, default=32, help="tokens per question (default 32)")
    parser.add_argument("--output-tokens", type=int, default=16, help="tokens generated per request (default 16)")
    parser.add_argument("--zipf", type=float, default=0.0, help="document popularity ~ 1/rank^S (default 0: uniform)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (default 0)")
    parser.add_argument(
        "--warm-docs", action="store_true", help="send every document once, untimed, before the run (default off)"
    )
    parser.add_argument("--out", default=str(ROOT / "work" / "server-load" / "run"), help="output folder")
    parser.add_argument("--server", default=str(SERVER), help=f"llama-server (default {SERVER.relative_to(ROOT)})")
    parser.add_argument("--cache-ram", type=int, default=256, help="the RAM prompt cache, MiB (default 256; 0: off)")
    parser.add_argument("--ctx", type=int, help="-c, all slots' KV in tokens (default: --parallel x what one needs)")
    parser.add_argument("--kv-unified", action="store_true", help="one KV buffer shared by the slots (default off)")
    parser.add_argument("--slot-prompt-similarity", type=float, default=0.1, help="-sps (default 0.1, the server's)")
    parser.add_argument(
        "--server-cpus",
        type=cpu_list,
        metavar="LIST",
        help="run the server on these CPUs only and this client on the others (e.g. 1; default: not pinned)",
    )
    parser.add_argument(
        "--threads", type=int, help="the server's threads (default: its CPUs, --server-cpus or all cores)"
    )
    parser.add_argument("--server-arg", action="append", default=[], help="another llama-server argument (repeatable)")
    args = parser.parse_args(argv)
    args.threads = args.threads or len(args.server_cpus or range(os.cpu_count()))
    if args.docs < 1 or args.doc_tokens < 1 or args.requests < 1 or args.rate <= 0 or args.parallel < 1:
        parser.error("--docs, --doc-tokens, --requests, --parallel and --rate must be positive")
    if not Path(args.server).is_file():
        raise SystemExit(f"load.py: no {args.server}: build it with server/build_llama_server.sh")
    args.ctx = args.ctx or context_size(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.model = tiny_model.write(ROOT / "work" / "server-load" / "model") / "tiny.gguf"
    documents, requests, warm_up = workload(args)
    port = free_port()
    log_path = out / "server.log"
    with open(log_path, "w", encoding="utf-8") as log:
        server, command = start(args, port, log)
        try:
            warm_ups = []  # the server's own timings of each (fit on, with the run's: load_check.py)
            for tokens in [warm_up, *(documents if args.warm_docs else ())]:
                answer = complete(port, tokens, args.output_tokens, time.perf_counter())
                if "error" in answer:
                    raise SystemExit(f"load.py: a warm-up request failed: {answer['error']} (see {log_path})")
                timings = answer["final"].get("timings", {})
                warm_ups.append({key: timings.get(key) for key in ("cache_n", "prompt_n", "prompt_ms", "predicted_ms")})
            print(
                f"load.py: {args.requests} requests at {args.rate}/s, {args.docs} documents of {args.doc_tokens} "
                f"tokens, --parallel {args.parallel}, --cache-ram {args.cache_ram} ...",
                flush=True,
            )
            warm_log_end = len(log_path.read_text(encoding="utf-8"))
            load_before = os.getloadavg()
            answers, t0 = send_all(port, requests, args.output_tokens)
            elapsed = time.perf_counter() - t0
            load_after = os.getloadavg()
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
    text = log_path.read_text(encoding="utf-8")
    tasks, cache = read_log(text[warm_log_end:])
    _, cache_before = read_log(text[:warm_log_end])
    records, mismatches = joined(requests, answers, tasks, args.doc_tokens)
    with open(out / "requests.jsonl", "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    summary = summarize(args, records, cache, mismatches, command, elapsed)
    summary["ram_cache_before_run"] = cache_before
    summary["warm_ups"] = warm_ups
    # other work on the machine slows the server (its threads wait for each other): the load average, 1/5/15 min
    summary["loadavg_before"], summary["loadavg_after"] = (
        [round(x, 2) for x in load_before],
        [round(x, 2) for x in load_after],
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    ttft = summary["ttft_ms"]
    print(
        f"load.py: {summary['completed']}/{args.requests} done in {elapsed:.1f} s; TTFT p50 {ttft['p50']} ms, "
        f"p90 {ttft['p90']} ms; reuse {summary['reuse']}, source {summary['source']}; "
        f"log join mismatches {mismatches}; wrote {out}/requests.jsonl, summary.json, server.log"
    )
    return 1 if summary["errors"] or mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
