"""Marian / OPUS-MT: post-norm, Marian's sinusoids, tied output with final_logits_bias; the same token ids and
text as transformers' MarianTokenizer (v5).

Encoding: split out special tokens, keep a leading `>>xx<<` language code as one token, SentencePiece pieces
of the source model mapped through vocab.json (unknown → <unk>), then </s>. Multi-target models select the
target with a `>>xx<<` code at the start of the source. Decoding drops special ids and joins pieces through
SentencePiece. Moses punctuation normalization is opt-in: transformers defines it but does not apply it, and
parity with transformers is the default.
"""

from __future__ import annotations

import re
from pathlib import Path


from ...errors import CheckpointError
from ...network.architecture import Architecture, ModelConfig, Positions
from ..config import read_json
from . import layout
from .base import Family, Languages, load_spm, read_tokenizer_config, sentencepiece_bytes, special_token_pattern

DEFAULTS = dict(max_position_embeddings=1024, activation_function="gelu", tie_word_embeddings=True,
                eos_token_id=0, share_encoder_decoder_embeddings=True)


def model_config(raw: dict, source: str) -> ModelConfig:
    architecture = Architecture(positions=Positions.MARIAN_SINUSOIDAL, pre_norm=False,
                                scale_embedding=bool(raw.get("scale_embedding", False)),
                                activation=raw.get("activation_function", DEFAULTS["activation_function"]),
                                output_bias=True)
    tie = bool(raw.get("tie_word_embeddings", True))
    # transformers 5 unties all three matrices when tie_word_embeddings is false, even with shared embeddings.
    shared = bool(raw.get("share_encoder_decoder_embeddings", True)) and tie
    defaults = dict(DEFAULTS, forced_eos_token_id=raw.get("eos_token_id", DEFAULTS["eos_token_id"]))
    return layout.model_config(raw, source, defaults, architecture, shared_embeddings=shared)


def config_json(config: ModelConfig) -> dict:
    """The config.json that transformers' MarianConfig reads."""
    c, arch = config, config.architecture
    return dict(vocab_size=c.vocab_size, decoder_vocab_size=c.target_vocab_size, d_model=c.d_model,
                encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
                encoder_attention_heads=c.encoder_attention_heads, decoder_attention_heads=c.decoder_attention_heads,
                encoder_ffn_dim=c.encoder_ffn_dim, decoder_ffn_dim=c.decoder_ffn_dim,
                max_position_embeddings=c.max_position_embeddings, activation_function=arch.activation,
                scale_embedding=arch.scale_embedding, share_encoder_decoder_embeddings=c.shared_embeddings,
                tie_word_embeddings=c.tie_word_embeddings, pad_token_id=c.pad_token_id, eos_token_id=c.eos_token_id,
                decoder_start_token_id=c.decoder_start_token_id, forced_eos_token_id=c.forced_eos_token_id,
                model_type="marian", architectures=["MarianMTModel"], is_encoder_decoder=True)


SPIECE_UNDERLINE = "▁"


NAMED_TARGET = re.compile(r"\s*>>([^<>\s]+)<<\s*")  # a multi-target model's ">>fra<< Hello", as written for it


class MarianTokenizer:
    def __init__(self, source_spm: Path, target_spm: Path, vocab: dict[str, int],
                 target_vocab: dict[str, int] | None = None, source_lang: str | None = None,
                 target_lang: str | None = None,
                 unk_token: str = "<unk>", eos_token: str = "</s>", pad_token: str = "<pad>"):
        if unk_token not in vocab:
            raise CheckpointError(f"vocab.json: missing the unknown token {unk_token!r}")
        self.spm_source, self.spm_target = load_spm(source_spm), load_spm(target_spm)
        self.vocab = vocab
        self.source_lang, self.target_lang = source_lang, target_lang
        self.separate_vocabs = target_vocab is not None
        target = target_vocab if self.separate_vocabs else vocab
        self.target_vocab = target
        self.id_to_piece = {i: piece for piece, i in target.items()}
        self.id_to_source_piece = {i: piece for piece, i in vocab.items()}
        # transformers decodes with the source SentencePiece model when the vocabulary is shared.
        self.spm_decode = self.spm_target if self.separate_vocabs else self.spm_source
        self.unk_id = vocab[unk_token]
        self.eos_id, self.pad_id = vocab[eos_token], vocab[pad_token]
        specials = [eos_token, unk_token, pad_token]
        self.special_tokens = {tok: vocab[tok] for tok in specials}
        self.special_ids = set(self.special_tokens.values())
        self.special_re = special_token_pattern(specials)
        self.language_codes = [] if self.separate_vocabs else [
            k for k in vocab if k.startswith(">>") and k.endswith("<<")]
        targets = tuple(code[2:-2] for code in self.language_codes) or ((target_lang,) if target_lang else ())
        self.languages = Languages(source=(source_lang,) if source_lang else (), target=targets,
                                   default_source=source_lang, default_target=targets[0] if len(targets) == 1 else None,
                                   named_target=NAMED_TARGET if self.language_codes else None)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path) -> "MarianTokenizer":
        model_dir = Path(model_dir)
        tok_config = read_tokenizer_config(model_dir)
        separate = bool(tok_config.get("separate_vocabs", False))
        return cls(
            model_dir / "source.spm", model_dir / "target.spm", read_json(model_dir / "vocab.json"),
            read_json(model_dir / "target_vocab.json") if separate else None,
            source_lang=tok_config.get("source_lang"),
            target_lang=tok_config.get("target_lang"),
            unk_token=tok_config.get("unk_token", "<unk>"),
            eos_token=tok_config.get("eos_token", "</s>"),
            pad_token=tok_config.get("pad_token", "<pad>"),
        )

    def tokenize(self, text: str) -> list[str]:
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

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """Source text → ids, </s> appended; a multi-target model gets `>>target_lang<<` in front."""
        if target_lang is not None and self.language_codes:
            text = f">>{target_lang}<< {text}"
        return [self.vocab.get(piece, self.unk_id) for piece in self.tokenize(text)] + [self.eos_id]

    def encode_target(self, text: str) -> list[int]:
        """Target text → target ids: the target SentencePiece model's pieces through the target vocabulary, as
        transformers tokenizes text_target (unknown → <unk>)."""
        unk = self.target_vocab.get(self.id_to_source_piece[self.unk_id], self.unk_id)
        return [self.target_vocab.get(piece, unk) for piece in self.spm_target.encode(text, out_type=str)]

    def id_to_token(self, token_id: int) -> str:
        piece = self.id_to_piece.get(token_id)
        if piece is None:
            piece = self.spm_decode.IdToPiece(token_id) if token_id < self.spm_decode.GetPieceSize() else ""
        return piece

    def decode(self, token_ids: list[int]) -> str:
        """Target ids → text, special tokens skipped."""
        pieces = [self.id_to_token(i) for i in token_ids if i not in self.special_ids]
        return self.spm_decode.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()

    def token_bytes(self, token_ids: list[int], source: bool = False) -> list[bytes]:
        piece = self.id_to_source_piece.get if source else self.id_to_token
        return [sentencepiece_bytes(piece(i) or "") for i in token_ids]

    def forced_bos(self, target_lang: str | None) -> int | None:
        return None  # the target is chosen in the source text


FAMILY = Family(name="marian", model_config=model_config, key_map=layout.key_map, ignored_keys=layout.ignored_keys,
                load_tokenizer=MarianTokenizer.from_pretrained)
