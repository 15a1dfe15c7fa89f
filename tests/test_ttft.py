"""kvlab/latency/ttft.py (`kvlab ttft`): the TTFT model fitted to a measurement the simulator replays (fit), its
predictions across a lab sweep's grid (sweep) and across a plan's CPU budgets (budgets), the committed results/ttft/
artifacts, and bad input.

The expectations are built here independently: tiers from the lab's simulator (kvsim) driven by this file, per-pass
statistics as summarize.py defines them, the token-weighted mix in exact arithmetic from per-request replay rows.
"""

import csv
import json
import math
import re
import shlex
import statistics
import tempfile
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, kvlab, load_config, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import kvsim
from kvlab.cache.write_policies import make_cache
from kvlab.cli import replay as replay_cli
from kvlab.cli import ttft as ttft_cli
from kvlab.cli.flags import make_workload
from kvlab.latency.ttft import model_identity
from kvlab.loop import replay, rows_of
from kvlab.measure import example as example_measurement
from kvlab.workflow import commands, paths

RESULTS = ROOT / "results"
COMMITTED = RESULTS / "ttft"
QWEN_1_5B = ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json"
TINY = ROOT / "models" / "tiny-llama-cpp" / "config.json"  # another model: a fit to it prices it only
PER_TOKEN = 28_672  # Qwen2.5-1.5B: 2 (K, V) x 28 layers x 2 KV heads x 128 dims x 2 bytes (bf16)
TIERS = ("gpu_hit", "cpu_load", "recompute", "recompute_offload")
TABLE_COLUMNS = [
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
]
BUDGETS_COLUMNS = ["cpu_gib", "cpu_tokens", "round", "token_hit_ratio"]
BUDGETS_COLUMNS += ["predicted_p50_ms", "predicted_p99_ms", "predicted_mean_ms"]
CACHES = {"write-through": kvsim.TwoTierCache, "write-back": kvsim.WriteBackCache, "selective": kvsim.SelectiveCache}
ACCESS = {"gpu": "gpu_hit", "cpu": "cpu_load", "miss": "recompute"}
FEW = settings(max_examples=50, deadline=None, database=None)
SOME = settings(max_examples=80, deadline=None, database=None)


# --------------------------------------------------------------------------------------------
# Helpers: running the command, the independent simulator replay, the files
# --------------------------------------------------------------------------------------------


def call(*argv):
    """Run ``kvlab ttft ARGV`` in this process; return ``(exit status, stderr)`` (it writes nothing to stdout)."""
    done = kvlab("ttft", *argv)
    assert done.stdout == "", done.stdout
    return done.returncode, done.stderr


def call_ok(*argv):
    status, err = call(*argv)
    assert (status, err) == (0, ""), err


def read_csv(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def header(path):
    return Path(path).read_text(encoding="utf-8").splitlines()[0].split(",")


def write_jsonl(path, records):
    Path(path).write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def reading_order(order, docs):
    return range(docs) if order == "fwd" else range(docs - 1, -1, -1)


def served(configs, passes, docs, length, policy="write-through"):
    """``{(config, pass, doc): tier}``: one cache of the lab's simulator per config, kept across the passes."""
    tiers = {}
    for name, gpu, cpu in configs:
        cache = CACHES[policy](gpu, cpu)
        for pass_name, order in passes:
            for doc in reading_order(order, docs):
                tier = ACCESS[cache.access(doc, length(doc))]
                tiers[name, pass_name, doc] = "recompute_offload" if tier == "recompute" and cpu > 0 else tier
    return tiers


def fit_argv(measurement, docs, tokens, configs, passes, model, table, *recorded):
    """``kvlab ttft fit``'s arguments; ``recorded``: what the fit records of where it was measured (--model-config,
    --measured-on, --synthetic)."""
    argv = ["fit", "--measurement", measurement, "--docs", docs, "--tokens", tokens]
    argv += [arg for name, gpu, cpu in configs for arg in ("--config", f"{name}:{gpu},{cpu}")]
    argv += [arg for name, order in passes for arg in ("--pass", f"{name}:{order}")]
    return [*argv, *recorded, "--model", model, "--table", table]


def expected_fitted_in(records, model_config=None, measured_on=None, synthetic=False):
    """The ``fitted_in`` a fit of ``records`` writes: the model's identity (None without --model-config), what it
    was measured on, whether synthetic, and the least and most prompt tokens measured."""
    lengths = [record["doc_tokens"] for record in records]
    return {
        "model": None if model_config is None else model_identity(model_config),
        "measured_on": measured_on,
        "synthetic": synthetic,
        "tokens": [min(lengths), max(lengths)],
    }


def run_fit(records, docs, tokens, configs, passes):
    """Fit ``records`` in this setting; return the model document (its JSON rows checked equal to the CSV's; its
    ``fitted_in``: no model, nothing measured on, not synthetic, the measured prompts' range)."""
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        write_jsonl(folder / "m.jsonl", records)
        call_ok(*fit_argv(folder / "m.jsonl", docs, tokens, configs, passes, folder / "model.json", folder / "t.csv"))
        document = json.loads((folder / "model.json").read_text(encoding="utf-8"))
        assert header(folder / "t.csv") == TABLE_COLUMNS
        table = read_csv(folder / "t.csv")
    assert list(document) == [
        "measurement",
        "setting",
        "tiers",
        "passes",
        "offload_ratio",
        "max_p50_error",
        "fitted_in",
    ]
    assert document["fitted_in"] == expected_fitted_in(records)
    assert document["setting"] == {
        "docs": docs,
        "tokens": tokens,
        "configs": {name: {"gpu_tokens": gpu, "cpu_tokens": cpu} for name, gpu, cpu in configs},
        "passes": dict(passes),
    }
    assert table == [
        {key: "" if value is None else str(value) for key, value in row.items()} for row in document["passes"]
    ]
    return document


def check_rows(rows, records, tiers, configs, passes):
    """One row per (config, pass) with a measured request, in the setting's order; the tiers the simulator gives
    and the measured p50 and mean as summarize.py computes them."""
    keys = [(name, p) for name, _, _ in configs for p, _ in passes]
    measured = {key: [r for r in records if (r["config"], r["pass"]) == key] for key in keys}
    assert [(row["config"], row["pass"]) for row in rows] == [key for key in keys if measured[key]]
    for row in rows:
        mine = measured[row["config"], row["pass"]]
        counts = Counter(tiers[r["config"], r["pass"], r["doc"]] for r in mine)
        assert row["n"] == len(mine)
        assert {tier: row[tier] for tier in TIERS} == {tier: counts[tier] for tier in TIERS}
        values = [r["ttft_ms"] for r in mine]
        assert row["measured_p50_ms"] == round(statistics.median(values), 1)
        assert row["measured_mean_ms"] == round(statistics.mean(values), 1)


def tier_times(tiers_json, tokens):
    """Each tier's time at ``tokens`` as the model file says, in exact arithmetic."""
    return {
        tier: Fraction(fit["intercept_ms"]) + Fraction(fit["ms_per_token"]) * tokens for tier, fit in tiers_json.items()
    }


def exact_mix(tiers_json, tokens, gpu, cpu, has_cpu):
    times = tier_times(tiers_json, tokens)
    computed = times["recompute_offload" if has_cpu else "recompute"]
    return (gpu * times["gpu_hit"] + cpu * times["cpu_load"] + (tokens - gpu - cpu) * computed) / tokens


def cpu_tokens_of(text):
    """Whole tokens a budget of ``text`` GiB holds (exact decimal arithmetic)."""
    return math.floor(Fraction(Decimal(text)) * 2**30 / PER_TOKEN)


def near(value, exact, places=1):
    """A figure rounded to ``places`` decimals is within half a unit of the exact one."""
    return abs(value - float(exact)) <= 0.5 * 10**-places + 1e-9


def p99(times):
    """The 99th percentile as budgets states it: numpy's (linear interpolation between the closest ranks)."""
    return float(np.percentile([float(time) for time in times], 99))


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

MS = st.integers(100, 100_000).map(lambda cents: cents / 100)
LATENCIES = st.fixed_dictionaries(
    {
        "gpu_hit": MS,
        "cpu_load": MS,
        "recompute": MS,
        "store_overhead": st.integers(0, 50_000).map(lambda cents: cents / 100),
        "decode": MS,
    }
)


def rooms(docs, tokens):
    """Rooms in tokens: whole documents (where the cliffs are), or anything up to one more than all of them."""
    return st.one_of(st.integers(0, docs + 1).map(lambda k: k * tokens), st.integers(0, (docs + 1) * tokens))


@st.composite
def lab_settings(draw, max_docs=7):
    """``(docs, tokens, [(config, gpu, cpu)], [(pass, order)])``: rooms from none to more than every document."""
    docs = draw(st.integers(1, max_docs))
    tokens = draw(st.integers(1, 3000))
    names = draw(st.lists(st.sampled_from(["baseline", "lmcache", "other"]), min_size=1, max_size=3, unique=True))
    room = rooms(docs, tokens)
    configs = [(name, draw(room), draw(st.one_of(st.just(0), room))) for name in names]
    orders = draw(st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4))
    passes = [(f"p{number}-{order}", order) for number, order in enumerate(orders, start=1)]
    return docs, tokens, configs, passes


