"""KV-cache bytes per token from a Hugging Face ``config.json``, and GiB <-> tokens.

A token's KV cache is a key and a value vector per layer and KV head:
``2 x num_hidden_layers x KV heads per GPU x head_dim x bytes of torch_dtype``. With tensor
parallelism each GPU holds ``num_key_value_heads / tp`` of the heads (at least one: vLLM
replicates a head when there are more GPUs than KV heads), and its own share of the CPU cache.

"GB" of KV memory means GiB (2**30 bytes), as LMCache's ``max_local_cpu_size``, vLLM's
``kv_offloading_size`` and the lab's handout use it: Qwen2.5-1.5B stores 4,864 tokens in
0.1299 of them.
"""

import dataclasses
import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path

from kvlab.util.files import MAX_FILE_BYTES, number_text, read_json, shown
from kvlab.util.numbers import GIB
from kvlab.util.settings import setting

__all__ = [
    "GIB",
    "KV_DTYPES",
    "MAX_GIB",
    "MAX_LAYERS",
    "KVShape",
    "ModelConfigError",
    "gib",
    "layer_counts",
    "no_tokens",
    "read_model_config",
    "tokens_in",
]


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
MAX_FIELD = 2**31  # heads, head dimension and the other sizes of a config.json
MAX_LAYERS = 4096  # num_hidden_layers: real models have fewer than 1,000 (Nemotron-H 56B: 118); more is a mistake


class ModelConfigError(ValueError):
    """A config.json kvlab cannot size; the message names the file."""


