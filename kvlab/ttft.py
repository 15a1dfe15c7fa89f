"""What TTFT to expect: fit the latency model to a measurement, then predict across grids and CPU budgets.

Usage::

    python kvlab/ttft.py fit --measurement ttft.jsonl --docs 10 --tokens 5011 \\
        --config baseline:21520,0 --config lmcache:21520,56000 \\
        --pass pass1-cold:fwd --pass pass2-replay:fwd --pass pass3-reverse:rev --model model.json --table table.csv
    python kvlab/ttft.py sweep --model model.json --docs 10 --tokens 5011 --passes fwd,fwd \\
        --gpu 21520 --cpu 0 --vary gpu --grid 21520,50110 --out cliff.csv
    python kvlab/ttft.py budgets --model model.json [plan.py's setting] --cpu-gb-grid 0,0.5,1.5 --out budgets.csv

``fit`` replays the measured requests through the lab's simulator in the setting they were
measured in (each config's rooms, the passes in order), fits the per-tier model
(``kvlab/latency.py``) and sets the predicted per-pass p50 and mean beside the measured ones.
``sweep`` prices a lab sweep (every grid value, every pass); ``budgets`` prices the planner's
setting (``kvlab/plan.py``) at each CPU budget, from a block-level replay per budget.
"""

import csv
import io
import json
import sys
from pathlib import Path

if not __package__:  # run as `python kvlab/ttft.py`: import the package from the repository root
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from kvlab.files import dump_json, write_together
from kvlab.kvsim import TWO_TIER_CACHES
from kvlab.latency import TIERS, LatencyModel, tier_of
from kvlab.model_size import decimal_gib, tokens_in
from kvlab.plan import add_plan_arguments, plan_setting
from kvlab.policy_grid import listing
from kvlab.replay import add_workload_arguments, argument, ratio, replay
from kvlab.scenario import OneLineParser
from kvlab.summarize import CONFIGS, InputError, describe, read_records
from kvlab.workloads import WorkloadError, pass_list, whole_number
from kvlab.write_policies import make_cache

PROG = "ttft.py"
TABLE_COLUMNS = (
    "config",
    "pass",
    "n",
    *TIERS,
    "measured_p50_ms",
    "predicted_p50_ms",
    "p50_ratio",
    "measured_mean_ms",
    "predicted_mean_ms",
    "mean_ratio",
)


class SettingError(ValueError):
    """The measurement does not fit the setting; the message names the file and line."""


def access_tiers(write_policy, gpu, cpu, reads):
    """The tier of each read ``(doc, tokens)``, through one two-tier cache of the lab's simulator."""
    cache = TWO_TIER_CACHES[write_policy](gpu, cpu)
    return [tier_of(cache.access(doc, tokens), cpu > 0) for doc, tokens in reads]


def pass_reads(passes, docs):
    """``(pass name, doc)`` in reading order: each pass reads documents 0..docs-1 forwards or backwards."""
    return [(name, doc) for name, order in passes for doc in (range(docs) if order == "fwd" else reversed(range(docs)))]


def measured_requests(path, configs, passes, docs):
    """``{(config, pass, doc): (tokens, ttft_ms)}``; SettingError (naming file:line) for a request the setting has
    not."""
    requests = {}
    for where, record in read_records(path):
        config, name, doc, tokens = record["config"], record["pass"], record["doc"], record["doc_tokens"]
        if config not in configs:
            raise SettingError(f"{where}: config {config!r} is not in the setting ({', '.join(configs)})")
        if name not in passes:
            raise SettingError(f"{where}: pass {name!r} is not in the setting ({', '.join(passes)})")
        if type(doc) is not int or not 0 <= doc < docs:
            raise SettingError(f"{where}: doc must be a document number 0..{docs - 1}, got {doc!r}")
        if type(tokens) is not int or tokens < 1:
            raise SettingError(f"{where}: doc_tokens must be a whole number >= 1, got {tokens!r}")
        if (config, name, doc) in requests:
            raise SettingError(f"{where}: config {config!r} pass {name!r} reads doc {doc} twice")
        requests[config, name, doc] = (tokens, record["ttft_ms"])
    return requests


def fit(path, configs, passes, docs, tokens):
    """The model, and per config and pass the tiers, the measured and the predicted TTFTs of its requests."""
    requests = measured_requests(path, configs, dict(passes), docs)
    lengths = {doc: tokens for doc in range(docs)}  # a measured document's own length wins
    lengths.update({doc: length for (_, _, doc), (length, _) in requests.items()})
    reads = pass_reads(passes, docs)
    served = {}  # (config, pass, doc) -> tier
    for config, (gpu, cpu) in configs.items():
        tiers = access_tiers("write-through", gpu, cpu, [(doc, lengths[doc]) for _, doc in reads])
        served.update({(config, name, doc): tier for (name, doc), tier in zip(reads, tiers, strict=True)})
    model = LatencyModel.fit((served[key], length, ttft) for key, (length, ttft) in requests.items())
    per_pass = {}  # (config, pass) -> (tiers, measured, predicted), in the setting's order
    for config in configs:
        for name, _ in passes:
            measured = [(key, value) for key, value in requests.items() if key[:2] == (config, name)]
            if measured:
                per_pass[config, name] = (
                    [served[key] for key, _ in measured],
                    [ttft for _, (_, ttft) in measured],
                    [model.predict(served[key], length) for key, (length, _) in measured],
                )
    return model, per_pass


