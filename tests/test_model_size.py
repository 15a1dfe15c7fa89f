"""Tests of kvlab/sizing/model_size.py: the shipped models' KV bytes per token against the README table and against
their published shapes, the config.json rules (GQA defaults, explicit head_dim, multimodal text_config, MLA refused),
tensor parallelism, the lab's GiB figures, the exact GiB <-> tokens conversions, and bad configs."""

import json
import math
from decimal import Decimal
from fractions import Fraction

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.sizing.model_size import (
    GIB,
    MAX_LAYERS,
    KVShape,
    ModelConfigError,
    gib,
    layer_counts,
    read_model_config,
    tokens_in,
)

MODELS = ROOT / "models"
SOME = settings(max_examples=300, deadline=None, database=None)

# The plain shapes (layers, KV heads, head dim, bytes per element served), read off the published configs by hand.
PUBLISHED = {
    "Qwen2.5-1.5B-Instruct": (28, 2, 128, 2),
    "Qwen2.5-7B-Instruct": (28, 4, 128, 2),
    "Qwen3-8B": (36, 8, 128, 2),
    "Llama-3.1-8B-Instruct": (32, 8, 128, 2),
    "Llama-3.1-70B-Instruct": (80, 8, 128, 2),
    "Mistral-7B-Instruct-v0.3": (32, 8, 128, 2),
    "opt-1.3b": (24, 32, 64, 2),
}

# Every shipped model by hand, from the numbers in its published config (models/SOURCES.md), at TP 1 in the
# engine's auto dtype (16 bits): (bytes one more token adds, bytes of a 100,000-token prompt).
A = 100_000
CATALOG = {
    # plain attention: 2 (K and V) x layers x KV heads x head dim x 2 bytes
    "Devstral-Small-2-24B-Instruct": (2 * 40 * 8 * 128 * 2, A * 163_840),
    "GLM-4.7": (2 * 92 * 8 * 128 * 2, A * 376_832),
    "Llama-3.1-70B-Instruct": (2 * 80 * 8 * 128 * 2, A * 327_680),
    "Llama-3.1-8B-Instruct": (2 * 32 * 8 * 128 * 2, A * 131_072),
    "Llama-3.2-1B-Instruct": (2 * 16 * 8 * 64 * 2, A * 32_768),
    "Llama-3.2-3B-Instruct": (2 * 28 * 8 * 128 * 2, A * 114_688),
    "Llama-3.3-70B-Instruct": (2 * 80 * 8 * 128 * 2, A * 327_680),
    "Mistral-7B-Instruct-v0.3": (2 * 32 * 8 * 128 * 2, A * 131_072),
    "Mixtral-8x7B-v0.1": (2 * 32 * 8 * 128 * 2, A * 131_072),
    "Qwen2.5-1.5B-Instruct": (2 * 28 * 2 * 128 * 2, A * 28_672),
    "Qwen2.5-7B-Instruct": (2 * 28 * 4 * 128 * 2, A * 57_344),
    "Qwen3-30B-A3B": (2 * 48 * 4 * 128 * 2, A * 98_304),
    "Qwen3-32B": (2 * 64 * 8 * 128 * 2, A * 262_144),
    "Qwen3-8B": (2 * 36 * 8 * 128 * 2, A * 147_456),
    "opt-1.3b": (2 * 24 * 32 * 64 * 2, A * 196_608),
    "phi-4": (2 * 40 * 10 * 128 * 2, A * 204_800),
    "tiny-llama-cpp": (2 * 4 * 2 * 64 * 2, A * 2_048),  # server/tiny_model.py's: float32 served in 16 bits (auto)
    # MLA: layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes; the V3.2/GLM-5 indexer: 128 + 4 bytes
    "DeepSeek-V3": (61 * 576 * 2, A * 70_272),
    "DeepSeek-R1": (61 * 576 * 2, A * 70_272),
    "Kimi-K2-Instruct": (61 * 576 * 2, A * 70_272),
    "DeepSeek-V3.2": (61 * 576 * 2 + 61 * 132, A * 78_324),
    "GLM-5": (78 * 576 * 2 + 78 * 132, A * 100_152),
    # sliding windows: the global layers grow, a window layer holds at most its window
    "gemma-2-9b": (21 * 2 * 8 * 256 * 2, A * 21 * 8_192 + 4096 * 21 * 8_192),
    "gemma-3-27b-it": (10 * 2 * 16 * 128 * 2, A * 10 * 8_192 + 1024 * 52 * 8_192),
    "gemma-3-4b-it": (5 * 2 * 4 * 256 * 2, A * 5 * 4_096 + 1024 * 29 * 4_096),
    "gpt-oss-120b": (18 * 2 * 8 * 64 * 2, A * 18 * 2_048 + 128 * 18 * 2_048),
    "gpt-oss-20b": (12 * 2 * 8 * 64 * 2, A * 12 * 2_048 + 128 * 12 * 2_048),
    "Phi-3-mini-4k-instruct": (0, 2047 * 32 * 2 * 32 * 96 * 2),
    # hybrids: attention layers grow; a recurrent layer holds conv + state per request, once
    "Nemotron-H-56B-Base-8K": (
        10 * 2 * 8 * 128 * 2,
        A * 40_960 + 54 * ((256 * 64 + 2 * 8 * 256) * 3 + 256 * 64 * 256) * 2,
    ),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (
        6 * 2 * 2 * 128 * 2,
        A * 6_144 + 23 * ((64 * 64 + 2 * 8 * 128) * 3 * 2 + 64 * 64 * 128 * 4),  # its SSM state in float32
    ),
    "Qwen3-Next-80B-A3B-Thinking": (
        12 * 2 * 2 * 256 * 2,
        A * 24_576 + 36 * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 2,
    ),
}
ELEMENT_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
QWEN_1_5B = {  # the lab's model, as a config.json to vary
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 1536,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "num_hidden_layers": 28,
    "torch_dtype": "bfloat16",
}


