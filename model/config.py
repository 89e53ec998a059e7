"""Generation defaults read once from a checkpoint's generation_config.json (or config.json), and JSON reading."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .architecture import ModelConfig
from .errors import CheckpointError
from .search import START_TOKENS, new_tokens_within


def first_id(value):
    """transformers allows a list of ids where one is meant (eos_token_id: [2]); the first one counts."""
    return value[0] if isinstance(value, list) else value


@dataclass(frozen=True)
class GenerationDefaults:
    """Defaults from generation_config.json (transformers' semantics: max_length counts the start token)."""

    num_beams: int = 1
    max_new_tokens: int = 256
    min_new_tokens: int = 0
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0

    @classmethod
    def from_dict(cls, raw: dict, config: ModelConfig) -> "GenerationDefaults":
        if "max_new_tokens" in raw and raw["max_new_tokens"] is not None:
            max_new = int(raw["max_new_tokens"])
        elif raw.get("max_length") is not None:
            max_new = new_tokens_within(int(raw["max_length"]))
        else:
            max_new = cls.max_new_tokens
        max_new = max(1, min(max_new, new_tokens_within(config.max_position_embeddings)))
        return cls(
            num_beams=int(raw.get("num_beams") or 1),
            max_new_tokens=max_new,
            # min_length counts the start token (transformers' MinLengthLogitsProcessor); both apply
            min_new_tokens=max(int(raw.get("min_new_tokens") or 0),
                               new_tokens_within(int(raw.get("min_length") or START_TOKENS))),
            length_penalty=float(raw.get("length_penalty", 1.0)),
            early_stopping=raw.get("early_stopping", False),
            bad_words_ids=tuple(tuple(ids) for ids in raw.get("bad_words_ids") or ()),
            forced_bos_token_id=first_id(raw.get("forced_bos_token_id")),
            forced_eos_token_id=first_id(raw.get("forced_eos_token_id", config.forced_eos_token_id)),
            do_sample=bool(raw.get("do_sample", False)),
            temperature=float(raw.get("temperature") or 1.0),
            top_k=int(raw.get("top_k") or 0),
            top_p=float(raw.get("top_p") or 1.0),
            repetition_penalty=float(raw.get("repetition_penalty") or 1.0),
            no_repeat_ngram_size=int(raw.get("no_repeat_ngram_size") or 0),
        )


def config_reader(raw: dict, defaults: dict, source: str):
    """key → config.json's value, else the family's default; a key in neither names the file."""
    def get(key):
        value = raw.get(key, defaults.get(key))
        if value is None:
            raise CheckpointError(f"{source}: missing key {key!r}")
        return value
    return get


def read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from None


def read_generation_defaults(model_dir: Path, config: ModelConfig) -> GenerationDefaults:
    gen_path = model_dir / "generation_config.json"
    # Like transformers: without generation_config.json, generation keys of config.json apply.
    gen_raw = read_json(gen_path) if gen_path.exists() else read_json(model_dir / "config.json")
    return GenerationDefaults.from_dict(gen_raw, config)
