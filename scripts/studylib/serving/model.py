"""A random-initialised MoE model and an offline tokenizer, built locally from config.

No model hub is touched: the architecture is one transformers ships (Qwen3-MoE), its
geometry (layers, hidden size, experts, top-k, expert size) comes from the config, the
weights are random (seeded), and the tokenizer is a word-level vocabulary of synthetic
tokens ``w<i>`` built with the ``tokenizers`` library. The model has no EOS id, so
generation always runs to the requested length.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL = ["<unk>", "<pad>", "<eos>"]


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )


def prompt_text(token_ids: list[int]) -> str:
    """The text that this tokenizer turns back into exactly ``token_ids``."""
    return " ".join(f"w{t}" for t in token_ids)


def build_moe_model(out_dir: str | Path, geometry: dict, seed: int = 0, dtype: str = "bfloat16",
                    device: str = "cpu"):  # fmt: skip
    """Save a random Qwen3-MoE with ``geometry`` and its tokenizer under ``out_dir``.

    The weights are created directly on ``device`` in ``dtype``: the seed geometry is about
    19 G parameters, 39 GB in bf16, which an fp32 CPU build followed by a cast would double.
    """
    import torch
    from transformers import GenerationConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM

    out_dir = Path(out_dir)
    g = geometry
    config = Qwen3MoeConfig(
        vocab_size=g["vocab_size"],
        hidden_size=g["hidden_size"],
        intermediate_size=g.get("intermediate_size", g["moe_intermediate_size"]),
        moe_intermediate_size=g["moe_intermediate_size"],
        num_hidden_layers=g["layers"],
        num_attention_heads=g["heads"],
        num_key_value_heads=g["kv_heads"],
        head_dim=g.get("head_dim", g["hidden_size"] // g["heads"]),
        num_experts=g["experts"],
        num_experts_per_tok=g["top_k"],
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=g.get("max_position_embeddings", 4096),
        bos_token_id=None,
        eos_token_id=None,  # no EOS: generation never stops early
        pad_token_id=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = Qwen3MoeForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config = GenerationConfig(eos_token_id=None, pad_token_id=1, do_sample=False)
    model.save_pretrained(out_dir)
    build_tokenizer(g["vocab_size"]).save_pretrained(out_dir)
    params = sum(p.numel() for p in model.parameters())
    facts = {"architecture": "Qwen3MoeForCausalLM", "parameters": params, "dtype": dtype,
             "seed": seed, "built_on": device, **geometry}  # fmt: skip
    (out_dir / "study_model.json").write_text(json.dumps(facts, indent=2))
    return facts