def config_path(name):
    return MODELS / name / "config.json"


def readme_table():
    """models/README.md's bytes table: name -> (bytes per token, bytes of a 100,000-token prompt) at TP 1."""
    rows = {}
    for line in (MODELS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or not cells[1].replace(",", "").isdigit():
            continue  # not a row of the bytes table
        rows[cells[0]] = (int(cells[1].replace(",", "")), int(cells[2].replace(",", "")))
    return rows


def write_config(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# The shipped models
# --------------------------------------------------------------------------------------------


def test_every_shipped_model_is_in_the_table():
    folders = {path.parent.name for path in MODELS.glob("*/config.json")}
    assert len(folders) >= 25
    assert folders == set(readme_table()) == set(CATALOG)
    assert set(PUBLISHED) <= folders


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_bytes_of_the_shipped_models(name):
    """By hand (above) == what read_model_config makes of the published config.json == models/README.md."""
    shape = read_model_config(config_path(name))
    assert (shape.bytes_per_token(), shape.bytes_for(A)) == CATALOG[name] == readme_table()[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_plain_shapes_of_the_shipped_models(name):
    layers, heads, head_dim, element = PUBLISHED[name]
    shape = read_model_config(config_path(name))
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.element_bytes()) == PUBLISHED[name]
    assert shape.standard and shape.bytes_per_token() == 2 * layers * heads * head_dim * element


def test_gemma_explicit_head_dim_wins():
    raw = json.loads(config_path("gemma-2-9b").read_text(encoding="utf-8"))
    assert raw["hidden_size"] // raw["num_attention_heads"] == 224  # what hidden / heads would say
    shape = read_model_config(config_path("gemma-2-9b"))
    assert shape.head_dim == 256
    # float32 in the checkpoint, served in 16 bits (auto); as float32 only when asked for
    assert shape.bytes_per_token(windows=True) == 2 * 42 * 8 * 256 * 2
    assert shape.bytes_per_token(kv_dtype="float32", windows=True) == 2 * 42 * 8 * 256 * 4 == 688_128


def test_opt_has_all_heads_as_kv_heads():
    raw = json.loads(config_path("opt-1.3b").read_text(encoding="utf-8"))
    assert "num_key_value_heads" not in raw
    shape = read_model_config(config_path("opt-1.3b"))
    assert shape.kv_heads == raw["num_attention_heads"] == 32
    assert shape.head_dim == 2048 // 32 == 64


@pytest.mark.parametrize(
    "name, tp, heads_per_gpu",
    [
        ("Llama-3.1-70B-Instruct", 1, 8),
        ("Llama-3.1-70B-Instruct", 2, 4),
        ("Llama-3.1-70B-Instruct", 8, 1),
        ("Llama-3.1-70B-Instruct", 16, 1),  # more GPUs than KV heads: a head is replicated, never split
        ("Qwen2.5-7B-Instruct", 4, 1),
        ("Qwen2.5-7B-Instruct", 2, 2),  # not 8: vLLM refuses a tp that does not split its 28 attention heads
        ("Qwen2.5-1.5B-Instruct", 2, 1),
        ("opt-1.3b", 4, 8),
    ],
)
def test_tensor_parallel_split(name, tp, heads_per_gpu):
    layers, _, head_dim, element = PUBLISHED[name]
    shape = read_model_config(config_path(name))
    assert shape.heads_per_gpu(tp) == heads_per_gpu
    assert shape.bytes_per_token(tp) == 2 * layers * heads_per_gpu * head_dim * element
    assert shape.describe(tp)["kv_heads_per_gpu"] == heads_per_gpu


def test_llama_70b_at_tp_8_and_16():
    shape = read_model_config(config_path("Llama-3.1-70B-Instruct"))
    assert shape.bytes_per_token(8) == shape.bytes_per_token(16) == 2 * 80 * 1 * 128 * 2 == 40_960
    assert shape.bytes_per_token(8) * 8 == shape.bytes_per_token(1)


@pytest.mark.parametrize(
    "name, tp", [("Qwen2.5-7B-Instruct", 3), ("Qwen2.5-7B-Instruct", 6), ("Llama-3.1-8B-Instruct", 3)]
)
def test_tp_that_does_not_split_the_heads(name, tp):
    shape = read_model_config(config_path(name))
    with pytest.raises(ValueError, match="split"):
        shape.heads_per_gpu(tp)
    with pytest.raises(ValueError):
        shape.bytes_per_token(tp)


@pytest.mark.parametrize("tp", [0, -1])
def test_tp_below_one(tp):
    with pytest.raises(ValueError):
        KVShape(28, 2, 128, "bfloat16").bytes_per_token(tp)


# --------------------------------------------------------------------------------------------
# The lab's figures
# --------------------------------------------------------------------------------------------


def test_the_lab_check():
    """Qwen2.5-1.5B: a 5011-token document in 256-token chunks stores 4,864 tokens in 0.1299 GiB;
    1.5 GiB holds 56,173 tokens, 219 whole chunks = 56,064."""
    per_token = read_model_config(config_path("Qwen2.5-1.5B-Instruct")).bytes_per_token()
    assert per_token == 28_672
    stored = 5011 // 256 * 256
    assert stored == 4_864
    assert gib(stored, per_token) == 0.1299
    assert tokens_in(1.5, per_token) == tokens_in("1.5", per_token) == tokens_in(Decimal("1.5"), per_token) == 56_173
    assert 56_173 // 256 == 219 and 219 * 256 == 56_064
    assert tokens_in("0.1299", per_token) >= 4_864 > tokens_in("0.1298", per_token)


# --------------------------------------------------------------------------------------------
# GiB <-> tokens
# --------------------------------------------------------------------------------------------


def exact_floor_tokens(text, per_token):
    return math.floor(Fraction(text) * GIB / per_token)


@SOME
@given(tokens=st.integers(0, 10**9), per_token=st.integers(1, 4 * 10**6))
def test_gib_is_the_smallest_four_decimal_budget(tokens, per_token):
    amount = gib(tokens, per_token)
    assert isinstance(amount, float)
    exact = math.ceil(Fraction(tokens * per_token, GIB) * 10**4)  # in units of 0.0001 GiB, rounded up
    assert Fraction(repr(amount)) == Fraction(exact, 10**4)
    assert tokens_in(amount, per_token) >= tokens
    if amount:
        less = Decimal(repr(amount)) - Decimal("0.0001")
        assert tokens_in(less, per_token) < tokens


@SOME
@given(units=st.integers(0, 10**9), places=st.integers(0, 8), per_token=st.integers(1, 4 * 10**6))
def test_tokens_in_is_exact_for_decimals(units, places, per_token):
    text = f"{Decimal(f'{units}e-{places}'):f}"
    assert tokens_in(text, per_token) == tokens_in(Decimal(text), per_token) == exact_floor_tokens(text, per_token)


def exact_text(fraction):
    """A fraction whose denominator is a power of two as its exact decimal text."""
    places = fraction.denominator.bit_length() - 1
    assert fraction.denominator == 2**places
    return f"{Decimal(f'{fraction.numerator * 5**places}e-{places}'):f}"  # from text: exact, whatever the digits


@SOME
@given(
    tokens=st.integers(1, 10**7),
    per_token=st.integers(1, 4 * 10**6).map(lambda units: units * 2**12),  # as real models: a multiple of 4 KiB
    below=st.integers(10, 13),
)
def test_tokens_in_at_and_just_below_an_exact_boundary(tokens, per_token, below):
    """A budget of exactly ``tokens`` tokens' bytes holds them; a hair less (1e-10 to 1e-13 GiB, under a byte)
    holds one fewer. (With 2**12 dividing the bytes, the boundary is exact in at most 18 decimal places, the most
    kvlab reads: see the next test for the others.)"""
    text = exact_text(Fraction(tokens * per_token, GIB))
    assert Fraction(text) == Fraction(tokens * per_token, GIB)
    assert tokens_in(text, per_token) == tokens
    hair = Decimal(text) - Decimal(1).scaleb(-below)
    assert tokens_in(hair, per_token) == tokens - 1


@SOME
@given(tokens=st.integers(1, 10**7), per_token=st.integers(1, 4 * 10**6))
def test_tokens_in_at_a_boundary_to_18_places(tokens, per_token):
    """Any boundary: written exactly, it is read when it takes at most 18 decimal places and refused (a usage
    error, not a rounding) when it takes more; rounded up to 18 places it holds the tokens, rounded down (when
    that is below it) one fewer: 1e-18 GiB is under a byte."""
    boundary = Fraction(tokens * per_token, GIB)
    text = exact_text(boundary)
    places = len(text.partition(".")[2])
    if places <= 18:
        assert tokens_in(text, per_token) == tokens
    else:
        with pytest.raises(ValueError, match="18 decimal places"):
            tokens_in(text, per_token)
    up, down = math.ceil(boundary * 10**18), math.floor(boundary * 10**18)
    assert tokens_in(Decimal(up).scaleb(-18), per_token) == tokens
    assert tokens_in(Decimal(down).scaleb(-18), per_token) == (tokens if down == up else tokens - 1)


@pytest.mark.parametrize("per_token", [1, 3, 28_672, 57_344, 688_128])
def test_tokens_in_reads_a_float_as_its_text(per_token):
    """0.1 is 0.1, not 0.1000000000000000055...; 1.5 is 1.5."""
    for value in (0.1, 0.3, 1.5, 0.1299, 2.675):
        assert tokens_in(value, per_token) == exact_floor_tokens(repr(value), per_token)


def test_tokens_in_exact_with_many_digits():
    """Exact decimals also past 28 significant digits (Decimal's default context precision): a large budget
    with 18 decimal places, one 1e-18 GiB below a boundary."""
    per_token = 28_672
    tokens = 10**16 + 1
    boundary = Fraction(tokens * per_token, GIB)
    text = exact_text(boundary)
    assert text == "267028808593.750026702880859375"  # 12 + 18 = 30 significant digits, exact
    assert tokens_in(text, per_token) == tokens
    below = "267028808593.750026702880859374"  # 1e-18 GiB below
    assert Fraction(below) == boundary - Fraction(1, 10**18)
    assert tokens_in(below, per_token) == exact_floor_tokens(below, per_token) == tokens - 1
    tokens = 4 * 10**16 + 1  # an amount near 2**40 GiB: 13 + 18 = 31 significant digits
    boundary = Fraction(tokens * per_token, GIB)
    text = exact_text(boundary)
    below = "1068115234375.000026702880859374"
    assert Fraction(below) == boundary - Fraction(1, 10**18) and len(below.replace(".", "")) == 31
    assert tokens_in(text, per_token) == tokens
    assert tokens_in(below, per_token) == exact_floor_tokens(below, per_token) == tokens - 1
    # More than 18 places (below a byte of any model) is refused, not rounded.
    with pytest.raises(ValueError, match="18 decimal places"):
        tokens_in("1.4970703124999999999999999999", per_token)


@pytest.mark.parametrize("value", ["1099511627776", "1099511627776.000000000000000000", str(2**40 - 1)])
def test_tokens_in_up_to_2_to_the_40_gib(value):
    assert tokens_in(value, 28_672) == exact_floor_tokens(value, 28_672)


@pytest.mark.parametrize("value", ["1099511627776.000000000000000001", "1099511627777", "1e13", str(2**53)])
def test_tokens_in_refuses_more_than_2_to_the_40_gib(value):
    with pytest.raises(ValueError, match=f"at most {2**40} GiB"):
        tokens_in(value, 28_672)


@pytest.mark.parametrize("value", ["-1", "-0.0001", "nan", "inf", "abc", "", "1,5"])
def test_tokens_in_rejects_non_amounts(value):
    with pytest.raises(ValueError):
        tokens_in(value, 28_672)


def test_zero_tokens():
    assert gib(0, 28_672) == 0.0
    assert tokens_in(0, 28_672) == tokens_in("0", 28_672) == 0


# --------------------------------------------------------------------------------------------
# config.json rules
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, expected",
    [
        pytest.param({}, (28, 2, 128, "bfloat16"), id="qwen"),
        pytest.param({"num_key_value_heads": None}, (28, 12, 128, "bfloat16"), id="kv-heads-null"),
        pytest.param({"num_key_value_heads": ...}, (28, 12, 128, "bfloat16"), id="kv-heads-absent"),
        pytest.param({"head_dim": None}, (28, 2, 128, "bfloat16"), id="head-dim-null"),
        pytest.param({"head_dim": 64}, (28, 2, 64, "bfloat16"), id="head-dim-explicit"),
        pytest.param({"head_dim": 64, "hidden_size": 1537}, (28, 2, 64, "bfloat16"), id="head-dim-odd-hidden"),
        pytest.param({"head_dim": 64, "hidden_size": ...}, (28, 2, 64, "bfloat16"), id="head-dim-no-hidden"),
        pytest.param({"torch_dtype": ..., "dtype": "float16"}, (28, 2, 128, "float16"), id="dtype-key"),
        pytest.param({"torch_dtype": "float16", "dtype": "float32"}, (28, 2, 128, "float16"), id="torch-dtype-first"),
        pytest.param({"torch_dtype": "float8_e4m3fn"}, (28, 2, 128, "float8_e4m3fn"), id="float8"),
        pytest.param({"torch_dtype": "half"}, (28, 2, 128, "half"), id="half"),
    ],
)
def test_config_fields(tmp_path, change, expected):
    """null or absent num_key_value_heads: all heads; an explicit head_dim wins (hidden_size then unused);
    torch_dtype first, then the newer dtype key. ``...`` removes the field."""
    config = {**QWEN_1_5B, **change}
    config = {key: value for key, value in config.items() if value is not ...}
    shape = read_model_config(write_config(tmp_path, config))
    assert (shape.layers, shape.kv_heads, shape.head_dim, shape.dtype) == expected
    layers, heads, head_dim, dtype = expected
    assert shape.bytes_per_token() == 2 * layers * heads * head_dim * ELEMENT_BYTES[dtype]


def test_multimodal_config_uses_text_config(tmp_path):
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "hidden_size": 2560,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "num_hidden_layers": 34,
        },
        "vision_config": {"hidden_size": 1152, "num_attention_heads": 16, "num_hidden_layers": 27},
    }
    shape = read_model_config(write_config(tmp_path, config))
    assert shape == KVShape(34, 4, 256, "bfloat16")
    assert shape.bytes_per_token() == 2 * 34 * 4 * 256 * 2


