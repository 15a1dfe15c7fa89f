"""Does the llama-server model (kvlab/serving/llama_cpp.py) predict a real llama-server under load?

Two runs of server/load.py on a fresh server each (the same workload generator and seed, so the model regenerates
every prompt's exact tokens), a light one (``--fit``, default 2/s x 60: little queueing) and a heavy one
(``--predict``, default 4/s x 200). Both start from a server that has seen every document (load.py
``--warm-docs``: the documents sent once, alone, untimed), and run the server on one CPU with one thread and the
client on the others (``--server-cpus``, default the last CPU): without those the heavy run's upper percentiles
were decided by the opening transient (the documents' first prefills queued behind each other) and by how a
2-thread server's barriers woke up (a solo decode took 3 or 7 ms a token, switching every few seconds). The model's
step prices are calibrated on the light run only: least squares on its per-request ``prompt_ms`` and
``predicted_ms`` and on the warm-ups' (the server's own timings, each a sum of main-loop steps whose make-up the
model's replay of that run knows: the warm-ups' prefills of whole documents are what price a prompt token apart
from a prompt's slot), the RAM cache's save and restore rates and the states' size from its log, and the HTTP
overhead as the median of its TTFT less its queueing and prompt time. Both runs' exact send times are then
replayed through the calibrated model.

The verdict: in each run the reuse agreement (below), and with ``--strict-time`` the heavy run's TTFT p50 and p90
within ``--tolerance`` (15%) of the measured (the light run's are printed beside them, in-sample; without it the
errors are reported, not judged: ``make test-server`` judges what the server's log counts, never a time). The reuse
agreement: the fraction of requests whose predicted
``cache_n`` is the server's at least ``--reuse-bar`` (0.95), and the fraction whose predicted source (``slot``:
its slot's own KV; ``ram``: a state restored from the RAM cache; ``none``) is the server's at least
``--source-bar`` (0.90). Why these bars: with 8 documents and 32-token questions ``cache_n`` is 0 or 2,000, and
with every document warmed nearly every request reuses its document, so ``cache_n`` alone says little (the rule
"a document seen before in the run is a hit", printed as ``naive``, is wrong only on each document's first
request); the source, which the slot choice and the RAM cache's moves decide, carries the check. Neither can be
100% on a real server: a request that arrives within a few ms of the release of the slot that holds its document
takes that slot or another one depending on which comes first. 0.95 allows that for one request in twenty (about
10 in the heavy run); the source, which such a race also flips for the requests after it (which slot holds what),
one in ten. Beyond those the rules are wrong.

    python server/load_check.py                                  (about 1.5 minutes; the server built)
    python server/load_check.py --reuse-from work/server-load    (no server: DIR/light and DIR/heavy)
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "server"))

import load  # noqa: E402

from kvlab.serving import llama_cpp as model  # noqa: E402

TIME = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) ")
STATE = re.compile(r"saving prompt with length (\d+), total state size = ([\d.]+) MiB")


def run_load(name, rate, requests, out, seed, threads=None, extra=(), server_cpus=None):
    argv = ["--rate", str(rate), "--requests", str(requests), "--seed", str(seed), "--out", str(out / name)]
    argv += ["--warm-docs"] + (["--server-cpus", server_cpus] if server_cpus else [])
    argv += ["--threads", str(threads)] if threads else []
    argv += [word for arg in extra for word in arg.split(maxsplit=1)]
    print(f"load_check.py: {name} run: python server/load.py {' '.join(argv)}", flush=True)
    code = load.main(argv)
    if code:
        raise SystemExit(f"load_check.py: the {name} run failed (load.py exited {code}); see {out / name}")


def read_run(folder):
    """A run of load.py: its summary, its records, its log, and the model's inputs (server, requests, warm-up)
    regenerated from the summary's workload parameters and checked against the records."""
    folder = Path(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
    log = (folder / "server.log").read_text(encoding="utf-8") if (folder / "server.log").exists() else ""
    keys = ("rate", "requests", "docs", "doc_tokens", "question_tokens", "output_tokens", "zipf", "seed")
    documents, requests, warm_up = load.workload(argparse.Namespace(**{key: summary[key] for key in keys}))
    for request, record in zip(requests, records, strict=True):
        if request["doc"] != record["doc"] or len(request["tokens"]) != record["prompt_tokens"]:
            raise SystemExit(f"load_check.py: {folder}: request {record['index']} is not the workload's")
    if summary["kv_unified"]:
        raise SystemExit(f"load_check.py: {folder}: the model has per-slot KV only (--no-kv-unified)")
    command = summary["server_command"]
    sps = float(command[command.index("--slot-prompt-similarity") + 1])
    server = model.Server(
        parallel=summary["parallel"],
        ctx=summary["ctx"],
        cache_ram_mib=summary["cache_ram_mib"],
        slot_prompt_similarity=sps,
        cache_idle_slots="--no-cache-idle-slots" not in command,
    )
    inputs = [
        (record.get("sent_s", record["arrival_s"]), request["tokens"], summary["output_tokens"])
        for request, record in zip(requests, records, strict=True)
    ]
    return {
        "name": folder.name,
        "folder": folder,
        "summary": summary,
        "records": records,
        "log": log,
        "server": server,
        "requests": inputs,
        "warm_up": [
            (tokens, summary["output_tokens"]) for tokens in [warm_up, *(documents if summary.get("warm_docs") else ())]
        ],
        "warm_up_measured": summary.get("warm_ups"),
    }


def log_lines(text):
    """The log's timestamped lines: ``[(seconds, line)]``."""
    lines = []
    for line in text.splitlines():
        match = TIME.match(line)
        if match:
            lines.append((int(match[1]) * 60 + int(match[2]) + int(match[3]) / 1e3 + int(match[4]) / 1e6, line))
    return lines


def ram_prices(text):
    """From a log: a state's bytes per token and fixed bytes (least squares over every state the server sized),
    and the ms per MiB of a save that stored a state and of a restore (each to the log's next line)."""
    import numpy as np

    lines = log_lines(text)
    sizes, saves, restores = set(), [], []
    for i, (t, line) in enumerate(lines[:-1]):
        match = STATE.search(line)
        if match:
            sizes.add((int(match[1]), float(match[2])))
            j = i + 1
            if "already in the cache" in lines[j][1]:
                continue
            while j + 1 < len(lines) and ("making room" in lines[j][1] or "removing obsolete" in lines[j][1]):
                j += 1
            saves.append((float(match[2]), 1e3 * (lines[j][0] - t)))
        elif "found better prompt" in line:
            restores.append(1e3 * (lines[i + 1][0] - t))
    prices = {}
    if len({n for n, _ in sizes}) >= 2:
        a = np.array([[1.0, n] for n, _ in sizes])
        fixed, per_token = np.linalg.lstsq(a, np.array([mib * model.MIB for _, mib in sizes]), rcond=None)[0]
        prices |= {"state_fixed_bytes": max(0.0, float(fixed)), "state_bytes_per_token": float(per_token)}
    if saves:
        prices["save_ms_per_mib"] = sum(ms for _, ms in saves) / sum(mib for mib, _ in saves)
    if restores:
        mib = statistics.median(mib for _, mib in sizes) if sizes else 4.0
        prices["restore_ms_per_mib"] = statistics.median(restores) / mib
    return prices


def calibrate(run, terms=model.FITTED):
    """The model's :class:`Costs` fitted to ``run``, and the state sizes its log shows."""
    prices = ram_prices(run["log"])
    sizes = {k: v for k, v in prices.items() if k.startswith("state_")}
    server = replace(run["server"], **sizes)
    costs = replace(model.Costs(), **{k: v for k, v in prices.items() if k.endswith("_per_mib")})
    if run["warm_up_measured"] and len(run["warm_up_measured"]) == len(run["warm_up"]):
        # the warm-ups' own timings join the fit: the documents' first prefills, alone, price a prompt token apart
        # from a prompt's slot (every timed prompt may be a hit of the same length)
        requests = model.with_warm_up([model.Request(*r) for r in run["requests"]], run["warm_up"])
        costs, report = model.fit(requests, run["warm_up_measured"] + run["records"], server, costs, None, terms)
    else:
        costs, report = model.fit(run["requests"], run["records"], server, costs, run["warm_up"], terms)
    served, _ = model.simulate(run["requests"], server, replace(costs, http_ms=0.0), run["warm_up"])
    gaps = [
        record["ttft_ms"] - record["queue_ms"] - record["prompt_ms"] - mine.launch_ms
        for record, mine in zip(run["records"], served, strict=True)
        if "error" not in record and record.get("queue_ms") is not None and record.get("prompt_ms") is not None
    ]
    costs = replace(costs, http_ms=max(0.0, statistics.median(gaps)) if gaps else costs.http_ms)
    return sizes, costs, report


def compare(run, server, costs):
    served, cache = model.simulate(run["requests"], server, costs, run["warm_up"])
    done = [(record, mine) for record, mine in zip(run["records"], served, strict=True) if "error" not in record]
    row = {"run": run["name"], "n": len(done), "rate": run["summary"]["rate"]}
    for q in (50, 90):
        measured = load.percentile([r["ttft_ms"] for r, _ in done], q)
        predicted = load.percentile([m.ttft_ms for _, m in done], q)
        row[f"p{q}"] = {"measured": measured, "predicted": predicted, "error": predicted / measured - 1}
    row["cache_n_agree"] = sum(r["cached_tokens"] == m.cached_tokens for r, m in done) / len(done)
    row["source_agree"] = sum(r["source"] == m.source for r, m in done) / len(done)
    row["slot_agree"] = sum(r["slot"] == m.slot for r, m in done) / len(done)
    row["source_measured"] = {k: sum(r["source"] == k for r, _ in done) for k in ("slot", "ram", "none")}
    row["source_predicted"] = {k: sum(m.source == k for _, m in done) for k in ("slot", "ram", "none")}
    row["misses"] = {
        "measured": sum(not r["cached_tokens"] for r, _ in done),
        "predicted": sum(not m.cached_tokens for _, m in done),
    }
    naive = naive_reuse(run["requests"])
    row["naive_cache_n_agree"] = sum(r["cached_tokens"] == naive[r["index"]] for r, _ in done) / len(done)
    misses = [r["prompt_ms"] for r, _ in done if not r["cached_tokens"] and r.get("prompt_ms") is not None]
    row["miss_prompt_ms_median"] = {
        "measured": statistics.median(misses) if misses else None,
        "predicted": statistics.median(m.prompt_ms for _, m in done if not m.cached_tokens)
        if any(not m.cached_tokens for _, m in done)
        else None,
    }
    row["disagreements"] = [
        {
            "index": r["index"],
            "measured": [r["cached_tokens"], r["source"], r["slot"]],
            "predicted": [m.cached_tokens, m.source, m.slot],
        }
        for r, m in done
        if r["cached_tokens"] != m.cached_tokens
    ]
    row["ram_cache"] = {"measured": run["summary"].get("ram_cache"), "predicted": cache}
    row["by_source_ttft_p50"] = {
        key: {
            "measured": load.percentile([r["ttft_ms"] for r, m in done if r["source"] == key], 50),
            "predicted": load.percentile([m.ttft_ms for r, m in done if m.source == key], 50),
        }
        for key in ("slot", "ram", "none")
    }
    return row, served


def naive_reuse(requests):
    """``cache_n`` by the rule "what any earlier prompt shares is reused" (less one on a full match): what a model
    that knew nothing of slots, their order or the RAM cache's moves would say."""
    reuse = []
    for i, (_, tokens, _) in enumerate(requests):
        shared = max((model.common_prefix(list(other), list(tokens)) for _, other, _ in requests[:i]), default=0)
        reuse.append(min(shared, len(tokens) - 1))
    return reuse


def print_table(rows, fitted_to):
    print(
        f"\n{'run':<10}{'role':<11}{'n':>4}  {'TTFT p50 meas/pred ms':>26}  {'TTFT p90 meas/pred ms':>26}  "
        f"{'cache_n':>7}  {'naive':>6}  {'source':>6}  {'misses':>7}  source slot/ram/none meas | pred"
    )
    for row in rows:
        role = "fitted" if row["run"] == fitted_to else "predicted"
        cells = []
        for q in ("p50", "p90"):
            p = row[q]
            cells.append(f"{p['measured']:8.1f} /{p['predicted']:8.1f} ({100 * p['error']:+5.1f}%)")
        m, p = row["source_measured"], row["source_predicted"]
        print(
            f"{row['run']:<10}{role:<11}{row['n']:>4}  {cells[0]:>26}  {cells[1]:>26}  "
            f"{row['cache_n_agree']:>7.1%}  {row['naive_cache_n_agree']:>6.1%}  {row['source_agree']:>6.1%}  "
            f"{row['misses']['measured']:>3}/{row['misses']['predicted']:<3}  "
            f"{m['slot']}/{m['ram']}/{m['none']} | {p['slot']}/{p['ram']}/{p['none']}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "work" / "server-load-check"), help="the runs' folder")
    parser.add_argument("--reuse-from", metavar="DIR", help="use DIR/<fit> and DIR/<predict>: no server is started")
    parser.add_argument("--fit", default="light", help="the run the model is calibrated on (default light)")
    parser.add_argument("--predict", default="heavy", help="the run it predicts (default heavy)")
    parser.add_argument("--fit-load", default="2,60", help="RATE,REQUESTS of the fit run (default 2,60)")
    parser.add_argument("--predict-load", default="4,200", help="RATE,REQUESTS of the predicted run (default 4,200)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (default 0)")
    cpus = os.cpu_count() or 1
    parser.add_argument(
        "--server-cpus",
        default=str(cpus - 1) if cpus > 1 else None,
        help="load.py --server-cpus: the server's CPUs, the client on the others (default: the last CPU on a"
        " machine of two or more; '' for none)",
    )
    parser.add_argument("--threads", type=int, help="the server's threads (default: load.py's, its CPUs)")
    parser.add_argument(
        "--load-arg",
        action="append",
        default=[],
        metavar="'--FLAG VALUE'",
        help="another server/load.py argument for both runs (repeatable), e.g. --load-arg '--docs 16'",
    )
    parser.add_argument("--tolerance", type=float, default=0.15, help="TTFT p50/p90 relative error (default 0.15)")
    parser.add_argument(
        "--strict-time",
        action="store_true",
        help="fail when the TTFT is off by more than --tolerance (the bench's verdict; by default the TTFT errors"
        " are reported, and only the reuse, which the server's log counts, decides: a shared machine's speed"
        " wanders between runs)",
    )
    parser.add_argument("--reuse-bar", type=float, default=0.95, help="cache_n agreement per run (default 0.95)")
    parser.add_argument("--source-bar", type=float, default=0.90, help="source agreement per run (default 0.90)")
    parser.add_argument("--intercept", action="store_true", help="fit a per-step intercept too (default: 0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.reuse_from:
        folder = Path(args.reuse_from)
    else:
        folder = Path(args.out)
        for name, spec in ((args.fit, args.fit_load), (args.predict, args.predict_load)):
            rate, requests = spec.split(",")
            run_load(name, float(rate), int(requests), folder, args.seed, args.threads, args.load_arg, args.server_cpus)
    measured_s = time.perf_counter() - started
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {name: read_run(folder / name) for name in (args.fit, args.predict)}
    terms = model.TERMS if args.intercept else model.FITTED
    sizes, costs, report = calibrate(runs[args.fit], terms)
    server = replace(runs[args.fit]["server"], **sizes)
    print(
        f"\nload_check.py: the model calibrated on {folder / args.fit} (rate {runs[args.fit]['summary']['rate']}/s, "
        f"{len(runs[args.fit]['records'])} requests) only; {report['equations']} equations (prompt_ms and "
        f"predicted_ms per request; {report['left_out']} left out, their make-up timing-dependent), rms residual "
        f"{report['rms_ms']:.1f} ms:"
    )
    print(
        "  step ms = {:.3f} + {:.4f} x prompt tokens + {:.3f} x slots with prompt tokens + {:.3f} x generating "
        "slots + {:.3f} x ubatches".format(*costs.coefficients())
    )
    print(
        f"  RAM save {costs.save_ms_per_mib:.3f} ms/MiB, restore {costs.restore_ms_per_mib:.3f} ms/MiB, "
        f"state {server.state_bytes_per_token:.1f} B/token + {server.state_fixed_bytes:.0f} B, "
        f"HTTP {costs.http_ms:.2f} ms"
    )
    rows = []
    for name in (args.fit, args.predict):
        row, served = compare(runs[name], replace(runs[name]["server"], **sizes), costs)
        rows.append(row)
        (out / f"{name}.model.jsonl").write_text(
            "".join(json.dumps(record.record()) + "\n" for record in served), encoding="utf-8"
        )
    print_table(rows, args.fit)
    failures, notes = [], []
    for row in rows:
        if row["cache_n_agree"] < args.reuse_bar:
            failures.append(f"{row['run']}: cache_n agreement {row['cache_n_agree']:.1%} < {args.reuse_bar:.0%}")
        if row["source_agree"] < args.source_bar:
            failures.append(f"{row['run']}: source agreement {row['source_agree']:.1%} < {args.source_bar:.0%}")
        for d in row["disagreements"][:8]:
            print(
                f"  {row['run']} request {d['index']}: server cache_n/source/slot {d['measured']}, "
                f"model {d['predicted']}"
            )
        if row["run"] == args.predict:
            for q in ("p50", "p90"):
                if abs(row[q]["error"]) > args.tolerance:
                    off = f"{row['run']}: TTFT {q} off by {100 * row[q]['error']:+.1f}%"
                    (failures if args.strict_time else notes).append(off)
    loads = {
        name: (run["summary"].get("loadavg_before"), run["summary"].get("loadavg_after")) for name, run in runs.items()
    }
    speed = {row["run"]: row["miss_prompt_ms_median"] for row in rows}
    print(f"\nthe machine's speed: a miss's prefill (median prompt_ms, measured / model) per run: {speed}")
    print(f"load averages (1/5/15 min) before and after each run: {loads}")
    result = {
        "fitted_to": str(folder / args.fit),
        "costs": vars(costs),
        "server": vars(server),
        "fit": report,
        "rows": rows,
        "failures": failures,
        "time_notes": notes,
        "measured_s": round(measured_s, 1),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    (out / "load_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    if notes:
        print(f"load_check.py: reported, not judged (--strict-time judges it): {'; '.join(notes)}")
    print(
        f"load_check.py: {'FAIL: ' + '; '.join(failures) if failures else 'OK'} "
        f"({result['wall_s']} s; {out / 'load_check.json'})"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