@st.composite
def model_tiers(draw):
    """A model file's ``tiers``: all four, lines with distinct-ish times (floats, as fit writes them)."""
    return {
        tier: {
            "n": draw(st.integers(1, 50)),
            "intercept_ms": draw(st.integers(1_000, 1_000_000)) / 1000,
            "ms_per_token": draw(st.integers(0, 200_000)) / 1_000_000,
            "residual_median_abs_ms": 0.0,
            "residual_max_abs_ms": 0.0,
        }
        for tier in TIERS
    }


# --------------------------------------------------------------------------------------------
# fit: differential properties against example_measurement.generate and the simulator
# --------------------------------------------------------------------------------------------


@FEW
@given(setting=lab_settings(), latency=LATENCIES, seed=st.integers(0, 2**32))
def test_fit_recovers_noise_free_latencies_exactly(setting, latency, seed):
    """No jitter: each present tier's time is its latency (recompute_offload: recompute + store overhead), and every
    pass's predicted p50 and mean are the measured ones."""
    docs, tokens, configs, passes = setting
    records = example_measurement.generate(configs, passes, docs, tokens, latency, 0.0, seed)
    document = run_fit(records, docs, tokens, configs, passes)
    tiers = served(configs, passes, docs, lambda doc: tokens)
    counts = Counter(tiers.values())
    expected = {tier: latency[tier] for tier in ("gpu_hit", "cpu_load", "recompute")}
    expected["recompute_offload"] = round(latency["recompute"] + latency["store_overhead"], 2)
    assert list(document["tiers"]) == [tier for tier in TIERS if counts[tier]]
    for tier, fit in document["tiers"].items():
        assert fit == {
            "n": counts[tier],
            "intercept_ms": expected[tier],
            "ms_per_token": 0.0,
            "residual_median_abs_ms": 0.0,
            "residual_max_abs_ms": 0.0,
        }
    rows = document["passes"]
    check_rows(rows, records, tiers, configs, passes)
    for row in rows:
        assert row["predicted_p50_ms"] == row["measured_p50_ms"]
        assert row["predicted_mean_ms"] == row["measured_mean_ms"]
        assert row["p50_ratio"] == row["mean_ratio"] == 1.0
    assert document["max_p50_error"] == 0
    names = [name for name, _, _ in configs]
    both = "baseline" in names and "lmcache" in names
    assert [r["pass"] for r in document["offload_ratio"]] == ([p for p, _ in passes] if both else [])
    for ratio in document["offload_ratio"]:
        assert ratio["measured_p50"] == ratio["predicted_p50"]


@SOME
@given(
    setting=lab_settings(),
    latency=LATENCIES,
    jitter=st.floats(0.001, 0.2),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_fit_with_jitter_and_missing_shuffled_lines(setting, latency, jitter, seed, data):
    """Jitter, some requests not measured, the lines in any order: the tiers are still the simulator's over the
    whole setting; each tier's time is the median of its requests; a pass's predicted p50 is the median of its
    requests' tier medians, so it is within the largest residual of the pass's requests (model.json's
    residual_max_abs_ms of its tiers) of the measured p50, give or take the rounding to 0.1 ms."""
    docs, tokens, configs, passes = setting
    records = example_measurement.generate(configs, passes, docs, tokens, latency, jitter, seed)
    keep = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    records = [record for record, kept in zip(records, keep, strict=True) if kept]
    records = [records[i] for i in data.draw(st.permutations(range(len(records))))]
    if not records:  # nothing measured: nothing to fit (test_empty_measurement_is_refused)
        return
    document = run_fit(records, docs, tokens, configs, passes)
    tiers = served(configs, passes, docs, lambda doc: tokens)
    check_rows(document["passes"], records, tiers, configs, passes)

    values = {}
    for r in records:
        values.setdefault(tiers[r["config"], r["pass"], r["doc"]], []).append(r["ttft_ms"])
    medians = {tier: statistics.median(v) for tier, v in values.items()}
    assert list(document["tiers"]) == [tier for tier in TIERS if tier in values]
    for tier, fit in document["tiers"].items():
        residuals = [abs(v - medians[tier]) for v in values[tier]]
        assert fit == {
            "n": len(values[tier]),
            "intercept_ms": round(medians[tier], 3),
            "ms_per_token": 0.0,
            "residual_median_abs_ms": round(statistics.median(residuals), 2),
            "residual_max_abs_ms": round(max(residuals), 2),
        }
    for row in document["passes"]:
        mine = [r for r in records if (r["config"], r["pass"]) == (row["config"], row["pass"])]
        row_tiers = [tiers[r["config"], r["pass"], r["doc"]] for r in mine]
        measured = [r["ttft_ms"] for r in mine]
        predicted = [medians[tier] for tier in row_tiers]
        assert row["predicted_p50_ms"] == round(statistics.median(predicted), 1)
        assert row["predicted_mean_ms"] == round(statistics.mean(predicted), 1)
        if statistics.median(measured):
            assert row["p50_ratio"] == round(statistics.median(predicted) / statistics.median(measured), 3)
        # The bound: the median (and the mean) moves by at most the largest change of any one value.
        largest = max(abs(x - y) for x, y in zip(measured, predicted, strict=True))
        assert abs(row["predicted_p50_ms"] - row["measured_p50_ms"]) <= largest + 0.1 + 1e-9
        assert abs(row["predicted_mean_ms"] - row["measured_mean_ms"]) <= largest + 0.1 + 1e-9
        stated = max(document["tiers"][tier]["residual_max_abs_ms"] for tier in set(row_tiers))
        assert abs(row["predicted_p50_ms"] - row["measured_p50_ms"]) <= stated + 0.005 + 0.1 + 1e-9
    ratios = [abs(row["p50_ratio"] - 1) for row in document["passes"] if row["p50_ratio"]]
    assert document["max_p50_error"] == round(max(ratios, default=0), 3)


@FEW
@given(setting=lab_settings(max_docs=6), data=st.data())
def test_fit_with_varying_lengths_recovers_each_tiers_line(setting, data):
    """Documents of different lengths (the measurement's doc_tokens win over --tokens) and noise-free per-tier lines:
    the simulator replays those lengths, and each tier whose lengths vary is fitted its line exactly."""
    docs, tokens, configs, passes = setting
    lengths = data.draw(st.lists(st.integers(1, 2 * tokens), min_size=docs, max_size=docs))
    lines = {
        tier: (data.draw(st.integers(0, 1_000_000)) / 1000, data.draw(st.integers(0, 500_000)) / 1_000_000)
        for tier in TIERS
    }
    tiers = served(configs, passes, docs, lambda doc: lengths[doc])
    records = []
    for name, _, _ in configs:
        for pass_name, order in passes:
            for doc in reading_order(order, docs):
                a, b = lines[tiers[name, pass_name, doc]]
                records.append(
                    {
                        "config": name,
                        "pass": pass_name,
                        "doc": doc,
                        "doc_tokens": lengths[doc],
                        "ttft_ms": a + b * lengths[doc],
                        "total_ms": 0.0,
                    }
                )
    other_tokens = data.draw(st.integers(1, 3000))  # every document is measured: --tokens is never used
    document = run_fit(records, docs, other_tokens, configs, passes)
    check_rows(document["passes"], records, tiers, configs, passes)
    for tier, fit in document["tiers"].items():
        a, b = lines[tier]
        seen = {r["doc_tokens"] for r in records if tiers[r["config"], r["pass"], r["doc"]] == tier}
        if len(seen) > 1:
            assert (fit["intercept_ms"], fit["ms_per_token"]) == (a, b)
        else:
            assert (fit["intercept_ms"], fit["ms_per_token"]) == (round(a + b * seen.pop(), 3), 0.0)
        assert fit["residual_max_abs_ms"] == 0.0
    for row in document["passes"]:
        assert abs(row["predicted_p50_ms"] - row["measured_p50_ms"]) <= 0.1 + 1e-9
        assert abs(row["predicted_mean_ms"] - row["measured_mean_ms"]) <= 0.1 + 1e-9


@pytest.mark.parametrize(("tokens", "tier"), [(40, "gpu_hit"), (50, "recompute")])
def test_unmeasured_documents_take_tokens(tokens, tier):
    """Only doc 1 (60 tokens) is measured; doc 0 has --tokens. GPU room 100: with 40 + 60 both stay, and the second
    pass hits doc 1; with 50 + 60 they evict each other, and it is recomputed."""
    records = [
        {"config": "baseline", "pass": name, "doc": 1, "doc_tokens": 60, "ttft_ms": 10.0, "total_ms": 20.0}
        for name in ("p1", "p2")
    ]
    document = run_fit(records, 2, tokens, [("baseline", 100, 0)], [("p1", "fwd"), ("p2", "fwd")])
    second = document["passes"][1]
    assert (second["pass"], second["n"], second[tier]) == ("p2", 1, 1)


@pytest.mark.parametrize("text", ["", "\n", "\n  \n"])
def test_empty_measurement_is_refused(tmp_path, text):
    """No request measured: nothing to fit, one line naming the file, and neither output written."""
    measurement = tmp_path / "m.jsonl"
    measurement.write_text(text, encoding="utf-8")
    model, table = tmp_path / "m.json", tmp_path / "t.csv"
    status, err = call(*fit_argv(measurement, 3, 10, [("baseline", 10, 0)], [("p", "fwd")], model, table))
    fails_with_one_line(status, err, f"kvlab ttft fit: error: {measurement}: ", "no requests to fit")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.jsonl"]


# --------------------------------------------------------------------------------------------
# The committed example measurement and results/ttft/
# --------------------------------------------------------------------------------------------


def run_ttft(*argv, process=False):
    """``kvlab ttft ARGV`` from the repository root, as Snakemake runs it (rules/ttft.smk): in this process, or with
    ``process`` in a process of its own (``python -m kvlab``, its own hash seed); it must succeed silently."""
    if process:
        done = run_python("-m", "kvlab", "ttft", *argv, timeout=300)
    else:
        done = kvlab("ttft", *argv, cwd=ROOT)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "")