def comparison(config, name, tiers, measured, predicted):
    """One row of the table: the pass's tiers, measured and predicted p50 and mean, predicted / measured."""
    measured_p50, measured_mean = describe(measured)
    predicted_p50, predicted_mean = describe(predicted)
    return {
        "config": config,
        "pass": name,
        "n": len(measured),
        **{tier: tiers.count(tier) for tier in TIERS},
        "measured_p50_ms": round(measured_p50, 1),
        "predicted_p50_ms": round(predicted_p50, 1),
        "p50_ratio": round(predicted_p50 / measured_p50, 3) if measured_p50 else None,
        "measured_mean_ms": round(measured_mean, 1),
        "predicted_mean_ms": round(predicted_mean, 1),
        "mean_ratio": round(predicted_mean / measured_mean, 3) if measured_mean else None,
    }


def offload_ratios(per_pass):
    """baseline / lmcache p50 per pass, measured and predicted, of the unrounded medians as ``summarize.py``
    divides them, where both configs have the pass."""
    first, second = CONFIGS
    ratios = []
    for (config, name), (_, measured, predicted) in per_pass.items():
        if config == first and (second, name) in per_pass:
            _, other_measured, other_predicted = per_pass[second, name]
            ratios.append(
                {
                    "pass": name,
                    "measured_p50": quotient(describe(measured)[0], describe(other_measured)[0]),
                    "predicted_p50": quotient(describe(predicted)[0], describe(other_predicted)[0]),
                }
            )
    return ratios


def quotient(numerator, denominator):
    """Rounded to 2 decimals as ``summarize.py``'s ratios; None when the denominator is 0."""
    return round(numerator / denominator, 2) if denominator else None


def csv_text(rows, columns):
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def sweep_rows(model, docs, tokens, passes, rooms, vary, grid, write_policy):
    """Predicted p50 and mean per pass at each grid value of ``vary`` (gpu or cpu), the other room fixed."""
    rows = []
    named = [(f"pass{number}", order) for number, order in enumerate(passes, start=1)]
    reads = pass_reads(named, docs)
    for value in grid:
        gpu, cpu = (value, rooms["cpu"]) if vary == "gpu" else (rooms["gpu"], value)
        tiers = access_tiers(write_policy, gpu, cpu, [(doc, tokens) for _, doc in reads])
        for name, _ in named:
            served = [tier for (pass_name, _), tier in zip(reads, tiers, strict=True) if pass_name == name]
            p50, mean = describe([model.predict(tier, tokens) for tier in served]) if served else (0.0, 0.0)
            rows.append(
                {
                    f"{vary}_tokens": value,
                    "pass": name,
                    **{tier: served.count(tier) for tier in TIERS},
                    "predicted_p50_ms": round(p50, 1),
                    "predicted_mean_ms": round(mean, 1),
                }
            )
    return rows


def budget_rows(model, workload, gpu_tokens, per_token, budgets, write_policy, block_rules):
    """Predicted p50 and mean per round (and in all) at each CPU budget in GiB, from a replay per budget."""
    rows = []
    for budget in budgets:
        cpu_tokens = tokens_in(budget, per_token)
        cache = make_cache(write_policy, gpu_tokens, cpu_tokens, workload.block_tokens, **block_rules)
        requests = []
        replay(workload, cache, requests)
        has_cpu = cpu_tokens > 0
        times = [
            (r, model.predict_mix(tokens, gpu, cpu, has_cpu), tokens, gpu, cpu)
            for r, _, _, tokens, gpu, cpu in requests
        ]
        for index, name in [(None, "all"), *enumerate(workload.rounds)]:
            mine = [time for time in times if index is None or time[0] == index]
            inputs = sum(time[2] for time in mine)
            hits = sum(time[3] + time[4] for time in mine)
            p50, mean = describe([time[1] for time in mine]) if mine else (0.0, 0.0)
            rows.append(
                {
                    "cpu_gb": float(budget),
                    "cpu_tokens": cpu_tokens,
                    "round": name,
                    "token_hit_ratio": ratio(hits, inputs),
                    "predicted_p50_ms": round(p50, 1),
                    "predicted_mean_ms": round(mean, 1),
                }
            )
    return rows


def named_rooms(text):
    """``NAME:GPU,CPU`` (rooms in tokens)."""
    name, _, rooms = text.partition(":")
    gpu, _, cpu = rooms.partition(",")
    if not name or not gpu.isdigit() or not cpu.isdigit():
        raise ValueError(f"expected NAME:GPU,CPU with rooms in tokens, got {text!r}")
    return name, (int(gpu), int(cpu))


def named_order(text):
    """``NAME:fwd`` or ``NAME:rev``."""
    name, _, order = text.partition(":")
    if not name or order not in ("fwd", "rev"):
        raise ValueError(f"expected NAME:fwd or NAME:rev, got {text!r}")
    return name, order


