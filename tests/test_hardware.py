"""kvlab/latency/hardware.py and what it stands on (database.py, roofline.py, shape.py, transfer.py, systems.py,
pricing.py) and the commands `kvlab ttft predict|breakeven|systems`.

The expectations are built here independently: the measured database's answers from aiconfigurator-core's own
``EngineHandle`` (compiled here, not through kvlab), the roofline's attention sums by brute force, the link's
times from its formula, the per-round medians with ``statistics.median`` from the per-request CSV, the published
figures the issue names (the 8,192-token recompute of Llama-3.1-8B on an H100: 199.7 ms; Mooncake FAST'25 §2.2's
break-even bandwidths: 6 GB/s on 8xA800, 19 GB/s on 8xH800; vllm#33398's 5 GB/s for vLLM's 16-token blocks).
"""

import contextlib
import csv
import io
import json
import math
import statistics
from pathlib import Path

import pytest
from conftest import ROOT, kvlab, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.latency import roofline
from kvlab.latency.database import Database
from kvlab.latency.hardware import HardwareModel, HardwareSettings
from kvlab.latency.shape import read_compute_shape
from kvlab.latency.systems import database_versions, read_system, system_names
from kvlab.latency.transfer import Link
from kvlab.serving import ENGINES as SERVING

MODELS = ROOT / "models"
LLAMA_8B = MODELS / "Llama-3.1-8B-Instruct" / "config.json"
LLAMA_70B = MODELS / "Llama-3.1-70B-Instruct" / "config.json"
QWEN_8B = MODELS / "Qwen3-8B" / "config.json"
GEMMA_2 = MODELS / "gemma-2-9b" / "config.json"  # sliding-window layers (every other one)
LLAMA_8B_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x 32 layers x 8 KV heads x 128 dims x 2 bytes (bf16)
FEW = settings(max_examples=25, deadline=None, database=None)
SOME = settings(max_examples=60, deadline=None, database=None)
# (model config, system, tp): the database's own answer against kvlab's
DIFFERENTIAL = [(LLAMA_8B, "h100_sxm", 1), (QWEN_8B, "h100_sxm", 1), (LLAMA_70B, "h100_sxm", 8)]
ENGINES = ("vllm", "lmcache", "lmcache-layerwise", "sglang")
LAB = ["--workload", "lab", "--docs", "4", "--gpu-tokens", "10022", "--cpu-tokens", "20044", "--block-tokens", "5011"]
H100 = ["--model-config", LLAMA_8B, "--gpu-system", "h100_sxm"]
TIERS = ("input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")


# --------------------------------------------------------------------------------------------
# Fixtures: each EngineHandle and HardwareModel built once per module
# --------------------------------------------------------------------------------------------


def compile_handle(config, system, tp):
    """aiconfigurator-core's own EngineHandle at its default (current) version, its notices kept quiet."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return EngineHandle.compile(str(Path(config).parent), system, "vllm", tp_size=tp)


@pytest.fixture(scope="module")
def handles():
    return {(config, system, tp): compile_handle(config, system, tp) for config, system, tp in DIFFERENTIAL}


def hardware(config=LLAMA_8B, system="h100_sxm", block_tokens=None, **changes):
    return HardwareModel(HardwareSettings(model_config=str(config), gpu_system=system, **changes), block_tokens)


@pytest.fixture(scope="module")
def databases():
    """kvlab's database path: a HardwareModel asked for the database, and a Database, per setting."""
    return {
        (config, system, tp): (
            hardware(config, system, latency_source="database", tp=tp),
            Database(Path(config).parent, system, "vllm", tp=tp),
        )
        for config, system, tp in DIFFERENTIAL
    }


def per_engine(**changes):
    """Llama-3.1-8B on h100_sxm, one HardwareModel per engine (each its default block)."""
    return {
        "vllm": hardware(engine="vllm", **changes),
        "lmcache": hardware(engine="lmcache", **changes),
        "lmcache-layerwise": hardware(engine="lmcache", layerwise=True, **changes),
        "sglang": hardware(engine="sglang", **changes),
    }


