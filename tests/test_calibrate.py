"""kvlab/latency/calibrate.py: the hardware model's factors fitted to measured TTFTs. It recovers the factors a
measurement was generated with (from other start values); leaves a factor no sample can tell at its start and
says so; refuses the database; and on the committed real llama.cpp measurement (this machine's CPU as the
system) predicts the held-out documents' per-(config, pass) p50 within 10%."""

import json
import math
import statistics

import pytest
import yaml
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.latency.calibrate import (
    Sample,
    calibrate,
    calibrate_measurement,
    held_out_report,
    measurement_samples,
    samples_from_tiers,
)
from kvlab.latency.hardware import HardwareModel, HardwareSettings
from kvlab.latency.shape import read_compute_shape
from kvlab.latency.systems import read_system
from kvlab.sizing.model_size import read_model_config
from kvlab.util.errors import KvlabError, SettingError

LLAMA_8B = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"
TINY = ROOT / "models" / "tiny-llama-cpp" / "config.json"
CI_SYSTEM = ROOT / "data" / "systems" / "ci-2vcpu.yaml"
REAL = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))["real_measurement"]
BLOCK = 256  # LMCache's chunk: a load is a few copies, its time the bytes over the link

# Requests of Llama-3.1-8B on an H100 whose computed part is either one token (a whole hit or load: memory-bound
# at any efficiency) or 2,048 tokens or more (compute-bound at any efficiency from 0.05 to 1), so that each sample
# stays on one side of the roofline's max() whatever the factors: recomputes, GPU hits, CPU loads and mixes.
SPLITS = [
    (length, gpu, cpu)
    for length in (2048, 4096, 8192)
    for gpu, cpu in ((0, 0), (length, 0), (0, length), (length // 2, length // 2))
] + [(4096, 0, 2048), (8192, 2048, 2048), (6144, 4096, 0)]


def h100(**factors):
    return HardwareSettings(
        model_config=str(LLAMA_8B), gpu_system="h100_sxm", engine="lmcache", latency_source="roofline", **factors
    )


def generated(truth, splits=SPLITS):
    model = HardwareModel(truth, BLOCK)
    return [Sample(*split, model.parts_ms(*split)[2]) for split in splits]


def close(fitted, true):
    return math.isclose(fitted, true, rel_tol=1e-3, abs_tol=1e-3)


efficiencies = st.floats(0.05, 1.0)
links = st.floats(1.0, 100.0)
overheads = st.floats(0.0, 50.0)


@settings(max_examples=15, deadline=None)
@given(efficiencies, links, overheads, efficiencies, links, overheads)
def test_the_factors_a_measurement_was_generated_with_are_recovered(
    efficiency, link, overhead, start_efficiency, start_link, start_overhead
):
    truth = h100(efficiency=efficiency, link_gbps=link, overhead_ms=overhead)
    start = h100(efficiency=start_efficiency, link_gbps=start_link, overhead_ms=start_overhead)
    result = calibrate(generated(truth), start, BLOCK)
    assert result.fitted == ("efficiency", "link_gbps", "overhead_ms") and result.not_identified == ()
    assert close(result.settings.efficiency, efficiency)
    assert close(result.settings.link_gbps, link)
    assert close(result.settings.overhead_ms, overhead)
    assert result.residuals["max_abs_relative"] < 1e-6
    assert result.n == len(SPLITS) and result.converged


def test_the_fit_is_deterministic_and_reports_rounded_factors():
    samples = generated(h100(efficiency=0.42, link_gbps=12.5, overhead_ms=3.0))
    first, second = (calibrate(samples, h100(), BLOCK) for _ in range(2))
    assert first == second
    assert first.start == {"efficiency": 0.6, "link_gbps": 64.0, "overhead_ms": 0.0}  # the settings', PCIe 5.0's
    assert first.factors == {"efficiency": 0.42, "link_gbps": 12.5, "overhead_ms": 3.0}
    assert json.loads(json.dumps(first.describe()))["factors"] == first.factors


def test_a_factor_no_sample_can_tell_is_not_fitted():
    """No request loaded from the CPU: the link stays at its start, listed as not identified."""
    truth = h100(efficiency=0.3, link_gbps=20.0, overhead_ms=5.0)
    no_loads = [split for split in SPLITS if split[2] == 0]
    result = calibrate(generated(truth, no_loads), h100(link_gbps=7.0), BLOCK)
    assert result.not_identified == ("link_gbps",) and result.fitted == ("efficiency", "overhead_ms")
    assert result.settings.link_gbps == 7.0 and result.factors["link_gbps"] == 7.0
    assert close(result.settings.efficiency, 0.3) and close(result.settings.overhead_ms, 5.0)
    # the system's PCIe figure as the start (no --link-gbps): the setting stays "the system's"
    assert calibrate(generated(truth, no_loads), h100(), BLOCK).settings.link_gbps is None


def test_factors_that_move_every_ttft_alike_are_not_both_fitted():
    """One request shape only: the overhead moves its TTFT as the efficiency does; the later is left out."""
    result = calibrate([Sample(4096, 0, 0, 300.0)] * 3, h100(), BLOCK, fit=("efficiency", "overhead_ms"))
    assert result.not_identified == ("overhead_ms",) and result.settings.overhead_ms == 0.0
    assert result.residuals["max_abs_ms"] < 1e-6


def test_the_database_is_refused():
    for source in ("database", "auto"):
        with pytest.raises(SettingError, match="the database's kernels are measured, not factors") as error:
            calibrate([Sample(4096, 0, 0, 300.0)], h100().replace(latency_source=source), BLOCK)
        assert "\n" not in str(error.value)


def test_bad_samples_and_factors_are_refused():
    with pytest.raises(SettingError, match="factors to fit"):
        calibrate([Sample(4096, 0, 0, 300.0)], h100(), BLOCK, fit=("tp",))
    for bad in ([], [(4096, 0, 0, 0.0)], [(4096, 4096, 1, 10.0)], [(4096, 0, 0)]):
        with pytest.raises(KvlabError):
            calibrate(bad, h100(), BLOCK)


def test_the_tiers_token_splits():
    requests = {
        ("c", "p", 0): (100, 1.0),
        ("c", "p", 1): (100, 2.0),
        ("c", "p", 2): (100, 3.0),
        ("c", "q", 0): (50, 4.0),
    }
    served = {("c", "p", 0): "gpu_hit", ("c", "p", 1): "cpu_load", ("c", "p", 2): "recompute"}
    served[("c", "q", 0)] = "recompute_offload"
    assert samples_from_tiers(requests, served) == {
        ("c", "p", 0): ("gpu_hit", Sample(100, 100, 0, 1.0)),
        ("c", "p", 1): ("cpu_load", Sample(100, 0, 100, 2.0)),
        ("c", "p", 2): ("recompute", Sample(100, 0, 0, 3.0)),
        ("c", "q", 0): ("recompute_offload", Sample(50, 0, 0, 4.0)),
    }


def test_held_out_report_compares_p50s():
    truth = h100(efficiency=0.5, link_gbps=30.0, overhead_ms=2.0)
    samples = generated(truth)
    off = [sample._replace(ttft_ms=sample.ttft_ms * 1.1) for sample in samples[:4]]
    report = held_out_report(truth, BLOCK, {("a", "p"): samples, ("b", "p"): off})
    assert [row["p50_error"] for row in report["passes"]] == [0.0, pytest.approx(1 - 1 / 1.1, abs=1e-4)]
    assert report["max_p50_error"] == report["passes"][1]["p50_error"]


# -- the real llama.cpp measurement ------------------------------------------------------------------------------


def test_the_tiny_model_and_the_ci_system_read():
    shape = read_compute_shape(TINY)
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim) == (4, 256, 4, 2, 64)
    assert (shape.intermediate, shape.vocab, shape.tied, shape.gated) == (512, 4388, False, True)
    assert read_model_config(TINY).bytes_per_token() == 2048  # config.yaml's real_measurement: 2,048 bytes of KV
    system = read_system(str(CI_SYSTEM))
    assert (system.bf16_flops, system.pcie_bw, system.gpus_per_node) == (166.1e9, 10e9, 1)


def real_setting():
    configs = {name: (rooms["gpu_tokens"], rooms["cpu_tokens"]) for name, rooms in REAL["configs"].items()}
    passes = list(REAL["passes"].items())
    server = (REAL["server"], REAL["state_extra_tokens"])
    return ROOT / REAL["source"], configs, passes, REAL["docs"], REAL["tokens"], server


def ci_settings():
    return HardwareSettings(model_config=str(TINY), gpu_system=str(CI_SYSTEM), latency_source="roofline")


def test_the_real_measurement_s_held_out_p50s_within_10_percent():
    path, configs, passes, docs, tokens, server = real_setting()
    fit_docs = set(REAL["fit_docs"])
    document = calibrate_measurement(
        path, configs, passes, docs, tokens, ci_settings(), server=server, fit_docs=fit_docs
    )
    calibration = document["calibration"]
    assert calibration["fitted"] == ["efficiency", "link_gbps", "overhead_ms"] and calibration["converged"]
    factors = calibration["factors"]
    assert 0 < factors["efficiency"] <= 1 and factors["link_gbps"] > 0 and factors["overhead_ms"] >= 0
    # the fit's three tiers: a hit is the overhead, a load the overhead and the link, a recompute the prefill
    tiers = document["fitted_tiers"]
    assert set(tiers) == {"gpu_hit", "cpu_load", "recompute"}
    for tier in tiers.values():
        assert tier["predicted_p50_ms"] == pytest.approx(tier["measured_p50_ms"], rel=0.05)
    compared = {(row["config"], row["pass"]): row for row in document["passes"]}
    assert list(compared) == [(config, name) for config in configs for name, _ in passes]
    assert all(row["n"] == docs - len(fit_docs) for row in compared.values())
    assert document["max_p50_error"] == max(row["p50_error"] for row in compared.values())
    assert document["max_p50_error"] <= 0.10, document["passes"]


def test_the_real_measurement_s_samples_follow_the_server_s_tiers():
    path, configs, passes, docs, tokens, server = real_setting()
    samples = measurement_samples(path, configs, passes, docs, tokens, server)
    assert len(samples) == len(configs) * len(passes) * docs
    by_tier = {}
    for tier, sample in samples.values():
        by_tier.setdefault(tier, []).append(sample.ttft_ms)
        assert sample.tokens == tokens
    # a hit (the document still in the context) is the fastest, a restore from RAM next, a recompute the slowest
    medians = {tier: statistics.median(values) for tier, values in by_tier.items()}
    assert medians["gpu_hit"] < medians["cpu_load"] < medians["recompute"] / 10


def test_without_a_fitted_gpu_hit_the_overhead_is_not_told_from_the_link():
    """Fitted on the even documents, which have no GPU hit (the only ones are doc 9's): a load and a recompute
    are two equations for three unknowns, so the overhead stays at its start and is named."""
    path, configs, passes, docs, tokens, server = real_setting()
    even = set(range(0, docs, 2))
    document = calibrate_measurement(path, configs, passes, docs, tokens, ci_settings(), server=server, fit_docs=even)
    assert document["calibration"]["not_identified"] == ["overhead_ms"]
    assert document["calibration"]["factors"]["overhead_ms"] == 0.0
    assert document["setting"]["tiers_not_fitted"] == ["gpu_hit"]
