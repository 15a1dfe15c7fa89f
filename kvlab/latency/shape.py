"""What a forward pass computes and reads: a model's shape from its whole Hugging Face ``config.json``.

The roofline (``kvlab/latency/roofline.py``) needs every shape field the KV sizing does not
(``intermediate_size``, ``vocab_size``, the experts): a cut-down config is refused with the field it lacks.
The projections are transformers' (``modeling_llama.py``: q, k, v, o; a gated MLP of gate, up and down;
``modeling_mixtral.py`` / ``modeling_qwen3_moe.py``: top-k experts of the same MLP and a router; OPT's
``fc1``/``fc2`` ungated MLP of ``ffn_dim``).
"""

from dataclasses import dataclass

from kvlab.sizing.model_size import DEFAULTS, DTYPE_BYTES, MAX_FIELD, KVShape, ModelConfigError, read_model_config
from kvlab.util.files import MAX_FILE_BYTES, read_json, shown

__all__ = ["ComputeShape", "HeadsOnly", "read_compute_shape"]


class HeadsOnly(ModelConfigError):
    """A model whose compute shape kvlab does not read (latent attention, a recurrent state, an indexer): what
    needs it (the roofline, vLLM's GPU memory rule) says what to give instead."""


UNGATED = {"opt", "gpt2", "gpt_neox", "gptj", "falcon", "bloom"}  # an MLP of two projections (fc1, fc2)
# What transformers' configuration class fills in where a published config.json leaves a field out, beyond the
# KV sizing's (model_size.DEFAULTS): Gemma3TextConfig's vocab_size (gemma-3-4b-it and -27b-it name none).
SHAPE_DEFAULTS = {"gemma3_text": {"vocab_size": 262_208}}


@dataclass(frozen=True)
class ComputeShape:
    """Per layer: attention of ``heads`` query heads over ``kv_heads`` KV heads of ``head_dim``; an MLP of
    ``intermediate`` (gated: three projections) or, in ``moe_layers`` of the layers, ``experts_per_token`` of
    ``experts`` experts of ``expert_intermediate`` (and a shared one of ``shared_intermediate``); a vocabulary
    of ``vocab``. ``kv`` is the KV sizing's shape (its window layers), ``weight_bytes`` an element's bytes."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    gated: bool
    experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int
    moe_layers: int
    weight_bytes: int
    kv: KVShape
    model_type: str = ""

    def attention_params(self):
        """q, k, v and o projections of one layer."""
        q = self.heads * self.head_dim
        return self.hidden * (2 * q + 2 * self.kv_heads * self.head_dim)

    def mlp_params(self, size):
        return (3 if self.gated else 2) * self.hidden * size

    def active_params_per_token(self):
        """Weights one token multiplies through, over every layer (the lm head is the last token's only)."""
        dense = self.layers - self.moe_layers
        moe = self.experts_per_token * self.mlp_params(self.expert_intermediate) + self.hidden * self.experts
        moe += self.mlp_params(self.shared_intermediate) if self.shared_intermediate else 0
        return (
            self.layers * self.attention_params() + dense * self.mlp_params(self.intermediate) + self.moe_layers * moe
        )

    def weights(self):
        """Every weight (the embedding and, untied, the lm head, each ``vocab x hidden``)."""
        dense = self.layers - self.moe_layers
        moe = self.experts * self.mlp_params(self.expert_intermediate) + self.hidden * self.experts
        moe += self.mlp_params(self.shared_intermediate) if self.shared_intermediate else 0
        body = (
            self.layers * self.attention_params() + dense * self.mlp_params(self.intermediate) + self.moe_layers * moe
        )
        return body + self.vocab * self.hidden * (1 if self.tied else 2)

    def describe(self):
        return {
            "name": self.name,
            "layers": self.layers,
            "hidden_size": self.hidden,
            "weights_billion": round(self.weights() / 1e9, 3),
            "active_weights_billion": round(self.active_params_per_token() / 1e9, 3),
        }


def read_compute_shape(path):
    """The :class:`ComputeShape` of a ``config.json``; ModelConfigError naming the file and the field it lacks."""
    kv = read_model_config(path)  # the KV shape, and its checks of the heads and layers
    config = read_json(path, MAX_FILE_BYTES // 16, constants=True)
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    kind = config.get("model_type")
    config = {**DEFAULTS.get(kind, {}), **SHAPE_DEFAULTS.get(kind, {}), **config}
    where = str(path)

    def field(*names, default=None, low=1):
        for name in names:
            value = config.get(name)
            if value is not None:
                if type(value) is not int or not low <= value <= MAX_FIELD:
                    raise ModelConfigError(f"{where}: {name} must be a whole number from {low}, got {shown(value)}")
                return value
        if default is not None:
            return default
        raise ModelConfigError(
            f"{where}: missing {names[0]}: the hardware model needs the whole published config.json, not a cut one"
        )

    if kv.latent or kv.state_layers or kv.indexer_layers:
        raise HeadsOnly(
            f"{where}: the roofline prices attention models with heads only (not latent attention, a recurrent"
            " state or an indexer): use --latency-source database where it covers the model"
        )
    experts = field("num_experts", "num_local_experts", "n_routed_experts", default=0, low=0)
    intermediate = field("intermediate_size", "ffn_dim")
    moe_layers = 0
    if experts:
        dense_head = field("first_k_dense_replace", default=0, low=0)
        skipped = config.get("mlp_only_layers") or []
        moe_layers = config["num_hidden_layers"] - dense_head - (len(skipped) if isinstance(skipped, list) else 0)
    shared = field("shared_expert_intermediate_size", default=0, low=0)
    if not shared and experts and config.get("n_shared_experts"):
        shared = field("n_shared_experts", low=0) * field("moe_intermediate_size")
    dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
    return ComputeShape(
        name=where.removesuffix("/config.json").rsplit("/", 1)[-1],
        layers=config["num_hidden_layers"],
        hidden=field("hidden_size"),
        heads=field("num_attention_heads"),
        kv_heads=kv.kv_heads,
        head_dim=kv.head_dim,
        intermediate=intermediate,
        vocab=field("vocab_size"),
        tied=bool(config.get("tie_word_embeddings", True)),  # PretrainedConfig's default (Gemma 2 and 3, OPT omit it)
        gated=config.get("model_type") not in UNGATED,
        model_type=str(config.get("model_type") or ""),
        experts=experts,
        experts_per_token=field("num_experts_per_tok", default=1) if experts else 0,
        expert_intermediate=field("moe_intermediate_size", default=intermediate) if experts else 0,
        shared_intermediate=shared,
        moe_layers=moe_layers,
        weight_bytes=min(DTYPE_BYTES.get(dtype, 2), 2),  # served in 16 bits when the checkpoint is float32
        kv=kv,
    )