def test_a_path_as_text(tmp_path):
    path = write_config(tmp_path, QWEN_1_5B)
    assert read_model_config(str(path)) == read_model_config(path) == KVShape(28, 2, 128, "bfloat16")


def without(key):
    return {name: value for name, value in QWEN_1_5B.items() if name != key}


BAD_CONFIGS = [
    pytest.param("not json", "malformed JSON", id="text"),
    pytest.param("", "malformed JSON", id="empty"),
    pytest.param(b"\xff\xfe{", "not UTF-8 text", id="not-utf8"),
    # NaN and Infinity are read (published configs hold them in fields that size nothing), never as a size.
    pytest.param(b'{"num_hidden_layers": NaN}', "num_hidden_layers must be a whole number", id="nan"),
    pytest.param(b'{"num_hidden_layers": Infinity}', "num_hidden_layers must be a whole number", id="infinity"),
    pytest.param(b'{"num_hidden_layers": -Infinity}', "num_hidden_layers must be", id="minus-infinity"),
    pytest.param(b'{"num_hidden_layers": 1e400}', "num_hidden_layers must be a whole number", id="1e400"),
    pytest.param(b'{"num_hidden_layers": 1' + b"0" * 5000 + b"}", "malformed JSON", id="long-integer"),
    pytest.param([1, 2], "object", id="array"),
    pytest.param("text", "object", id="string"),
    pytest.param(None, "object", id="null"),
    pytest.param(without("num_hidden_layers"), "num_hidden_layers", id="no-layers"),
    pytest.param(without("num_attention_heads"), "num_attention_heads", id="no-heads"),
    pytest.param(without("hidden_size"), "hidden_size", id="no-hidden"),
    pytest.param({**QWEN_1_5B, "num_hidden_layers": None}, "num_hidden_layers", id="layers-null"),
    pytest.param({**QWEN_1_5B, "num_hidden_layers": 28.0}, "num_hidden_layers", id="layers-float"),
    pytest.param({**QWEN_1_5B, "num_hidden_layers": "28"}, "num_hidden_layers", id="layers-text"),
    pytest.param({**QWEN_1_5B, "num_hidden_layers": True}, "num_hidden_layers", id="layers-bool"),
    pytest.param({**QWEN_1_5B, "num_hidden_layers": 0}, "num_hidden_layers", id="layers-0"),
    pytest.param({**QWEN_1_5B, "num_hidden_layers": -28}, "num_hidden_layers", id="layers-negative"),
    pytest.param({**QWEN_1_5B, "num_attention_heads": 0}, "num_attention_heads", id="heads-0"),
    pytest.param({**QWEN_1_5B, "num_attention_heads": False}, "num_attention_heads", id="heads-false"),
    pytest.param({**QWEN_1_5B, "num_key_value_heads": 2.5}, "num_key_value_heads", id="kv-heads-float"),
    pytest.param({**QWEN_1_5B, "num_key_value_heads": True}, "num_key_value_heads", id="kv-heads-true"),
    pytest.param({**QWEN_1_5B, "num_key_value_heads": "2"}, "num_key_value_heads", id="kv-heads-text"),
    pytest.param({**QWEN_1_5B, "num_key_value_heads": -2}, "num_key_value_heads", id="kv-heads-negative"),
    pytest.param({**QWEN_1_5B, "num_key_value_heads": 0}, "num_key_value_heads", id="kv-heads-0"),
    pytest.param({**QWEN_1_5B, "num_key_value_heads": False}, "num_key_value_heads", id="kv-heads-false"),
    pytest.param({**QWEN_1_5B, "head_dim": 0}, "head_dim", id="head-dim-0"),
    pytest.param({**QWEN_1_5B, "head_dim": 128.0}, "head_dim", id="head-dim-float"),
    pytest.param({**QWEN_1_5B, "hidden_size": 1537}, "hidden_size", id="hidden-not-multiple"),
    pytest.param({**QWEN_1_5B, "hidden_size": 0}, "hidden_size", id="hidden-0"),
    pytest.param({**QWEN_1_5B, "torch_dtype": "int8"}, "torch_dtype", id="dtype-int8"),
    pytest.param({**QWEN_1_5B, "torch_dtype": "bf16"}, "torch_dtype", id="dtype-bf16"),
    pytest.param({**QWEN_1_5B, "torch_dtype": 2}, "torch_dtype", id="dtype-number"),
    pytest.param({**QWEN_1_5B, "torch_dtype": ["bfloat16"]}, "torch_dtype", id="dtype-list"),
    pytest.param({**QWEN_1_5B, "kv_lora_rank": 512}, "qk_rope_head_dim", id="mla-without-rope"),
    pytest.param(
        {"torch_dtype": "bfloat16", "text_config": {**QWEN_1_5B, "kv_lora_rank": 512, "qk_rope_head_dim": 0}},
        "qk_rope_head_dim must be a whole number",
        id="mla-in-text-config",
    ),
    pytest.param(
        {"torch_dtype": "bfloat16", "text_config": without("num_hidden_layers")},
        "num_hidden_layers",
        id="text-config-no-layers",
    ),
]


