"""How far the roofline (its default factors) is from the measured database, on every model and system both cover.

For each ``models/*/config.json`` and each aiconfigurator-core system whose database holds vLLM kernels, the
model is priced twice through :class:`kvlab.latency.hardware.HardwareModel` (engine vllm): with
``latency_source="database"`` (aiconfigurator-core's measured kernels; a model it refuses to compile, or has no
kernels for, is skipped and listed) and with ``latency_source="roofline"`` (compute 0.6, memory 0.8, no overhead,
ring all-reduces; a model whose shape it refuses, latent attention or a recurrent state, is listed too). The
tensor-parallel degree is the least of 1, 2, 4, 8 whose share of the weights fits 90% of the GPU's memory
(``mem_capacity`` of the system's spec; 8 where none does), the same for both. The queries: prefills of
(isl, cached prefix) in ``POINTS`` and one decode step of one request holding ``DECODE_CONTEXT`` tokens. The
table gives the ratio roofline / database per query kind, per model, per system and overall: the median, the
10th and 90th percentiles and the worst (the farthest from 1, either way). Markdown, for the docs. Usage::

    .venv/bin/python bench/roofline_vs_database.py [--systems h100_sxm,b200_sxm] [--models Llama-3.1-8B-Instruct]
"""

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from kvlab.latency.hardware import HardwareModel, HardwareSettings  # noqa: E402
from kvlab.latency.shape import read_compute_shape  # noqa: E402
from kvlab.latency.systems import database_versions, system_names, systems_dir  # noqa: E402
from kvlab.util.errors import KvlabError  # noqa: E402

POINTS = [(1024, 0), (8192, 0), (32768, 0), (8192, 7680), (32768, 32000)]
DECODE_CONTEXT = 8192
FIT = 0.9  # the share of a GPU's memory the weights may take
DEGREES = (1, 2, 4, 8)


def degree(config, system):
    """The least tensor-parallel degree whose share of the weights fits the GPU (8 where none does); and None,
    8 where the roofline cannot read the model's shape (the database is still asked, at 8)."""
    spec = yaml.safe_load((systems_dir() / f"{system}.yaml").read_text(encoding="utf-8"))
    memory = spec["gpu"]["mem_capacity"]
    try:
        shape = read_compute_shape(config)
    except (KvlabError, ValueError) as error:
        return str(error).split(": ", 1)[-1], DEGREES[-1]
    weights = shape.weights() * shape.weight_bytes
    return None, next((tp for tp in DEGREES if weights / tp <= FIT * memory), DEGREES[-1])


def short(reason, most=100):
    return reason if len(reason) <= most else reason[: most - 3].rstrip() + "..."


def queries(model):
    """``{query: ms}`` of a HardwareModel: the prefill points and one decode step."""
    found = {f"prefill {isl:,}/{prefix:,}": model.prefill_ms(isl, prefix) for isl, prefix in POINTS}
    found[f"decode 1 x {DECODE_CONTEXT:,}"] = model.decode_ms([DECODE_CONTEXT])
    return found


def spread(ratios):
    """(count, median, p10, p90, worst) of ``ratios``; worst is the farthest from 1 on a log scale."""
    ordered = sorted(ratios)
    deciles = statistics.quantiles(ordered, n=10, method="inclusive") if len(ordered) > 1 else ordered * 9
    worst = max(ordered, key=lambda ratio: abs(math.log(ratio)))
    return len(ordered), statistics.median(ordered), deciles[0], deciles[-1], worst


