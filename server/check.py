"""The lab on a real server: llama-cpp-python serving the tiny model, measured by ``kvlab measure``, its hits read from
the server's own log and compared, request by request, with what ``kvlab replay --server llama-cpp`` predicts.

Three runs of the lab's passes (forward, forward, reverse) over ``--docs`` documents of ``--tokens`` tokens, each on
a fresh server: ``baseline`` (no RAM cache: the context alone), ``lmcache`` (a RAM cache with room to spare: every
state the passes save) and ``short`` (room for one document fewer than there are: the lab's cliff). The RAM cache's
room is a whole number of saved states and a half, each state sized by kvlab's sizing of the model (``kvlab size``
on its config.json: 2,048 bytes of KV per token) plus what llama.cpp's state adds (``STATE_*``); the check also
asserts that every state the server saves has exactly that size. The verdict rests on the log alone (the tier and
the tokens of every hit, the size of every state), never on timing, which a loaded machine skews: TTFT is reported
per tier, its median and the misses' median over it, for information. Before the measured passes each server gets
one untimed warm-up request (see :func:`warm_up`), so that its start-up costs do not land on the first requests.
The baseline and lmcache records go to ``--out`` (the lab's schema, so ``kvlab summarize`` reads them).

    python server/check.py --out work/server/measurement.jsonl      (make test-server)
"""

import argparse
import csv
import json
import math
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvlab.cli import main as kvlab_main  # noqa: E402

# What a llama.cpp state holds besides the KV (llama.cpp's llama_context::state_write_data, as the server logs
# it): a header, the logits of the last output (4 bytes per vocabulary entry) and, per cached token, its
# position, its count of sequences and its sequence id (3 x 4 bytes).
STATE_HEADER, STATE_PER_CELL = 145, 12
LOG_EVENTS = re.compile(
    r"(?P<hit>_create_completion: cache hit)|(?P<miss>_create_completion: cache miss)"
    r"|generate: (?P<prefix>\d+) prefix-match hit|prompt eval time = .*/\s*(?P<evaluated>\d+) tokens"
    r"|saving (?P<state>\d+) bytes of llama state"
)


def kvlab(arguments, quiet=False):
    """A kvlab command in this process (``quiet``: its standard output dropped); its exit code."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
        return kvlab_main([str(argument) for argument in arguments])


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(model, port, context, cache_bytes, log):
    """The server on 127.0.0.1:port, its log in ``log``; wait until it answers."""
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n_ctx", str(context), "--logits_all", "false", "--verbose", "true"]
    if cache_bytes:
        command += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(cache_bytes)]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"check.py: the server stopped at start-up (see {log.name})")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"check.py: the server did not answer within 120 s (see {log.name})")


def served(log_text):
    """Per request, from the server's log, in order: ``{"tier", "reused", "evaluated", "states"}``, ``states`` the
    sizes of the states it saved. A request's events end with its prompt evaluation; a state saved after that line
    is still the request's, unless the next request's events have begun (its cache hit or miss comes first)."""
    requests = []
    hit, prefix, states, begun = None, 0, [], False
    for match in LOG_EVENTS.finditer(log_text):
        if match["hit"] or match["miss"]:
            hit, begun = bool(match["hit"]), True
        elif match["prefix"]:
            prefix, begun = int(match["prefix"]), True
        elif match["state"]:
            (states if begun or not requests else requests[-1]["states"]).append(int(match["state"]))
        else:
            tier = "miss" if not prefix else ("cpu" if hit else "gpu")
            requests.append({"tier": tier, "reused": prefix, "evaluated": int(match["evaluated"]), "states": states})
            hit, prefix, states, begun = None, 0, [], False
    return requests


def warm_up(port, tokens, max_tokens, log_path):
    """One untimed completion before the measured passes: a fresh server's first requests pay for its start
    (buffers allocated, pages touched: 2,560 and 3,621 ms against some 450), which says nothing of its cache.

    It leaves the predicted hits as they are: its text is body words, and every request starts with a document's
    opening word, which no body word is (each word is one token, no BOS is added), so it shares no prefix with any
    request. The context that holds it serves no request a token; its state in the RAM cache is never found (a
    lookup returns only a state with a common prefix), so it stays the least recently used and is evicted before
    any document's, and while it stays the documents' states fit without it too: the documents' states held are
    always those of an empty cache, which kvlab predicts. Its log entries, the first request's, are left out."""
    from kvlab.measure.client import Server, ServerError

    try:
        with Server(f"http://127.0.0.1:{port}", "tiny") as server:
            server.complete(warm_up_text(tokens), max_tokens)
    except ServerError as error:
        raise SystemExit(f"check.py: the warm-up request failed: {error} (see {log_path})") from None