@pytest.mark.parametrize("content, fragment", BAD_CONFIGS)
def test_bad_config_names_the_file(tmp_path, content, fragment):
    path = tmp_path / "bad model" / "config.json"
    path.parent.mkdir()
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str) and content in ("not json", ""):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ModelConfigError) as caught:
        read_model_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert fragment in message
    assert "\n" not in message
    assert isinstance(caught.value, ValueError)


def test_deeply_nested_json_is_a_config_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(ModelConfigError) as caught:
        read_model_config(path)
    assert str(caught.value).startswith(f"{path}: ")


@pytest.mark.parametrize("where", ["missing.json", "folder"])
def test_unreadable_config_names_the_file(tmp_path, where):
    (tmp_path / "folder").mkdir()
    path = tmp_path / where
    with pytest.raises(ModelConfigError) as caught:
        read_model_config(path)
    assert str(caught.value).startswith(f"{path}: cannot read")


# --------------------------------------------------------------------------------------------
# The layer count: bounded, and sized per kind of layer (issue 22, item 9)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layers", [MAX_LAYERS + 1, 2**31, 2**31 + 1, 10**18])
def test_layers_above_the_bound_are_refused_in_one_line(tmp_path, layers):
    """A 200-byte config.json may not ask for a list per layer of 2**31 layers: refused naming file and key."""
    path = write_config(tmp_path, {**QWEN_1_5B, "num_hidden_layers": layers})
    assert path.stat().st_size < 300
    with pytest.raises(ModelConfigError) as caught:
        read_model_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: num_hidden_layers must be a whole number from 1 to {MAX_LAYERS}")
    assert str(layers) in message and "\n" not in message


