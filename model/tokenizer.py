"""Marian tokenizer: the same token ids and text as transformers' MarianTokenizer (v5).

Encoding: split out special tokens, keep a leading `>>xx<<` language code as one token, SentencePiece
pieces of the source model mapped through vocab.json (unknown → <unk>), then </s>. Decoding drops special
ids and joins pieces through SentencePiece. Moses punctuation normalization is opt-in: transformers defines
it but does not apply it, and parity with transformers is the default.
"""

from __future__ import annotations

import re
from pathlib import Path

import sentencepiece

from .config import CheckpointError, read_json

SPIECE_UNDERLINE = "▁"


def _load_spm(path: Path) -> sentencepiece.SentencePieceProcessor:
    if not path.exists():
        raise CheckpointError(f"{path}: file not found")
    spm = sentencepiece.SentencePieceProcessor()
    spm.Load(str(path))
    return spm


class MarianTokenizer:
    def __init__(self, source_spm: Path, target_spm: Path, vocab: dict[str, int],
                 target_vocab: dict[str, int] | None = None, source_lang: str | None = None,
                 target_lang: str | None = None,
                 unk_token: str = "<unk>", eos_token: str = "</s>", pad_token: str = "<pad>",
                 normalize_punctuation: bool = False):
        if unk_token not in vocab:
            raise CheckpointError(f"vocab.json: missing the unknown token {unk_token!r}")
        self.spm_source, self.spm_target = _load_spm(source_spm), _load_spm(target_spm)
        self.vocab = vocab
        self.source_lang, self.target_lang = source_lang, target_lang
        self.separate_vocabs = target_vocab is not None
        target = target_vocab if self.separate_vocabs else vocab
        self.id_to_piece = {i: piece for piece, i in target.items()}
        # transformers decodes with the source SentencePiece model when the vocabulary is shared.
        self.spm_decode = self.spm_target if self.separate_vocabs else self.spm_source
        self.unk_id = vocab[unk_token]
        self.eos_id, self.pad_id = vocab[eos_token], vocab[pad_token]
        specials = [eos_token, unk_token, pad_token]
        self.special_tokens = {tok: vocab[tok] for tok in specials}
        self.special_ids = set(self.special_tokens.values())
        self.special_re = re.compile("(" + "|".join(map(re.escape, sorted(specials, key=len, reverse=True))) + ")")
        self.language_codes = [] if self.separate_vocabs else [
            k for k in vocab if k.startswith(">>") and k.endswith("<<")]
        self.normalize = None
        if normalize_punctuation:
            from sacremoses import MosesPunctNormalizer
            self.normalize = MosesPunctNormalizer(source_lang or "en").normalize

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, normalize_punctuation: bool = False) -> "MarianTokenizer":
        model_dir = Path(model_dir)
        tok_config_path = model_dir / "tokenizer_config.json"
        tok_config = read_json(tok_config_path) if tok_config_path.exists() else {}
        separate = bool(tok_config.get("separate_vocabs", False))
        return cls(
            model_dir / "source.spm", model_dir / "target.spm", read_json(model_dir / "vocab.json"),
            read_json(model_dir / "target_vocab.json") if separate else None,
            source_lang=tok_config.get("source_lang"),
            target_lang=tok_config.get("target_lang"),
            unk_token=tok_config.get("unk_token", "<unk>"),
            eos_token=tok_config.get("eos_token", "</s>"),
            pad_token=tok_config.get("pad_token", "<pad>"),
            normalize_punctuation=normalize_punctuation,
        )

    def tokenize(self, text: str) -> list[str]:
        if self.normalize is not None and text:
            text = self.normalize(text)
        pieces: list[str] = []
        for chunk in self.special_re.split(text):
            if not chunk:
                continue
            if chunk in self.special_tokens:
                pieces.append(chunk)
                continue
            if chunk.startswith(">>") and (end := chunk.find("<<")) != -1:
                pieces.append(chunk[: end + 2])
                chunk = chunk[end + 2:]
            pieces.extend(self.spm_source.encode(chunk, out_type=str))
        return pieces

    def encode(self, text: str) -> list[int]:
        """Source text → ids, </s> appended."""
        return [self.vocab.get(piece, self.unk_id) for piece in self.tokenize(text)] + [self.eos_id]

    def id_to_token(self, token_id: int) -> str:
        piece = self.id_to_piece.get(token_id)
        if piece is None:
            piece = self.spm_decode.IdToPiece(token_id) if token_id < self.spm_decode.GetPieceSize() else ""
        return piece

    def decode(self, token_ids: list[int]) -> str:
        """Target ids → text, special tokens skipped."""
        pieces = [self.id_to_token(i) for i in token_ids if i not in self.special_ids]
        return self.spm_decode.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()
