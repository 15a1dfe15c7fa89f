"""What TTFT to expect: fit the latency model to a measurement, then predict across grids and CPU budgets.

``fit`` replays the measured requests through the lab's design in the setting they were measured in
(each config's rooms, the passes in order; a document one block of the reference engine, the lab simulator's
rules: ``kvlab/loop.py``), fits the per-tier model
(``kvlab/latency/model.py``) and sets the predicted per-pass p50 and mean beside the measured ones.
A real server's measurement is replayed through that server's own design instead (``server``:
llama-cpp-python's, ``kvlab/serving/llama_cpp.py``); with ``fit_docs`` the model is fitted on those
documents' requests only and compared on the others' (out of sample), but for a tier no fitted request
has, which is fitted on the compared requests of that tier and named in the setting
(``fitted_on_compared_requests``).
``sweep`` prices a lab sweep (every grid value, every pass); ``budgets`` prices the planner's
setting (``kvlab/sizing/plan.py``) at each CPU budget, from a block-level replay per budget. The
command is ``kvlab ttft`` (``kvlab/cli/ttft.py``).
"""

from dataclasses import dataclass
from pathlib import Path

from kvlab.latency.measurement import CONFIGS, describe, read_records
from kvlab.latency.model import MAX_MS, TIERS, LatencyModel, tier_of
from kvlab.sizing.model_size import tokens_in
from kvlab.util.errors import SettingError as Refused  # a setting refused (exit 2), not a measurement's error
from kvlab.util.files import finite, read_json, shown
from kvlab.workloads import MAX_WHOLE

__all__ = ["TABLE_COLUMNS", "SettingError", "budget_rows", "fit_report", "fitted_model", "read_model", "sweep_rows"]

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


MAX_READS = 10**6  # documents a setting reads over its passes: a measurement has a few thousand requests


class SettingError(ValueError):
    """The measurement does not fit the setting; the message names the file and line."""


def access_tiers(write_policy, gpu_tokens, cpu_tokens, reads):
    """The tier of each read ``(doc, tokens)``, replayed through one two-tier cache of ``write_policy``, a document
    one block (the lab's simulator's rules: ``kvlab/loop.py``'s :class:`DocumentReads`)."""
    from kvlab.cache.interface import CacheSettings
    from kvlab.loop import DocumentReads, tiers

    workload = DocumentReads(reads)
    rooms = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "block_tokens": workload.block_tokens}
    cache = CacheSettings(**rooms, partial_blocks="keep", write_policy=write_policy).build()
    return [tier_of(tier, cpu_tokens > 0) for tier in tiers(workload, cache)]


def pass_reads(passes, docs):
    """``(pass name, doc)`` in reading order: each pass reads documents 0..docs-1 forwards or backwards; a setting
    of more than :data:`MAX_READS` reads is refused before any is made."""
    if docs * len(passes) > MAX_READS:
        raise ValueError(f"{docs} documents x {len(passes)} passes read more than {MAX_READS:,} documents")
    return [(name, doc) for name, order in passes for doc in (range(docs) if order == "fwd" else reversed(range(docs)))]


def measured_requests(path, configs, passes, docs):
    """``{(config, pass, doc): (tokens, ttft_ms)}``; SettingError (naming file:line) for a request the setting has
    not."""
    requests = {}
    for where, record in read_records(path):
        config, name, doc, tokens = record["config"], record["pass"], record["doc"], record["doc_tokens"]
        if config not in configs:
            raise SettingError(f"{where}: config {shown(config)} is not in the setting ({', '.join(configs)})")
        if name not in passes:
            raise SettingError(f"{where}: pass {shown(name)} is not in the setting ({', '.join(passes)})")
        if type(doc) is not int or not 0 <= doc < docs:
            raise SettingError(f"{where}: doc must be a document number 0..{docs - 1}, got {shown(doc)}")
        if type(tokens) is not int or not 1 <= tokens <= MAX_WHOLE:
            raise SettingError(f"{where}: doc_tokens must be a whole number from 1 to {MAX_WHOLE}, got {shown(tokens)}")
        if not record["ttft_ms"] <= MAX_MS:
            raise SettingError(f"{where}: ttft_ms {shown(record['ttft_ms'])} is longer than {MAX_MS} ms (11.6 days)")
        if (config, name, doc) in requests:
            raise SettingError(f"{where}: config {shown(config)} pass {shown(name)} reads doc {doc} twice")
        requests[config, name, doc] = (tokens, record["ttft_ms"])
    return requests


