"""Does offloading help here? One answer and its reason, from a plan's own figures (issue 40, part 3).

The reasons are tried in order, each from numbers the plan already has: the workload reuses no prefix (its hit ratio
at an unlimited room is 0); the GPU's room alone reaches that ratio (the working set fits in HBM); the plan gives the
CPU no budget (then what full reuse would take); the CPU tier serves nothing at this budget (below the cliff); the
tier's loads are slower than recomputing the prefix (the predicted TTFT with the tier against without it, where the
plan prices it: ``--gpu-system``); the load is too light for the tier to change anything (the time under ``--load``
with the tier against without it: the throughput within 1% and the TTFT p99 within 5%); else yes, with what it
gains in TTFT and throughput, and per unit of cost where the plan is priced (``--prices``).

``without`` holds the same blocks (``ttft``, ``load``, ``cost``) for the plan's setting with no CPU tier; a block
the plan lacks is not judged.
"""

__all__ = ["REASONS", "verdict"]

REASONS = ("no_reuse", "fits_in_gpu", "no_budget", "below_cliff", "link_slower", "light_load", "helps")
LIGHT_THROUGHPUT = 0.01  # a throughput gain below 1% is none
LIGHT_TTFT = 0.05  # nor a TTFT p99 gain below 5%


def _change(before, after):
    """``after`` against ``before`` in percent, signed, to 0.1 (None where either is missing or ``before`` is 0)."""
    if before is None or after is None or not before:
        return None
    return round((after - before) / before * 100, 1)


def _signed(percent):
    return "from 0" if percent is None else f"{percent:+.1f}%"


def verdict(result, without=None):
    """``{"offload_helps": bool, "reason": one of REASONS, "line": the answer in words}`` for a plan's JSON object
    (``result``) and its figures with no CPU tier (``without``: its ``ttft``, ``load`` and ``cost`` blocks)."""
    without = without or {}
    most = result["max_token_hit_ratio"]
    cache = result["cache"]
    full = result["cpu_gib_for_full_reuse"]
    if not most:
        return _said(False, "no_reuse", "no: the workload reuses no prefix (its hit ratio is 0 at any room)")
    if not full:
        return _said(
            False,
            "fits_in_gpu",
            f"no: the GPU's room ({cache['gpu_gib']} GiB) already holds every prefix the workload reuses (hit ratio"
            f" {most} without a CPU tier)",
        )
    if not float(cache["cpu_gib"]):
        return _said(
            True,
            "no_budget",
            f"yes, with a budget: {full} GiB of CPU per GPU would raise the hit ratio from {result['token_hit_ratio']}"
            f" to {most} (this plan gives the CPU none)",
        )
    if not result["cpu_hit_tokens"]:
        return _said(
            False,
            "below_cliff",
            f"no: at {cache['cpu_gib']} GiB per GPU the CPU tier serves nothing (below the cliff: it holds no prefix"
            f" until it comes back); full reuse takes {full} GiB",
        )
    parts = [f"the CPU serves {result['cpu_hit_tokens']:,} input tokens, hit ratio {result['token_hit_ratio']}"]
    ttft, before = result.get("ttft"), without.get("ttft")
    if ttft is not None and before is not None:
        with_tier, alone = ttft["all"]["mean_ms"], before["all"]["mean_ms"]
        if with_tier is not None and alone is not None and with_tier >= alone:
            return _said(
                False,
                "link_slower",
                f"no: loading the prefixes from CPU is slower than recomputing them here: mean TTFT {with_tier} ms with"
                f" the tier against {alone} ms without it",
            )
        parts.append(f"TTFT mean {alone} -> {with_tier} ms ({_signed(_change(alone, with_tier))})")
    load, unloaded = result.get("load"), without.get("load")
    gains = {}
    if load is not None and unloaded is not None:
        gains["throughput"] = _change(unloaded["output_tokens_per_s"], load["output_tokens_per_s"])
        gains["ttft"] = _change(unloaded["ttft_ms"]["p99"], load["ttft_ms"]["p99"])
        light = (gains["throughput"] or 0) < LIGHT_THROUGHPUT * 100 and -(gains["ttft"] or 0) < LIGHT_TTFT * 100
        if light:
            return _said(
                False,
                "light_load",
                "no: at this load the engine keeps up without the tier (no queue for it to shorten): throughput"
                f" {unloaded['output_tokens_per_s']} -> {load['output_tokens_per_s']} output tokens/s, TTFT p99"
                f" {unloaded['ttft_ms']['p99']} ->"
                f" {load['ttft_ms']['p99']} ms ({_signed(gains['ttft'] or 0)})",
            )
        parts.append(
            f"under load TTFT p99 {unloaded['ttft_ms']['p99']} -> {load['ttft_ms']['p99']} ms"
            f" ({_signed(gains['ttft'])}), throughput {unloaded['output_tokens_per_s']} ->"
            f" {load['output_tokens_per_s']} output tokens/s ({_signed(gains['throughput'])})"
        )
    cost, cheaper = result.get("cost"), without.get("cost")
    if cost is not None and cheaper is not None:
        total, base_total = cost["per_hour"]["total"], cheaper["per_hour"]["total"]
        parts.append(
            f"cost {base_total:g} -> {total:g} {cost['currency']} per hour ({_signed(_change(base_total, total))})"
        )
        if load is not None and unloaded is not None and total and base_total:
            per_cost = _change(unloaded["output_tokens_per_s"] / base_total, load["output_tokens_per_s"] / total)
            parts.append(f"output tokens per {cost['currency']} {_signed(per_cost)}")
    return _said(True, "helps", "yes: " + "; ".join(parts))


def _said(helps, reason, line):
    return {"offload_helps": helps, "reason": reason, "line": line}