def pipeline_fit(folder, process=False):
    """`kvlab ttft fit` with the pipeline's command line (rules/ttft.smk)."""
    args = shlex.split(commands.job_args(load_config(), "ttft_fit"))
    model, table = folder / "model.json", folder / "predicted_vs_measured.csv"
    run_ttft("fit", "--measurement", paths.MEASUREMENT, *args, "--model", model, "--table", table, process=process)
    return model, table


def pipeline_sweep(folder, sweep, model=paths.TTFT_MODEL, process=False):
    out = folder / f"sweep-{sweep}.csv"
    args = shlex.split(commands.job_args(load_config(), "ttft_sweep", sweep=sweep))
    run_ttft("sweep", "--model", model, *args, "--out", out, process=process)
    return out


def pipeline_budgets(folder, model=paths.TTFT_MODEL, process=False):
    config = load_config()
    out = folder / f"budgets-{config['ttft']['budgets']['plan']}.csv"
    args = shlex.split(commands.job_args(config, "ttft_budgets", plan=config["ttft"]["budgets"]["plan"]))
    run_ttft("budgets", "--model", model, *args, "--out", out, process=process)
    return out


def test_committed_predictions_are_within_ten_percent():
    """The issue's bar: every predicted per-pass p50 within 10% of the measured one (from the columns themselves)."""
    rows = read_csv(COMMITTED / "predicted_vs_measured.csv")
    setting = load_config()["ttft"]["setting"]
    assert [(row["config"], row["pass"]) for row in rows] == [
        (config, name) for config in setting["configs"] for name in setting["passes"]
    ]
    for row in rows:
        measured, predicted = float(row["measured_p50_ms"]), float(row["predicted_p50_ms"])
        assert abs(predicted / measured - 1) <= 0.10, row
        assert abs(float(row["p50_ratio"]) - predicted / measured) <= 0.003  # the ratio of the unrounded p50s
    document = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))
    assert document["max_p50_error"] == round(max(abs(float(row["p50_ratio"]) - 1) for row in rows), 3) <= 0.10


def test_committed_fit_is_reproduced_byte_for_byte(tmp_path):
    model, table = pipeline_fit(tmp_path)
    assert model.read_bytes() == (COMMITTED / "model.json").read_bytes()
    assert table.read_bytes() == (COMMITTED / "predicted_vs_measured.csv").read_bytes()


def test_committed_fit_against_the_example_and_the_summary(tmp_path):
    """results/ttft.jsonl is the example drawn by the simulator's tiers; fitted afresh by the pipeline's command line
    (the same bytes as the committed model: see above), the tier counts are the simulator's, the tier times lie within
    the jitter of the latencies drawn around, the measured statistics and ratios are summarize.py's
    (results/measured.json)."""
    config = load_config()
    spec = config["example_measurement"]
    configs = [(name, rooms["gpu_tokens"], rooms["cpu_tokens"]) for name, rooms in spec["configs"].items()]
    passes = list(spec["passes"].items())
    records = [json.loads(line) for line in (RESULTS / "ttft.jsonl").read_text(encoding="utf-8").splitlines()]
    drawn = example_measurement.generate(
        configs, passes, spec["docs"], spec["tokens"], spec["latency_ms"], spec["jitter"], spec["seed"]
    )
    assert records == drawn
    model, _ = pipeline_fit(tmp_path)
    document = json.loads(model.read_text(encoding="utf-8"))
    tiers = served(configs, passes, spec["docs"], lambda doc: spec["tokens"])
    assert {tier: fit["n"] for tier, fit in document["tiers"].items()} == dict(Counter(tiers.values()))
    check_rows(document["passes"], records, tiers, configs, passes)
    measurement = config["measurement"]  # what the fit records of where it was measured (config.yaml)
    assert document["fitted_in"] == expected_fitted_in(
        records, ROOT / measurement["model_config"], measurement["measured_on"], measurement["synthetic"]
    )
    latency = dict(spec["latency_ms"])
    latency["recompute_offload"] = latency["recompute"] + latency["store_overhead"]
    for tier, fit in document["tiers"].items():
        assert abs(fit["intercept_ms"] / latency[tier] - 1) <= spec["jitter"], tier
    summary = json.loads((RESULTS / "measured.json").read_text(encoding="utf-8"))
    for row in document["passes"]:
        stats = summary[row["config"]][row["pass"]]
        assert (row["n"], row["measured_p50_ms"], row["measured_mean_ms"]) == (
            stats["n"],
            stats["p50_ms"],
            stats["mean_ms"],
        )
    # baseline / lmcache, the lab's ratio (of the unrounded p50s; the rows' are rounded to 0.1 ms)
    rows = {(row["config"], row["pass"]): row for row in document["passes"]}
    assert [r["pass"] for r in document["offload_ratio"]] == list(spec["passes"])
    for ratio in document["offload_ratio"]:
        baseline, lmcache = rows["baseline", ratio["pass"]], rows["lmcache", ratio["pass"]]
        assert abs(ratio["predicted_p50"] - baseline["predicted_p50_ms"] / lmcache["predicted_p50_ms"]) <= 0.011