def warm_up_text(tokens):
    """The warm-up's text: ``tokens`` body words (a document's length), none of them a document's opening word."""
    import random

    from kvlab.measure.documents import BODY

    return " ".join(random.Random("warm-up").choices(BODY, k=tokens))


def ttft_by_tier(records, requests):
    """TTFT's median per tier the log shows (and how many requests), with the misses' median over it: information
    only, e.g. ``miss 450.0 ms (8), cpu 90.0 ms (5; miss/cpu 5.0x)``."""
    times = {}
    for record, seen in zip(records, requests, strict=False):
        times.setdefault(seen["tier"], []).append(record["ttft_ms"])
    medians = {tier: statistics.median(times[tier]) for tier in ("miss", "gpu", "cpu") if tier in times}
    parts = []
    for tier, median in medians.items():
        ratio = (
            f"; miss/{tier} {medians['miss'] / median:.1f}x" if tier != "miss" and "miss" in medians and median else ""
        )
        parts.append(f"{tier} {median:.1f} ms ({len(times[tier])}{ratio})")
    return ", ".join(parts)


def judged(records, requests, expected, state):
    """One config's verdict, from the server's log alone: ``(failures, the report's lines)``. A request fails when
    the tier and tokens of its hit in the log (``requests``, from :func:`served`) are not kvlab's prediction
    (``expected``); a state saved of another size than ``state``, or counts that differ, fail too. TTFT (from
    ``records``) is shown, per request and per tier, and judges nothing: a loaded machine skews it."""
    failures, lines = 0, []
    wrong = [size for request in requests for size in request["states"] if size != state]
    if wrong:
        failures += 1
        lines.append(f"  FAIL: states of {sorted(set(wrong))} bytes, not {state:,}")
    if not len(records) == len(requests) == len(expected):
        failures += 1
        lines.append(f"  FAIL: {len(records)} requests measured, {len(requests)} in the log, {len(expected)} predicted")
    lines.append(f"  {'pass':<14} {'doc':>3} {'TTFT ms':>8}  measured        predicted")
    for record, seen, (gpu, cpu) in zip(records, requests, expected, strict=False):
        guess = "cpu" if cpu else ("gpu" if gpu else "miss")
        same = (seen["tier"], seen["reused"]) == (guess, gpu + cpu)
        failures += not same
        where = f"{record['pass']:<14} {record['doc']:>3} {record['ttft_ms']:>8.1f}"
        verdict = "ok" if same else "DIFFERENT"
        lines.append(f"  {where}  {seen['tier']:>4} {seen['reused']:>5}    {guess:>4} {gpu + cpu:>5}  {verdict}")
    lines.append(f"  TTFT median by tier (information, not a verdict): {ttft_by_tier(records, requests)}")
    return failures, lines


