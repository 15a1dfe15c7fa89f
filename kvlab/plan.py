"""Plan a CPU offload budget: the tokens served from GPU, from CPU and recomputed, and the GiB it takes.

Usage: ``python kvlab/plan.py --workload {lab,long_doc_qa,mooncake} [source flags] --model-config
CONFIG.json [--tp N] [--chunk-tokens 256] (--gpu-tokens N | --gpu-gb X) [--cpu-gb Y]
[--write-policy P] [--target-hit-ratio R] [--format json|table]``.

The model's config.json sizes a token's KV (``kvlab/model_size.py``); the rooms in GiB become tokens
per GPU. Both tiers are LRU over chunks of ``--chunk-tokens`` (LMCache's 256 by default; a partial
last chunk is not stored). Under write-through the CPU figures come from the exact curve of the
CPU tier at the GPU room (``kvlab/mrc.py``), so the budgets for full reuse and for the target are
the smallest that reach them. Write-back and selective have no such curve: their budgets are
found by bisection over replays, which assumes more CPU never serves less.

"GB" means GiB (2**30 bytes), as LMCache's max_local_cpu_size and vLLM's kv_offloading_size.
"""

import math
import sys
from fractions import Fraction
from functools import cached_property
from pathlib import Path

if not __package__:  # run as `python kvlab/plan.py`: import the package from the repository root
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from kvlab.files import dump_json
from kvlab.model_size import ModelConfigError, decimal_gib, gib, read_model_config, tokens_in
from kvlab.mrc import hit_ratio, tier_curve
from kvlab.prefix_cache import Blocks
from kvlab.replay import (
    add_block_rule_arguments,
    add_workload_arguments,
    argument,
    make_workload,
    ratio,
    replay,
)
from kvlab.scenario import OneLineParser
from kvlab.workloads import WORKLOADS, WorkloadError, whole_number
from kvlab.write_policies import WRITE_POLICIES, make_cache

PROG = "plan.py"
FORMATS = ("json", "table")


def build_parser():
    parser = OneLineParser(
        prog=PROG,
        description=__doc__.splitlines()[0] + " GB means GiB (2**30 bytes) throughout.",
    )
    add_plan_arguments(parser)
    parser.add_argument(
        "--target-hit-ratio",
        type=argument(hit_ratio),
        help="also the smallest CPU budget for this token hit ratio over the whole workload (0..1)",
    )
    parser.add_argument("--format", choices=FORMATS, default="json", help="json (default) or a table for people")
    add_workload_arguments(parser)
    return parser


def add_plan_arguments(parser):
    """The setting of a plan: the workload's source, the model, the chunks, the rooms and the write policy."""
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS), help="the source of requests")
    model = parser.add_argument_group("model")
    model.add_argument("--model-config", required=True, metavar="FILE", help="the model's Hugging Face config.json")
    model.add_argument(
        "--tp", type=argument(whole_number(1)), default=1, help="tensor-parallel degree (default 1); rooms are per GPU"
    )
    cache = parser.add_argument_group("cache")
    cache.add_argument(
        "--chunk-tokens",
        type=argument(whole_number(1)),
        help="tokens per chunk (default 256, LMCache's; mooncake: 512 or a multiple of it)",
    )
    add_block_rule_arguments(cache)
    gpu = cache.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu-tokens", type=argument(whole_number(0)), help="the GPU's KV pool in tokens (vLLM's figure)")
    gpu.add_argument("--gpu-gb", type=argument(decimal_gib), help="the GPU's KV pool in GiB (2**30 bytes)")
    cache.add_argument(
        "--cpu-gb",
        type=argument(decimal_gib),
        default=decimal_gib(0),
        help="CPU offload budget in GiB (2**30 bytes; default 0)",
    )
    cache.add_argument(
        "--write-policy",
        choices=WRITE_POLICIES,
        default="write-through",
        help="how the CPU tier is filled (default write-through: exact curve; others: bisection over replays)",
    )