KV_DTYPES = {  # --kv-dtype: the element the engine caches KV in (auto: the model's, by the engine's rule)
    "auto": None,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


@dataclass(frozen=True)
class KVShape:
    """What sizes a token's KV cache, layer group by layer group.

    ``layers`` full-attention layers cache a key and a value of ``head_dim`` per KV head (``latent``: one vector
    of ``head_dim`` elements per token instead, multi-head latent attention, held whole on every tensor-parallel
    rank); ``window_layers`` more cache the same but only the last ``window`` tokens of a request (sliding
    window); ``indexer_layers`` hold a sparse-attention indexer's key of ``indexer_dim`` elements per token (in
    fp8, with a float32 scale per 128 elements); ``state_layers`` a recurrent state per request (Mamba, linear
    attention: ``state_conv`` + ``state_ssm`` elements), which does not grow with the prompt. ``dtype`` is the
    checkpoint's.
    """

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str
    latent: bool = False
    window_layers: int = 0
    window: int = 0
    indexer_layers: int = 0
    indexer_dim: int = 0
    state_layers: int = 0
    state_conv: int = 0  # per layer per request: the convolution's last inputs
    state_ssm: int = 0  # per layer per request: the SSM or delta-rule state
    ssm_dtype: str = ""  # the SSM state's dtype where the config names one (mamba_ssm_cache_dtype), else the model's
    heads: int = dataclasses.field(default=0, compare=False)  # num_attention_heads (0: unread): split tp, size none

    @property
    def standard(self):
        """Only full attention with heads: the shape every figure of the planner was made for."""
        return not (self.latent or self.window_layers or self.indexer_layers or self.state_layers)

    def heads_per_gpu(self, tp=1):
        """KV heads each of ``tp`` GPUs holds; ValueError when the heads do not split evenly. A latent is one
        vector every rank holds whole."""
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp!r}")
        if not self.latent and self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(f"{self.kv_heads} KV heads do not split over tp {tp}")
        if self.heads % tp:  # vLLM's ModelConfig.verify_with_parallel_config (vllm/config/model.py)
            raise ValueError(f"{self.heads} attention heads do not split over tp {tp}")
        return 1 if self.latent else max(1, self.kv_heads // tp)

    def element_bytes(self, kv_dtype="auto"):
        """Bytes of one cached element: ``kv_dtype``'s, or with ``auto`` the checkpoint's, served in 16 bits when
        it is float32 (vLLM's rule for an ``auto`` dtype: docs/engines.md)."""
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
        if kv_dtype != "auto":
            return KV_DTYPES[kv_dtype]
        return min(DTYPE_BYTES[self.dtype], 2)

    def attention_bytes(self, tp=1, kv_dtype="auto"):
        """Bytes per token of one full-attention (or window) layer on one GPU."""
        vectors = 1 if self.latent else 2  # a latent, or a key and a value
        return vectors * self.heads_per_gpu(tp) * self.head_dim * self.element_bytes(kv_dtype)

    def indexer_bytes(self):
        return self.indexer_dim + 4 * -(-self.indexer_dim // 128)  # fp8 elements and a float32 scale per 128

    def bytes_per_token(self, tp=1, kv_dtype="auto", windows=False):
        """KV bytes of one more token of a long prompt on one GPU (and in that GPU's share of the CPU cache): the
        layers that grow with the prompt. With ``windows`` the sliding-window layers count per token too, as the
        planner charges them (exact up to the window, more beyond it)."""
        attention = self.layers + (self.window_layers if windows else 0)
        return attention * self.attention_bytes(tp, kv_dtype) + self.indexer_layers * self.indexer_bytes()

    def bytes_for(self, tokens, tp=1, kv_dtype="auto"):
        """KV bytes one request of ``tokens`` tokens holds on one GPU: every layer group as it grows."""
        per_layer = self.attention_bytes(tp, kv_dtype)
        grown = tokens * (self.layers * per_layer + self.indexer_layers * self.indexer_bytes())
        windowed = min(tokens, self.window) * self.window_layers * per_layer
        return grown + windowed + (self.state_bytes(tp) if tokens else 0)

    def state_bytes(self, tp=1):
        """A request's recurrent state on one GPU: its heads split over the ranks, in the model's dtype whatever
        the KV cache's (vLLM's ``mamba_cache_dtype`` auto)."""
        ssm = DTYPE_BYTES[self.ssm_dtype] if self.ssm_dtype else self.element_bytes("auto")
        return self.state_layers * ((self.state_conv // tp) * self.element_bytes("auto") + (self.state_ssm // tp) * ssm)

    def groups(self, tp=1, kv_dtype="auto"):
        """The layer groups, each with its bytes on one GPU: per token, and per request where it stops growing."""
        found = []
        if self.layers:
            kind = "latent" if self.latent else "full"
            found.append(
                {
                    "kind": kind,
                    "layers": self.layers,
                    "bytes_per_token": self.layers * self.attention_bytes(tp, kv_dtype),
                }
            )
        if self.window_layers:
            per_token = self.window_layers * self.attention_bytes(tp, kv_dtype)
            found.append(
                {
                    "kind": "window",
                    "layers": self.window_layers,
                    "window": self.window,
                    "bytes_per_token": per_token,
                    "bytes_per_request_at_most": per_token * self.window,
                }
            )
        if self.indexer_layers:
            found.append(
                {
                    "kind": "indexer",
                    "layers": self.indexer_layers,
                    "bytes_per_token": self.indexer_layers * self.indexer_bytes(),
                }
            )
        if self.state_layers:
            found.append(
                {
                    "kind": "state",
                    "layers": self.state_layers,
                    "bytes_per_token": 0,
                    "bytes_per_request": self.state_bytes(tp),
                }
            )
        return found

    def describe(self, tp=1, kv_dtype="auto"):
        """The shape as a plan shows it: for a standard model its heads, for any other its layer groups too."""
        described = {
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype": self.dtype,
            "tp": tp,
            "kv_heads_per_gpu": self.heads_per_gpu(tp),
            "bytes_per_token": self.bytes_per_token(tp, kv_dtype, windows=True),
        }
        if kv_dtype != "auto":
            described["kv_dtype"] = kv_dtype
        if not self.standard:
            described["groups"] = self.groups(tp, kv_dtype)
        return described


# What transformers' configuration class fills in where a published config.json leaves a field out.
DEFAULTS = {
    "gemma3_text": {  # Gemma3TextConfig (configuration_gemma3.py): gemma-3-4b-it's text_config names none of these
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
    "gemma2": {"sliding_window": 4096},  # Gemma2Config
}


LAYER_TYPES = {  # transformers' layer_types entries kvlab sizes, by the kind of cache each layer keeps
    "full_attention": "full",
    "sliding_attention": "window",
    "linear_attention": "state",
    "mamba": "state",
}
# Nemotron-H's hybrid_override_pattern (vLLM nemotron_h.py): ``*`` attention, ``M`` Mamba2, ``-`` an MLP alone,
# ``E`` a mixture of experts; the last two cache nothing.
PATTERN_MARKS = {"*": "full", "M": "state", "-": None, "E": None}


def layer_counts(config, layers, path="config.json"):
    """How many layers cache ``full`` attention, a ``window`` or a recurrent ``state``, counted per kind (never a
    list per layer, so the memory does not grow with ``layers``), from the config's own description of its
    layers: ``layer_types`` (transformers' list), ``hybrid_override_pattern`` (Nemotron-H), then
    ``full_attention_interval`` (Qwen3-Next), ``sliding_window_pattern`` (Gemma 3, Cohere 2: every n-th layer
    full), Gemma 2's alternation; else all full. A list or a pattern must name exactly ``layers`` layers, each
    of a known kind, as transformers' ``layer_type_validation`` requires: ModelConfigError naming ``path``."""
    counts = {"full": 0, "window": 0, "state": 0}
    listed, pattern = config.get("layer_types"), config.get("hybrid_override_pattern")
    if listed is not None:
        described, named, known = "layer_types", listed, LAYER_TYPES
        if not isinstance(listed, list):
            raise ModelConfigError(f"{path}: layer_types must be a list of layer kinds, got {shown(listed)}")
    elif pattern is not None:
        described, named, known = "hybrid_override_pattern", pattern, PATTERN_MARKS
        if not isinstance(pattern, str):
            raise ModelConfigError(f"{path}: hybrid_override_pattern must be a string, got {shown(pattern)}")
    else:
        return counts | interval_counts(config, layers)
    if len(named) != layers:
        raise ModelConfigError(
            f"{path}: {described} names {len(named)} layers but num_hidden_layers is {layers}: they must agree"
        )
    for index, kind in enumerate(named):
        if not isinstance(kind, str) or kind not in known:
            raise ModelConfigError(
                f"{path}: {described}[{index}] is {shown(kind)}, not one of {', '.join(map(repr, known))}"
            )
    for kind in set(named):  # at most as many kinds as the known ones
        if known[kind] is not None:
            counts[known[kind]] += named.count(kind)
    return counts


def interval_counts(config, layers):
    """The kinds of a config whose layers follow a rule, counted by arithmetic."""
    every = config.get("full_attention_interval")  # Qwen3-Next: every n-th layer attention, the rest Gated DeltaNet
    if type(every) is int and every > 0:
        return {"full": layers // every, "state": layers - layers // every}
    # Qwen2 (Qwen2.5-1.5B: sliding_window 32768, use_sliding_window false, max_window_layers 21): transformers'
    # Qwen2Config sets sliding_window = sliding_window if use_sliding_window else None, so no layer slides.
    if not config.get("sliding_window") or config.get("use_sliding_window") is False:
        return {"full": layers}
    every = config.get("sliding_window_pattern")
    if type(every) is int and every > 0:  # layers every, 2 x every, ... are full
        return {"full": layers // every, "window": layers - layers // every}
    if config.get("model_type") == "gemma2":  # transformers' Gemma2: even layers slide, odd ones are global
        return {"full": layers // 2, "window": layers - layers // 2}
    return {"window": layers}  # a window on every layer (Mistral 7B v0.1)


def read_model_config(path):
    """The :class:`KVShape` of a Hugging Face ``config.json``; ModelConfigError naming the file if it cannot."""
    path = Path(path)
    try:
        config = read_json(path, MAX_FILE_BYTES // 16, constants=True)  # fields it does not read may be Infinity
    except ValueError as error:
        raise ModelConfigError(str(error)) from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path}: expected a JSON object")
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}  # a multimodal model: its language model's shape
    config = {**DEFAULTS.get(config.get("model_type"), {}), **config}

    def whole(field, value, low=1, high=MAX_FIELD, why=""):
        if type(value) is not int or not low <= value <= high:
            raise ModelConfigError(
                f"{path}: {field} must be a whole number from {low} to {high}{why}, got {shown(value)}"
            )
        return value

    def field(name, low=1, high=MAX_FIELD, why=""):
        if config.get(name) is None:
            raise ModelConfigError(f"{path}: missing {name}")
        return whole(name, config[name], low, high, why)

    dtype = config.get("torch_dtype")
    if dtype is None:  # newer transformers write `dtype`
        dtype = config.get("dtype")
    if dtype is None:  # none named (gpt-oss): transformers' default, as vLLM reads it (served in 16 bits, auto)
        dtype = "float32"
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise ModelConfigError(f"{path}: torch_dtype {shown(dtype)} is not one of {', '.join(DTYPE_BYTES)}")
    layers = field("num_hidden_layers", high=MAX_LAYERS, why=" (real models have fewer than 1,000 layers)")
    if config.get("kv_lora_rank") is not None:  # multi-head latent attention (DeepSeek-V2/V3, Kimi K2, GLM-5)
        latent = field("kv_lora_rank") + field("qk_rope_head_dim")
        indexer = field("index_head_dim") if config.get("index_head_dim") is not None else 0  # DeepSeek-V3.2
        heads = field("num_attention_heads") if config.get("num_attention_heads") is not None else 0
        return KVShape(
            layers,
            1,
            latent,
            dtype,
            latent=True,
            indexer_layers=layers if indexer else 0,
            indexer_dim=indexer,
            heads=heads,
        )
    heads = field("num_attention_heads")
    kv_heads = heads  # no num_key_value_heads: every attention head has its own KV (multi-head attention)
    if config.get("num_key_value_heads") is not None:
        kv_heads = whole("num_key_value_heads", config["num_key_value_heads"])
    if heads % kv_heads:  # each KV head serves a whole group of query heads: transformers' repeat_kv by
        # num_attention_heads // num_key_value_heads, vLLM's attention backends' num_heads % num_kv_heads == 0 assert
        relation = "is more than" if kv_heads > heads else "does not divide"
        raise ModelConfigError(
            f"{path}: num_key_value_heads {kv_heads} {relation} num_attention_heads {heads}"
            " (each KV head must serve a whole group of query heads)"
        )
    named = "head_dim" if config.get("head_dim") is not None else "attention_head_dim"  # Nemotron-H's name
    if config.get(named) is not None:
        head_dim = whole(named, config[named])
    else:
        hidden = field("hidden_size")
        if hidden % heads:
            raise ModelConfigError(f"{path}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
        head_dim = hidden // heads
    kinds = layer_counts(config, layers, path)
    state = state_elements(field) if kinds["state"] else (0, 0)
    ssm_dtype = config.get("mamba_ssm_cache_dtype") if kinds["state"] else None
    if ssm_dtype is not None and ssm_dtype not in DTYPE_BYTES:
        raise ModelConfigError(
            f"{path}: mamba_ssm_cache_dtype {shown(ssm_dtype)} is not one of {', '.join(DTYPE_BYTES)}"
        )
    return KVShape(
        kinds["full"],
        kv_heads,
        head_dim,
        dtype,
        window_layers=kinds["window"],
        window=field("sliding_window") if kinds["window"] else 0,
        state_layers=kinds["state"],
        state_conv=state[0],
        state_ssm=state[1],
        ssm_dtype=ssm_dtype or "",
        heads=heads,
    )


def state_elements(field):
    """``(conv, ssm)`` elements of one recurrent layer's state per request: its convolution's last inputs, and its
    SSM (Mamba2: Nemotron-H) or delta-rule (Gated DeltaNet: Qwen3-Next) state; vLLM's ``mamba2_state_shape``
    and ``gated_delta_net_state_shape`` (docs/engines.md, section 5)."""
    try:
        keys = field("linear_num_key_heads") * field("linear_key_head_dim")  # Gated DeltaNet
        values = field("linear_num_value_heads") * field("linear_value_head_dim")
        conv = (2 * keys + values) * (field("linear_conv_kernel_dim") - 1)
        return conv, field("linear_num_value_heads") * field("linear_key_head_dim") * field("linear_value_head_dim")
    except ModelConfigError:
        pass
    inner = field("mamba_num_heads") * field("mamba_head_dim")  # Mamba2
    conv = (inner + 2 * field("n_groups") * field("ssm_state_size")) * (field("conv_kernel") - 1)
    return conv, inner * field("ssm_state_size")


def decimal_gib(value):
    """A GiB amount as an exact Decimal (from its text, so 1.5 is 1.5); ValueError if not a number >= 0."""
    text = str(value)
    try:
        number = Decimal(text) if len(text) <= 100 and number_text(text) else Decimal("NaN")
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
    """Whole tokens of KV that ``gib_amount`` GiB holds; ValueError for a token of no bytes (it has no answer)."""
    if bytes_per_token < 1:
        raise ValueError(f"a token must take at least one byte to count tokens in GiB, got {bytes_per_token}")
    return math.floor(Fraction(decimal_gib(gib_amount)) * GIB / bytes_per_token)  # exact at any precision


def gib(tokens, bytes_per_token):
    """GiB that ``tokens`` tokens of KV take, rounded up to 4 decimals: a budget of that many GiB holds them."""
    steps = math.ceil(Fraction(tokens * bytes_per_token * 10**GIB_DECIMALS, GIB))  # exact, then up
    return float(Decimal(steps).scaleb(-GIB_DECIMALS))


def no_tokens(shape):
    """Why a model with no KV bytes per token cannot be planned, in words; None when it can."""
    if shape.bytes_per_token(windows=True):
        return None
    kept = f"its {shape.state_layers} recurrent layers keep one state per request" if shape.state_layers else ""
    return (
        "the model caches no KV per token" + (f" ({kept})" if kept else "") + ", so a GiB holds no number of"
        " tokens and there is no CPU budget to plan (kvlab size shows what it holds per request)"
    )


def kv_dtype_setting(group=None):
    """The ``kv_dtype`` setting, as every command that takes it declares it (kvlab/util/settings.py)."""
    return setting(
        "auto",
        choices=tuple(KV_DTYPES),
        group=group,
        help="the element the KV cache is stored in (default auto: the model's, a float32 one served in 16 bits)",
    )