def server_tiers(design, gpu_tokens, cpu_tokens, reads):
    """The tier of each read ``(doc, tokens)`` through a server's design: ``("llama-cpp", state_extra_tokens)``.
    llama-cpp-python saves a state after the stream ends, so a recompute costs the same with a RAM cache or
    without: it is ``recompute`` in either config."""
    from kvlab.loop import DocumentReads, tiers
    from kvlab.serving.llama_cpp import LlamaCppServer

    name, extra = design
    if name != "llama-cpp":
        raise ValueError(f"server must be llama-cpp, got {shown(name)}")
    workload = DocumentReads(reads)  # a document is one key: whole documents are shared or not
    cache = LlamaCppServer(gpu_tokens, cpu_tokens, workload.block_tokens, extra)
    return [SERVER_TIER[tier] for tier in tiers(workload, cache)]


SERVER_TIER = {"gpu": "gpu_hit", "cpu": "cpu_load", "miss": "recompute"}


def served_tiers(requests, configs, reads, docs, tokens, server=None):
    """``{(config, pass, doc): tier}``: the setting's reads replayed per config through the lab's design (or
    ``server``'s), each document of its measured length (else ``tokens``)."""
    lengths = dict.fromkeys(range(docs), tokens)  # a measured document's own length wins
    lengths.update({doc: length for (_, _, doc), (length, _) in requests.items()})
    served = {}
    for config, (gpu, cpu) in configs.items():
        read = [(doc, lengths[doc]) for _, doc in reads]
        tiers = server_tiers(server, gpu, cpu, read) if server else access_tiers("write-through", gpu, cpu, read)
        served.update({(config, name, doc): tier for (name, doc), tier in zip(reads, tiers, strict=True)})
    return served


def fit(path, configs, passes, docs, tokens, server=None, fit_docs=None):
    """The model; per config and pass the tiers, the measured and the predicted TTFTs of its requests (those of the
    documents not in ``fit_docs``, when it is given); and the tiers fitted on compared requests."""
    reads = pass_reads(passes, docs)  # the setting's size, checked before the measurement is read
    requests = measured_requests(path, configs, dict(passes), docs)
    if not requests:
        raise ValueError(f"{path}: no requests to fit")
    served = served_tiers(requests, configs, reads, docs, tokens, server)
    held_out = {key: value for key, value in requests.items() if fit_docs is not None and key[2] not in fit_docs}
    training = {key: value for key, value in requests.items() if key not in held_out}
    if fit_docs is not None and not held_out:
        raise ValueError(f"{path}: every request is of a fitted document: none is left to compare")
    fitted = {served[key] for key in training}
    in_sample = sorted({served[key] for key in held_out} - fitted, key=TIERS.index)  # no fitted request of theirs
    training.update({key: value for key, value in held_out.items() if served[key] in in_sample})
    model = LatencyModel.fit((served[key], length, ttft) for key, (length, ttft) in training.items())
    if not finite(model.describe()):
        raise ValueError(f"{path}: the fit is not a finite number (ttft_ms or doc_tokens too large)")
    per_pass = {}  # (config, pass) -> (tiers, measured, predicted), in the setting's order
    for config in configs:
        for name, _ in passes:
            measured = [(key, value) for key, value in (held_out or requests).items() if key[:2] == (config, name)]
            if measured:
                per_pass[config, name] = (
                    [served[key] for key, _ in measured],
                    [ttft for _, (_, ttft) in measured],
                    [model.predict(served[key], length) for key, (length, _) in measured],
                )
    return model, per_pass, in_sample


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


def sweep_rows(model, docs, tokens, passes, rooms, vary, grid, write_policy):
    """Predicted p50 and mean per pass at each grid value of ``vary`` (gpu_tokens or cpu_tokens, a key of ``rooms``),
    the other room fixed."""
    rows = []
    named = [(f"pass{number}", order) for number, order in enumerate(passes, start=1)]
    reads = pass_reads(named, docs)
    for value in grid:
        gpu, cpu = (value, rooms["cpu_tokens"]) if vary == "gpu_tokens" else (rooms["gpu_tokens"], value)
        tiers = access_tiers(write_policy, gpu, cpu, [(doc, tokens) for _, doc in reads])
        for name, _ in named:
            served = [tier for (pass_name, _), tier in zip(reads, tiers, strict=True) if pass_name == name]
            p50, mean = describe([model.predict(tier, tokens) for tier in served]) if served else (0.0, 0.0)
            rows.append(
                {
                    vary: value,
                    "pass": name,
                    **{tier: served.count(tier) for tier in TIERS},
                    "predicted_p50_ms": round(p50, 1),
                    "predicted_mean_ms": round(mean, 1),
                }
            )
    return rows