def test_the_bound_itself_is_read(tmp_path):
    shape = read_model_config(write_config(tmp_path, {**QWEN_1_5B, "num_hidden_layers": MAX_LAYERS}))
    assert shape.layers == MAX_LAYERS and shape.bytes_per_token() == 2 * MAX_LAYERS * 2 * 128 * 2


@pytest.mark.parametrize(
    "config",
    [
        {"sliding_window": 4096, "sliding_window_pattern": 6},
        {"sliding_window": 4096, "model_type": "gemma2"},
        {"sliding_window": 4096},
        {"full_attention_interval": 4},
        {},
    ],
    ids=["pattern", "gemma2", "all-window", "interval", "plain"],
)
def test_counting_by_kind_does_not_grow_with_the_layers(config):
    """The rules' kinds are counted by arithmetic: 10**18 layers are counted at once (a list per layer of them
    would take 8 EB), and each kind's count is the one the rule gives."""
    layers = 10**18
    counts = layer_counts(config, layers)
    assert sum(counts.values()) == layers
    every = config.get("sliding_window_pattern") or config.get("full_attention_interval")
    if every:
        assert counts["full"] == layers // every
    elif config.get("model_type") == "gemma2":
        assert counts == {"full": layers // 2, "window": layers // 2, "state": 0}


DTYPES = st.sampled_from(["bfloat16", "float16", "float32"])
MAMBA = {"mamba_num_heads": 8, "mamba_head_dim": 64, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4}
DELTA = {
    "linear_num_key_heads": 4,
    "linear_key_head_dim": 32,
    "linear_num_value_heads": 8,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
}


def per_layer_kinds(config, layers):
    """Brute force, layer by layer, as transformers and vLLM name each layer: full, window, state or none."""
    if "layer_types" in config:
        names = {"full_attention": "full", "sliding_attention": "window", "linear_attention": "state", "mamba": "state"}
        return [names[kind] for kind in config["layer_types"]]
    if "hybrid_override_pattern" in config:
        return [{"*": "full", "M": "state"}.get(mark, "none") for mark in config["hybrid_override_pattern"]]
    kinds = []
    for layer in range(layers):
        if config.get("full_attention_interval"):
            kinds.append("full" if (layer + 1) % config["full_attention_interval"] == 0 else "state")
        elif not config.get("sliding_window") or config.get("use_sliding_window") is False:
            kinds.append("full")
        elif config.get("sliding_window_pattern"):
            kinds.append("full" if (layer + 1) % config["sliding_window_pattern"] == 0 else "window")
        elif config.get("model_type") == "gemma2":
            kinds.append("window" if layer % 2 == 0 else "full")
        else:
            kinds.append("window")
    return kinds


def brute_force_bytes(config, tokens, grown=True):
    """KV bytes of a request of ``tokens`` tokens (TP 1, 16-bit service), summed layer by layer (without
    ``grown``: only the recurrent states)."""
    element = 2  # auto: the checkpoint's in 16 bits
    attention = 2 * config["num_key_value_heads"] * config["head_dim"] * element
    if "mamba_num_heads" in config:  # Mamba2 (vLLM mamba2_state_shape)
        inner = config["mamba_num_heads"] * config["mamba_head_dim"]
        conv = (inner + 2 * config["n_groups"] * config["ssm_state_size"]) * (config["conv_kernel"] - 1)
        state = (conv + inner * config["ssm_state_size"]) * element
    elif "linear_num_key_heads" in config:  # Gated DeltaNet (vLLM gated_delta_net_state_shape)
        keys = config["linear_num_key_heads"] * config["linear_key_head_dim"]
        values = config["linear_num_value_heads"] * config["linear_value_head_dim"]
        conv = (2 * keys + values) * (config["linear_conv_kernel_dim"] - 1)
        ssm = config["linear_num_value_heads"] * config["linear_key_head_dim"] * config["linear_value_head_dim"]
        state = (conv + ssm) * element
    else:
        state = 0
    total = 0
    for kind in per_layer_kinds(config, config["num_hidden_layers"]):
        if kind == "full" and grown:
            total += tokens * attention
        elif kind == "window" and grown:
            total += min(tokens, config["sliding_window"]) * attention
        elif kind == "state" and tokens:
            total += state
    return total


@st.composite
def layered_configs(draw):
    """A config.json with N layers described by one of the rules kvlab reads."""
    layers = draw(st.integers(1, MAX_LAYERS))
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    config = {
        "num_hidden_layers": layers,
        "num_attention_heads": kv_heads * draw(st.sampled_from([1, 2, 4])),
        "num_key_value_heads": kv_heads,
        "head_dim": draw(st.sampled_from([64, 128, 256])),
        "torch_dtype": draw(DTYPES),
    }
    rule = draw(st.sampled_from(["plain", "window", "off", "pattern", "gemma2", "interval", "types", "hybrid"]))
    window = draw(st.integers(1, 10_000))
    if rule == "window":
        config["sliding_window"] = window
    elif rule == "off":
        config |= {"sliding_window": window, "use_sliding_window": False}
    elif rule == "pattern":
        config |= {"sliding_window": window, "sliding_window_pattern": draw(st.integers(1, 12))}
    elif rule == "gemma2":
        config |= {"sliding_window": window, "model_type": "gemma2"}
    elif rule == "interval":
        config |= {"full_attention_interval": draw(st.integers(1, 8)), **DELTA}
    elif rule == "types":
        kinds = st.sampled_from(["full_attention", "sliding_attention", "linear_attention", "mamba"])
        config |= {"layer_types": draw(st.lists(kinds, min_size=layers, max_size=layers)), "sliding_window": window}
        config |= MAMBA
    else:
        marks = draw(st.lists(st.sampled_from("*M-E"), min_size=layers, max_size=layers))
        config |= {"hybrid_override_pattern": "".join(marks), **MAMBA}
    return config


@settings(max_examples=150, deadline=None, database=None)
@given(config=layered_configs(), tokens=st.integers(0, 100_000))
def test_sizing_by_kind_equals_a_layer_by_layer_model(tmp_path_factory, config, tokens):
    """For any rule and any N up to the bound, the shape counted per kind sizes a request as the sum over its
    layers does, layer by layer: a prompt's bytes, the growth per token past the windows and within them."""
    path = write_config(tmp_path_factory.mktemp("model"), config)
    shape = read_model_config(path)
    kinds = per_layer_kinds(config, config["num_hidden_layers"])
    assert (shape.layers, shape.window_layers, shape.state_layers) == tuple(
        map(kinds.count, ("full", "window", "state"))
    )
    assert shape.bytes_for(tokens) == brute_force_bytes(config, tokens)
    past = config.get("sliding_window", 0) + 1  # every window full: only the full layers grow
    assert shape.bytes_per_token() == brute_force_bytes(config, past + 1) - brute_force_bytes(config, past)
    first = brute_force_bytes(config, 1) - brute_force_bytes(config, 1, grown=False)  # one token in every layer
    assert shape.bytes_per_token(windows=True) == first
    assert [group["layers"] for group in shape.groups()] == [
        count for count in map(kinds.count, ("full", "window", "state")) if count
    ]


# --------------------------------------------------------------------------------------------
# Layer lists and KV heads checked against the config (issue 22, item 14)
# --------------------------------------------------------------------------------------------


def refused(tmp_path, config):
    """The one-line message of a refused config (which must name its file)."""
    path = write_config(tmp_path, config)
    with pytest.raises(ModelConfigError) as caught:
        read_model_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


@settings(max_examples=100, deadline=None, database=None)
@given(layers=st.integers(1, 200), listed=st.integers(0, 200), key=st.sampled_from(["layer_types", "pattern"]))
def test_a_layer_list_must_name_every_layer(tmp_path_factory, layers, listed, key):
    """A list (or pattern) naming another number of layers than num_hidden_layers is refused, naming both keys;
    one naming as many is read, with that many layers."""
    if key == "layer_types":
        config = {**QWEN_1_5B, "num_hidden_layers": layers, "layer_types": ["full_attention"] * listed}
    else:
        config = {**QWEN_1_5B, "num_hidden_layers": layers, "hybrid_override_pattern": "*" * listed}
    name = "layer_types" if key == "layer_types" else "hybrid_override_pattern"
    if listed != layers:
        message = refused(tmp_path_factory.mktemp("model"), config)
        assert f"{name} names {listed} layers" in message and f"num_hidden_layers is {layers}" in message
    else:
        shape = read_model_config(write_config(tmp_path_factory.mktemp("model"), config))
        assert shape.layers == layers and shape.bytes_per_token() == 2 * layers * 2 * 128 * 2


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"layer_types": ["full_attention"] * 27 + ["full_atention"]}, "layer_types[27] is 'full_atention'"),
        ({"layer_types": ["full_attention"] * 27 + [1]}, "layer_types[27] is 1"),
        ({"layer_types": "full_attention"}, "layer_types must be a list"),
        ({"hybrid_override_pattern": "*" * 27 + "m"}, "hybrid_override_pattern[27] is 'm'"),
        ({"hybrid_override_pattern": ["*"] * 28}, "hybrid_override_pattern must be a string"),
    ],
    ids=["typo", "number", "not-a-list", "lower-case-mark", "pattern-list"],
)
def test_an_unknown_layer_kind_is_refused(tmp_path, change, fragment):
    """A typo used to be a layer that caches nothing (0 layers, 0 bytes per token): now one line naming it."""
    assert fragment in refused(tmp_path, {**QWEN_1_5B, **change})


@settings(max_examples=200, deadline=None, database=None)
@given(heads=st.integers(1, 128), kv_heads=st.integers(1, 256))
def test_kv_heads_must_divide_the_attention_heads(tmp_path_factory, heads, kv_heads):
    """Each KV head serves a whole group of query heads (transformers' repeat_kv, vLLM's num_heads % num_kv_heads
    assert): more KV heads than heads, or a number that does not divide them, is refused in one line."""
    config = {**QWEN_1_5B, "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 64}
    if heads % kv_heads:
        message = refused(tmp_path_factory.mktemp("model"), config)
        assert f"num_key_value_heads {kv_heads}" in message and f"num_attention_heads {heads}" in message
        assert ("is more than" in message) == (kv_heads > heads)
    else:
        assert read_model_config(write_config(tmp_path_factory.mktemp("model"), config)).kv_heads == kv_heads


@pytest.mark.parametrize("per_token", [0, -1])
def test_tokens_in_a_token_of_no_bytes_is_an_error_in_words(per_token):
    with pytest.raises(ValueError, match="at least one byte"):
        tokens_in("1", per_token)
