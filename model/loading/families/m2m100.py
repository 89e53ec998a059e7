"""M2M100 and NLLB-200 (model_type m2m_100): pre-norm with final encoder/decoder norms, fairseq sinusoidal
positions counted over non-pad tokens (offset 2), ReLU, tied output without bias, √d embedding scale.

Source `[src_lang] X </s>` (NLLB's legacy order `X </s> [src_lang]` where tokenizer_config asks for it); the
decoder starts from </s> and the target language token is forced first.
- M2M100: SentencePiece + vocab.json, language tokens `__fr__` after the vocabulary (model code `fr`).
- NLLB-200: tokenizer.json (a BPE converted from SentencePiece), language tokens `fra_Latn`.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import CheckpointError
from ...network.architecture import Architecture, ModelConfig, Positions
from ..config import read_json
from . import layout
from .base import Family, TokenizerJson, read_tokenizer_config
from .language_tokens import LanguageTokenTokenizer, SentencePieceVocab, listed_language_codes

# transformers' M2M100Config defaults, for keys a config.json leaves out.
DEFAULTS = dict(vocab_size=128112, max_position_embeddings=1024, encoder_layers=12, decoder_layers=12,
                encoder_ffn_dim=4096, decoder_ffn_dim=4096, encoder_attention_heads=16, decoder_attention_heads=16,
                activation_function="relu", d_model=1024, decoder_start_token_id=2, scale_embedding=True,
                pad_token_id=1, eos_token_id=2, tie_word_embeddings=True)


# M2M100Tokenizer keeps its language list in code (tokenizer_config.json names it: "language_codes"); the
# tokens `__xx__` take the ids after vocab.json in this order. Data copied from transformers' tokenizer.
M2M100_LANGUAGES = {
    "m2m100": ("af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he "
               "hi hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no "
               "ns oc or pa pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo "
               "zh zu").split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def model_config(raw: dict, source: str) -> ModelConfig:
    architecture = Architecture(positions=Positions.FAIRSEQ_SINUSOIDAL, pre_norm=True, final_norms=True,
                                scale_embedding=bool(raw.get("scale_embedding", DEFAULTS["scale_embedding"])),
                                activation=raw.get("activation_function", DEFAULTS["activation_function"]),
                                output_bias=False)
    return layout.model_config(raw, source, DEFAULTS, architecture, shared_embeddings=True)


def m2m100_tokenizer(model_dir: Path, tok_config: dict) -> LanguageTokenTokenizer:
    vocab = read_json(model_dir / "vocab.json")
    list_name = tok_config.get("language_codes", "m2m100")
    if list_name not in M2M100_LANGUAGES:
        raise CheckpointError(f"{model_dir / 'tokenizer_config.json'}: language_codes {list_name!r} is not one of "
                              f"{', '.join(M2M100_LANGUAGES)}")
    codes = {code: len(vocab) + i for i, code in enumerate(M2M100_LANGUAGES[list_name])}
    pieces = SentencePieceVocab(model_dir / "sentencepiece.bpe.model", vocab,
                                {f"__{code}__": i for code, i in codes.items()}, tok_config.get("unk_token", "<unk>"))
    return LanguageTokenTokenizer(pieces, codes, tok_config.get("src_lang") or "en")


def nllb_tokenizer(model_dir: Path, tok_config: dict) -> LanguageTokenTokenizer:
    pieces = TokenizerJson.read(model_dir / "tokenizer.json")
    return LanguageTokenTokenizer(pieces, listed_language_codes(pieces, model_dir, tok_config),
                                  tok_config.get("src_lang") or "eng_Latn",
                                  legacy_suffix=bool(tok_config.get("legacy_behaviour", False)))


def load_tokenizer(model_dir: Path) -> LanguageTokenTokenizer:
    """M2M100's files (vocab.json + sentencepiece.bpe.model) or NLLB's (tokenizer.json)."""
    tok_config = read_tokenizer_config(model_dir)
    if tok_config.get("tokenizer_class") == "M2M100Tokenizer" or not (model_dir / "tokenizer.json").exists():
        return m2m100_tokenizer(model_dir, tok_config)
    return nllb_tokenizer(model_dir, tok_config)


FAMILY = Family(name="m2m_100", model_config=model_config, key_map=layout.key_map, ignored_keys=layout.ignored_keys,
                load_tokenizer=load_tokenizer)