def table(title, groups):
    lines = [f"| {title} | n | median | p10 | p90 | worst |", "|---|---:|---:|---:|---:|---:|"]
    for name, ratios in groups.items():
        count, median, p10, p90, worst = spread(ratios)
        lines.append(f"| {name} | {count} | {median:.2f} | {p10:.2f} | {p90:.2f} | {worst:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", help="comma-separated systems (default: every one with vLLM kernels)")
    parser.add_argument("--models", help="comma-separated folders of models/ (default: all)")
    parser.add_argument(
        "--skip",
        default="tiny-llama-cpp",
        help="comma-separated folders of models/ left out (default: %(default)s, the llama.cpp calibration's"
        " 5 M-parameter toy, no model a GPU serves)",
    )
    args = parser.parse_args(argv)
    systems = (
        args.systems.split(",") if args.systems else [s for s in system_names() if database_versions(s).get("vllm")]
    )
    configs = sorted((ROOT / "models").glob("*/config.json"))
    if args.models:
        configs = [config for config in configs if config.parent.name in args.models.split(",")]
    skipped = set(args.skip.split(",")) if args.skip else set()
    configs = [config for config in configs if config.parent.name not in skipped]

    start = time.perf_counter()
    rows = []  # (model, system, tp, query, roofline ms, database ms)
    refused = {}  # model -> {reason: [systems]}
    for config in configs:
        name = config.parent.name
        for system in systems:
            unreadable, tp = degree(config, system)
            common = {"model_config": str(config), "gpu_system": system, "engine": "vllm", "tp": tp}
            try:
                database = HardwareModel(HardwareSettings(**common, latency_source="database"))
                measured = queries(database)
            except KvlabError as error:
                reason = "the database refuses it: " + short(str(error).split(": ", 1)[-1])
                refused.setdefault(name, {}).setdefault(reason, []).append(system)
                continue
            if unreadable:
                reason = f"the database covers it (tp {tp}), the roofline refuses it: {short(unreadable)}"
                refused.setdefault(name, {}).setdefault(reason, []).append(system)
                continue
            modelled = queries(HardwareModel(HardwareSettings(**common, latency_source="roofline")))
            for query, ms in measured.items():
                rows.append((name, system, tp, query, modelled[query], ms))
    elapsed = time.perf_counter() - start

    covered = sorted({row[0] for row in rows})
    pairs = sorted({(row[0], row[1]) for row in rows})
    print(
        f"roofline (compute 0.6, memory 0.8) / database (aiconfigurator-core, vllm): {len(covered)} models,"
        f" {len({row[1] for row in rows})} systems, {len(pairs)} (model, system) pairs, {len(rows)} queries"
        f" ({elapsed:.1f} s)\n"
    )
    by = {}
    for name, system, tp, query, roof, measured in rows:
        ratio = roof / measured
        by.setdefault("query", {}).setdefault(query, []).append(ratio)
        by.setdefault("model", {}).setdefault(name, []).append(ratio)
        by.setdefault("tp", {}).setdefault(name, set()).add(tp)
        by.setdefault("system", {}).setdefault(system, []).append(ratio)
        by.setdefault("kind", {}).setdefault("prefill" if query.startswith("prefill") else "decode", []).append(ratio)
    overall = {"all": [roof / measured for *_, roof, measured in rows]}
    if not rows:
        print("no (model, system) pair both cover")
    else:
        print_tables(by, overall)
    print_refused(refused, systems)
    if skipped:
        print(f"- left out (--skip): {', '.join(sorted(skipped))}")


def print_tables(by, overall):
    print(table("query (isl/prefix)", {**by["query"], **by["kind"], **overall}), end="\n\n")
    print(table("system", {**by["system"], **overall}), end="\n\n")
    models = {}
    for name in sorted(by["model"], key=str.lower):
        degrees = sorted(by["tp"][name])
        shown = "" if degrees == [1] else f" (tp {', '.join(map(str, degrees))})"
        models[name + shown] = by["model"][name]
    print(table("model (tp where more than 1)", {**models, **overall}), end="\n\n")


def print_refused(refused, systems):
    if refused:
        print("Not compared:\n")
        for name in sorted(refused, key=str.lower):
            for reason, where in refused[name].items():
                shown = "every system" if len(where) == len(systems) else ", ".join(where)
                print(f"- {name} ({shown}): {reason}")


if __name__ == "__main__":
    main()
