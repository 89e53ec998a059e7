"""Tiny T5 (v1.0, v1.1), mT5/MADLAD-style and BART checkpoints built with transformers (the oracle) and real
tokenizers trained in-process, saved as the Hub repositories lay them out.

transformers 5.23 quirks (checked): T5Config forces tie_word_embeddings=True and save_pretrained then writes no
lm_head and `"tie_word_embeddings": true`, so a v1.1 checkpoint (untied head, no output rescaling) is written here as
the Hub files are: config.json with `"tie_word_embeddings": false` (and without the `scale_decoder_outputs` that
transformers 5 adds) and lm_head.weight in the weights file.
"""

from __future__ import annotations

import json
from pathlib import Path

from family_fixtures import ALL_WORDS, _family_corpus, _train_spm

PROMPTS = ("summarize: ", "translate English to German: ", "question: ", "")
T5_SENTENCES = [
    "summarize: The quick brown fox jumps over the lazy dog, and then it asks the teacher for advice.",
    "translate English to German: The house by the river is small.",
    "question: where is the train? context: the train leaves the city tomorrow morning",
    "Hello.",
    "x",
    "Fill the <extra_id_0> in the <extra_id_1> please.",
    "  odd   spacing\there  \n and   a newline ",
    "Ünïcödé çharacters ñ ø å ß € 42 3.14",
]
BART_SENTENCES = [
    "The quick brown fox jumps over the lazy dog, and then it asks the teacher for advice tomorrow morning.",
    "Hello.",
    " leading space and  double spaces",
    "A <mask> in the middle.",
    "Ünïcödé çharacters ñ ø å ß € 42 3.14 🙂",
    "x",
]
MADLAD_TARGETS = ("de", "fr", "es", "ru", "zh_Latn")


def _corpus(seed: int) -> list[str]:
    lines = _family_corpus(500, seed)
    return [PROMPTS[i % len(PROMPTS)] + line for i, line in enumerate(lines)] + T5_SENTENCES + BART_SENTENCES


def _perturb(model, seed: int) -> None:
    """Norm weights away from 1 so that the norms matter in the comparison."""
    import torch

    generator = torch.Generator().manual_seed(seed + 2000)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.1)
            elif name.endswith("bias") or name.endswith("final_logits_bias"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=generator) * 0.5)


def build_t5(path: Path, variant: str = "v1_1", seed: int = 0) -> Path:
    """variant: "v1_0" (ReLU, tied, rescaled output; spiece.model only, no tokenizer.json), "v1_1" (gated-GELU,
    untied head), "madlad" (model_type t5, gated-GELU, untied, <2xx> target tokens in the vocabulary, heads × d_kv
    != d_model, and MADLAD-400's special ids: decoder start 0 (<unk>), pad 1, eos 2, where T5's are 0, 0, 1)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration, T5Tokenizer

    path.mkdir(parents=True, exist_ok=True)
    scratch = path / "_spm_source"
    scratch.mkdir(exist_ok=True)
    symbols = [f"<2{code}>" for code in MADLAD_TARGETS] if variant == "madlad" else []
    madlad = variant == "madlad"
    ids = dict(unk_id=0, pad_id=1, eos_id=2) if madlad else dict(pad_id=0, eos_id=1, unk_id=2)
    spm_bytes = _train_spm(_corpus(seed + 7), 400, "unigram", bos_id=-1, user_defined_symbols=symbols, **ids)
    (scratch / "spiece.model").write_bytes(spm_bytes)
    tokenizer = T5Tokenizer.from_pretrained(str(scratch), extra_ids=20, model_max_length=128)
    for file in scratch.iterdir():
        file.unlink()
    scratch.rmdir()
    tokenizer.save_pretrained(path)
    if variant == "v1_0":  # as the original t5-small repository: the SentencePiece model, no tokenizer.json
        (path / "tokenizer.json").unlink()
        (path / "spiece.model").write_bytes(spm_bytes)
        config_path = path / "tokenizer_config.json"
        tok_config = json.loads(config_path.read_text(encoding="utf-8"))
        config_path.write_text(json.dumps(tok_config | {"extra_ids": 20}), encoding="utf-8")

    gated = variant != "v1_0"
    d_kv = 12 if madlad else 8
    torch.manual_seed(seed + 11)
    # equal layer counts: transformers 5.23 sizes T5's generate cache by num_layers (IndexError otherwise)
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=d_kv, d_ff=48, num_layers=2, num_decoder_layers=2,
                      num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                      feed_forward_proj="gated-gelu" if gated else "relu", dropout_rate=0.0,
                      decoder_start_token_id=0, pad_token_id=ids["pad_id"], eos_token_id=ids["eos_id"])
    model = T5ForConditionalGeneration(config).eval()
    _perturb(model, seed)
    model.generation_config = GenerationConfig(decoder_start_token_id=0, pad_token_id=ids["pad_id"],
                                               eos_token_id=ids["eos_id"], max_length=60)
    model.save_pretrained(path)
    if gated:  # untied: the Hub layout (see the module docstring)
        weights = load_file(str(path / "model.safetensors"))
        generator = torch.Generator().manual_seed(seed + 3000)
        weights["lm_head.weight"] = torch.randn(weights["shared.weight"].shape, generator=generator) * 0.3
        save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
        del raw["scale_decoder_outputs"]  # transformers 5 writes it; the Hub files have only tie_word_embeddings
        (path / "config.json").write_text(json.dumps(raw | {"tie_word_embeddings": False}), encoding="utf-8")
    return path


def build_bart(path: Path, seed: int = 0, tokenizer_json: bool = True) -> Path:
    """BART layout (bart-large-cnn's generation rules: beam 4, length_penalty 2.0, min_length, max_length,
    no_repeat_ngram_size 3, early_stopping, forced_bos <s>); byte-level BPE trained here. tokenizer_json=False
    leaves only vocab.json + merges.txt, as older repositories."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizer, GenerationConfig

    path.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(_corpus(seed + 9) + [" ".join(ALL_WORDS)], trainer)
    bpe.model.save(str(path))  # vocab.json, merges.txt
    tokenizer = BartTokenizer.from_pretrained(str(path), model_max_length=128)
    if tokenizer_json:
        tokenizer.save_pretrained(path)
    else:
        (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BartTokenizer"}))

    torch.manual_seed(seed + 13)
    config = BartConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=3,
                        encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=96,
                        max_position_embeddings=128, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                        init_std=0.3, bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
                        forced_bos_token_id=0, forced_eos_token_id=2)
    model = BartForConditionalGeneration(config).eval()
    _perturb(model, seed)
    model.generation_config = GenerationConfig(
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=0,
        forced_eos_token_id=2, num_beams=4, length_penalty=2.0, min_length=8, max_length=40,
        no_repeat_ngram_size=3, early_stopping=True)
    model.save_pretrained(path)
    return path


BUILDERS = {
    "t5_v1_0": lambda path: build_t5(path, "v1_0"),
    "t5_v1_1": lambda path: build_t5(path, "v1_1"),
    "madlad": lambda path: build_t5(path, "madlad"),
    "bart": build_bart,
}
