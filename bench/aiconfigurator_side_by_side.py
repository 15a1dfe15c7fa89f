"""kvlab search beside NVIDIA aiconfigurator (issue 40, part 5): for the same model, GPU system, GPUs, input and
output lengths and TTFT/TPOT targets, aiconfigurator's best aggregated and disaggregated configurations (``cli
default``, its own venv: ``requirements-aiconfigurator.txt``) and kvlab's, with their output tokens/s/GPU; then the
same question on the conversation trace, whose prefix reuse aiconfigurator sees only as one scalar (``--prefix``).

aiconfigurator answers "the most tokens/s per GPU at these targets" from a steady state of ``bs`` sequences per
replica; kvlab answers "the cheapest configuration that meets them under this load" from a simulation. To ask kvlab
the same question, the load is aiconfigurator's own: the request rate its best aggregated configuration sustains
(its ``request_rate`` per replica times the replicas), as Poisson arrivals of requests of exactly ``isl`` tokens
in (each with blocks of its own: no prefix reuse) and ``osl`` out. kvlab's tokens/s/GPU is then the output tokens
per second the load offers over the winner's GPUs (and, beside it, over the whole run, whose drain after the last
arrival lowers it). Beside it, kvlab simulates aiconfigurator's own aggregated layout under its
own concurrency (``--clients``). The targets are on means: aiconfigurator's TTFT and TPOT are one steady-state
figure each, not a distribution.

    .venv/bin/python bench/aiconfigurator_side_by_side.py [--only NAME] [--requests N]
"""

import argparse
import csv
import glob
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / ".venv" / "bin" / "kvlab"
AICONFIGURATOR = ROOT / ".venv-aiconfigurator" / "bin" / "aiconfigurator"
TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
BLOCK = 512  # the written traces' hash blocks (Mooncake's)

# name: aiconfigurator's model and backend, kvlab's model and engine, the system, GPUs, lengths and targets (ms)
SETTINGS = {
    "llama8b_2000_50": {
        "aic_model": "meta-llama/Meta-Llama-3.1-8B",
        "backend": "vllm",
        "model_config": "models/Llama-3.1-8B-Instruct/config.json",
        "system": "h100_sxm",
        "gpus": 8,
        "isl": 4000,
        "osl": 500,
        "ttft": 2000,
        "tpot": 50,
    },
    "llama8b_1000_20": {
        "aic_model": "meta-llama/Meta-Llama-3.1-8B",
        "backend": "vllm",
        "model_config": "models/Llama-3.1-8B-Instruct/config.json",
        "system": "h100_sxm",
        "gpus": 8,
        "isl": 4000,
        "osl": 500,
        "ttft": 1000,
        "tpot": 20,
    },
    "llama70b_2000_50": {
        "aic_model": "meta-llama/Meta-Llama-3.1-70B",
        "backend": "vllm",
        "model_config": "models/Llama-3.1-70B-Instruct/config.json",
        "system": "h100_sxm",
        "gpus": 16,
        "isl": 4000,
        "osl": 500,
        "ttft": 2000,
        "tpot": 50,
    },
    # aiconfigurator's README: 1.67x disaggregated over aggregated. kvlab prices no TRT-LLM and no FP8 weights: its
    # side is vLLM's engine with the BF16 weights of models/Qwen3-32B, an FP8 KV cache.
    "qwen32b_300_10": {
        "aic_model": "Qwen/Qwen3-32B-FP8",
        "backend": "trtllm",
        "model_config": "models/Qwen3-32B/config.json",
        "kv_dtype": "fp8",
        "system": "h200_sxm",
        "gpus": 32,
        "isl": 4000,
        "osl": 500,
        "ttft": 300,
        "tpot": 10,
    },
}


def aiconfigurator(setting, folder, prefix=0):
    """aiconfigurator's best aggregated and disaggregated rows (its best_config_topn.csv), with the replicas each
    fills the GPUs with."""
    command = [str(AICONFIGURATOR), "cli", "default", "--model-path", setting["aic_model"], "--system"]
    command += [setting["system"], "--total-gpus", str(setting["gpus"]), "--isl", str(setting["isl"]), "--osl"]
    command += [str(setting["osl"]), "--ttft", str(setting["ttft"]), "--tpot", str(setting["tpot"]), "--backend"]
    command += [setting["backend"], "--strict-sla", "--prefix", str(prefix), "--save-dir", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"aiconfigurator: {done.stderr.strip().splitlines()[-1:]}")
    best = {}
    for mode in ("agg", "disagg"):
        path = glob.glob(f"{folder}/**/{mode}/best_config_topn.csv", recursive=True)[0]
        with open(path, encoding="utf-8") as rows:
            row = max(csv.DictReader(rows), key=lambda r: float(r["tokens/s/gpu"]))
        row["replicas"] = setting["gpus"] // int(row["num_total_gpus"])
        best[mode] = row
    return best