@pytest.fixture(scope="module")
def engines():
    """Priced by the database (SGLang by its own kernels, the others by vLLM's)."""
    return per_engine()


@pytest.fixture(scope="module")
def roofline_engines():
    """Priced by the roofline: every engine's prefill the same."""
    return per_engine(latency_source="roofline")


@pytest.fixture(scope="module")
def llama_shape():
    return read_compute_shape(LLAMA_8B)


@pytest.fixture(scope="module")
def gemma_shape():
    return read_compute_shape(GEMMA_2)


@pytest.fixture(scope="module")
def h100():
    return read_system("h100_sxm")


def ttft(*argv):
    """``kvlab ttft ARGV`` in this process; its exit status, stdout and stderr."""
    done = kvlab("ttft", *argv)
    return done.returncode, done.stdout, done.stderr


def ttft_json(*argv):
    status, out, err = ttft(*argv)
    assert (status, err) == (0, ""), err
    return json.loads(out)


def refused(command, *argv, naming=""):
    """``kvlab ttft COMMAND ARGV`` refuses: exit 2, nothing on stdout, one line on stderr naming ``naming``."""
    status, out, err = ttft(command, *argv)
    shown = f"exit {status}\nstderr: {err!r}"
    assert "Traceback" not in out + err, shown
    assert status == 2, shown
    assert out == "", shown
    assert err.endswith("\n") and err.count("\n") == 1, shown
    assert err.startswith(f"kvlab ttft {command}: error: "), shown
    assert naming in err, shown
    return err


# --------------------------------------------------------------------------------------------
# The database path is aiconfigurator-core's own answer
# --------------------------------------------------------------------------------------------


@st.composite
def queries(draw):
    isl = draw(st.integers(1, 65536))
    return isl, draw(st.integers(0, isl - 1))


@pytest.mark.parametrize("setting", DIFFERENTIAL, ids=lambda s: f"{s[0].parent.name}-{s[1]}-tp{s[2]}")
@FEW
@given(query=queries())
def test_database_path_is_the_engine_handles_answer(handles, databases, setting, query):
    isl, prefix = query
    expected = handles[setting].predict_prefill_latency(1, isl, prefix)
    model, database = databases[setting]
    assert model.source == "database"
    assert model.prefill_ms(isl, prefix) == expected
    assert database.prefill_ms(isl, prefix) == expected
    # a full hit recomputes the last token: the database is asked for prefix isl - 1
    assert model.prefill_ms(isl, isl) == handles[setting].predict_prefill_latency(1, isl, isl - 1)


@pytest.mark.parametrize("setting", DIFFERENTIAL[:1], ids=["Llama-3.1-8B-Instruct-h100_sxm-tp1"])
@FEW
@given(batch=st.integers(1, 64), context=st.integers(1, 65536))
def test_decode_is_the_engine_handles_one_step(handles, databases, setting, batch, context):
    model, database = databases[setting]
    expected = handles[setting].predict_decode_latency(batch, context, 2)
    assert database.decode_ms(batch, context) == expected
    assert model.decode_ms([context] * batch) == expected


def test_a_mixture_of_experts_at_tp_2_is_priced_by_the_database():
    """vLLM shards the experts over the tensor-parallel ranks by default: the database is asked the same."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    mixtral = MODELS / "Mixtral-8x7B-v0.1"
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        handle = EngineHandle.compile(str(mixtral), "h100_sxm", "vllm", tp_size=2, moe_tp_size=2, moe_ep_size=1)
    model = hardware(mixtral / "config.json", latency_source="database", tp=2)
    assert model.prefill_ms(8192, 1024) == handle.predict_prefill_latency(1, 8192, 1024)


def test_the_8192_token_recompute_is_199_7_ms(handles, engines):
    """The issue's done-when: Llama-3.1-8B on h100_sxm with vLLM recomputes 8,192 tokens in 199.7 ms (1%)."""
    expected = handles[LLAMA_8B, "h100_sxm", 1].predict_prefill_latency(1, 8192, 0)
    model = engines["vllm"]
    assert model.source == "database"
    load, prefill, total = model.parts_ms(8192, 0, 0)
    assert (load, prefill, total) == (0.0, expected, expected)
    assert total == pytest.approx(199.7, rel=0.01)


