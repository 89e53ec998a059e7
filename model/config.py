"""Typed configuration read once from a Marian checkpoint's config.json and generation_config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ACTIVATIONS = ("swish", "silu", "relu", "gelu", "gelu_new")


class CheckpointError(ValueError):
    """A checkpoint file is missing, malformed or does not match the model; the message names the file/key."""


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    decoder_vocab_size: int
    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_position_embeddings: int
    activation_function: str
    scale_embedding: bool
    share_encoder_decoder_embeddings: bool
    tie_word_embeddings: bool
    pad_token_id: int
    eos_token_id: int
    decoder_start_token_id: int
    forced_eos_token_id: int | None

    def __post_init__(self) -> None:
        if self.activation_function not in ACTIVATIONS:
            raise CheckpointError(
                f"config.json: activation_function {self.activation_function!r} is not one of {', '.join(ACTIVATIONS)}"
            )
        for heads_key in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, heads_key):
                raise CheckpointError(f"config.json: d_model {self.d_model} is not divisible by {heads_key}")

    @property
    def one_embedding(self) -> bool:
        """Encoder input, decoder input and output share one matrix (transformers 5 unties all three when
        tie_word_embeddings is false, even with share_encoder_decoder_embeddings)."""
        return self.share_encoder_decoder_embeddings and self.tie_word_embeddings

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.share_encoder_decoder_embeddings else self.decoder_vocab_size

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config.json") -> "ModelConfig":
        def get(key, default=None):
            value = raw.get(key, default)
            if value is None and default is None:
                raise CheckpointError(f"{source}: missing key {key!r}")
            return value

        eos = get("eos_token_id", 0)
        forced_eos = raw.get("forced_eos_token_id", eos)
        pad = get("pad_token_id")
        return cls(
            vocab_size=get("vocab_size"),
            decoder_vocab_size=raw.get("decoder_vocab_size") or get("vocab_size"),
            d_model=get("d_model"),
            encoder_layers=get("encoder_layers"),
            decoder_layers=get("decoder_layers"),
            encoder_attention_heads=get("encoder_attention_heads"),
            decoder_attention_heads=get("decoder_attention_heads"),
            encoder_ffn_dim=get("encoder_ffn_dim"),
            decoder_ffn_dim=get("decoder_ffn_dim"),
            max_position_embeddings=get("max_position_embeddings", 1024),
            activation_function=get("activation_function", "gelu"),
            scale_embedding=bool(raw.get("scale_embedding", False)),
            share_encoder_decoder_embeddings=bool(raw.get("share_encoder_decoder_embeddings", True)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
            pad_token_id=pad,
            eos_token_id=eos[0] if isinstance(eos, list) else eos,
            decoder_start_token_id=raw.get("decoder_start_token_id", pad),
            forced_eos_token_id=forced_eos[0] if isinstance(forced_eos, list) else forced_eos,
        )

    def to_dict(self) -> dict:
        """The config.json that transformers' MarianConfig reads."""
        out = {key: getattr(self, key) for key in self.__dataclass_fields__}
        out.update(model_type="marian", architectures=["MarianMTModel"], is_encoder_decoder=True)
        return out


@dataclass(frozen=True)
class GenerationDefaults:
    """Defaults from generation_config.json (transformers' semantics: max_length counts the start token)."""

    num_beams: int = 1
    max_new_tokens: int = 256
    min_new_tokens: int = 0
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_eos_token_id: int | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @classmethod
    def from_dict(cls, raw: dict, config: ModelConfig) -> "GenerationDefaults":
        if "max_new_tokens" in raw and raw["max_new_tokens"] is not None:
            max_new = int(raw["max_new_tokens"])
        elif raw.get("max_length") is not None:
            max_new = int(raw["max_length"]) - 1
        else:
            max_new = cls.max_new_tokens
        max_new = max(1, min(max_new, config.max_position_embeddings - 1))
        forced = raw.get("forced_eos_token_id", config.forced_eos_token_id)
        return cls(
            num_beams=int(raw.get("num_beams") or 1),
            max_new_tokens=max_new,
            min_new_tokens=int(raw.get("min_new_tokens") or 0),
            length_penalty=float(raw.get("length_penalty", 1.0)),
            early_stopping=raw.get("early_stopping", False),
            bad_words_ids=tuple(tuple(ids) for ids in raw.get("bad_words_ids") or ()),
            forced_eos_token_id=forced[0] if isinstance(forced, list) else forced,
            do_sample=bool(raw.get("do_sample", False)),
            temperature=float(raw.get("temperature") or 1.0),
            top_k=int(raw.get("top_k") or 0),
            top_p=float(raw.get("top_p") or 1.0),
        )


def read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from None


def load_configs(model_dir: Path) -> tuple[ModelConfig, GenerationDefaults]:
    config = ModelConfig.from_dict(read_json(model_dir / "config.json"), str(model_dir / "config.json"))
    gen_path = model_dir / "generation_config.json"
    # Like transformers: without generation_config.json, generation keys of config.json apply.
    gen_raw = read_json(gen_path) if gen_path.exists() else read_json(model_dir / "config.json")
    return config, GenerationDefaults.from_dict(gen_raw, config)