def test_committed_measured_offload_ratio_is_the_labs():
    """offload_ratio's measured p50 is 'the lab's ratio' (rounded to 2 decimals 'as summarize.py's ratios')."""
    document = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))
    summary = json.loads((RESULTS / "measured.json").read_text(encoding="utf-8"))
    assert {r["pass"]: r["measured_p50"] for r in document["offload_ratio"]} == {
        name: ratio["p50"] for name, ratio in summary["ratio"].items()
    }


# --------------------------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------------------------


def expected_sweep(tiers_json, docs, tokens, orders, rooms, vary, grid, policy):
    """The sweep's rows as the CSV holds them, from the simulator's tiers at each grid value."""
    passes = [(f"pass{number}", order) for number, order in enumerate(orders, start=1)]
    rows = []
    for value in grid:
        gpu, cpu = (value, rooms["cpu_tokens"]) if vary == "gpu_tokens" else (rooms["gpu_tokens"], value)
        tiers = served([("x", gpu, cpu)], passes, docs, lambda doc: tokens, policy)
        for name, _ in passes:
            mine = [tiers["x", name, doc] for doc in range(docs)]
            times = [tiers_json[t]["intercept_ms"] + tiers_json[t]["ms_per_token"] * tokens for t in mine]
            p50, mean = (statistics.median(times), statistics.mean(times)) if times else (0.0, 0.0)
            rows.append(
                {
                    vary: str(value),
                    "pass": name,
                    **{tier: str(mine.count(tier)) for tier in TIERS},
                    "predicted_p50_ms": str(round(p50, 1)),
                    "predicted_mean_ms": str(round(mean, 1)),
                }
            )
    return rows


@SOME
@given(
    tiers_json=model_tiers(),
    docs=st.integers(0, 7),
    tokens=st.integers(1, 3000),
    orders=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=3),
    policy=st.sampled_from(sorted(CACHES)),
    vary=st.sampled_from(["gpu_tokens", "cpu_tokens"]),
    data=st.data(),
)
def test_sweep_is_the_simulators_tiers_priced(tiers_json, docs, tokens, orders, policy, vary, data):
    room = rooms(docs, tokens)
    fixed = {"gpu_tokens": data.draw(room), "cpu_tokens": data.draw(room)}
    grid = data.draw(st.lists(room, min_size=1, max_size=4, unique=True))
    with tempfile.TemporaryDirectory() as folder:
        model, out = Path(folder) / "model.json", Path(folder) / "sweep.csv"
        model.write_text(json.dumps({"tiers": tiers_json}), encoding="utf-8")
        call_ok(
            *["sweep", "--model", model, "--docs", docs, "--tokens", tokens, "--passes", ",".join(orders)],
            *["--gpu-tokens", fixed["gpu_tokens"], "--cpu-tokens", fixed["cpu_tokens"], "--write-policy", policy],
            *["--vary", vary, "--grid", ",".join(map(str, grid)), "--out", out],
        )
        assert header(out) == [vary, "pass", *TIERS, "predicted_p50_ms", "predicted_mean_ms"]
        assert read_csv(out) == expected_sweep(tiers_json, docs, tokens, orders, fixed, vary, grid, policy)


@pytest.mark.parametrize(
    ("policy", "loads"),
    [("write-through", [0, 0, 1, 2]), ("write-back", [0, 1, 2, 2]), ("selective", [0, 0, 0, 0])],
)
def test_sweep_follows_the_write_policy(tmp_path, policy, loads):
    """Three documents of 100 tokens, GPU room 100, passes fwd,rev, CPU rooms 0..300: after pass 1 write-through's CPU
    keeps the last documents computed (2, 1, 0), write-back's those the GPU evicted (1, 0), selective's nothing (no
    document computed twice yet); so pass 2 (doc 2 a GPU hit, then docs 1, 0) loads this many from the CPU."""
    out = tmp_path / "sweep.csv"
    call_ok(
        *["sweep", "--model", COMMITTED / "model.json", "--docs", 3, "--tokens", 100, "--passes", "fwd,rev"],
        *["--gpu-tokens", 100, "--write-policy", policy, "--vary", "cpu_tokens", "--grid", "0,100,200,300"],
        *["--out", out],
    )
    rows = read_csv(out)
    assert [int(row["cpu_load"]) for row in rows if row["pass"] == "pass2"] == loads
    tiers_json = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))["tiers"]
    rooms = {"gpu_tokens": 100}
    assert rows == expected_sweep(tiers_json, 3, 100, ["fwd", "rev"], rooms, "cpu_tokens", [0, 100, 200, 300], policy)


@pytest.mark.parametrize("sweep", load_config()["ttft"]["sweeps"])
def test_committed_sweeps(tmp_path, sweep):
    """Reproduced byte for byte by the pipeline's command line, and equal to the simulator's tiers priced by the
    committed model."""
    config = load_config()
    out = pipeline_sweep(tmp_path, sweep)
    assert out.read_bytes() == (COMMITTED / f"sweep-{sweep}.csv").read_bytes()
    spec = config["sweeps"][sweep]
    lab = {**config["scenario"], **spec["fixed"]}
    rooms = {"gpu_tokens": lab.get("gpu", 21520), "cpu_tokens": lab.get("cpu", 0)}  # the lab's spelling in sweeps
    tiers_json = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))["tiers"]
    expected = expected_sweep(
        tiers_json,
        lab["docs"],
        lab["tokens"],
        spec["passes"],
        rooms,
        f"{spec['vary']}_tokens",
        spec["grid"],
        lab.get("write_policy", "write-through"),
    )
    assert read_csv(COMMITTED / f"sweep-{sweep}.csv") == expected


def test_committed_gpu_cliff_matches_the_labs_hits():
    """results/cliff.json: pass-2 hits at each GPU room. The sweep's pass 2 hits as often, and its p50 is the GPU-hit
    time exactly where all 10 hit (the recompute time where none does)."""
    hits = json.loads((RESULTS / "cliff.json").read_text(encoding="utf-8"))
    tiers_json = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))["tiers"]
    rows = {row["gpu_tokens"]: row for row in read_csv(COMMITTED / "sweep-cliff.csv") if row["pass"] == "pass2"}
    assert list(rows) == list(hits)
    assert set(hits.values()) == {0, 10}  # the cliff: nothing, then everything
    for room, count in hits.items():
        assert int(rows[room]["gpu_hit"]) == count
        tier = "gpu_hit" if count == 10 else "recompute"
        assert float(rows[room]["predicted_p50_ms"]) == round(tiers_json[tier]["intercept_ms"], 1)


def test_committed_cpu_cliff_matches_the_labs_misses():
    """results/cpu_cliff.json: pass-2 misses at each CPU room. The sweep's pass 2 recomputes as often (without a CPU
    tier at room 0, storing to it otherwise), and its p50 is the CPU-load time exactly where none misses."""
    misses = json.loads((RESULTS / "cpu_cliff.json").read_text(encoding="utf-8"))
    tiers_json = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))["tiers"]
    rows = {row["cpu_tokens"]: row for row in read_csv(COMMITTED / "sweep-cpu_cliff.csv") if row["pass"] == "pass2"}
    assert list(rows) == list(misses)
    assert set(misses.values()) == {0, 10}
    for room, count in misses.items():
        recompute = "recompute" if room == "0" else "recompute_offload"
        assert (int(rows[room][recompute]), int(rows[room]["recompute"]) + int(rows[room]["recompute_offload"])) == (
            count,
            count,
        )
        tier = "cpu_load" if count == 0 else recompute
        assert int(rows[room]["cpu_load"]) == 10 - count
        assert float(rows[room]["predicted_p50_ms"]) == round(tiers_json[tier]["intercept_ms"], 1)