# --------------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------------


@SOME
@given(new=st.integers(0, 300), cached=st.integers(0, 300), window=st.none() | st.integers(1, 400))
def test_attended_is_the_brute_force_sum(new, cached, window):
    def sees(i):
        return cached + i if window is None else min(cached + i, window)

    assert roofline.attended(new, cached, window) == sum(sees(i) for i in range(1, new + 1))


@pytest.mark.parametrize("which", ["llama_shape", "gemma_shape"])
@SOME
@given(cached=st.integers(0, 40000), new=st.integers(1, 40000), more=st.integers(1, 40000))
def test_prefill_grows_with_new_tokens(request, h100, which, cached, new, more):
    shape, factors = request.getfixturevalue(which), roofline.Efficiency()
    fewer = roofline.prefill_ms(shape, h100, factors, cached + new, cached)
    assert fewer <= roofline.prefill_ms(shape, h100, factors, cached + new + more, cached)


@pytest.mark.parametrize("which", ["llama_shape", "gemma_shape"])
@SOME
@given(total=st.integers(2, 80000), data=st.data())
def test_prefill_falls_with_more_cached_of_the_same_total(request, h100, which, total, data):
    shape, factors = request.getfixturevalue(which), roofline.Efficiency()
    less = data.draw(st.integers(0, total - 2))
    more = data.draw(st.integers(less + 1, total - 1))
    assert roofline.prefill_ms(shape, h100, factors, total, more) <= roofline.prefill_ms(
        shape, h100, factors, total, less
    )


@SOME
@given(
    compute=st.floats(0.01, 0.5),
    memory=st.floats(0.01, 0.5),
    tokens=st.integers(1, 65536),
    data=st.data(),
    tp=st.sampled_from([1, 2, 8]),
)
def test_doubling_an_efficiency_never_slows(llama_shape, h100, compute, memory, tokens, data, tp):
    cached = data.draw(st.integers(0, tokens - 1))
    base = roofline.Efficiency(compute, memory)
    times = {}
    for name, factors in {
        "base": base,
        "compute": roofline.Efficiency(2 * compute, memory),
        "memory": roofline.Efficiency(compute, 2 * memory),
    }.items():
        times[name] = (
            roofline.prefill_ms(llama_shape, h100, factors, tokens, cached, tp=tp),
            roofline.decode_ms(llama_shape, h100, factors, [tokens], tp=tp),
        )
    for faster in ("compute", "memory"):
        assert all(f <= b for f, b in zip(times[faster], times["base"], strict=True))


def test_two_ranks_without_all_reduce_beat_one_on_a_big_prefill():
    one = hardware(latency_source="roofline", tp=1)
    two = hardware(latency_source="roofline", tp=2, all_reduce="none")
    ring = hardware(latency_source="roofline", tp=2)
    for tokens in (8192, 32768):
        assert two.prefill_ms(tokens, 0) < one.prefill_ms(tokens, 0)
        assert two.prefill_ms(tokens, 0) < ring.prefill_ms(tokens, 0)  # the all-reduces cost time
    assert two.bytes_per_token * 2 == one.bytes_per_token == LLAMA_8B_PER_TOKEN