def no_reuse_trace(path, count, isl, osl):
    """``count`` requests of ``isl`` tokens in and ``osl`` out, each with blocks of its own (Mooncake's format)."""
    blocks = math.ceil(isl / BLOCK)
    with open(path, "w", encoding="utf-8") as out:
        for number in range(count):
            ids = list(range(number * blocks, (number + 1) * blocks))
            out.write(json.dumps({"timestamp": 0, "input_length": isl, "output_length": osl, "hash_ids": ids}) + "\n")


def kvlab(*words):
    done = subprocess.run([str(KVLAB), *map(str, words)], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"kvlab {words[0]}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def searched(setting, trace, load, folder, layouts):
    """kvlab search's winner under ``load`` over ``layouts`` (``{"instances": ..., "tp": ...}`` or prefill and
    decode), with its tokens/s/GPU."""
    words = ["search", "--workload", "mooncake", "--trace", trace, "--model-config", setting["model_config"]]
    words += ["--gpu-system", setting["system"], *load, "--evaluations", folder]
    words += ["--slo", f"ttft_mean<={setting['ttft']}ms,tpot_mean<={setting['tpot']}ms"]
    words += [f"--kv-dtype={setting['kv_dtype']}"] if "kv_dtype" in setting else []
    for key, value in layouts.items():
        words += [f"--{key.replace('_', '-')}", value]
    document = kvlab(*words)
    winner = document["winner"]
    if winner is None:
        return None, document["search"]
    figures = winner["figures"]
    gpus = winner["configuration"]["gpus"]
    return {
        "configuration": winner["configuration"],
        "tokens_per_s_per_gpu": round(figures["output_tokens_per_s"] / gpus, 1),
        "offered_per_gpu": round(float(load[1]) * setting["osl"] / gpus, 1) if load else None,
        "ttft_mean_ms": figures["ttft_ms"]["mean"],
        "tpot_mean_ms": figures["tpot_ms"]["mean"],
        "hit_ratio": figures["token_hit_ratio"],
        "cost_per_hour": winner["cost_per_hour"],
    }, document["search"]


def layout_words(setting):
    """The aggregated space (every TP and instance count within the GPUs) and the disaggregated one (TP 1 to 4,
    prefill and decode instances within the GPUs)."""
    gpus = setting["gpus"]
    tps = [tp for tp in (1, 2, 4, 8) if tp <= gpus]
    agg = {"tp": ",".join(map(str, tps)), "instances": ",".join(map(str, range(1, gpus + 1)))}
    pairs = [f"{p}:{d}" for p in range(1, gpus) for d in range(1, gpus) if p + d <= gpus]
    disagg = {"tp": ",".join(map(str, tps[:3])), "prefill_decode": ",".join(pairs)}
    return agg, disagg


def conversation(args, work):
    """The conversation trace at its own clock, whose prefix reuse aiconfigurator sees as one scalar: its mean input
    and output lengths and mean reused tokens (the leading blocks an earlier request already had) as
    aiconfigurator's --isl, --osl and --prefix, the GPUs its best aggregated tokens/s/GPU needs for the trace's
    output tokens per second, with and without --prefix; beside kvlab search's cheapest aggregated configuration on
    the trace itself and on the same trace with every request's blocks its own (no reuse)."""
    import gzip

    setting = {**SETTINGS["llama8b_2000_50"], "gpus": 8}
    rows, seen = [], set()
    with gzip.open(TRACE, "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            ids = row["hash_ids"]
            shared = next((index for index, key in enumerate(ids) if key not in seen), len(ids))
            seen.update(ids)
            rows.append((row, min(shared * BLOCK, row["input_length"] - 1)))
    count = len(rows)
    isl = round(sum(row["input_length"] for row, _ in rows) / count)
    osl = round(sum(row["output_length"] for row, _ in rows) / count)
    prefix = round(sum(shared for _, shared in rows) / count)
    span = (rows[-1][0]["timestamp"] - rows[0][0]["timestamp"]) / 1000
    output_rate = sum(row["output_length"] for row, _ in rows) / span
    print(f"conversation trace: {count:,} requests over {span:,.0f} s, mean input {isl:,}, output {osl},")
    print(f"  reused at an unlimited room {prefix:,} tokens on average; {output_rate:,.1f} output tokens/s")
    for given in (prefix, 0):
        aic = aiconfigurator({**setting, "isl": isl, "osl": osl}, work / f"aic-prefix{given}", prefix=given)["agg"]
        per_gpu = float(aic["tokens/s/gpu"])
        print(
            f"  aiconfigurator --prefix {given}: {per_gpu:.1f} tok/s/GPU ({aic['parallel']}), so"
            f" {math.ceil(output_rate / per_gpu)} GPUs for the trace's output tokens/s"
        )
    unique = work / "conversation_no_reuse.jsonl"
    with open(unique, "w", encoding="utf-8") as out:
        number = 0
        for row, _ in rows:
            blocks = len(row["hash_ids"])
            out.write(json.dumps({**row, "hash_ids": list(range(number, number + blocks))}) + "\n")
            number += blocks
    space = {"tp": "1,2", "instances": ",".join(map(str, range(1, 9)))}
    for name, trace in (("with its reuse", TRACE), ("without reuse", unique)):
        found, counts = searched(setting, trace, [], work / f"ev-{name[:4]}", space)
        config = found["configuration"] if found else None
        said = (
            f"{config['instances']}x tp{config['tp']} ({config['gpus']} GPUs), TTFT mean {found['ttft_mean_ms']} ms,"
            f" TPOT mean {found['tpot_mean_ms']} ms, hit ratio {found['hit_ratio']}"
            if config
            else "nothing meets it"
        )
        print(f"  kvlab search {name}: {said} ({counts['evaluated']} simulated)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(SETTINGS))
    parser.add_argument("--requests", type=int, default=3000, help="requests of the written no-reuse trace")
    parser.add_argument("--conversation", action="store_true", help="only the conversation trace's comparison")
    args = parser.parse_args()
    if not AICONFIGURATOR.exists():
        sys.exit(f"{AICONFIGURATOR} is missing: make bench-aiconfigurator installs it")
    if args.conversation or not args.only:
        with tempfile.TemporaryDirectory() as work:
            conversation(args, Path(work))
        if args.conversation:
            return
    for name in [args.only] if args.only else SETTINGS:
        setting = SETTINGS[name]
        with tempfile.TemporaryDirectory() as work:
            work = Path(work)
            aic = aiconfigurator(setting, work / "aic")
            agg = aic["agg"]
            rate = float(agg["request_rate"]) * agg["replicas"]
            trace = work / "no_reuse.jsonl"
            no_reuse_trace(trace, args.requests, setting["isl"], setting["osl"])
            print(f"{name}: {setting['aic_model']} on {setting['gpus']} x {setting['system']}, isl {setting['isl']}")
            print(f"  osl {setting['osl']}, TTFT <= {setting['ttft']} ms, TPOT <= {setting['tpot']} ms (means)")
            for mode, row in aic.items():
                layout = (
                    row["parallel"]
                    if mode == "agg"
                    else f"P {row['(p)workers']}x{row['(p)parallel']} + D {row['(d)workers']}x{row['(d)parallel']}"
                )
                print(
                    f"  aiconfigurator {mode}: {row['replicas']} x {layout},"
                    f" {float(row['tokens/s/gpu']):.1f} tok/s/GPU, TTFT {float(row['ttft']):.1f} ms,"
                    f" TPOT {float(row['tpot']):.2f} ms, concurrency"
                    f" {int(float(row['concurrency'])) * row['replicas']}"
                )
            ratio = float(aic["disagg"]["tokens/s/gpu"]) / float(agg["tokens/s/gpu"])
            print(f"  aiconfigurator disagg/agg: {ratio:.2f}")
            # kvlab simulates aiconfigurator's aggregated layout at its concurrency
            tp = int(agg["tp"])
            clients = int(float(agg["concurrency"])) * agg["replicas"]
            own = kvlab(
                "simulate",
                "--workload",
                "mooncake",
                "--trace",
                trace,
                "--model-config",
                setting["model_config"],
                "--gpu-system",
                setting["system"],
                "--tp",
                tp,
                "--instances",
                agg["replicas"],
                "--clients",
                clients,
                *([f"--kv-dtype={setting['kv_dtype']}"] if "kv_dtype" in setting else []),
            )
            print(
                f"  kvlab simulate of aiconfigurator's agg layout at its concurrency: "
                f"{own['output_tokens_per_s'] / setting['gpus']:.1f} tok/s/GPU, TTFT mean {own['ttft_ms']['mean']} ms,"
                f" TPOT mean {own['tpot_ms']['mean']} ms"
            )
            load = ["--rate", f"{rate:.4f}"]
            agg_space, disagg_space = layout_words(setting)
            results = {}
            for mode, space in (("agg", agg_space), ("disagg", disagg_space)):
                found, counts = searched(setting, trace, load, work / f"ev-{mode}", space)
                results[mode] = found
                if found is None:
                    print(f"  kvlab search {mode} at {rate:.2f} requests/s: nothing meets the targets ({counts})")
                    continue
                config = found["configuration"]
                layout = (
                    f"{config['prefill_instances']}P+{config['decode_instances']}D"
                    if "prefill_instances" in config
                    else f"{config['instances']}x"
                )
                print(
                    f"  kvlab search {mode} at {rate:.2f} requests/s: {layout} tp{config['tp']}"
                    f" ({config['gpus']} GPUs), {found['offered_per_gpu']} tok/s/GPU offered,"
                    f" {found['tokens_per_s_per_gpu']} over the run (its drain included),"
                    f" TTFT mean {found['ttft_mean_ms']} ms, TPOT mean"
                    f" {found['tpot_mean_ms']} ms ({counts['evaluated']} simulated of {counts['configurations']})"
                )
            if results["agg"] and results["disagg"]:
                ratio = results["disagg"]["offered_per_gpu"] / results["agg"]["offered_per_gpu"]
                print(f"  kvlab disagg/agg at aiconfigurator's aggregated load (GPUs each needs): {ratio:.2f}")


if __name__ == "__main__":
    main()