# --------------------------------------------------------------------------------------------
# budgets
# --------------------------------------------------------------------------------------------


def replay_run(argv, folder):
    """`kvlab replay`'s report and per-request rows for ``argv``."""
    per_request = folder / "per_request.csv"
    done = kvlab("replay", *argv, "--per-request", per_request)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return json.loads(done.stdout), read_csv(per_request)


def test_committed_budgets(tmp_path):
    """Reproduced byte for byte by the pipeline's command line; each row's token hit ratio is `kvlab replay`'s at that
    CPU room, its p50, p99 and mean those of the token-weighted mix of each request `kvlab replay` reports; at 0 GiB
    there is no CPU tier (a recompute does not pay the store). The plan's setting is the fit's: no outside_fit."""
    out = pipeline_budgets(tmp_path)
    committed = COMMITTED / "budgets-lab.csv"
    assert out.read_bytes() == committed.read_bytes()
    assert header(committed) == BUDGETS_COLUMNS
    config = load_config()
    args = ttft_cli.build_parser("kvlab ttft").parse_args(
        [
            "budgets",
            "--model",
            "m",
            *shlex.split(commands.job_args(config, "ttft_budgets", plan=config["ttft"]["budgets"]["plan"])),
            "--out",
            "o",
        ]
    )
    tiers_json = json.loads((COMMITTED / "model.json").read_text(encoding="utf-8"))["tiers"]
    rows = read_csv(committed)
    grid = config["ttft"]["budgets"]["cpu_gib"]
    rounds = ["all", *(f"pass{n}" for n in range(1, len(args.passes.split(",")) + 1))]
    assert [(row["cpu_gib"], row["round"]) for row in rows] == [(str(float(gb)), r) for gb in grid for r in rounds]
    for gb in grid:
        cpu_tokens = cpu_tokens_of(str(gb))
        report, requests = replay_run(
            [
                *["--workload", "lab", "--docs", args.docs, "--tokens", args.tokens, "--passes", args.passes],
                *["--gpu-tokens", args.gpu_tokens, "--cpu-tokens", cpu_tokens, "--block-tokens", args.chunk_tokens],
                *["--write-policy", args.write_policy, "--partial-blocks", args.partial_blocks],
                *["--eviction-order", args.eviction_order],
            ],
            tmp_path,
        )
        mine = [row for row in rows if row["cpu_gib"] == str(float(gb))]
        figures = [report, *report["rounds"]]
        for row, name, figure in zip(mine, rounds, figures, strict=True):
            assert int(row["cpu_tokens"]) == cpu_tokens
            assert float(row["token_hit_ratio"]) == figure["token_hit_ratio"]
            times = [
                exact_mix(
                    tiers_json,
                    int(r["input_tokens"]),
                    int(r["gpu_hit_tokens"]),
                    int(r["cpu_hit_tokens"]),
                    cpu_tokens > 0,
                )
                for r in requests
                if name == "all" or r["round"] == name
            ]
            assert near(float(row["predicted_p50_ms"]), statistics.median(times)), (gb, name)
            assert near(float(row["predicted_p99_ms"]), p99(times)), (gb, name)
            assert near(float(row["predicted_mean_ms"]), statistics.mean(times)), (gb, name)
    recompute = round(tiers_json["recompute"]["intercept_ms"], 1)
    no_cpu = [row for row in rows if float(row["cpu_gib"]) == 0 and row["round"] == "pass1"]
    assert [(row["cpu_tokens"], float(row["predicted_p50_ms"])) for row in no_cpu] == [("0", recompute)]
    with_cpu = [row for row in rows if float(row["cpu_gib"]) > 0 and row["round"] == "pass1"]
    offload = round(tiers_json["recompute_offload"]["intercept_ms"], 1)
    assert {float(row["predicted_p50_ms"]) for row in with_cpu} == {offload} != {recompute}


@SOME
@given(
    tiers_json=model_tiers(),
    docs=st.integers(1, 5),
    tokens=st.integers(1, 2000),
    orders=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=3),
    chunk=st.integers(1, 600),
    policy=st.sampled_from(["write-through", "write-back", "selective"]),
    partial=st.sampled_from(["drop", "keep"]),
    eviction_order=st.sampled_from(["tail-first", "head-first"]),
    data=st.data(),
)
def test_budgets_price_each_requests_mix(
    tiers_json, docs, tokens, orders, chunk, policy, partial, eviction_order, data
):
    """Per budget: GiB to tokens with the model's bytes per token, a block-level replay, and each request priced as
    the token-weighted mix of the tiers' times (recompute, not recompute_offload, when the budget holds no token).
    The model was fitted to this model (--model-config) on prompts of these lengths: it prices them, unlabelled."""
    gpu = data.draw(st.integers(0, (docs + 1) * tokens))
    grid = [f"{k / 10000:.4f}" for k in data.draw(st.lists(st.integers(0, 5000), min_size=1, max_size=3, unique=True))]
    fitted_in = {"model": model_identity(QWEN_1_5B), "measured_on": None, "synthetic": False, "tokens": [tokens] * 2}
    with tempfile.TemporaryDirectory() as folder:
        model, out = Path(folder) / "model.json", Path(folder) / "budgets.csv"
        model.write_text(json.dumps({"tiers": tiers_json, "fitted_in": fitted_in}), encoding="utf-8")
        call_ok(
            *["budgets", "--model", model, "--workload", "lab", "--docs", docs, "--tokens", tokens],
            *["--passes", ",".join(orders), "--model-config", QWEN_1_5B, "--chunk-tokens", chunk],
            *["--gpu-tokens", gpu, "--write-policy", policy, "--partial-blocks", partial],
            *["--eviction-order", eviction_order, "--cpu-gib-grid", ",".join(grid), "--out", out],
        )
        assert header(out) == BUDGETS_COLUMNS
        rows = read_csv(out)
    rounds = ["all", *(f"pass{n}" for n in range(1, len(orders) + 1))]
    assert [(row["cpu_gib"], row["round"]) for row in rows] == [(str(float(gb)), r) for gb in grid for r in rounds]
    workload = make_workload(lab_args(docs, tokens, orders), chunk)
    for index, gb in enumerate(grid):
        cpu_tokens = cpu_tokens_of(gb)
        parts = []
        cache = make_cache(policy, gpu, cpu_tokens, chunk, partial_blocks=partial, eviction_order=eviction_order)
        replay(workload, cache, parts)
        requests = list(rows_of(parts))
        mine = rows[index * len(rounds) : (index + 1) * len(rounds)]
        for row, name in zip(mine, rounds, strict=True):
            picked = [r for r in requests if name == "all" or rounds[r[0] + 1] == name]
            inputs = sum(r[3] for r in picked)
            hits = sum(r[4] + r[5] for r in picked)
            assert int(row["cpu_tokens"]) == cpu_tokens
            assert float(row["token_hit_ratio"]) == round(hits / inputs, 6)
            times = [exact_mix(tiers_json, r[3], r[4], r[5], cpu_tokens > 0) for r in picked]
            assert near(float(row["predicted_p50_ms"]), statistics.median(times)), (gb, name)
            assert near(float(row["predicted_p99_ms"]), p99(times)), (gb, name)
            assert near(float(row["predicted_mean_ms"]), statistics.mean(times)), (gb, name)


def lab_args(docs, tokens, orders):
    """The parsed arguments make_workload reads, for the lab source."""
    return replay_cli.build_parser("kvlab replay").parse_args(
        ["--workload", "lab", "--gpu-tokens", "0", "--docs", str(docs), "--tokens", str(tokens)]
        + ["--passes", ",".join(orders)]
    )


# --------------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------------


def test_two_runs_are_byte_identical(tmp_path):
    """In this process and in processes of their own (other hash seeds): the same bytes."""
    outputs = []
    for name, process in (("a", False), ("b", True)):
        folder = tmp_path / name
        folder.mkdir()
        model, table = pipeline_fit(folder, process)
        files = [
            model,
            table,
            pipeline_sweep(folder, "cliff", model, process),
            pipeline_budgets(folder, model, process),
        ]
        outputs.append([path.read_bytes() for path in files])
    assert outputs[0] == outputs[1]