def test_a_step_reads_the_weights_its_tokens_use():
    """One token reads the weights it multiplies through and the lm head: the active ones of a mixture of experts
    (k of E experts); a long prefill reads them all; never the untied input embedding (a row per token)."""
    for name in ("Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct", "Qwen3-30B-A3B", "Mixtral-8x7B-v0.1"):
        shape = read_compute_shape(MODELS / name / "config.json")
        embedding = 0 if shape.tied else shape.vocab * shape.hidden
        one = roofline.weights_read(shape, 1)
        assert one == pytest.approx(shape.active_params_per_token() + shape.vocab * shape.hidden, rel=1e-12), name
        reads = [roofline.weights_read(shape, tokens) for tokens in (1, 2, 8, 64, 1024, 65536)]
        assert reads == sorted(reads), name
        assert reads[-1] == pytest.approx(shape.weights() - embedding, rel=1e-9), name
    llama = read_compute_shape(LLAMA_8B)
    # Llama-3.1-8B's 8,030,261,248 parameters (its safetensors: 16,060,522,496 bytes in bf16), less the norms
    assert llama.weights() == 8_030_261_248 - (2 * 32 + 1) * 4096


def test_gemma_3_reads_transformers_defaults():
    """gemma-3-4b-it's text_config names neither its heads nor its vocabulary: Gemma3TextConfig's defaults, and
    tied embeddings (PretrainedConfig's default; the file does not say)."""
    shape = read_compute_shape(MODELS / "gemma-3-4b-it" / "config.json")
    assert (shape.heads, shape.kv_heads, shape.head_dim, shape.vocab, shape.tied) == (8, 4, 256, 262_208, True)
    assert shape.weights() == pytest.approx(3_880_099_328, rel=1e-4)  # its text model's parameters (norms too)


MOONCAKE = [  # Mooncake FAST'25 §2.2 (LLaMA3-70B, 8 GPUs): A800 is an A100-class part, H800 an H100-class one
    ("a100_sxm", 6.0),
    ("h100_sxm", 19.0),
]


@pytest.mark.parametrize("system, published", MOONCAKE)
def test_mooncake_eq2_breakeven(system, published):
    argv = ["--model-config", LLAMA_70B, "--gpu-system", system, "--tp", "8", "--prefix-tokens", "8192"]
    light = ttft_json(
        "breakeven", *argv, "--latency-source", "roofline", "--efficiency", "1", "--memory-efficiency", "1",
        "--all-reduce", "none",
    )  # fmt: skip
    assert light["latency_source"] == "roofline"
    assert light["breakeven_gbps"] == pytest.approx(published, rel=0.15)
    # Eq. 2 itself: the prefix's KV bytes over the time of its prefill
    assert light["kv_bytes"] == 8192 * 2 * 80 * 8 * 128 * 2
    assert light["breakeven_gbps"] == pytest.approx(light["kv_bytes"] / light["recompute_ms"] / 1e6, rel=1e-4)
    measured = ttft_json("breakeven", *argv, "--latency-source", "database")
    assert measured["latency_source"] == "database"
    # measured kernels do not reach peak: a longer recompute, so a lower break-even
    assert measured["recompute_ms"] > light["recompute_ms"]
    assert measured["breakeven_gbps"] < light["breakeven_gbps"]


# --------------------------------------------------------------------------------------------
# The link
# --------------------------------------------------------------------------------------------


@SOME
@given(
    peak=st.floats(1, 1000),
    copy=st.floats(0.01, 100),
    latency=st.floats(0, 10),
    unit=st.integers(1, 1 << 24),
    size=st.integers(0, 1 << 34),
    more=st.integers(1, 1 << 30),
)
def test_link_time_grows_with_size(peak, copy, latency, unit, size, more):
    link = Link(peak, copy, latency)
    assert link.ms(0, unit) == 0.0
    assert link.ms(size, unit) < link.ms(size + more, unit)
    if size:
        copies = math.ceil(size / unit)
        assert link.ms(size, unit) == pytest.approx(latency + copies * copy / 1e3 + size / peak / 1e6, rel=1e-12)


@SOME
@given(peak=st.floats(1, 1000), copy=st.floats(0.01, 100), unit=st.integers(1, 1 << 30), more=st.integers(1, 1 << 30))
def test_effective_bandwidth_grows_with_the_unit_below_the_peak(peak, copy, unit, more):
    link = Link(peak, copy)
    assert link.effective_gbps(unit) < link.effective_gbps(unit + more) <= peak