def predicted(folder, docs, tokens, context, cache_tokens, extra):
    """``kvlab replay --server llama-cpp``'s per-request rows: ``(gpu_hit_tokens, cpu_hit_tokens)``."""
    table = folder / f"predicted-{cache_tokens}.csv"
    code = kvlab(
        ["replay", "--workload", "lab", "--docs", docs, "--tokens", tokens, "--passes", "fwd,fwd,rev"]
        + ["--block-tokens", tokens, "--server", "llama-cpp", "--gpu-tokens", context]
        + ["--cpu-tokens", cache_tokens, "--state-extra-tokens", extra, "--per-request", table],
        quiet=True,
    )
    if code:
        raise SystemExit("check.py: kvlab replay failed")
    with open(table, newline="", encoding="utf-8") as handle:
        return [(int(row["gpu_hit_tokens"]), int(row["cpu_hit_tokens"])) for row in csv.DictReader(handle)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the measurement of baseline and lmcache (JSONL)")
    parser.add_argument("--docs", type=int, default=4, help="documents (default 4)")
    parser.add_argument("--tokens", type=int, default=2000, help="tokens per document (default 2000)")
    parser.add_argument("--max-tokens", type=int, default=4, help="tokens generated per request (default 4)")
    parser.add_argument("--work", default=str(ROOT / "work" / "server"), help="folder for the model and logs")
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "server"))
    import tiny_model

    model = tiny_model.write(work / "model")
    from kvlab.sizing.model_size import read_model_config

    per_token = read_model_config(model / "config.json").bytes_per_token()
    vocabulary = len(tiny_model.vocabulary()[0])
    question = 2  # the words of kvlab measure's question
    cells = args.tokens + question + args.max_tokens - 1  # the last generated token is never evaluated
    state = STATE_HEADER + 4 * vocabulary + cells * (per_token + STATE_PER_CELL)
    extra = math.ceil(state / per_token) - args.tokens  # a state in tokens of KV, beyond the document
    context = 2 * (args.tokens + question + args.max_tokens)
    rooms = {"baseline": 0, "lmcache": 3 * args.docs * state, "short": (args.docs - 1) * state}
    rooms = {config: room + state // 2 if room else 0 for config, room in rooms.items()}
    print(f"state: {state:,} bytes ({cells:,} tokens of KV at {per_token:,} + {STATE_PER_CELL} bytes, and logits)")
    failures = 0
    measurement = work / "all.jsonl"
    measurement.unlink(missing_ok=True)
    for config, room in rooms.items():
        port = free_port()
        log_path = work / f"{config}.log"
        with open(log_path, "w", encoding="utf-8") as log:
            server = start(model / "tiny.gguf", port, context, room, log)
            try:
                warm_up(port, args.tokens, args.max_tokens, log_path)
                code = kvlab(
                    ["measure", "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny", "--docs", args.docs]
                    + ["--tokens", args.tokens, "--max-tokens", args.max_tokens, "--config-name", config]
                    + ["--out", measurement]
                )
            finally:
                server.terminate()
                server.wait(timeout=30)
        if code:
            raise SystemExit(f"check.py: kvlab measure failed against the server (see {log_path})")
        requests = served(log_path.read_text(encoding="utf-8"))[1:]  # the first is the warm-up
        states = [size for request in requests for size in request["states"]]
        expected = predicted(work, args.docs, args.tokens, context, room // per_token, extra)
        records = [json.loads(line) for line in measurement.read_text(encoding="utf-8").splitlines()]
        records = [record for record in records if record["config"] == config]
        print(f"\n{config}: RAM cache {room:,} bytes ({room / state:.1f} states); {len(states)} states saved")
        wrong, lines = judged(records, requests, expected, state)
        failures += wrong
        print("\n".join(lines))
    lines = measurement.read_text(encoding="utf-8").splitlines(keepends=True)
    Path(args.out).write_text("".join(line for line in lines if '"short"' not in line), encoding="utf-8")
    print(f"\nmeasurement (baseline, lmcache): {args.out}")
    if failures:
        print(f"FAIL: {failures} requests or sizes differ from kvlab's prediction")
        return 1
    print("every request's hit is the one kvlab predicts, and every saved state the size it computes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