# --------------------------------------------------------------------------------------------
# Bad input: one line on stderr, a nonzero exit, no output written or clobbered
# --------------------------------------------------------------------------------------------

SMALL_CONFIGS = [("baseline", 200, 0), ("lmcache", 200, 300)]
SMALL_PASSES = [("p1", "fwd"), ("p2", "rev")]
SENTINEL = "an earlier output\n"


def good_record(**changes):
    return {"config": "lmcache", "pass": "p2", "doc": 1, "doc_tokens": 100, "ttft_ms": 5.0, "total_ms": 9.0} | changes


def small_measurement():
    latency = {"gpu_hit": 1.0, "cpu_load": 2.0, "recompute": 30.0, "store_overhead": 3.0, "decode": 10.0}
    return example_measurement.generate(SMALL_CONFIGS, SMALL_PASSES, 3, 100, latency, 0.05, 1)


def fails_with_one_line(status, err, prefix, fragment, code=1):
    assert status == code
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(prefix), err
    assert fragment in err, err


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"config": "baseline", "pass": ', "malformed JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"config": "baseline", "pass": "p1", "doc": 0}), "missing field(s): doc_tokens, ttft_ms, total_ms"),
        (json.dumps(good_record(ttft_ms=-1.0)), "ttft_ms must be a finite number >= 0"),
        (json.dumps(good_record(config="other")), "config 'other' is not in the setting (baseline, lmcache)"),
        (json.dumps(good_record(**{"pass": "p9"})), "pass 'p9' is not in the setting (p1, p2)"),
        (json.dumps(good_record(doc=3)), "doc must be a document number 0..2, got 3"),
        (json.dumps(good_record(doc=-1)), "doc must be a document number 0..2, got -1"),
        (json.dumps(good_record(doc="1")), "doc must be a document number 0..2, got '1'"),
        (json.dumps(good_record(doc=1.0)), "doc must be a document number 0..2, got 1.0"),
        (json.dumps(good_record(doc=True)), "doc must be a document number 0..2, got True"),
        (json.dumps(good_record(doc_tokens=0)), f"doc_tokens must be a whole number from 1 to {2**53}, got 0"),
        (json.dumps(good_record(doc_tokens="100")), f"doc_tokens must be a whole number from 1 to {2**53}, got '100'"),
        (json.dumps(good_record(doc_tokens=100.5)), f"doc_tokens must be a whole number from 1 to {2**53}, got 100.5"),
        (json.dumps(good_record(doc_tokens=True)), f"doc_tokens must be a whole number from 1 to {2**53}, got True"),
        (json.dumps(good_record(doc_tokens=None)), f"doc_tokens must be a whole number from 1 to {2**53}, got None"),
        (json.dumps(good_record(config="baseline", **{"pass": "p1"}, doc=0)), "'baseline' pass 'p1' reads doc 0 twice"),
        (json.dumps(good_record(doc_tokens=2**53 + 1)), f"doc_tokens must be a whole number from 1 to {2**53}, got"),
        ('{"config": "lmcache", "pass": "p2", "doc": 1, "doc_tokens": 100, "ttft_ms": NaN, "total_ms": 9.0}', "NaN"),
    ],
)
def test_fit_bad_measurement_line(tmp_path, line, fragment):
    """The bad line is line 4 (after three good ones, one of them baseline p1 doc 0): named as file:4."""
    records = small_measurement()
    lines = [json.dumps(record) for record in records]
    lines.insert(3, line)
    measurement = tmp_path / "m.jsonl"
    measurement.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model, table = tmp_path / "model.json", tmp_path / "table.csv"
    model.write_text(SENTINEL, encoding="utf-8")
    status, err = call(*fit_argv(measurement, 3, 100, SMALL_CONFIGS, SMALL_PASSES, model, table))
    fails_with_one_line(status, err, f"kvlab ttft fit: error: {measurement}:4: ", fragment)
    assert model.read_text(encoding="utf-8") == SENTINEL
    assert not table.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "model.json"]  # no temporary file left


def test_fit_bad_measurement_in_a_real_process(tmp_path):
    """As the pipeline runs it: exit 1, one line naming file:line, nothing on stdout, outputs untouched."""
    measurement = tmp_path / "m.jsonl"
    write_jsonl(measurement, [*small_measurement(), good_record(doc=7)])
    model, table = tmp_path / "model.json", tmp_path / "table.csv"
    model.write_text(SENTINEL, encoding="utf-8")
    table.write_text(SENTINEL, encoding="utf-8")
    done = run_python("-m", "kvlab", "ttft", *fit_argv(measurement, 3, 100, SMALL_CONFIGS, SMALL_PASSES, model, table))
    fails_with_one_line(done.returncode, done.stderr, f"kvlab ttft fit: error: {measurement}:13: ", "got 7")
    assert done.stdout == ""
    assert model.read_text(encoding="utf-8") == table.read_text(encoding="utf-8") == SENTINEL


def test_fit_unreadable_measurement(tmp_path):
    missing = tmp_path / "absent.jsonl"
    status, err = call(*fit_argv(missing, 3, 100, SMALL_CONFIGS, SMALL_PASSES, tmp_path / "m.json", tmp_path / "t.csv"))
    fails_with_one_line(status, err, f"kvlab ttft fit: error: {missing}: cannot read", "No such file")
    assert list(tmp_path.iterdir()) == []


def test_fit_unwritable_table_leaves_the_model(tmp_path):
    measurement = tmp_path / "m.jsonl"
    write_jsonl(measurement, small_measurement())
    model = tmp_path / "model.json"
    model.write_text(SENTINEL, encoding="utf-8")
    table = tmp_path / "absent" / "t.csv"
    status, err = call(*fit_argv(measurement, 3, 100, SMALL_CONFIGS, SMALL_PASSES, model, table))
    fails_with_one_line(status, err, f"kvlab ttft fit: error: {table}: cannot write", "No such file")
    assert model.read_text(encoding="utf-8") == SENTINEL


@pytest.mark.parametrize(
    ("argv", "prefix", "fragment"),
    [
        ([], "kvlab ttft: error: ", "command"),
        (["estimate"], "kvlab ttft: error: ", "invalid choice"),
        (["predict"], "kvlab ttft predict: error: ", "the following arguments are required: "),
        (["breakeven", "--prefix-tokens", "0"], "kvlab ttft breakeven: error: ", "expected a whole number >= 1"),
        (["systems", "--engine", "vllm"], "kvlab ttft systems: error: ", "unrecognized arguments: --engine"),
        (["fit", "--config", "baseline:21520"], "kvlab ttft fit: error: ", "expected NAME:GPU_TOKENS,CPU_TOKENS"),
        (["fit", "--pass", "p1:sideways"], "kvlab ttft fit: error: ", "expected NAME:fwd or NAME:rev"),
        (["sweep", "--grid", "1,1"], "kvlab ttft sweep: error: ", "given twice"),
        (["sweep", "--passes", "fwd,up"], "kvlab ttft sweep: error: ", "argument --passes"),
        (["budgets", "--cpu-gib-grid", "-1"], "kvlab ttft budgets: error: ", "expected a number of GiB >= 0"),
    ],
)
def test_bad_arguments(argv, prefix, fragment):
    status, err = call(*argv)
    fails_with_one_line(status, err, prefix, fragment, code=2)


def test_an_unknown_subcommand_names_every_one():
    """predict, breakeven and systems (TTFT from the hardware) are subcommands beside fit, sweep and budgets."""
    (listed,) = re.findall(r"\{([\w,]+)\}", ttft_cli.build_parser("kvlab ttft").format_usage())
    subcommands = listed.split(",")
    assert {"predict", "breakeven", "systems", "fit", "sweep", "budgets"} == set(subcommands)
    status, err = call("estimate")
    choices = ", ".join(map(repr, subcommands))
    fails_with_one_line(status, err, "kvlab ttft: error: ", f"invalid choice: 'estimate' (choose from {choices})", 2)