def test_vllm_16_token_blocks_of_llama_8b_move_at_5_gbps(engines):
    """vllm#33398: about 5 GB/s CPU->GPU for Llama-3.1-8B's 16-token blocks on an H100 (the fit of vLLM's copy_us)."""
    model = engines["vllm"]
    assert model.block_tokens == 16 and model.link.peak_gbps == 64.0 and model.link.copy_us == SERVING["vllm"].copy_us
    unit = SERVING["vllm"].transfer_unit(16, 16, LLAMA_8B_PER_TOKEN, 32)
    assert unit == 32 * 1024  # one layer's K (or V) of a block: 16 tokens x 8 heads x 128 dims x 2 bytes
    assert model.link.effective_gbps(unit) == pytest.approx(5.0, rel=0.02)
    tokens = 16 * 1000
    assert tokens * LLAMA_8B_PER_TOKEN / model.load_ms(tokens) / 1e6 == pytest.approx(5.0, rel=0.02)


# --------------------------------------------------------------------------------------------
# Composition: each engine's TTFT from its load and its prefill
# --------------------------------------------------------------------------------------------


@st.composite
def splits(draw):
    tokens = draw(st.integers(1, 65536))
    gpu = draw(st.integers(0, tokens))
    return tokens, gpu, draw(st.integers(0, tokens - gpu))


@SOME
@given(split=splits(), has_cpu=st.booleans())
def test_a_gpu_hit_is_never_slower_than_a_cpu_load(engines, split, has_cpu):
    tokens, gpu, cpu = split
    hits = gpu + cpu
    for name, model in engines.items():
        on_gpu = model.parts_ms(tokens, hits, 0, has_cpu)[2]
        mixed = model.parts_ms(tokens, gpu, cpu, has_cpu)[2]
        on_cpu = model.parts_ms(tokens, 0, hits, has_cpu)[2]
        assert on_gpu <= mixed <= on_cpu, name


@SOME
@given(tokens=st.integers(1, 65536))
def test_a_full_recompute_is_the_prefill(engines, roofline_engines, tokens):
    model = engines["vllm"]
    assert model.parts_ms(tokens, 0, 0, True) == (0.0, model.prefill_ms(tokens, 0), model.prefill_ms(tokens, 0))
    for group in (engines, roofline_engines):
        for name, other in group.items():
            # no load: every engine's TTFT is its prefill (LMCache's blocking store comes with a CPU tier only)
            prefill = other.prefill_ms(tokens, 0)
            assert other.parts_ms(tokens, 0, 0, False) == (0.0, prefill, prefill), name
    assert engines["lmcache"].prefill_ms(tokens, 0) == model.prefill_ms(tokens, 0)  # LMCache runs in vLLM
    assert roofline_engines["sglang"].prefill_ms(tokens, 0) == roofline_engines["vllm"].prefill_ms(tokens, 0)


@SOME
@given(split=splits(), has_cpu=st.booleans())
def test_overlap_never_hurts(engines, roofline_engines, split, has_cpu):
    tokens, gpu, cpu = split
    # the same prefill for every engine (the roofline's): the layer-by-layer loads never lose to vLLM's load first
    vllm = roofline_engines["vllm"].parts_ms(tokens, gpu, cpu, False)[2]
    for name in ("sglang", "lmcache-layerwise"):
        assert roofline_engines[name].parts_ms(tokens, gpu, cpu, False)[2] <= vllm, name
    assert roofline_engines["sglang"].parts_ms(tokens, gpu, cpu, True)[2] <= vllm  # SGLang's backups run beside
    for group in (engines, roofline_engines):
        # each engine against its own load, prefill and store run one after another
        for name in ("sglang", "lmcache-layerwise"):
            model = group[name]
            load, prefill, total = model.parts_ms(tokens, gpu, cpu, has_cpu)
            assert total <= load + prefill + model.store_ms(tokens, gpu, cpu, has_cpu), name
        layerwise = group["lmcache-layerwise"].parts_ms(tokens, gpu, cpu, has_cpu)[2]
        assert layerwise <= group["lmcache"].parts_ms(tokens, gpu, cpu, has_cpu)[2]
        # LMCache runs in vLLM (its kernels): with no store to wait for, its layer-wise load beats vLLM's
        assert (
            group["lmcache-layerwise"].parts_ms(tokens, gpu, cpu, False)[2]
            <= group["vllm"].parts_ms(tokens, gpu, cpu, False)[2]
        )