def budget_rows(model, workload, gpu_tokens, per_token, budgets, write_policy, block_rules, meter=None):
    """Predicted p50 and mean per round (and in all) at each CPU budget in GiB, from a replay per budget;
    ``meter`` (:class:`kvlab.util.memory.Meter`) checks every replay, so a workload too large stops in the first."""
    import numpy as np

    from kvlab.cache.interface import CacheSettings  # the replay's engines, imported by what replays only
    from kvlab.loop import ratio, replay, rows_of

    rows = []
    for budget in budgets:
        cpu_tokens = tokens_in(budget, per_token)
        rooms = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "block_tokens": workload.block_tokens}
        cache = CacheSettings(**rooms, write_policy=write_policy, **block_rules).build(workload)
        parts = []
        replay(workload, cache, parts, meter=meter)
        has_cpu = cpu_tokens > 0
        requests = list(rows_of(parts))
        outside = check_lengths(model, [request[3] for request in requests])
        times = [
            (r, model.predict_mix(tokens, gpu, cpu, has_cpu), tokens, gpu, cpu)
            for r, _, _, tokens, gpu, cpu in requests
        ]
        for index, name in [(None, "all"), *enumerate(workload.rounds)]:
            mine = [time for time in times if index is None or time[0] == index]
            inputs = sum(time[2] for time in mine)
            hits = sum(time[3] + time[4] for time in mine)
            p50, mean = describe([time[1] for time in mine]) if mine else (0.0, 0.0)
            p99 = float(np.percentile([time[1] for time in mine], 99)) if mine else 0.0
            rows.append(
                {
                    "cpu_gib": float(budget),
                    "cpu_tokens": cpu_tokens,
                    "round": name,
                    "token_hit_ratio": ratio(hits, inputs),
                    "predicted_p50_ms": round(p50, 1),
                    "predicted_p99_ms": round(p99, 1),
                    "predicted_mean_ms": round(mean, 1),
                    **({"outside_fit": outside} if outside else {}),
                }
            )
    return rows


def model_identity(model_config):
    """What makes two config.json files the same model for a TTFT fit: its KV shape and its width, depth and
    vocabulary (its name is only for messages)."""
    from dataclasses import fields

    from kvlab.sizing.model_size import read_model_config

    config = read_json(model_config)
    text = config.get("text_config") if "num_hidden_layers" not in config else None
    config = {**config, **text} if isinstance(text, dict) else config
    widths = {key: config.get(key) for key in ("hidden_size", "intermediate_size", "vocab_size")}
    shape = read_model_config(model_config)
    kv = {field.name: getattr(shape, field.name) for field in fields(shape) if field.compare}  # what sizes the KV
    return {"name": Path(model_config).parent.name, **kv, **widths}


def setting_document(docs, tokens, configs, passes, server=None, fit_docs=None):
    """The setting a measurement was fitted in, as a fit's document records it (``setting``)."""
    return {
        "docs": docs,
        "tokens": tokens,
        "configs": {name: {"gpu_tokens": gpu, "cpu_tokens": cpu} for name, (gpu, cpu) in configs.items()},
        "passes": dict(passes),
        **({"server": server[0], "state_extra_tokens": server[1]} if server else {}),
        **({"fit_docs": sorted(fit_docs), "compared": "the other documents"} if fit_docs is not None else {}),
    }


