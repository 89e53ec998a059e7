"""T5, flan-T5, mT5 and MADLAD-400 (model_type t5 / mt5): pre-norm with RMSNorm and final norms, no position
embeddings but a bucketed relative attention bias (computed once per side and shared by all layers), attention
without the 1/√d scaling, no biases, FFN ReLU (v1.0) or gated-GELU (v1.1, flan-T5, mT5, MADLAD).

Output: tied to the shared embedding and rescaled by d_model^-0.5 unless config.json says
tie_word_embeddings: false (v1.1) or it is an mT5, then lm_head.weight (transformers 5 falls back to the shared
embedding when the file has none) and no rescaling (transformers 5 writes its choice as scale_decoder_outputs).
The decoder starts from pad. Tokenizer: T5's (tokenizer.json, or spiece.model with <extra_id_N> sentinels at the end
of the vocabulary), </s> appended. MADLAD names the target language with a
`<2xx>` token at the start of the source text.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import CheckpointError
from ...network.architecture import Architecture, ModelConfig, Positions
from ..config import config_reader, first_id
from .base import (Family, Languages, PiecesTokenizer, TokenizerJson, load_spm, read_tokenizer_config,
                   sentencepiece_bytes, special_token_pattern)
from .layout import Parts, add_parts

# transformers' T5Config defaults, for keys a config.json leaves out.
DEFAULTS = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                relative_attention_num_buckets=32, relative_attention_max_distance=128, layer_norm_epsilon=1e-6,
                feed_forward_proj="relu", pad_token_id=0, eos_token_id=1, n_positions=512)
TARGET_TOKEN = re.compile(r"<2([A-Za-z][A-Za-z0-9_-]*)>")  # MADLAD: <2de>, <2zh_Latn>
NAMED_TARGET = re.compile(r"\s*" + TARGET_TOKEN.pattern + r"\s*")  # as MADLAD's model card writes it: "<2pt> I love"


def model_config(raw: dict, source: str) -> ModelConfig:
    """T5Config → ModelConfig. mT5 (transformers' MT5Config) defaults to gated-GELU and never rescales the output;
    T5 rescales unless tie_word_embeddings is false."""
    mt5 = raw.get("model_type") == "mt5"
    defaults = DEFAULTS | (dict(feed_forward_proj="gated-gelu", vocab_size=250112) if mt5 else {})
    get = config_reader(raw, defaults, source)
    proj = get("feed_forward_proj")
    gated, _, act = proj.rpartition("-")
    if gated not in ("", "gated"):
        raise CheckpointError(f"{source}: feed_forward_proj {proj!r} is not 'ACT' or 'gated-ACT'")
    tied = not mt5 and raw.get("tie_word_embeddings", True) is not False
    # transformers 5 writes its decision (scale_decoder_outputs); Hub files only have tie_word_embeddings
    scaled = not mt5 and bool(raw.get("scale_decoder_outputs", tied))
    architecture = Architecture(positions=Positions.RELATIVE, pre_norm=True, final_norms=True,
                                activation="gelu_new" if proj == "gated-gelu" else act, rms_norm=True,
                                norm_eps=float(get("layer_norm_epsilon")), scale_attention=False,
                                gated_ffn=bool(gated), linear_bias=False, scale_output=scaled)
    layers, heads, pad = get("num_layers"), get("num_heads"), get("pad_token_id")
    eos = get("eos_token_id")
    return ModelConfig(
        architecture=architecture, vocab_size=get("vocab_size"), target_vocab_size=get("vocab_size"),
        d_model=get("d_model"), encoder_layers=layers, decoder_layers=raw.get("num_decoder_layers") or layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=get("d_ff"),
        decoder_ffn_dim=get("d_ff"), max_position_embeddings=int(raw.get("n_positions") or DEFAULTS["n_positions"]),
        shared_embeddings=True, tie_word_embeddings=tied, pad_token_id=pad,
        eos_token_id=first_id(eos),
        decoder_start_token_id=raw.get("decoder_start_token_id", pad), head_dim=get("d_kv"),
        relative_buckets=get("relative_attention_num_buckets"),
        relative_max_distance=get("relative_attention_max_distance"))


def key_map(config: ModelConfig) -> dict[str, Parts]:
    """Our state-dict key → the checkpoint keys it is made of (T5's `block.{i}.layer.{j}` names)."""
    out: dict[str, Parts] = {}

    def add(ours: str, theirs: list[str]) -> None:
        add_parts(out, ours, theirs, ("weight",))  # T5 has no biases

    gated = config.architecture.gated_ffn
    for side, n_layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n_layers):
            ours, theirs = f"{side}_layers.{i}", f"{side}.block.{i}.layer"
            add(f"{ours}.self_attn.qkv_proj", [f"{theirs}.0.SelfAttention.{p}" for p in "qkv"])
            add(f"{ours}.self_attn.out_proj", [f"{theirs}.0.SelfAttention.o"])
            add(f"{ours}.self_attn_layer_norm", [f"{theirs}.0.layer_norm"])
            ffn = f"{theirs}.{2 if side == 'decoder' else 1}"
            add(f"{ours}.ffn.fc1", [f"{ffn}.DenseReluDense.wi_0", f"{ffn}.DenseReluDense.wi_1"] if gated
                else [f"{ffn}.DenseReluDense.wi"])
            add(f"{ours}.ffn.fc2", [f"{ffn}.DenseReluDense.wo"])
            add(f"{ours}.final_layer_norm", [f"{ffn}.layer_norm"])
            if side == "decoder":
                add(f"{ours}.encoder_attn.q_proj", [f"{theirs}.1.EncDecAttention.q"])
                add(f"{ours}.encoder_attn.kv_proj", [f"{theirs}.1.EncDecAttention.{p}" for p in "kv"])
                add(f"{ours}.encoder_attn.out_proj", [f"{theirs}.1.EncDecAttention.o"])
                add(f"{ours}.encoder_attn_layer_norm", [f"{theirs}.1.layer_norm"])
        add(f"{side}_relative_bias", [f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias"])
        add(f"{side}_norm", [f"{side}.final_layer_norm"])
    embeddings = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    out["encoder_embed.weight"] = (embeddings + (("lm_head.weight",) if config.tie_word_embeddings else ()),)
    if not config.tie_word_embeddings:
        out["lm_head.weight"] = (("lm_head.weight", "shared.weight"),)
    return out


def ignored_keys(config: ModelConfig) -> tuple[str, ...]:
    return ()


class SentencePieceT5:
    """spiece.model with T5's sentinels <extra_id_0> … <extra_id_{N-1}> as the last N ids (extra_id_0 last),
    as transformers converts it; special tokens in the text are kept whole."""

    def __init__(self, path: Path, extra_ids: int):
        self.spm = load_spm(path)
        size = self.spm.GetPieceSize()
        specials = {self.spm.IdToPiece(i): i for i in range(size) if self.spm.IsControl(i) or self.spm.IsUnknown(i)}
        specials |= {f"<extra_id_{i}>": size + extra_ids - 1 - i for i in range(extra_ids)}
        self.special_tokens, self.special_ids = specials, set(specials.values())
        self.special_re = special_token_pattern(specials)

    def token_id(self, token: str) -> int | None:
        if token in self.special_tokens:
            return self.special_tokens[token]
        piece = self.spm.PieceToId(token)
        return None if piece == self.spm.unk_id() and token != self.spm.IdToPiece(piece) else piece

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for chunk in self.special_re.split(text):
            if chunk in self.special_tokens:
                ids.append(self.special_tokens[chunk])
            elif chunk.strip():
                ids += self.spm.encode(chunk)
        return ids

    def encode_word(self, text: str) -> list[int]:
        return self.encode(text)  # SentencePiece starts the text with ▁, as a word inside running text

    def decode(self, ids: list[int]) -> str:
        return self.spm.decode([i for i in ids if i not in self.special_ids])

    def token_bytes(self, ids: list[int]) -> list[bytes]:
        sentinels = {i: token for token, i in self.special_tokens.items()}
        return [sentencepiece_bytes(sentinels.get(i) or self.spm.IdToPiece(i)) for i in ids]


class T5Tokenizer(PiecesTokenizer):
    """Source: the pieces of the text (MADLAD: `<2xx> ` + text), then </s>. No forced first token."""

    def __init__(self, pieces: TokenizerJson | SentencePieceT5, eos_token: str = "</s>", pad_token: str = "<pad>"):
        self.pieces = pieces
        self.eos_id, self.pad_id = pieces.token_id(eos_token), pieces.token_id(pad_token)
        if self.eos_id is None or self.pad_id is None:
            raise CheckpointError(f"tokenizer: missing {eos_token!r} or {pad_token!r}")
        codes = target_codes(pieces)
        self.languages = Languages(target=tuple(codes), target_required=bool(codes),
                                   named_target=NAMED_TARGET if codes else None)

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        prefix = f"<2{target_lang}> " if target_lang is not None and self.languages.target else ""
        return self.pieces.encode(prefix + text) + [self.eos_id]

    def forced_bos(self, target_lang: str | None) -> int | None:
        return None


def target_codes(pieces: TokenizerJson | SentencePieceT5) -> list[str]:
    """MADLAD's target codes: the `<2xx>` pieces of the vocabulary (none in T5 and flan-T5)."""
    if isinstance(pieces, TokenizerJson):
        vocab = pieces.tokenizer.get_vocab()
    else:
        vocab = (pieces.spm.IdToPiece(i) for i in range(pieces.spm.GetPieceSize()))
    return sorted(match.group(1) for token in vocab if (match := TARGET_TOKEN.fullmatch(token)))


def load_tokenizer(model_dir: Path) -> T5Tokenizer:
    if (model_dir / "tokenizer.json").exists():
        return T5Tokenizer(TokenizerJson.read(model_dir / "tokenizer.json"))
    tok_config = read_tokenizer_config(model_dir)
    return T5Tokenizer(SentencePieceT5(model_dir / "spiece.model", int(tok_config.get("extra_ids", 100))))


FAMILY = Family(name="t5", model_config=model_config, key_map=key_map, ignored_keys=ignored_keys,
                load_tokenizer=load_tokenizer)
MT5 = Family(name="mt5", model_config=model_config, key_map=key_map, ignored_keys=ignored_keys,
             load_tokenizer=load_tokenizer)