def build_parser():
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    parser.commands = {}

    fitting = commands.add_parser("fit", help="fit the model to a measurement; predicted vs measured")
    parser.commands["fit"] = fitting
    fitting.add_argument("--measurement", required=True, help="the measurement (the lab's JSONL schema)")
    fitting.add_argument("--docs", required=True, type=argument(whole_number(1)), help="documents in the setting")
    fitting.add_argument("--tokens", required=True, type=argument(whole_number(1)), help="tokens per document")
    fitting.add_argument("--config", required=True, action="append", type=argument(named_rooms), metavar="NAME:GPU,CPU")
    fitting.add_argument("--pass", dest="passes", required=True, action="append", type=argument(named_order))
    fitting.add_argument("--model", required=True, help="the model and the comparison (JSON) to write")
    fitting.add_argument("--table", required=True, help="the predicted-vs-measured table (CSV) to write")

    sweep = commands.add_parser("sweep", help="predicted TTFT per pass across a lab sweep's grid (CSV)")
    parser.commands["sweep"] = sweep
    sweep.add_argument("--model", required=True, help="the fitted model (fit's JSON)")
    sweep.add_argument("--docs", required=True, type=argument(whole_number(0)))
    sweep.add_argument("--tokens", required=True, type=argument(whole_number(1)))
    sweep.add_argument("--passes", required=True, type=argument(pass_list), help="e.g. fwd,fwd")
    sweep.add_argument(
        "--gpu", type=argument(whole_number(0)), default=21520, help="GPU room in tokens when fixed (default 21520)"
    )
    sweep.add_argument(
        "--cpu", type=argument(whole_number(0)), default=0, help="CPU room in tokens when fixed (default 0)"
    )
    sweep.add_argument("--write-policy", choices=TWO_TIER_CACHES, default="write-through")
    sweep.add_argument("--vary", required=True, choices=("gpu", "cpu"))
    sweep.add_argument("--grid", required=True, type=listing(whole_number(0), "rooms in tokens"))
    sweep.add_argument("--out", required=True, help="the CSV file to write")

    budgets = commands.add_parser("budgets", help="predicted TTFT per round at each CPU budget of a plan (CSV)")
    parser.commands["budgets"] = budgets
    budgets.add_argument("--model", required=True, help="the fitted model (fit's JSON)")
    add_plan_arguments(budgets)
    budgets.add_argument("--cpu-gb-grid", required=True, type=listing(decimal_gib, "GiB amounts"), help="GiB each")
    budgets.add_argument("--out", required=True, help="the CSV file to write")
    add_workload_arguments(budgets)
    return parser


def read_model(command, path):
    try:
        return LatencyModel.from_description(json.loads(Path(path).read_text(encoding="utf-8"))["tiers"])
    except OSError as error:
        command.fail(f"{path}: cannot read: {error.strerror}")
    except (ValueError, KeyError, TypeError, AttributeError):
        command.fail(f"{path}: not a model written by `ttft.py fit`")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    command = parser.commands[args.command]
    outputs = {}
    try:
        if args.command == "fit":
            configs, passes = dict(args.config), args.passes
            model, per_pass = fit(args.measurement, configs, passes, args.docs, args.tokens)
            rows = [comparison(config, name, *samples) for (config, name), samples in per_pass.items()]
            document = {
                "measurement": Path(args.measurement).name,
                "setting": {
                    "docs": args.docs,
                    "tokens": args.tokens,
                    "configs": {name: {"gpu": gpu, "cpu": cpu} for name, (gpu, cpu) in configs.items()},
                    "passes": dict(passes),
                },
                "tiers": model.describe(),
                "passes": rows,
                "offload_ratio": offload_ratios(per_pass),
                "max_p50_error": round(
                    max((abs(row["p50_ratio"] - 1) for row in rows if row["p50_ratio"]), default=0), 3
                ),
            }
            outputs = {args.model: dump_json(document), args.table: csv_text(rows, TABLE_COLUMNS)}
        elif args.command == "sweep":
            model = read_model(command, args.model)
            rooms = {"gpu": args.gpu, "cpu": args.cpu}
            rows = sweep_rows(
                model, args.docs, args.tokens, args.passes, rooms, args.vary, args.grid, args.write_policy
            )
            columns = (f"{args.vary}_tokens", "pass", *TIERS, "predicted_p50_ms", "predicted_mean_ms")
            outputs = {args.out: csv_text(rows, columns)}
        else:
            model = read_model(command, args.model)
            workload, _, per_token, gpu_tokens = plan_setting(command, args)
            rules = {"partial_blocks": args.partial_blocks, "eviction_order": args.eviction_order}
            rows = budget_rows(model, workload, gpu_tokens, per_token, args.cpu_gb_grid, args.write_policy, rules)
            outputs = {args.out: csv_text(rows, tuple(rows[0]) if rows else ("cpu_gb",))}
    except (InputError, SettingError, WorkloadError, ValueError) as error:
        command.fail(str(error))
    try:
        write_together(outputs)
    except OSError as error:
        command.fail(f"cannot write {error.filename}: {error.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
