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
#: The positions of a model the study builds when its geometry names none.
DEFAULT_POSITIONS = 4096
#: Keys of a model's config.json that give the positions it has (architectures differ).
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "max_sequence_length")  # fmt: skip


def geometry_positions(geometry: dict) -> tuple[int, str]:
    """The positions of the model the study builds from ``geometry``, and where that comes
    from (its ``max_position_embeddings``, or the default)."""
    if geometry.get("max_position_embeddings"):
        return int(geometry["max_position_embeddings"]), "max_position_embeddings"
    return DEFAULT_POSITIONS, f"max_position_embeddings, default {DEFAULT_POSITIONS}"


def model_positions(model_dir: str | Path) -> tuple[int, str] | None:
    """The positions a model folder's config.json gives (its first of POSITION_KEYS, or its
    text_config's), and which file and key say so; None where the folder or the key is not
    there."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    # A multimodal model's language model keeps its own config (text_config).
    text = config.get("text_config") if isinstance(config, dict) else None
    for where, part in (("", config), ("text_config.", text)):
        if not isinstance(part, dict):
            continue
        for key in POSITION_KEYS:
            value = part.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"{where}{key} in {path}"
    return None


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
        max_position_embeddings=g.get("max_position_embeddings", DEFAULT_POSITIONS),
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


# --- config-only models served with random weights (SGLang's --load-format dummy) ---------

ARCHITECTURES = {"glm4_moe": "Glm4MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
WEIGHT_BYTES = {"bf16": 2, "fp8": 1}
FP8_BLOCK = 128  # block-FP8: one fp32 scale per 128 x 128 block of every linear weight


def served_model_config(geometry: dict, weights: str) -> dict:
    """config.json of a config-only model: ``geometry.architecture`` (glm4_moe, the seed's
    GLM family, or qwen3_moe) with the seed's expert shape; every layer is a MoE layer.
    ``weights: fp8`` adds a block-FP8 quantization_config, so the server allocates the
    weights in FP8 directly rather than building them in bf16 first."""
    g = geometry
    arch = g.get("architecture", "glm4_moe")
    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture {arch!r}: known {', '.join(ARCHITECTURES)}")
    if weights not in WEIGHT_BYTES:
        raise ValueError(f"weights {weights!r}: known {', '.join(WEIGHT_BYTES)}")
    head_dim = g.get("head_dim", g["hidden_size"] // g["heads"])
    config = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "vocab_size": g["vocab_size"],
        "hidden_size": g["hidden_size"],
        "intermediate_size": g.get("intermediate_size", g["moe_intermediate_size"]),
        "moe_intermediate_size": g["moe_intermediate_size"],
        "num_hidden_layers": g["layers"],
        "num_attention_heads": g["heads"],
        "num_key_value_heads": g["kv_heads"],
        "head_dim": head_dim,
        "num_experts_per_tok": g["top_k"],
        "max_position_embeddings": g.get("max_position_embeddings", DEFAULT_POSITIONS),
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "bos_token_id": None,
        "eos_token_id": None,  # no EOS: generation never stops early
        "pad_token_id": 1,
        "torch_dtype": "bfloat16",
    }
    if arch == "glm4_moe":
        config.update(
            n_routed_experts=g["experts"],
            n_shared_experts=g.get("shared_experts", 0),
            first_k_dense_replace=0,  # every layer routes: the decode cost under study
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=1.0,
            partial_rotary_factor=0.5,
            use_qk_norm=False,
            num_nextn_predict_layers=0,
        )
    else:
        if g.get("shared_experts"):
            raise ValueError("qwen3_moe has no shared experts: set shared_experts to 0")
        config.update(num_experts=g["experts"], decoder_sparse_step=1, mlp_only_layers=[],
                      norm_topk_prob=True)  # fmt: skip
    if weights == "fp8":
        config["quantization_config"] = {
            "quant_method": "fp8",
            "activation_scheme": "dynamic",
            "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
        }
    return config


def weight_bytes(geometry: dict, weights: str) -> dict:
    """Bytes of each weight group as served (FP8: the linear layers in FP8 with their block
    scales; embeddings, router and lm_head stay bf16)."""
    g = geometry
    hidden, inter, experts = g["hidden_size"], g["moe_intermediate_size"], g["experts"]
    head_dim = g.get("head_dim", hidden // g["heads"])
    per_elt = WEIGHT_BYTES[weights]

    def linear(rows: int, cols: int) -> float:
        scales = 4 * -(-rows // FP8_BLOCK) * -(-cols // FP8_BLOCK) if weights == "fp8" else 0
        return rows * cols * per_elt + scales

    expert = linear(2 * inter, hidden) + linear(hidden, inter)  # gate_up, down
    attention = linear((g["heads"] + 2 * g["kv_heads"]) * head_dim, hidden) + linear(
        hidden, g["heads"] * head_dim
    )
    return {
        "expert": expert,
        "shared_experts": g.get("shared_experts", 0) * expert,
        "attention": attention,
        "router": 2 * experts * hidden,
        "lm_head": 2 * g["vocab_size"] * hidden,
        "embedding": 2 * g["vocab_size"] * hidden,
        "kv_per_token_layer": 2 * 2 * g["kv_heads"] * head_dim,  # K and V in bf16
    }


def experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts a layer reads in one decode step of ``tokens`` tokens, each
    routed to ``top_k`` of ``experts`` uniformly at random (the dummy weights' routing)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def step_bytes(geometry: dict, weights: str, concurrency: int, context: float) -> float:
    """The fewest bytes one decode step of ``concurrency`` sequences reads from HBM: per layer
    attention, router, shared experts and every routed expert some token picked, plus the
    KV cache of ``context`` tokens per sequence, plus lm_head. Divided by the measured copy
    bandwidth this is the step's HBM floor."""
    w = weight_bytes(geometry, weights)
    touched = experts_touched(geometry["experts"], geometry["top_k"], concurrency)
    layer = w["attention"] + w["router"] + w["shared_experts"] + touched * w["expert"]
    kv = concurrency * context * w["kv_per_token_layer"]
    return geometry["layers"] * (layer + kv) + w["lm_head"]


def write_served_model(out_dir: str | Path, geometry: dict, weights: str) -> dict:
    """A config-only model folder: config.json, the offline tokenizer and study_model.json
    (geometry, weight bytes). No weights: the server draws random ones."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = served_model_config(geometry, weights)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(
        json.dumps({"eos_token_id": None, "pad_token_id": 1, "do_sample": False})
    )
    build_tokenizer(geometry["vocab_size"]).save_pretrained(out_dir)
    w = weight_bytes(geometry, weights)
    layer = w["attention"] + w["router"] + w["shared_experts"] + geometry["experts"] * w["expert"]
    total = geometry["layers"] * layer + w["lm_head"] + w["embedding"]
    facts = {"model_class": config["architectures"][0], "weights": weights,
             "weights_random": True, "weight_bytes": total, **geometry}  # fmt: skip
    (out_dir / "study_model.json").write_text(json.dumps(facts, indent=2))
    return facts
