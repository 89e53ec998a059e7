"""Tiny Marian checkpoints built with transformers (the oracle) and real SentencePiece models."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import sentencepiece as spm

WORDS_EN = ("the quick brown fox jumps over lazy dog house river mountain small large green city train "
            "tomorrow yesterday morning evening friend teacher asked advice frog water bread coffee").split()
WORDS_DE = ("der schnelle braune Fuchs springt über den faulen Hund Haus Fluss Berg klein groß grün Stadt "
            "Zug morgen gestern Abend Freund Lehrer fragte Rat Frosch Wasser Brot Kaffee Straße Mädchen").split()
PUNCT = [".", ",", "!", "?", ";", ":", "\u201c", "\u201d", "'", "\u2019", "(", ")", "-", "\u2014"]

SENTENCES = [
    "Hello.",
    "The quick brown fox jumps over the lazy dog, and then it asks the teacher for advice tomorrow morning "
    "before the train leaves the small green city by the river.",
    "Der Fuchs sprang über die Straße; das Mädchen lächelte: «très bien» — ça va?",
    "She said \u201chello\u201d and he replied \u2018goodbye\u2019\u2026",
    "  odd   spacing\there  ",
    ">>de<< The frog drinks water.",
    "x",
    "Ünïcödé çharacters ñ ø å ß € 42 3.14",
]


def _corpus(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        tokens = [rng.choice(words) + (rng.choice(PUNCT) if rng.random() < 0.2 else "")
                  for _ in range(rng.randint(1, 12))]
        lines.append(" ".join(tokens))
    return lines + SENTENCES


def _train_spm(lines: list[str], vocab_size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                   minloglevel=2, num_threads=1)
    return model.getvalue()


def _vocab(spm_bytes: bytes, language_codes: list[str], pad_last: bool) -> dict[str, int]:
    sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
    pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if not sp.IsControl(i) and not sp.IsUnknown(i)]
    tokens = ["</s>", "<unk>"] + ([] if pad_last else ["<pad>"]) + language_codes + pieces
    tokens += ["<pad>"] if pad_last else []
    return {tok: i for i, tok in enumerate(tokens)}


def build_checkpoint(path: Path, *, shared: bool = True, activation: str = "swish", scale_embedding: bool = True,
                     encoder_layers: int = 2, decoder_layers: int = 3, encoder_heads: int = 4,
                     decoder_heads: int = 2, d_model: int = 32, weights: str = "safetensors",
                     tie: bool = True, seed: int = 0, init_std: float = 0.5, eos_last: bool = False,
                     stored_dtype: str = "float32") -> Path:
    """eos_last: </s> just before <pad> at the end of the vocabulary, as opus-mt-tc-big's (eos_token_id 43311, not
    0); stored_dtype "float16": the weights saved in float16, as tc-big ships them."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    path.mkdir(parents=True, exist_ok=True)
    src_spm = _train_spm(_corpus(WORDS_EN, 400, seed), 120)
    tgt_spm = _train_spm(_corpus(WORDS_DE, 400, seed + 1), 110)
    (path / "source.spm").write_bytes(src_spm)
    (path / "target.spm").write_bytes(tgt_spm)
    codes = [">>de<<", ">>fr<<"]
    if shared:
        vocab = _vocab(src_spm, codes, pad_last=True)
        for piece in _vocab(tgt_spm, [], pad_last=True):  # a joint vocabulary, as in OPUS-MT
            vocab.setdefault(piece, len(vocab))
        vocab["<pad>"] = vocab.pop("<pad>") and len(vocab)  # keep <pad> the last id
        vocab = {tok: i for i, tok in enumerate(sorted(vocab, key=vocab.get))}
        target_vocab = None
    else:
        vocab = _vocab(src_spm, [], pad_last=False)
        target_vocab = _vocab(tgt_spm, [], pad_last=False)
    if eos_last:  # </s> trades places with the piece just before <pad>
        other = next(tok for tok, i in vocab.items() if i == vocab["<pad>"] - 1)
        vocab[other], vocab["</s>"] = vocab["</s>"], vocab[other]
        vocab = dict(sorted(vocab.items(), key=lambda item: item[1]))
    eos = vocab["</s>"]
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    if target_vocab:
        (path / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    (path / "tokenizer_config.json").write_text(json.dumps({
        "source_lang": "en", "target_lang": "de", "separate_vocabs": not shared, "model_max_length": 512,
        "tokenizer_class": "MarianTokenizer"}))

    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(target_vocab or vocab), d_model=d_model,
        encoder_layers=encoder_layers, decoder_layers=decoder_layers, encoder_attention_heads=encoder_heads,
        decoder_attention_heads=decoder_heads, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=3 * d_model,
        max_position_embeddings=256, activation_function=activation, scale_embedding=scale_embedding,
        share_encoder_decoder_embeddings=shared, tie_word_embeddings=tie, pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=eos, forced_eos_token_id=eos, init_std=init_std,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name:
                param.add_(torch.randn_like(param) * 0.1)
            elif name.endswith("bias"):
                param.normal_(0, 0.1)
        model.final_logits_bias.normal_(0, 0.5)
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]], forced_eos_token_id=eos, decoder_start_token_id=pad, eos_token_id=eos,
        pad_token_id=pad, num_beams=4, max_length=64)
    if stored_dtype == "float16":
        model.half()
    model.save_pretrained(path)
    if weights == "bin":  # the layout older transformers wrote (transformers 5 writes only safetensors)
        (path / "model.safetensors").unlink()
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, path / "pytorch_model.bin")
    return path


# Variants cover what real Marian checkpoints vary: shared/separate vocabularies, activations, embedding
# scaling, tied/untied output, uneven depths and head counts, safetensors and .bin.
VARIANTS = {
    "shared-swish-safetensors": dict(shared=True, activation="swish", scale_embedding=True, encoder_layers=2,
                                     decoder_layers=3, encoder_heads=4, decoder_heads=2),
    "separate-relu-bin": dict(shared=False, activation="relu", scale_embedding=False, encoder_layers=3,
                              decoder_layers=1, encoder_heads=2, decoder_heads=4, weights="bin", seed=1),
    "gelu-untied": dict(shared=True, activation="gelu", scale_embedding=True, encoder_layers=1, decoder_layers=2,
                        encoder_heads=1, decoder_heads=4, tie=False, seed=2),
    # opus-mt-tc-big: relu, shared embeddings (decoder_vocab_size = vocab_size), </s> far from id 0, float16 weights
    "tc-big-fp16": dict(shared=True, activation="relu", scale_embedding=True, encoder_layers=2, decoder_layers=2,
                        encoder_heads=2, decoder_heads=2, seed=4, eos_last=True, stored_dtype="float16"),
}