@SOME
@given(split=splits())
def test_lmcache_store_counts_only_with_a_cpu_tier(engines, split):
    tokens, gpu, cpu = split
    computed = tokens - gpu - cpu
    lmcache = engines["lmcache"]
    load, prefill, without = lmcache.parts_ms(tokens, gpu, cpu, False)
    assert without == load + prefill
    with_cpu = lmcache.parts_ms(tokens, gpu, cpu, True)[2]
    assert with_cpu == load + prefill + lmcache.load_ms(computed)
    assert (with_cpu > without) == (computed > 0)
    for name in ("vllm", "sglang"):  # their stores run off the TTFT
        assert engines[name].parts_ms(tokens, gpu, cpu, True) == engines[name].parts_ms(tokens, gpu, cpu, False)


# --------------------------------------------------------------------------------------------
# The commands
# --------------------------------------------------------------------------------------------


def read_rows(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_predict_lab_is_priced_by_the_database(tmp_path, handles):
    table = tmp_path / "requests.csv"
    document = ttft_json("predict", *LAB, *H100, "--per-request", table)
    assert document["latency_source"] == "database" == document["latency"]["latency_source"]
    rows = read_rows(table)
    assert len(rows) == document["requests"] == 12
    assert {row["latency_source"] for row in rows} == {"database"}
    for figures in document["rounds"]:
        mine = [row for row in rows if row["round"] == figures["round"]]
        assert len(mine) == figures["requests"] == 4
        median = statistics.median(float(row["ttft_ms"]) for row in mine)
        assert abs(figures["p50_ms"] - median) <= 0.05 + 1e-3  # the JSON rounds to 0.1 ms, the CSV to 0.001
        for tier in TIERS:
            assert sum(int(row[tier]) for row in mine) == figures[tier], tier
    for tier in TIERS:
        assert sum(int(row[tier]) for row in rows) == document["ttft"][tier], tier
    assert document["ttft"]["p50_ms"] == pytest.approx(statistics.median(float(r["ttft_ms"]) for r in rows), abs=0.051)
    # each request's TTFT from the database's answer and the link's formula (vLLM: load, then prefill)
    handle = handles[LLAMA_8B, "h100_sxm", 1]
    unit = 5011 * LLAMA_8B_PER_TOKEN / 64  # a block of one layer's K or V
    for row in rows:
        tokens, gpu, cpu = (int(row[key]) for key in TIERS[:3])
        assert int(row["computed_tokens"]) == tokens - gpu - cpu
        size = cpu * LLAMA_8B_PER_TOKEN
        load = math.ceil(size / unit) * SERVING["vllm"].copy_us / 1e3 + size / 64e6 if cpu else 0.0
        prefill = handle.predict_prefill_latency(1, tokens, min(gpu + cpu, tokens - 1))
        assert float(row["load_ms"]) == pytest.approx(load, abs=6e-4)
        assert float(row["prefill_ms"]) == pytest.approx(prefill, abs=6e-4)
        assert float(row["ttft_ms"]) == pytest.approx(load + prefill, abs=6e-4)


def test_predict_names_the_roofline():
    document = ttft_json("predict", *LAB, *H100, "--latency-source", "roofline")
    assert document["latency_source"] == "roofline" == document["latency"]["latency_source"]
    assert document["latency"]["prefill"].startswith("roofline: ")


def test_a_cut_config_is_refused_by_the_roofline(tmp_path):
    config = json.loads(LLAMA_8B.read_text(encoding="utf-8"))
    del config["intermediate_size"]
    (tmp_path / "cut").mkdir()
    cut = tmp_path / "cut" / "config.json"
    cut.write_text(json.dumps(config), encoding="utf-8")
    argv = [*LAB, "--model-config", cut, "--gpu-system", "h100_sxm"]
    refused("predict", *argv, "--latency-source", "roofline", naming="intermediate_size")
    # auto: the database compiles it but has no kernels for it, and the roofline refuses it: one line, no traceback
    refused("predict", *argv, naming="intermediate_size")


@pytest.mark.parametrize(
    "argv, naming",
    [
        (["--model-config", LLAMA_8B, "--gpu-system", "h999_sxm"], "h999_sxm"),
        ([*H100, "--engine-version", "9.9"], "9.9"),
        ([*H100, "--engine-version", "9.9", "--latency-source", "database"], "9.9"),
        ([*H100, "--engine", "sglang", "--engine-version", "0.5.6.post2"], "0.5.6.post2"),  # a folder, not a slot
        ([*H100, "--engine", "vllm", "--layerwise"], "--layerwise"),
    ],
    ids=["unknown-system", "unknown-version", "unknown-version-database", "unlisted-version", "layerwise-vllm"],
)
def test_predict_refuses_a_bad_setting(argv, naming):
    refused("predict", *LAB, *argv, naming=naming)


def test_systems_lists_the_database_and_every_spec():
    from aiconfigurator_core.sdk.perf_database import get_supported_databases

    document = ttft_json("systems")
    systems = {entry["name"]: entry for entry in document["systems"]}
    assert sorted(systems) == system_names()
    assert "vllm" in systems["h100_sxm"]["database"]
    assert systems["h100_sxm"]["current"]["vllm"] in systems["h100_sxm"]["database"]["vllm"]
    for name, entry in systems.items():
        for figure in ("bf16_tflops", "mem_gbps", "pcie_gbps", "nvlink_gbps", "gpus_per_node"):
            assert entry[figure] > 0, (name, figure)
        assert entry["source"].endswith(f"systems/{name}.yaml")
    # the versions a query may name are the package's own (its slots, not every data folder)
    with contextlib.redirect_stderr(io.StringIO()):
        supported = get_supported_databases()
    for name in system_names():
        theirs = {backend: list(versions) for backend, versions in supported.get(name, {}).items() if versions}
        assert database_versions(name) == dict(sorted(theirs.items())), name
        assert systems[name]["database"] == database_versions(name)


def test_breakeven_keys_and_its_recompute(engines):
    document = ttft_json("breakeven", *H100, "--prefix-tokens", "8192")
    assert list(document) == [
        "prefix_tokens",
        "latency_source",
        "latency",
        "recompute_ms",
        "kv_bytes_per_gpu",
        "kv_bytes",
        "breakeven_gbps",
        "breakeven_gbps_per_gpu",
        "load_ms_at_link",
        "loading_wins_at_link",
    ]
    model = engines["vllm"]
    assert document["latency_source"] == "database"
    assert document["recompute_ms"] == round(model.prefill_ms(8192, 0), 3)
    assert document["kv_bytes"] == document["kv_bytes_per_gpu"] == 8192 * LLAMA_8B_PER_TOKEN
    assert document["load_ms_at_link"] == round(model.load_ms(8192), 3)
    assert document["loading_wins_at_link"] == (model.load_ms(8192) < model.prefill_ms(8192, 0))


def test_replay_never_imports_the_database():
    done = run_python(
        "-X", "importtime", "-m", "kvlab", "replay", "--workload", "lab", "--docs", "4", "--gpu-tokens", "10022"
    )
    assert done.returncode == 0, done.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "kvlab.cli" in imported  # the log is there
    assert not [name for name in imported if name.startswith("aiconfigurator_core")]
    assert "kvlab.latency.database" not in imported
