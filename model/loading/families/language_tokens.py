"""Tokenizers of the families that name languages with tokens (M2M100, NLLB-200, mBART-50): the source
language token goes in front of the source (or after its </s>: NLLB's legacy order) and the target language
token is forced as the first generated one.

Two piece back-ends: SentencePiece + vocab.json (M2M100's slow tokenizer) and tokenizer.json through the
`tokenizers` library (what transformers 5 runs for NLLB and mBART-50, so ids and text are the same).
"""

from __future__ import annotations

from pathlib import Path

from ...errors import CheckpointError
from ..config import read_json
from .base import Languages, PiecesTokenizer, TokenizerJson, load_spm, sentencepiece_bytes, special_token_pattern


class SentencePieceVocab:
    """SentencePiece pieces mapped through vocab.json (unknown → <unk>); special tokens in the text are split out
    first and kept whole, as transformers' slow tokenizers do."""

    def __init__(self, spm_path: Path, vocab: dict[str, int], extra_tokens: dict[str, int], unk_token: str = "<unk>"):
        if unk_token not in vocab:
            raise CheckpointError(f"vocab.json: missing the unknown token {unk_token!r}")
        self.spm = load_spm(spm_path)
        self.vocab, self.unk_token, self.unk_id = vocab, unk_token, vocab[unk_token]
        self.id_to_token = {i: t for t, i in vocab.items()} | {i: t for t, i in extra_tokens.items()}
        specials = [t for t in ("<s>", "<pad>", "</s>", "<unk>") if t in vocab] + list(extra_tokens)
        self.special_tokens = {t: vocab.get(t, extra_tokens.get(t)) for t in specials}
        self.special_ids = set(self.special_tokens.values())
        self.special_re = special_token_pattern(specials)

    def token_id(self, token: str) -> int | None:
        return self.special_tokens.get(token, self.vocab.get(token))

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for chunk in self.special_re.split(text):
            if chunk in self.special_tokens:
                ids.append(self.special_tokens[chunk])
            elif chunk:
                ids += [self.vocab.get(p, self.unk_id) for p in self.spm.encode(chunk, out_type=str)]
        return ids

    def encode_word(self, text: str) -> list[int]:
        return self.encode(text)  # SentencePiece starts the text with ▁, as a word inside running text

    def decode(self, ids: list[int]) -> str:
        """Special ids skipped; an id with no token reads as the literal <unk>, which (being special) is not
        passed through SentencePiece — as transformers' M2M100Tokenizer does."""
        out, pieces = "", []
        for i in ids:
            if i in self.special_ids:
                continue
            token = self.id_to_token.get(i, self.unk_token)
            if token in self.special_tokens:
                out += self.spm.decode(pieces) + token
                pieces = []
            else:
                pieces.append(token)
        return (out + self.spm.decode(pieces)).strip()

    def token_bytes(self, ids: list[int]) -> list[bytes]:
        return [sentencepiece_bytes(self.id_to_token.get(i, self.unk_token)) for i in ids]


def listed_language_codes(pieces: TokenizerJson, model_dir: Path, tok_config: dict) -> dict[str, int]:
    """Language code → id, for the extra special tokens a checkpoint lists: tokenizer_config.json's
    extra_special_tokens (transformers 5) or additional_special_tokens, else special_tokens_map.json's."""
    listed = tok_config.get("extra_special_tokens") or tok_config.get("additional_special_tokens")
    if not listed and (model_dir / "special_tokens_map.json").exists():
        listed = read_json(model_dir / "special_tokens_map.json").get("additional_special_tokens")
    codes = {(t["content"] if isinstance(t, dict) else t): None for t in listed or []}
    return {code: i for code in codes if (i := pieces.token_id(code)) is not None}


class LanguageTokenTokenizer(PiecesTokenizer):
    """Source `[src] X </s>` (legacy: `X </s> [src]`); the target's token is forced first."""

    def __init__(self, pieces: SentencePieceVocab | TokenizerJson, codes: dict[str, int], default_source: str,
                 legacy_suffix: bool = False, eos_token: str = "</s>", pad_token: str = "<pad>"):
        if not codes:
            raise CheckpointError("tokenizer: no language codes found (tokenizer_config.json lists none)")
        self.pieces, self.codes, self.legacy_suffix = pieces, codes, legacy_suffix
        self.eos_id, self.pad_id = pieces.token_id(eos_token), pieces.token_id(pad_token)
        self.languages = Languages(source=tuple(codes), target=tuple(codes),
                                   default_source=default_source if default_source in codes else None,
                                   target_required=True)

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        ids = self.pieces.encode(text)
        lang = source_lang or self.languages.default_source
        if lang is None:
            return ids + [self.eos_id]
        lang_id = self.codes[lang]
        return ids + [self.eos_id, lang_id] if self.legacy_suffix else [lang_id] + ids + [self.eos_id]

    def forced_bos(self, target_lang: str | None) -> int | None:
        return None if target_lang is None else self.codes[target_lang]