def plan_setting(parser, args):
    """``(workload, model shape, bytes per token, GPU tokens)`` from the parsed arguments; errors are one line."""
    args.block_tokens = args.chunk_tokens
    try:
        workload = make_workload(args)
    except WorkloadError as error:
        parser.error(str(error))
    try:
        shape = read_model_config(args.model_config)
        per_token = shape.bytes_per_token(args.tp)
    except ModelConfigError as error:
        parser.fail(str(error))
    except ValueError as error:
        parser.error(f"--tp: {error}")
    gpu_tokens = args.gpu_tokens if args.gpu_tokens is not None else tokens_in(args.gpu_gb, per_token)
    return workload, shape, per_token, gpu_tokens


class Planner:
    """The workload and the GPU room fixed; what a CPU room of so many tokens gives, per round."""

    def __init__(self, workload, gpu_tokens, write_policy, partial_blocks, eviction_order):
        self.workload = workload
        self.gpu_tokens = gpu_tokens
        self.write_policy = write_policy
        self.rules = {"partial_blocks": partial_blocks, "eviction_order": eviction_order}
        self.curve = None  # write-through: the CPU tier's exact curve (its base: the GPU's tokens per round)
        if write_policy == "write-through":
            self.curve = tier_curve(workload, partial_blocks, eviction_order, gpu_tokens)

    def per_round(self, cpu_tokens):
        """``(input, GPU, CPU)`` tokens per round at this CPU room."""
        if self.curve is None:
            cache = make_cache(self.write_policy, self.gpu_tokens, cpu_tokens, self.workload.block_tokens, **self.rules)
            return [(row[2], row[5], row[6]) for row in replay(self.workload, cache)]
        curve = self.curve
        return [tuple(map(int, row)) for row in zip(curve.inputs, curve.base, curve.at(cpu_tokens), strict=True)]

    def hit_tokens(self, cpu_tokens):
        return sum(gpu + cpu for _, gpu, cpu in self.per_round(cpu_tokens))

    @cached_property
    def unlimited_cpu(self):
        """A CPU room that never evicts: every distinct block the workload can store."""
        block = self.workload.block_tokens
        keep = self.rules["partial_blocks"] == "keep"
        sizes = {}
        for request in self.workload.requests():
            blocks = Blocks(request.keys, request.tokens, block, keep)
            for index in range(blocks.stored):
                sizes[request.keys[index]] = block if index < blocks.full else blocks.last
        return sum(sizes.values())

    def smallest_cpu(self, hits):
        """The smallest CPU room at which the hit tokens reach ``hits``; None if no room does."""
        if self.curve is not None:
            return self.curve.smallest_reaching(hits - int(self.curve.base.sum()))
        high = self.unlimited_cpu
        if self.most_hits < hits:
            return None
        low = 0
        while low < high:  # bisection: more CPU is assumed never to serve less
            middle = (low + high) // 2
            if self.hit_tokens(middle) >= hits:
                high = middle
            else:
                low = middle + 1
        return low

    @cached_property
    def most_hits(self):
        """The hit tokens of an unlimited CPU."""
        if self.curve is not None:
            return int(self.curve.base.sum() + self.curve.final().sum())
        return self.hit_tokens(self.unlimited_cpu)


def round_figures(name, inputs, gpu, cpu):
    return {
        "round": name,
        "input_tokens": inputs,
        "gpu_hit_tokens": gpu,
        "cpu_hit_tokens": cpu,
        "computed_tokens": inputs - gpu - cpu,
        "token_hit_ratio": ratio(gpu + cpu, inputs),
    }


