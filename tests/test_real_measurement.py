"""The committed real measurement (config.yaml's real_measurement: llama-cpp-python on this kind of machine): every
request's TTFT says hit or miss as kvlab's model of the server predicts it, and the out-of-sample fit uses the
fitted documents only and compares on the others."""

import json
import shlex
import statistics

from conftest import ROOT, kvlab, load_config

from kvlab.serving.llama_cpp import LlamaCppServer
from kvlab.summarize import read_records
from kvlab.workflow import commands, paths

REAL = load_config()["real_measurement"]


def records():
    return [record for _, record in read_records(ROOT / REAL["source"])]


def predicted_tiers():
    """``{(config, pass, doc): tier}`` from kvlab's model of the server in the config's rooms."""
    tiers = {}
    for config, rooms in REAL["configs"].items():
        server = LlamaCppServer(rooms["gpu_tokens"], rooms["cpu_tokens"], REAL["tokens"], REAL["state_extra_tokens"])
        for name, order in REAL["passes"].items():
            for doc in range(REAL["docs"]) if order == "fwd" else reversed(range(REAL["docs"])):
                gpu, cpu, _, _ = server.serve([doc], REAL["tokens"])
                tiers[config, name, doc] = "gpu_hit" if gpu else "cpu_load" if cpu else "recompute"
    return tiers


def test_every_measured_request_is_a_hit_exactly_where_the_model_says():
    measured = records()
    tiers = predicted_tiers()
    assert sorted((r["config"], r["pass"], r["doc"]) for r in measured) == sorted(tiers)
    first = next(iter(REAL["passes"]))
    cold = statistics.median(r["ttft_ms"] for r in measured if r["pass"] == first)
    for record in measured:
        hit = tiers[record["config"], record["pass"], record["doc"]] != "recompute"
        assert (record["ttft_ms"] < cold / 2) == hit, record
    assert {"gpu_hit", "cpu_load", "recompute"} <= set(tiers.values())


def test_the_fit_is_out_of_sample(tmp_path):
    model, table = tmp_path / "model.json", tmp_path / "table.csv"
    args = shlex.split(commands.job_args(load_config(), "real_ttft_fit"))
    done = kvlab("ttft", "fit", "--measurement", ROOT / REAL["source"], *args, "--model", model, "--table", table)
    assert done.returncode == 0, done.stderr
    document = json.loads(model.read_text())
    tiers = predicted_tiers()
    fitted = [r for r in records() if r["doc"] in REAL["fit_docs"]]
    for tier, fit in document["tiers"].items():
        times = [r["ttft_ms"] for r in fitted if tiers[r["config"], r["pass"], r["doc"]] == tier]
        assert fit["n"] == len(times) and abs(fit["intercept_ms"] - statistics.median(times)) < 1e-3
    held_out = len(range(REAL["docs"])) - len(REAL["fit_docs"])
    assert [row["n"] for row in document["passes"]] == [held_out] * len(document["passes"])
    assert document["setting"]["fit_docs"] == sorted(REAL["fit_docs"])
    committed = ROOT / paths.REAL_MODEL
    assert json.loads(committed.read_text()) == document  # the pipeline's artifact is this fit


def test_a_tier_no_fitted_document_has_is_fitted_on_the_compared_requests_and_named(tmp_path):
    """With document 1 alone fitted, no fitted request is a context hit (only the last document read twice in a
    row is): that tier is fitted on the compared requests, and the model says so."""
    model, table = tmp_path / "model.json", tmp_path / "table.csv"
    args = shlex.split(
        commands.job_args({**load_config(), "real_measurement": {**REAL, "fit_docs": [1]}}, "real_ttft_fit")
    )
    done = kvlab("ttft", "fit", "--measurement", ROOT / REAL["source"], *args, "--model", model, "--table", table)
    assert done.returncode == 0, done.stderr
    document = json.loads(model.read_text())
    assert document["setting"]["fitted_on_compared_requests"] == ["gpu_hit"]
    assert document["tiers"]["gpu_hit"]["n"] == 2 and document["tiers"]["cpu_load"]["n"] == 2
