"""Write a tiny LLaMA-architecture model with random weights, for a real llama.cpp server on any CPU.

4 layers, width 256, 4 attention heads, 2 KV heads (head dim 64), a SentencePiece ("llama") vocabulary in which
every word of three letters from ``LETTERS`` is one token (its prefixes are tokens too, so that llama.cpp's
bigram merges reach it), and no BOS token added: prompts that start with different words share no first token.
Besides the GGUF file it writes the Hugging Face ``config.json`` fields that size its KV cache, so that kvlab
sizes the server's saved states as it sizes any model. Weights are drawn from a seeded generator: the same
arguments give the same bytes.

    python server/tiny_model.py OUT_DIR     (needs the server extra: gguf, numpy)
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

LETTERS = "abcdefghijklmnop"  # 16 letters: 4,096 words
SPACE = "\u2581"  # SentencePiece's word boundary
LAYERS, WIDTH, HEADS, KV_HEADS, FFN, CONTEXT = 4, 256, 4, 2, 512, 16384


def words():
    """Every word of the vocabulary, in order."""
    return ["".join(letters) for letters in itertools.product(LETTERS, repeat=3)]


def vocabulary():
    """``(pieces, scores, types)``: the special tokens, single characters, then every word prefix by length (the
    longer, the higher its score, so merges build whole words)."""
    import gguf

    pieces = ["<unk>", "<s>", "</s>", SPACE, *LETTERS]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.NORMAL] * (len(pieces) - 3)
    scores = [0.0] * len(pieces)
    for length in (1, 2, 3):
        for letters in itertools.product(LETTERS, repeat=length):
            pieces.append(SPACE + "".join(letters))
            types.append(gguf.TokenType.NORMAL)
            scores.append(float(length))
    return pieces, scores, types


def write(folder, seed=0):
    """The model in ``folder``: ``tiny.gguf`` and ``config.json``."""
    import gguf
    import numpy as np

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pieces, scores, types = vocabulary()
    head_dim = WIDTH // HEADS
    writer = gguf.GGUFWriter(str(folder / "tiny.gguf"), "llama")
    writer.add_name("kvlab-tiny")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    rng = np.random.default_rng(seed)

    def weight(rows, columns):
        return (rng.standard_normal((rows, columns)) / np.sqrt(columns)).astype(np.float32)

    ones = np.ones(WIDTH, dtype=np.float32)
    writer.add_tensor("token_embd.weight", weight(len(pieces), WIDTH))
    for layer in range(LAYERS):
        name = f"blk.{layer}."
        writer.add_tensor(name + "attn_norm.weight", ones)
        writer.add_tensor(name + "attn_q.weight", weight(WIDTH, WIDTH))
        writer.add_tensor(name + "attn_k.weight", weight(KV_HEADS * head_dim, WIDTH))
        writer.add_tensor(name + "attn_v.weight", weight(KV_HEADS * head_dim, WIDTH))
        writer.add_tensor(name + "attn_output.weight", weight(WIDTH, WIDTH))
        writer.add_tensor(name + "ffn_norm.weight", ones)
        writer.add_tensor(name + "ffn_gate.weight", weight(FFN, WIDTH))
        writer.add_tensor(name + "ffn_up.weight", weight(FFN, WIDTH))
        writer.add_tensor(name + "ffn_down.weight", weight(WIDTH, FFN))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", weight(len(pieces), WIDTH))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": WIDTH,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": FFN,
        "max_position_embeddings": CONTEXT,
        "vocab_size": len(pieces),
        "torch_dtype": "float16",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return folder


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="where to write tiny.gguf and config.json")
    parser.add_argument("--seed", type=int, default=0, help="the weights' seed (default 0)")
    args = parser.parse_args(argv)
    try:
        write(args.folder, args.seed)
    except ImportError as error:
        sys.exit(f"tiny_model.py: {error.name} is missing: install the server extra (make test-server does)")
    except OSError as error:
        sys.exit(f"tiny_model.py: {error.filename or args.folder}: {error.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
