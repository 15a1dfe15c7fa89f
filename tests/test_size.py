"""``kvlab size`` and the layered KV shape (kvlab/sizing/model_size.py): each layer group sized by hand from the
config's own fields, independently of the code; MLA held whole on every rank; --kv-dtype; tokens <-> GiB."""

import json

import pytest
from conftest import ROOT, kvlab
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.sizing.model_size import GIB, KVShape, read_model_config

MODELS = ROOT / "models"
LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
}


def size(*args):
    done = kvlab("size", *map(str, args))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_deepseek_v3_is_one_latent_per_layer_on_every_rank(tp):
    """61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, not split by tensor parallelism."""
    config = json.loads((MODELS / "DeepSeek-V3" / "config.json").read_text())
    by_hand = config["num_hidden_layers"] * (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * 2
    assert by_hand == 61 * 576 * 2 == 70_272
    assert size("--model-config", MODELS / "DeepSeek-V3" / "config.json", "--tp", tp)["bytes_per_token"] == by_hand


@settings(max_examples=100, deadline=None)
@given(
    layers=st.integers(1, 128),
    kv_heads=st.sampled_from([1, 2, 4, 8, 16]),
    head_dim=st.sampled_from([64, 128, 256]),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_fp8_halves_a_standard_model(layers, kv_heads, head_dim, tp):
    shape = KVShape(layers, kv_heads, head_dim, "bfloat16")
    per_rank = max(1, kv_heads // tp)
    assert shape.bytes_per_token(tp) == 2 * layers * per_rank * head_dim * 2
    assert shape.bytes_per_token(tp, "fp8") * 2 == shape.bytes_per_token(tp) == shape.bytes_per_token(tp, "bfloat16")


def test_a_float32_checkpoint_is_served_in_16_bits(tmp_path):
    path = write(tmp_path, {**LLAMA, "torch_dtype": "float32"})
    assert size("--model-config", path)["bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert size("--model-config", path, "--kv-dtype", "float32")["bytes_per_token"] == 2 * 32 * 8 * 128 * 4


@settings(max_examples=60, deadline=None)
@given(window=st.integers(1, 5000), every=st.integers(2, 8), tokens=st.integers(0, 20000))
def test_window_layers_hold_at_most_their_window(tmp_path_factory, window, every, tokens):
    """Gemma 3's pattern: every ``every``-th layer global, the others keep the last ``window`` tokens."""
    config = {**LLAMA, "sliding_window": window, "sliding_window_pattern": every}
    path = write(tmp_path_factory.mktemp("model"), config)
    full = sum(1 for layer in range(32) if (layer + 1) % every == 0)
    per_layer = 2 * 8 * 128 * 2
    got = size("--model-config", path, "--tokens", tokens)
    assert got["bytes_per_token"] == full * per_layer
    assert got["bytes"] == tokens * full * per_layer + min(tokens, window) * (32 - full) * per_layer


def test_layer_types_name_each_layer(tmp_path):
    """gpt-oss: layer_types alternates sliding_attention (window 128) and full_attention."""
    kinds = ["sliding_attention", "full_attention"] * 12
    config = {**LLAMA, "num_hidden_layers": 24, "layer_types": kinds, "sliding_window": 128, "head_dim": 64}
    shape = read_model_config(write(tmp_path, config))
    assert (shape.layers, shape.window_layers, shape.window) == (12, 12, 128)
    assert shape.bytes_for(1000) == 1000 * 12 * 2 * 8 * 64 * 2 + 128 * 12 * 2 * 8 * 64 * 2


def test_a_mamba_hybrid_keeps_a_state_per_request(tmp_path):
    """Nemotron-H's pattern: ``*`` attention, ``M`` Mamba2 (a state per request), ``-`` an MLP."""
    pattern = "M-M*-M-M*-"
    config = {**LLAMA, "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern}
    config |= {"mamba_num_heads": 8, "mamba_head_dim": 64, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4}
    shape = read_model_config(write(tmp_path, config))
    conv = (8 * 64 + 2 * 2 * 16) * (4 - 1)
    ssm = 8 * 64 * 16
    assert (shape.layers, shape.state_layers, shape.state_conv, shape.state_ssm) == (2, 4, conv, ssm)
    assert shape.bytes_for(100) == 100 * 2 * 2 * 8 * 128 * 2 + 4 * (conv + ssm) * 2
    assert shape.bytes_for(0) == 0
    # the state splits over the ranks and stays in the model's dtype when the KV cache is fp8
    assert shape.bytes_for(100, 2, "fp8") == 100 * 2 * 2 * 4 * 128 * 1 + 4 * ((conv + ssm) // 2) * 2


@settings(max_examples=100, deadline=None)
@given(tokens=st.integers(0, 10**7), window=st.integers(1, 10**5))
def test_gib_and_tokens_agree(tokens, window):
    """The tokens --gib reports are the most whose bytes fit; --tokens reports those bytes."""
    shape = KVShape(4, 2, 64, "bfloat16", window_layers=4, window=window)
    budget = shape.bytes_for(tokens)
    from kvlab.cli.size import fitting

    most = fitting(shape, budget, 1, "auto")
    assert most >= tokens
    assert shape.bytes_for(most) <= budget < shape.bytes_for(most + 1)


def test_gib_reports_the_tokens_it_holds(tmp_path):
    got = size("--model-config", MODELS / "Qwen2.5-1.5B-Instruct" / "config.json", "--gib", "1")
    assert got["tokens"] == GIB // got["bytes_per_token"] and got["bytes"] <= GIB


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tokens", "5", "--gib", "1"], "argument --gib: not allowed with argument --tokens"),
        (["--kv-dtype", "int4"], "argument --kv-dtype: invalid choice"),
        (["--tp", "3"], "--tp: 8 KV heads do not split over tp 3"),
        (["--gib", "-1"], "argument --gib: expected a number of GiB >= 0"),
    ],
)
def test_bad_arguments_are_one_line(args, message):
    done = kvlab("size", "--model-config", MODELS / "Llama-3.1-8B-Instruct" / "config.json", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"kvlab size: error: {message}" + done.stderr[len(f"kvlab size: error: {message}") :]
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"num_hidden_layers": 2**31}, "num_hidden_layers must be a whole number from 1 to 4096"),
        ({"layer_types": ["full_attention"] * 31}, "layer_types names 31 layers but num_hidden_layers is 32"),
        ({"layer_types": ["full_attention"] * 31 + ["full_atention"]}, "layer_types[31] is 'full_atention'"),
        ({"hybrid_override_pattern": "*M" * 15}, "hybrid_override_pattern names 30 layers"),
        ({"num_key_value_heads": 64}, "num_key_value_heads 64 is more than num_attention_heads 32"),
        ({"num_key_value_heads": 5}, "num_key_value_heads 5 does not divide num_attention_heads 32"),
    ],
    ids=["layers-2-31", "short-list", "typo", "short-pattern", "kv-more", "kv-not-dividing"],
)
def test_a_config_that_contradicts_itself_is_one_line(tmp_path, change, fragment):
    """What used to be read as 0 layers (or a 17 GB list, or odd KV heads) is one line naming the file, exit 1."""
    path = write(tmp_path, {**LLAMA, **change})
    done = kvlab("size", "--model-config", path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"kvlab size: error: {path}: ") and done.stderr.count("\n") == 1
    assert fragment in done.stderr
