"""The lab on a real server: llama-cpp-python serving the tiny model, measured by ``kvlab measure``, its hits read from
the server's own log and compared, request by request, with what ``kvlab replay --server llama-cpp`` predicts.

Three runs of the lab's passes (forward, forward, reverse) over ``--docs`` documents of ``--tokens`` tokens, each on
a fresh server: ``baseline`` (no RAM cache: the context alone), ``lmcache`` (a RAM cache with room to spare: every
state the passes save) and ``short`` (room for one document fewer than there are: the lab's cliff). The RAM cache's
room is a whole number of saved states and a half, each state sized by kvlab's sizing of the model (``kvlab size``
on its config.json: 2,048 bytes of KV per token) plus what llama.cpp's state adds (``STATE_*``); the check also
asserts that every state the server saves has exactly that size, and that the TTFT tells the same: a request whose
TTFT is under half the median of the first pass (every document computed) reused its document, any other did not.
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
    """Per request, from the server's log: ``{"tier", "reused", "evaluated"}``; and the state sizes it saved."""
    requests, states = [], []
    hit, prefix = None, 0
    for match in LOG_EVENTS.finditer(log_text):
        if match["hit"]:
            hit = True
        elif match["miss"]:
            hit = False
        elif match["prefix"]:
            prefix = int(match["prefix"])
        elif match["state"]:
            states.append(int(match["state"]))
        else:
            tier = "miss" if not prefix else ("cpu" if hit else "gpu")
            requests.append({"tier": tier, "reused": prefix, "evaluated": int(match["evaluated"])})
            hit, prefix = None, 0
    return requests, states


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
        requests, states = served(log_path.read_text(encoding="utf-8"))
        expected = predicted(work, args.docs, args.tokens, context, room // per_token, extra)
        records = [json.loads(line) for line in measurement.read_text(encoding="utf-8").splitlines()]
        records = [record for record in records if record["config"] == config]
        wrong = [size for size in states if size != state]
        print(f"\n{config}: RAM cache {room:,} bytes ({room / state:.1f} states); {len(states)} states saved")
        if wrong:
            failures += 1
            print(f"  FAIL: states of {sorted(set(wrong))} bytes, not {state:,}")
        cold = statistics.median(record["ttft_ms"] for record in records if record["pass"] == records[0]["pass"])
        print(f"  {'pass':<14} {'doc':>3} {'TTFT ms':>8}  measured        predicted")
        for record, seen, (gpu, cpu) in zip(records, requests, expected, strict=True):
            guess = "cpu" if cpu else ("gpu" if gpu else "miss")
            same = (seen["tier"], seen["reused"]) == (guess, gpu + cpu)
            same = same and (record["ttft_ms"] < cold / 2) == (seen["tier"] != "miss")
            failures += not same
            where = f"{record['pass']:<14} {record['doc']:>3} {record['ttft_ms']:>8.1f}"
            verdict = "ok" if same else "DIFFERENT"
            print(f"  {where}  {seen['tier']:>4} {seen['reused']:>5}    {guess:>4} {gpu + cpu:>5}  {verdict}")
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