def sweep_argv(model):
    return ["sweep", "--model", model, "--docs", 3, "--tokens", 100, "--passes", "fwd,fwd", "--cpu-tokens", 0]


def budgets_argv(model, grid="0,0.5", tokens=100, model_config=QWEN_1_5B):
    """Budgets of the lab's three documents of ``tokens`` (by default small_measurement's: a model fitted to it
    prices them)."""
    return [
        *["budgets", "--model", model, "--workload", "lab", "--docs", 3, "--tokens", tokens, "--passes", "fwd,fwd"],
        *["--model-config", model_config, "--gpu-tokens", 1024, "--cpu-gib-grid", grid],
    ]


COMMANDS = {
    "sweep": lambda model, out: [*sweep_argv(model), "--vary", "gpu_tokens", "--grid", "0,300", "--out", out],
    "budgets": lambda model, out: [*budgets_argv(model), "--out", out],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "cannot read: No such file or directory"),
        ("not json", "malformed JSON"),
        ('{"tiers": NaN}', "malformed JSON (NaN"),
        (
            '{"tiers": {"recompute": {"n": 1, "intercept_ms": 1e999}}}',
            "malformed JSON ('1e999' is beyond the float range",
        ),
        ("[1]", "not a model written by `kvlab ttft fit`"),
        ('{"setting": {}}', "not a model written by `kvlab ttft fit`"),
        ('{"tiers": {"recompute": {"n": 3}}}', "not a model written by `kvlab ttft fit`"),
        ('{"tiers": {"recompute": 5}}', "not a model written by `kvlab ttft fit`"),
        pytest.param(
            '{"tiers": []}',
            "not a model written by `kvlab ttft fit`",
            id="tiers-a-list",
        ),
        pytest.param(
            '{"tiers": null}',
            "not a model written by `kvlab ttft fit`",
            id="tiers-null",
        ),
        pytest.param(
            json.dumps(
                {
                    "tiers": {
                        tier: {
                            "n": 1,
                            "intercept_ms": "ten",
                            "ms_per_token": 0.0,
                            "residual_median_abs_ms": 0.0,
                            "residual_max_abs_ms": 0.0,
                        }
                        for tier in TIERS
                    }
                }
            ),
            "not a model written by `kvlab ttft fit`",
            id="intercept-not-a-number",
        ),
    ],
)
def test_bad_model_file(tmp_path, command, content, fragment):
    model, out = tmp_path / "model.json", tmp_path / "out.csv"
    if content is not None:
        model.write_text(content, encoding="utf-8")
    out.write_text(SENTINEL, encoding="utf-8")
    try:
        status, err = call(*COMMANDS[command](model, out))
    except Exception as error:  # an uncaught error is a traceback, not one line
        pytest.fail(f"uncaught {type(error).__name__}: {error}")
    fails_with_one_line(status, err, f"kvlab ttft {command}: error: {model}: ", fragment)
    assert out.read_text(encoding="utf-8") == SENTINEL


@pytest.mark.parametrize(
    "argv",
    [
        lambda m, model, out: fit_argv(m, 3, 100, SMALL_CONFIGS, SMALL_PASSES, m, out),  # the model over the input
        lambda m, model, out: fit_argv(m, 3, 100, SMALL_CONFIGS, SMALL_PASSES, out, m),  # the table over the input
        lambda m, model, out: fit_argv(m, 3, 100, SMALL_CONFIGS, SMALL_PASSES, out, out),  # two outputs in one
        lambda m, model, out: [*sweep_argv(model), "--vary", "gpu_tokens", "--grid", "0,300", "--out", model],
        lambda m, model, out: [*budgets_argv(model), "--out", model],
        lambda m, model, out: [*budgets_argv(model), "--out", QWEN_1_5B],  # the model config is an input too
    ],
    ids=["fit-model", "fit-table", "fit-both", "sweep", "budgets", "budgets-model-config"],
)
def test_an_output_over_an_input_is_refused(tmp_path, argv):
    """A usage error (exit 2, one line) before anything is read or written: no input is clobbered."""
    measurement, model, out = tmp_path / "m.jsonl", tmp_path / "model.json", tmp_path / "out.csv"
    write_jsonl(measurement, small_measurement())
    model.write_text((COMMITTED / "model.json").read_text(encoding="utf-8"), encoding="utf-8")
    before = {path: path.read_bytes() for path in (measurement, model, QWEN_1_5B)}
    status, err = call(*argv(measurement, model, out))
    assert status == 2 and err.count("\n") == 1 and err.startswith("kvlab ttft "), err
    assert " is both an input and an output" in err or " is named as two outputs" in err, err
    assert {path: path.read_bytes() for path in before} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.jsonl", "model.json"]


def test_model_without_a_needed_tier(tmp_path):
    """A model fitted without a CPU tier cannot price a setting with one: the error (exit 1) names the tier, the
    tiers the model has, and what to do (measure a setting that serves it, or price from the hardware), not "to
    fit"; the output of a grid whose first value it could price is not written either."""
    measurement = tmp_path / "m.jsonl"
    write_jsonl(measurement, [r for r in small_measurement() if r["config"] == "baseline"])
    model, out = tmp_path / "model.json", tmp_path / "out.csv"
    recorded = ("--model-config", QWEN_1_5B)  # budgets price the model the fit names only
    call_ok(*fit_argv(measurement, 3, 100, SMALL_CONFIGS[:1], SMALL_PASSES, model, tmp_path / "t.csv", *recorded))
    fitted = list(json.loads(model.read_text(encoding="utf-8"))["tiers"])
    assert set(fitted) == {"gpu_hit", "recompute"}
    status, err = call(*sweep_argv(model), "--vary", "cpu_tokens", "--grid", "0,300", "--out", out)
    fails_with_one_line(status, err, "kvlab ttft sweep: error: ", "no recompute_offload request")
    swept = err
    status, err = call(*budgets_argv(model, "0,0.5"), "--out", out)
    fails_with_one_line(status, err, "kvlab ttft budgets: error: ", "no recompute_offload request")
    for message in (swept, err):
        assert "this model has no recompute_offload time" in message, message
        assert "its measurement had no recompute_offload request" in message, message
        assert f"(it has {', '.join(fitted)})" in message, message
        assert "measure a setting that serves some" in message, message
        assert "--gpu-system" in message and "kvlab ttft predict" in message, message
        assert "to fit" not in message, message
    assert not out.exists()
    call_ok(*sweep_argv(model), "--vary", "cpu_tokens", "--grid", "0", "--out", out)  # no CPU tier: priceable
    assert [(row["recompute"], row["gpu_hit"]) for row in read_csv(out)] == [("3", "0"), ("0", "3")]


def test_budgets_bad_setting(tmp_path):
    """A setting of another workload source, an unreadable model config: one line, output untouched."""
    model = COMMITTED / "model.json"
    out = tmp_path / "out.csv"
    out.write_text(SENTINEL, encoding="utf-8")
    status, err = call(*budgets_argv(model), "--num-documents", 4, "--out", out)
    fails_with_one_line(status, err, "kvlab ttft budgets: error: ", "--num-documents is a setting of", code=2)
    argv = budgets_argv(model)
    argv[argv.index(QWEN_1_5B)] = tmp_path / "absent.json"
    status, err = call(*argv, "--out", out)
    fails_with_one_line(status, err, "kvlab ttft budgets: error: ", "absent.json")
    assert out.read_text(encoding="utf-8") == SENTINEL


# --------------------------------------------------------------------------------------------
# budgets --model: a fitted model prices the setting it was fitted in only (issue 24)
# --------------------------------------------------------------------------------------------

SMALL_READS = 3 * 2  # budgets_argv's requests: its three documents read by its two passes


def fitted(folder, *recorded, name="model.json"):
    """A model fitted to small_measurement with these record flags (--model-config, --synthetic, ...): its path
    and its document."""
    measurement = folder / "m.jsonl"
    write_jsonl(measurement, small_measurement())
    model = folder / name
    call_ok(*fit_argv(measurement, 3, 100, SMALL_CONFIGS, SMALL_PASSES, model, folder / f"{name}.csv", *recorded))
    return model, json.loads(model.read_text(encoding="utf-8"))


