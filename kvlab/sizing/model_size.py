"""KV-cache bytes per token from a Hugging Face ``config.json``, and GiB <-> tokens.

A token's KV cache is a key and a value vector per layer and KV head:
``2 x num_hidden_layers x KV heads per GPU x head_dim x bytes of torch_dtype``. With tensor
parallelism each GPU holds ``num_key_value_heads / tp`` of the heads (at least one: vLLM
replicates a head when there are more GPUs than KV heads), and its own share of the CPU cache.

"GB" of KV memory means GiB (2**30 bytes), as LMCache's ``max_local_cpu_size``, vLLM's
``kv_offloading_size`` and the lab's handout use it: Qwen2.5-1.5B stores 4,864 tokens in
0.1299 of them.
"""

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path

from kvlab.files import MAX_FILE_BYTES, read_json, shown

__all__ = ["GIB", "MAX_GIB", "KVShape", "ModelConfigError", "gib", "read_model_config", "tokens_in"]

GIB = 2**30
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
GIB_DECIMALS = 4
MAX_GIB = 2**40  # a GiB amount above this (a yottabyte) is a mistake, not a budget
MAX_GIB_PLACES = 18  # decimal places of a GiB amount: finer is below one byte
MAX_FIELD = 2**31  # layers, heads, head dimension of a config.json


class ModelConfigError(ValueError):
    """A config.json kvlab cannot size; the message names the file."""


@dataclass(frozen=True)
class KVShape:
    """What sizes a token's KV cache: layers, KV heads, head dimension and the element type."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str

    def heads_per_gpu(self, tp=1):
        """KV heads each of ``tp`` GPUs holds; ValueError when the heads do not split evenly."""
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp!r}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(f"{self.kv_heads} KV heads do not split over tp {tp}")
        return max(1, self.kv_heads // tp)

    def bytes_per_token(self, tp=1):
        """KV bytes of one token on one GPU (and in that GPU's share of the CPU cache)."""
        return 2 * self.layers * self.heads_per_gpu(tp) * self.head_dim * DTYPE_BYTES[self.dtype]

    def describe(self, tp=1):
        return {
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype": self.dtype,
            "tp": tp,
            "kv_heads_per_gpu": self.heads_per_gpu(tp),
            "bytes_per_token": self.bytes_per_token(tp),
        }


def read_model_config(path):
    """The :class:`KVShape` of a Hugging Face ``config.json``; ModelConfigError naming the file if it cannot."""
    path = Path(path)
    try:
        config = read_json(path, MAX_FILE_BYTES // 16)
    except ValueError as error:
        raise ModelConfigError(str(error)) from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path}: expected a JSON object")
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}  # a multimodal model: its language model's shape
    if "kv_lora_rank" in config:
        raise ModelConfigError(f"{path}: multi-head latent attention (kv_lora_rank) is not sized by heads")

    def whole(field, value):
        if type(value) is not int or not 1 <= value <= MAX_FIELD:
            raise ModelConfigError(f"{path}: {field} must be a whole number from 1 to {MAX_FIELD}, got {shown(value)}")
        return value

    def field(name):
        if config.get(name) is None:
            raise ModelConfigError(f"{path}: missing {name}")
        return whole(name, config[name])

    layers = field("num_hidden_layers")
    heads = field("num_attention_heads")
    kv_heads = heads  # no num_key_value_heads: every attention head has its own KV (multi-head attention)
    if config.get("num_key_value_heads") is not None:
        kv_heads = whole("num_key_value_heads", config["num_key_value_heads"])
    if config.get("head_dim") is not None:
        head_dim = whole("head_dim", config["head_dim"])
    else:
        hidden = field("hidden_size")
        if hidden % heads:
            raise ModelConfigError(f"{path}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        head_dim = hidden // heads
    dtype = config.get("torch_dtype")
    if dtype is None:  # newer transformers write `dtype`
        dtype = config.get("dtype")
    if dtype is None:
        raise ModelConfigError(f"{path}: missing torch_dtype")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise ModelConfigError(f"{path}: torch_dtype {shown(dtype)} is not one of {', '.join(DTYPE_BYTES)}")
    return KVShape(layers, kv_heads, head_dim, dtype)


def decimal_gib(value):
    """A GiB amount as an exact Decimal (from its text, so 1.5 is 1.5); ValueError if not a number >= 0."""
    text = str(value)
    try:
        number = Decimal(text) if len(text) <= 100 else Decimal("NaN")
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite() or number < 0:
        raise ValueError(f"expected a number of GiB >= 0, got {shown(value)}")
    if number > MAX_GIB:
        raise ValueError(f"expected at most {MAX_GIB} GiB, got {shown(value)}")
    if number and number.as_tuple().exponent < -MAX_GIB_PLACES:
        raise ValueError(f"expected at most {MAX_GIB_PLACES} decimal places of GiB, got {shown(value)}")
    return number


def tokens_in(gib_amount, bytes_per_token):
    """Whole tokens of KV that ``gib_amount`` GiB holds."""
    return math.floor(Fraction(decimal_gib(gib_amount)) * GIB / bytes_per_token)  # exact at any precision


def gib(tokens, bytes_per_token):
    """GiB that ``tokens`` tokens of KV take, rounded up to 4 decimals: a budget of that many GiB holds them."""
    steps = math.ceil(Fraction(tokens * bytes_per_token * 10**GIB_DECIMALS, GIB))  # exact, then up
    return float(Decimal(steps).scaleb(-GIB_DECIMALS))