def fit_report(path, configs, passes, docs, tokens, server=None, fit_docs=None, fitted_in=None):
    """The model document (fits, per-pass comparison, offload ratios, and ``fitted_in``: the model, the system
    and server, the prompt lengths and whether the measurement is synthetic) and the comparison's rows."""
    model, per_pass, in_sample = fit(path, configs, passes, docs, tokens, server, fit_docs)
    rows = [comparison(config, name, *samples) for (config, name), samples in per_pass.items()]
    document = {
        "measurement": Path(path).name,
        "setting": {
            **setting_document(docs, tokens, configs, passes, server, fit_docs),
            **({"fitted_on_compared_requests": in_sample} if in_sample else {}),
        },
        "tiers": model.describe(),
        "passes": rows,
        "offload_ratio": offload_ratios(per_pass),
        "max_p50_error": round(max((abs(row["p50_ratio"] - 1) for row in rows if row["p50_ratio"]), default=0), 3),
    }
    if fitted_in is not None:
        lengths = [length for length, _ in measured_requests(path, configs, dict(passes), docs).values()]
        model_config = fitted_in.get("model_config")
        document["fitted_in"] = {
            "model": model_identity(model_config) if model_config else None,
            "measured_on": fitted_in.get("measured_on"),
            "synthetic": bool(fitted_in.get("synthetic")),
            "tokens": [min(lengths), max(lengths)],
        }
    return document, rows


@dataclass(frozen=True)
class FittedScope:
    """The setting a fitted model may price (``fitted_in``): what it was fitted to, in words, its prompt lengths,
    and whether it may price outside them (``allow``; never a synthetic measurement's)."""

    path: str
    what: str
    synthetic: bool
    allow: bool
    tokens: tuple | None

    def judge(self, difference):
        """``difference`` (how this setting is not the fitted one) back, to label the rows with, where it may price
        outside; else SettingError saying what to do instead."""
        if self.synthetic or not self.allow:
            hint = (
                "price from the hardware instead (--gpu-system, kvlab ttft predict), or fit a model to a measurement"
                " of this setting (kvlab measure, kvlab ttft fit --model-config)"
            )
            extra = "" if self.synthetic else "; --allow-other-setting prices anyway, labelled"
            raise Refused(
                f"{self.path}: {difference}: a model fitted to {self.what} prices that setting only; {hint}{extra}"
            )
        return difference


def fitted_model(path, model_config, workload, allow=False):
    """The model a ``fit`` wrote and whether it may price this setting: ``(model, outside)``, ``outside`` naming
    how the setting differs from the one it was fitted in (only with ``allow``; None inside it); the model's
    ``scope`` (:class:`FittedScope`) judges the prompts' lengths later. SettingError, saying what to do instead,
    when it differs and ``allow`` is not given, or the measurement was synthetic."""
    document = read_json(path)
    model = model_of(document, path)
    fitted = document.get("fitted_in")
    if not isinstance(fitted, dict):
        fitted = {"model": None, "synthetic": False, "tokens": None}
    differences = []
    mine = model_identity(model_config)
    theirs = fitted.get("model")
    if theirs is None:
        differences.append("it was fitted without --model-config (its model is unknown)")
    elif {k: v for k, v in theirs.items() if k != "name"} != {k: v for k, v in mine.items() if k != "name"}:
        differences.append(f"it was fitted to {theirs.get('name')}, not {mine['name']}")
    synthetic = bool(fitted.get("synthetic"))
    what = "the SYNTHETIC example measurement" if synthetic else "its measurement's setting"
    tokens = tuple(fitted["tokens"]) if fitted.get("tokens") else None
    model.scope = FittedScope(str(path), what, synthetic, allow, tokens)
    if differences:
        model.scope.judge(differences[0])
    return model, "; ".join(differences) or None


def check_lengths(model, lengths):
    """SettingError when a fitted model (:func:`fitted_model`) would price prompts longer or shorter than those it
    was fitted on, unless allowed; returns the difference's text (or None)."""
    scope = getattr(model, "scope", None)
    if scope is None or not scope.tokens:
        return None
    low, high = scope.tokens
    outside = sum(1 for length in lengths if not low <= length <= high)
    if not outside:
        return None
    return scope.judge(f"{outside:,} requests are outside the {low:,}..{high:,} prompt tokens it was fitted on")


def read_model(path):
    """The model a ``fit`` wrote; ValueError naming the file if it is not one."""
    return model_of(read_json(path), path)


def model_of(document, path):
    """The model of a ``fit``'s document read from ``path``; ValueError naming the file if it is not one."""
    if isinstance(document, dict) and "calibration" in document:
        raise Refused(
            f"{path}: a hardware calibration (kvlab ttft fit --gpu-system), not a per-tier model: price with its"
            " hardware_settings as flags (--gpu-system, --efficiency, --link-gbps, --overhead-ms)"
        )
    try:
        return LatencyModel.from_description(document["tiers"])
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{path}: not a model written by `kvlab ttft fit`") from None