def refused(argv, out, *fragments):
    """budgets refuses (exit 2, one line with every fragment) and leaves its output as it was."""
    out.write_text(SENTINEL, encoding="utf-8")
    status, err = call(*argv, "--out", out)
    fails_with_one_line(status, err, "kvlab ttft budgets: error: ", fragments[0], code=2)
    for fragment in fragments[1:]:
        assert fragment in err, err
    assert out.read_text(encoding="utf-8") == SENTINEL
    return err


def test_fit_records_where_it_was_measured(tmp_path):
    """fitted_in: the model's identity (kvlab/latency/ttft.py model_identity), the note, synthetic, the prompts'
    range; the last key of the document."""
    _, document = fitted(tmp_path, "--model-config", QWEN_1_5B, "--measured-on", "a VM, no GPU", "--synthetic")
    assert list(document)[-1] == "fitted_in"
    assert document["fitted_in"] == expected_fitted_in(small_measurement(), QWEN_1_5B, "a VM, no GPU", True)
    assert document["fitted_in"]["model"]["name"] == QWEN_1_5B.parent.name


def test_budgets_refuse_a_model_fitted_without_its_model_config(tmp_path):
    model, _ = fitted(tmp_path)
    err = refused(budgets_argv(model), tmp_path / "out.csv", "it was fitted without --model-config")
    assert "--gpu-system" in err and "--allow-other-setting prices anyway" in err, err


def test_budgets_refuse_a_model_fitted_to_another_model(tmp_path):
    """By identity: another model is refused, naming both; the same config.json under another name is the same
    model."""
    model, document = fitted(tmp_path, "--model-config", TINY)
    theirs, mine = document["fitted_in"]["model"]["name"], model_identity(QWEN_1_5B)["name"]
    assert (theirs, mine) == (TINY.parent.name, QWEN_1_5B.parent.name)
    refused(budgets_argv(model), tmp_path / "out.csv", f"it was fitted to {theirs}, not {mine}")
    renamed = tmp_path / "renamed" / "config.json"
    renamed.parent.mkdir()
    renamed.write_bytes(TINY.read_bytes())
    call_ok(*budgets_argv(model, model_config=renamed), "--out", tmp_path / "out.csv")


@pytest.mark.parametrize("tokens", [99, 101, 5011])
def test_budgets_refuse_prompts_outside_the_fitted_range(tmp_path, tokens):
    model, document = fitted(tmp_path, "--model-config", QWEN_1_5B)
    low, high = document["fitted_in"]["tokens"]
    assert not low <= tokens <= high
    text = f"{SMALL_READS} requests are outside the {low}..{high} prompt tokens it was fitted on"
    refused(budgets_argv(model, tokens=tokens), tmp_path / "out.csv", text)
    call_ok(*budgets_argv(model, tokens=low), "--out", tmp_path / "out.csv")  # inside: priced


@pytest.mark.parametrize("setting", ["tokens", "model"])
def test_a_synthetic_fit_is_refused_even_with_allow_other_setting(tmp_path, setting):
    """A fit to a generated measurement prices its own setting only: --allow-other-setting does not open it."""
    model, document = fitted(tmp_path, "--model-config", QWEN_1_5B, "--synthetic")
    assert document["fitted_in"]["synthetic"] is True
    argv = budgets_argv(model, tokens=200) if setting == "tokens" else budgets_argv(model, model_config=TINY)
    err = refused([*argv, "--allow-other-setting"], tmp_path / "out.csv", "the SYNTHETIC example measurement")
    assert "--allow-other-setting" not in err, err  # not offered where it does not apply
    call_ok(*budgets_argv(model), "--out", tmp_path / "out.csv")  # its own setting: priced


def test_allow_other_setting_prices_anyway_and_labels_every_row(tmp_path):
    """A real (not synthetic) fit to another model on other prompt lengths: priced with --allow-other-setting, each
    row's outside_fit naming both differences; the figures are those of the same fit made in this setting."""
    model, document = fitted(tmp_path, "--model-config", TINY)
    low, high = document["fitted_in"]["tokens"]
    allowed = tmp_path / "allowed.csv"
    call_ok(*budgets_argv(model, tokens=200), "--allow-other-setting", "--out", allowed)
    assert header(allowed) == [*BUDGETS_COLUMNS, "outside_fit"]
    rows = read_csv(allowed)
    assert rows
    for row in rows:
        assert row["outside_fit"] == (
            f"it was fitted to {TINY.parent.name}, not {QWEN_1_5B.parent.name}; {SMALL_READS} requests are"
            f" outside the {low}..{high} prompt tokens it was fitted on"
        )
    inside = tmp_path / "inside.json"  # the same tiers, as if fitted in this setting
    document["fitted_in"] |= {"model": model_identity(QWEN_1_5B), "tokens": [200, 200]}
    inside.write_text(json.dumps(document), encoding="utf-8")
    plain = tmp_path / "plain.csv"
    call_ok(*budgets_argv(inside, tokens=200), "--out", plain)
    assert header(plain) == BUDGETS_COLUMNS
    assert [{key: row[key] for key in BUDGETS_COLUMNS} for row in rows] == read_csv(plain)


def test_allow_other_setting_names_an_unknown_model(tmp_path):
    model, _ = fitted(tmp_path)
    out = tmp_path / "out.csv"
    call_ok(*budgets_argv(model), "--allow-other-setting", "--out", out)
    unknown = "it was fitted without --model-config (its model is unknown)"
    assert {row["outside_fit"] for row in read_csv(out)} == {unknown}


def test_budgets_take_exactly_one_of_model_and_gpu_system(tmp_path):
    model, _ = fitted(tmp_path, "--model-config", QWEN_1_5B)
    out = tmp_path / "out.csv"
    one = "give one of --model (a fitted model) and --gpu-system (priced from the hardware)"
    refused([*budgets_argv(model), "--gpu-system", "h100_sxm", "--engine", "vllm"], out, one)
    neither = budgets_argv(model)
    del neither[1:3]  # --model MODEL
    assert "--model" not in neither
    refused(neither, out, one)
    refused([*neither, "--gpu-system", "h100_sxm", "--allow-other-setting"], out, "--allow-other-setting applies to")


def test_budgets_from_the_hardware_name_their_latency_source(tmp_path):
    """--gpu-system prices each request from the hardware (no fit): a latency_source column, the hardware model's."""
    from kvlab.latency.hardware import HardwareModel, HardwareSettings

    argv = budgets_argv(None)
    del argv[1:3]
    out = tmp_path / "out.csv"
    call_ok(*argv, "--gpu-system", "h100_sxm", "--engine", "vllm", "--out", out)
    assert header(out) == [*BUDGETS_COLUMNS, "latency_source"]
    chunk = ttft_cli.build_parser("kvlab ttft").parse_args([*map(str, argv), "--out", "o"]).chunk_tokens
    hardware = HardwareSettings(model_config=str(QWEN_1_5B), gpu_system="h100_sxm", engine="vllm")
    assert {row["latency_source"] for row in read_csv(out)} == {HardwareModel(hardware, chunk).source}


def test_a_calibration_is_not_a_per_tier_model(tmp_path):
    """`ttft fit --gpu-system` writes the hardware model's factors: budgets --model (and sweep) refuse it, exit 2."""
    model, document = fitted(tmp_path, "--model-config", QWEN_1_5B, "--gpu-system", "h100_sxm")
    assert "calibration" in document and "tiers" not in document
    text = "a hardware calibration (kvlab ttft fit --gpu-system), not a per-tier model"
    refused(budgets_argv(model), tmp_path / "out.csv", text)
    status, err = call(*sweep_argv(model), "--vary", "gpu_tokens", "--grid", "0", "--out", tmp_path / "s.csv")
    fails_with_one_line(status, err, "kvlab ttft sweep: error: ", text, code=2)
