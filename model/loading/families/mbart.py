"""mBART / mBART-50 (model_type mbart): pre-norm with final encoder/decoder norms and an embedding LayerNorm,
learned positions with offset 2, GELU, tied output with final_logits_bias.

mBART-50 (MBart50Tokenizer, tokenizer.json): source `[src_lang] X </s>` with codes like `fr_XX`; the decoder
starts from </s> and the target language code is forced first.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import CheckpointError
from ...network.architecture import Architecture, ModelConfig, Positions
from . import layout
from .base import Family, TokenizerJson, read_tokenizer_config
from .language_tokens import LanguageTokenTokenizer, listed_language_codes

# transformers' MBartConfig defaults, for keys a config.json leaves out.
DEFAULTS = dict(vocab_size=50265, max_position_embeddings=1024, encoder_layers=12, decoder_layers=12,
                encoder_ffn_dim=4096, decoder_ffn_dim=4096, encoder_attention_heads=16, decoder_attention_heads=16,
                activation_function="gelu", d_model=1024, scale_embedding=False, pad_token_id=1, eos_token_id=2,
                forced_eos_token_id=2, tie_word_embeddings=True)


def model_config(raw: dict, source: str) -> ModelConfig:
    architecture = Architecture(positions=Positions.LEARNED, pre_norm=True, final_norms=True, embedding_norm=True,
                                scale_embedding=bool(raw.get("scale_embedding", DEFAULTS["scale_embedding"])),
                                activation=raw.get("activation_function", DEFAULTS["activation_function"]),
                                output_bias=True)
    return layout.model_config(raw, source, DEFAULTS, architecture, shared_embeddings=True)


def load_tokenizer(model_dir: Path) -> LanguageTokenTokenizer:
    tok_config = read_tokenizer_config(model_dir)
    if not (model_dir / "tokenizer.json").exists():
        raise CheckpointError(f"{model_dir / 'tokenizer.json'}: file not found (mBART-50 checkpoints ship it)")
    pieces = TokenizerJson.read(model_dir / "tokenizer.json")
    return LanguageTokenTokenizer(pieces, listed_language_codes(pieces, model_dir, tok_config),
                                  tok_config.get("src_lang") or "en_XX")


FAMILY = Family(name="mbart", model_config=model_config, key_map=layout.key_map, ignored_keys=layout.ignored_keys,
                load_tokenizer=load_tokenizer)