def plan(workload, model, shape, tp, gpu_tokens, cpu_gib, write_policy, partial_blocks, eviction_order, target=None):
    """The planner's JSON object (see the module's docstring)."""
    per_token = shape.bytes_per_token(tp)
    cpu_tokens = tokens_in(cpu_gib, per_token)
    planner = Planner(workload, gpu_tokens, write_policy, partial_blocks, eviction_order)
    rows = planner.per_round(cpu_tokens)
    totals = [sum(column) for column in zip(*rows, strict=True)] if rows else [0, 0, 0]
    most = planner.most_hits
    full = planner.smallest_cpu(most)
    result = {
        "workload": workload.describe(),
        "model": {"config": model, **shape.describe(tp)},
        "cache": {
            "chunk_tokens": workload.block_tokens,
            "chunk_gb": gib(workload.block_tokens, per_token),
            "partial_blocks": partial_blocks,
            "eviction_order": eviction_order,
            "write_policy": write_policy,
            "eviction": "lru",
            "gpu_tokens": gpu_tokens,
            "gpu_gb": gib(gpu_tokens, per_token),
            "cpu_gb": float(cpu_gib),
            "cpu_tokens": cpu_tokens,
        },
        **{key: value for key, value in round_figures("all", *totals).items() if key != "round"},
        "rounds": [round_figures(name, *row) for name, row in zip(workload.rounds, rows, strict=True)],
        "max_token_hit_ratio": ratio(most, totals[0]),
        "cpu_tokens_for_full_reuse": full,
        "cpu_gb_for_full_reuse": gib(full, per_token),
    }
    if target is not None:
        need = math.ceil(Fraction(str(target)) * totals[0])  # the ratio as written: 0.9 is 9/10
        found = planner.smallest_cpu(need) if need <= most else None
        result["target_hit_ratio"] = target
        result["cpu_tokens_for_target"] = found
        result["cpu_gb_for_target"] = None if found is None else gib(found, per_token)
    return result


def table(result):
    """The plan for people: the setting, the rounds, the budgets."""
    import pandas as pd

    model, cache = result["model"], result["cache"]
    lines = [
        f"model: {model['layers']} layers x {model['kv_heads_per_gpu']} KV heads per GPU x head dim {model['head_dim']}"
        f" x {model['dtype']} = {model['bytes_per_token']:,} bytes per token (tp {model['tp']});"
        f" a chunk of {cache['chunk_tokens']} tokens is {cache['chunk_gb']} GiB",
        f"GPU: {cache['gpu_tokens']:,} tokens ({cache['gpu_gb']} GiB);"
        f" CPU: {cache['cpu_gb']} GiB = {cache['cpu_tokens']:,} tokens; {cache['write_policy']}, LRU",
        "",
    ]
    rows = pd.DataFrame([*result["rounds"], {**result, "round": "all"}])
    rows = rows[["round", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "token_hit_ratio"]]
    rows.columns = ["round", "input", "from GPU", "from CPU", "recomputed", "hit ratio"]
    lines.append(rows.to_string(index=False))
    lines.append("")
    full = result["cpu_tokens_for_full_reuse"]
    lines.append(
        f"full reuse (hit ratio {result['max_token_hit_ratio']}): {result['cpu_gb_for_full_reuse']} GiB of CPU"
        f" ({full:,} tokens)"
    )
    if "target_hit_ratio" in result:
        found = result["cpu_tokens_for_target"]
        answer = "unreachable" if found is None else f"{result['cpu_gb_for_target']} GiB of CPU ({found:,} tokens)"
        lines.append(f"hit ratio {result['target_hit_ratio']}: {answer}")
    return "\n".join(lines) + "\n"


def model_name(path):
    """What names a model config in the output: its folder (a Hugging Face repository's name), not a full path."""
    path = Path(path)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.name


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    workload, shape, _, gpu_tokens = plan_setting(parser, args)
    try:
        result = plan(
            workload,
            model_name(args.model_config),
            shape,
            args.tp,
            gpu_tokens,
            args.cpu_gb,
            args.write_policy,
            args.partial_blocks,
            args.eviction_order,
            args.target_hit_ratio,
        )
    except WorkloadError as error:
        parser.fail(str(error))
    sys.stdout.write(table(result) if args.format == "table" else dump_json(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
