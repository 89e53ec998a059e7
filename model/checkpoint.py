"""Hugging Face Marian checkpoints ↔ Seq2SeqTransformer, through one explicit key map.

Each of our tensors is built from one or more checkpoint tensors concatenated along dim 0 (the fused Q/K/V
and K/V projections); each part lists the checkpoint keys that may hold it (tied embeddings appear under
several names). Loading checks every key and shape and names the file and key on any mismatch.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .cpu_kernels import use_onednn_linears
from .config import CheckpointError, GenerationDefaults, ModelConfig, load_configs
from .transformer import Seq2SeqTransformer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Present in some checkpoints, recomputed here (sinusoids).
IGNORED_KEYS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
OUTPUT_BIAS = "lm_head.bias"  # Marian's final_logits_bias

Parts = tuple[tuple[str, ...], ...]  # parts concatenated along dim 0; each part: alternative checkpoint keys


def key_map(config: ModelConfig) -> dict[str, Parts]:
    """Our state-dict key → the checkpoint keys it is made of."""
    out: dict[str, Parts] = {}

    def add(ours: str, theirs: list[str], suffixes=("weight", "bias")) -> None:
        for suffix in suffixes:
            out[f"{ours}.{suffix}"] = tuple((f"{t}.{suffix}",) for t in theirs)

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
    lm_head_alias = ("lm_head.weight",) if config.tie_word_embeddings else ()
    shared_alias = ("model.shared.weight",) if config.share_encoder_decoder_embeddings else ()
    if config.one_embedding:
        out["encoder_embed.weight"] = (("model.shared.weight", "model.encoder.embed_tokens.weight",
                                        "model.decoder.embed_tokens.weight") + lm_head_alias,)
    else:
        out["encoder_embed.weight"] = (("model.encoder.embed_tokens.weight",) + shared_alias,)
        out["decoder_embed.weight"] = (("model.decoder.embed_tokens.weight",) + shared_alias + lm_head_alias,)
    if not config.tie_word_embeddings:
        out["lm_head.weight"] = (("lm_head.weight",),)
    out[OUTPUT_BIAS] = (("final_logits_bias",),)
    return out


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)  # never unpickle arbitrary objects
    except (pickle.UnpicklingError, RuntimeError, OSError, ValueError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: cannot read weights ({first_line})") from None


def weights_path(model_dir: Path) -> Path:
    for name in WEIGHT_FILES:
        if (model_dir / name).exists():
            return model_dir / name
    raise CheckpointError(f"{model_dir}: no weights file ({' or '.join(WEIGHT_FILES)})")


def load_model(model_dir: str | Path, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32) -> tuple[Seq2SeqTransformer, GenerationDefaults]:
    model_dir = Path(model_dir)
    config, generation = load_configs(model_dir)
    path = weights_path(model_dir)
    state = read_state_dict(path)
    model = Seq2SeqTransformer(config)
    expected = model.state_dict()
    loaded, used = {}, set(IGNORED_KEYS)
    for ours, parts in key_map(config).items():
        tensors = []
        for alternatives in parts:
            key = next((k for k in alternatives if k in state), None)
            if key is None:
                if ours == OUTPUT_BIAS:  # optional, as in transformers
                    break
                raise CheckpointError(f"{path}: missing key {alternatives[0]!r}")
            tensors.append(state[key])
            used.update(alternatives)
        if not tensors:
            continue
        value = torch.cat(tensors) if len(tensors) > 1 else tensors[0]
        value = value.reshape(-1) if ours == OUTPUT_BIAS else value
        if value.shape != expected[ours].shape:
            got = " + ".join(f"{k[0]} {tuple(t.shape)}" for k, t in zip(parts, tensors))
            raise CheckpointError(f"{path}: {got} does not match the expected shape {tuple(expected[ours].shape)} "
                                  f"from config.json")
        loaded[ours] = value
    unexpected = sorted(set(state) - used)
    if unexpected:
        raise CheckpointError(f"{path}: unexpected key {unexpected[0]!r}" +
                              (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""))
    model.load_state_dict(loaded, strict=False)
    missing = {name for name, _ in model.named_parameters()} - set(loaded) - {OUTPUT_BIAS}  # tied: listed once
    assert not missing, f"key map does not cover {sorted(missing)}"  # a bug in key_map, not in the file
    model = model.to(device=device, dtype=dtype).eval()
    if model.device.type == "cpu" and dtype == torch.float32:
        use_onednn_linears(model)
    return model, generation


def save_model(model: Seq2SeqTransformer, model_dir: str | Path, dtype: torch.dtype = torch.float32) -> None:
    """Write config.json and model.safetensors in the Hugging Face Marian layout."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    ours = model.state_dict()
    state = {}
    for key, parts in key_map(model.config).items():
        value = ours[key].detach().to(device="cpu", dtype=dtype)
        value = value.reshape(1, -1) if key == OUTPUT_BIAS else value
        for alternatives, chunk in zip(parts, value.chunk(len(parts))):
            state[alternatives[0]] = chunk.contiguous()
    save_file(state, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    with open(model_dir / "config.json", "w", encoding="utf-8") as f:
        json.dump(model.config.to_dict(), f, indent=2)
