"""The checkpoint layout that Marian, M2M100/NLLB, mBART and BART share (fairseq's, as transformers names it):
config.json keys → ModelConfig, and our state-dict keys → the checkpoint keys they are made of.

Each of our tensors is built from one or more checkpoint tensors concatenated along dim 0 (the fused Q/K/V
and K/V projections); each part lists the checkpoint keys that may hold it (tied embeddings appear under
several names).
"""

from __future__ import annotations

from ...network.architecture import Architecture, ModelConfig, Positions
from ..config import config_reader, first_id

Parts = tuple[tuple[str, ...], ...]  # parts concatenated along dim 0; each part: alternative checkpoint keys
ZEROS: tuple[str, ...] = ()  # a part no checkpoint holds, zeros (Whisper's key projections have no bias)
OUTPUT_BIAS = "lm_head.bias"  # final_logits_bias in the checkpoint


def model_config(raw: dict, source: str, defaults: dict, architecture: Architecture,
                 shared_embeddings: bool) -> ModelConfig:
    """config.json (`raw`, read from `source`) → ModelConfig; keys it lacks take the family's `defaults`."""
    get = config_reader(raw, defaults, source)
    vocab = get("vocab_size")
    pad = get("pad_token_id")
    return ModelConfig(
        architecture=architecture,
        vocab_size=vocab,
        target_vocab_size=raw.get("decoder_vocab_size") or vocab,
        d_model=get("d_model"),
        encoder_layers=get("encoder_layers"),
        decoder_layers=get("decoder_layers"),
        encoder_attention_heads=get("encoder_attention_heads"),
        decoder_attention_heads=get("decoder_attention_heads"),
        encoder_ffn_dim=get("encoder_ffn_dim"),
        decoder_ffn_dim=get("decoder_ffn_dim"),
        max_position_embeddings=get("max_position_embeddings"),
        shared_embeddings=shared_embeddings,
        tie_word_embeddings=bool(get("tie_word_embeddings")),
        pad_token_id=pad,
        eos_token_id=first_id(get("eos_token_id")),
        decoder_start_token_id=raw.get("decoder_start_token_id", defaults.get("decoder_start_token_id", pad)),
        forced_eos_token_id=first_id(raw.get("forced_eos_token_id", defaults.get("forced_eos_token_id"))),
    )


def add_parts(out: dict[str, Parts], ours: str, theirs: list[str], suffixes: tuple[str, ...]) -> None:
    """out[ours.suffix] = the checkpoint tensors theirs[i].suffix, concatenated along dim 0, for each suffix."""
    for suffix in suffixes:
        out[f"{ours}.{suffix}"] = tuple((f"{t}.{suffix}",) for t in theirs)


def key_map(config: ModelConfig) -> dict[str, Parts]:
    """Our state-dict key → the checkpoint keys it is made of."""
    arch = config.architecture
    out: dict[str, Parts] = {}

    def add(ours: str, theirs: list[str], suffixes=("weight", "bias")) -> None:
        add_parts(out, ours, theirs, suffixes)

    for side, n_layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n_layers):
            ours, theirs = f"{side}_layers.{i}", f"model.{side}.layers.{i}"
            add(f"{ours}.self_attn.qkv_proj", [f"{theirs}.self_attn.{p}_proj" for p in "qkv"])
            add(f"{ours}.self_attn.out_proj", [f"{theirs}.self_attn.out_proj"])
            add(f"{ours}.self_attn_layer_norm", [f"{theirs}.self_attn_layer_norm"])
            add(f"{ours}.ffn.fc1", [f"{theirs}.fc1"])
            add(f"{ours}.ffn.fc2", [f"{theirs}.fc2"])
            add(f"{ours}.final_layer_norm", [f"{theirs}.final_layer_norm"])
            if side == "decoder":
                add(f"{ours}.encoder_attn.q_proj", [f"{theirs}.encoder_attn.q_proj"])
                add(f"{ours}.encoder_attn.kv_proj", [f"{theirs}.encoder_attn.{p}_proj" for p in "kv"])
                add(f"{ours}.encoder_attn.out_proj", [f"{theirs}.encoder_attn.out_proj"])
                add(f"{ours}.encoder_attn_layer_norm", [f"{theirs}.encoder_attn_layer_norm"])
        if arch.positions is Positions.LEARNED:
            add(f"{side}_positions", [f"model.{side}.embed_positions"], ("weight",))
        if arch.embedding_norm:
            add(f"{side}_embed_norm", [f"model.{side}.layernorm_embedding"])
        if arch.final_norms:
            add(f"{side}_norm", [f"model.{side}.layer_norm"])
    lm_head_alias = ("lm_head.weight",) if config.tie_word_embeddings else ()
    shared_alias = ("model.shared.weight",)
    if config.shared_embeddings:
        out["encoder_embed.weight"] = (("model.shared.weight", "model.encoder.embed_tokens.weight",
                                        "model.decoder.embed_tokens.weight") + lm_head_alias,)
    else:
        out["encoder_embed.weight"] = (("model.encoder.embed_tokens.weight",) + shared_alias,)
        out["decoder_embed.weight"] = (("model.decoder.embed_tokens.weight",) + shared_alias + lm_head_alias,)
    if not config.tie_word_embeddings:
        out["lm_head.weight"] = (("lm_head.weight",),)
    if arch.output_bias:
        out[OUTPUT_BIAS] = (("final_logits_bias",),)
    return out


def ignored_keys(config: ModelConfig) -> tuple[str, ...]:
    """Keys some checkpoints hold that we recompute (fixed sinusoid tables)."""
    if config.architecture.positions is Positions.LEARNED:
        return ()
    return tuple(f"model.{side}.embed_positions.{name}" for side in ("encoder", "decoder")
                 for name in ("weight", "weights", "_float_tensor"))
