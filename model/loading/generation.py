"""A checkpoint's generation defaults (generation_config.json, else config.json's generation keys, as
transformers reads them) as the DecodeParams a request starts from."""

from __future__ import annotations

from pathlib import Path

from ..decoding.search import START_TOKENS, DecodeParams, new_tokens_within
from ..errors import CheckpointError
from ..network.architecture import ModelConfig
from .config import first_id, read_json

DEFAULT_MAX_NEW_TOKENS = 256


def generation_defaults(raw: dict, config: ModelConfig) -> DecodeParams:
    """transformers' semantics: max_length and min_length count the start token."""
    if raw.get("max_new_tokens") is not None:
        max_new = int(raw["max_new_tokens"])
    elif raw.get("max_length") is not None:
        max_new = new_tokens_within(int(raw["max_length"]))
    else:
        max_new = DEFAULT_MAX_NEW_TOKENS
    sampling = bool(raw.get("do_sample", False))
    return DecodeParams(
        max_new_tokens=max(1, min(max_new, new_tokens_within(config.max_position_embeddings))),
        # min_length counts the start token (transformers' MinLengthLogitsProcessor); both apply
        min_new_tokens=max(int(raw.get("min_new_tokens") or 0),
                           new_tokens_within(int(raw.get("min_length") or START_TOKENS))),
        num_beams=1 if sampling else int(raw.get("num_beams") or 1),  # sampling runs one beam here
        length_penalty=float(raw.get("length_penalty", 1.0)),
        early_stopping=raw.get("early_stopping", False),
        do_sample=sampling,
        temperature=float(raw.get("temperature") or 1.0),
        top_k=int(raw.get("top_k") or 0),
        top_p=float(raw.get("top_p") or 1.0),
        bad_words_ids=tuple(tuple(ids) for ids in raw.get("bad_words_ids") or ()),
        forced_bos_token_id=first_id(raw.get("forced_bos_token_id")),
        # only where the generation settings are read from: transformers ignores config.json's when a
        # generation_config.json exists without it
        forced_eos_token_id=first_id(raw.get("forced_eos_token_id")),
        repetition_penalty=float(raw.get("repetition_penalty") or 1.0),
        no_repeat_ngram_size=int(raw.get("no_repeat_ngram_size") or 0),
    )


def read_generation_defaults(model_dir: Path, config: ModelConfig) -> DecodeParams:
    gen_path = model_dir / "generation_config.json"
    # Like transformers: without generation_config.json, generation keys of config.json apply.
    path = gen_path if gen_path.exists() else model_dir / "config.json"
    try:
        return generation_defaults(read_json(path), config)
    except ValueError as e:  # values no search accepts
        raise CheckpointError(f"{path}: {e}") from None
