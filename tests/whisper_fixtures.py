"""Tiny random Whisper checkpoints built with transformers (the oracle), saved as openai/whisper-* lays them out:
config.json, generation_config.json (the keys Whisper's generate reads), model.safetensors, a byte-level BPE
tokenizer trained here with Whisper's special tokens after its text tokens (tokenizer.json, vocab.json, merges.txt,
added_tokens.json) and preprocessor_config.json. Multilingual (a few languages) or English-only (`.en`).

Speech here is noise and tones: parity needs no real speech.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

LANGUAGES = ("en", "de", "fr", "es", "ja")
TEXT = ["the quick brown fox jumps over the lazy dog", "one two three four five six seven eight nine ten",
        "speech in, text out", "hello world, how are you today?"]


def special_tokens(multilingual: bool) -> list[str]:
    """Whisper's special tokens in id order, right after the text tokens."""
    languages = [f"<|{code}|>" for code in LANGUAGES] if multilingual else []
    return (["<|endoftext|>", "<|startoftranscript|>", *languages, "<|translate|>", "<|transcribe|>",
             "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
            + [f"<|{i * 0.02:.2f}|>" for i in range(1501)])


def build_whisper(path: Path, multilingual: bool = True, seed: int = 0, encoder_positions: int = 1500,
                  decoder_positions: int = 448) -> Path:
    """The checkpoint in `path`. encoder_positions: two feature frames each (1500: openai/whisper's 30-s window;
    fewer: a shorter window, as a checkpoint trained on short clips has); decoder_positions: max_target_positions."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    path.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(TEXT * 3, trainer)
    bpe.model.save(str(path))  # vocab.json, merges.txt
    text_tokens = bpe.get_vocab_size()
    specials = special_tokens(multilingual)
    bpe.add_special_tokens([AddedToken(t, special=True) for t in specials])
    bpe.save(str(path / "tokenizer.json"))
    ids = {t: text_tokens + i for i, t in enumerate(specials)}
    (path / "added_tokens.json").write_text(json.dumps(ids))
    WhisperFeatureExtractor(chunk_length=encoder_positions // 50).save_pretrained(path)

    eos, start = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    torch.manual_seed(seed)
    config = WhisperConfig(vocab_size=len(ids) + text_tokens, num_mel_bins=80, d_model=32, encoder_layers=2,
                           decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=4,
                           encoder_ffn_dim=64, decoder_ffn_dim=48, max_source_positions=encoder_positions,
                           max_target_positions=decoder_positions, pad_token_id=eos, bos_token_id=eos,
                           eos_token_id=eos, decoder_start_token_id=start, init_std=0.2)
    model = WhisperForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # norms and biases away from their initial values, so that they matter
        for name, param in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    space = bpe.token_to_id("Ġ")
    extra = dict(lang_to_id={f"<|{code}|>": ids[f"<|{code}|>"] for code in LANGUAGES},
                 task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}) \
        if multilingual else {}
    model.generation_config = GenerationConfig(
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, decoder_start_token_id=start,
        max_length=decoder_positions,
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=multilingual, max_initial_timestamp_index=50, begin_suppress_tokens=[space, eos],
        alignment_heads=[[0, 3], [1, 0], [1, 2]],  # both layers, out of order (ours must not sort them)
        suppress_tokens=[5, 17, 40, *(ids[t] for t in ("<|translate|>", "<|transcribe|>", "<|startoflm|>",
                                                       "<|startofprev|>", "<|nocaptions|>"))], **extra)
    model.save_pretrained(path)
    return path


def speech(seconds: float, seed: int = 0) -> np.ndarray:
    """16 kHz float32 'speech': tones that glide, bursts of noise and silences."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = np.sin(2 * np.pi * (200 + 150 * np.sin(2 * np.pi * 0.3 * t)) * t)
    envelope = (np.sin(2 * np.pi * 0.5 * t + rng.uniform(0, 6)) > -0.3).astype(np.float64)
    return (0.3 * tone * envelope + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def ours_and_oracle(path: Path):
    """The checkpoint at `path` as our Transcriber and as transformers' WhisperForConditionalGeneration."""
    from transformers import WhisperForConditionalGeneration

    from model import Transcriber
    return Transcriber.from_pretrained(str(path)), WhisperForConditionalGeneration.from_pretrained(str(path)).eval()


def generate_kwargs(bundle, options) -> dict:
    """transformers' generate arguments asking what `options` (model.SpeechOptions) ask of ours on `bundle`:
    new tokens, timestamps, task and language (a multilingual checkpoint's), beams, the prompt's ids."""
    import torch

    tokens = bundle.tokenizer.speech
    kwargs = dict(max_new_tokens=options.max_new_tokens, return_timestamps=options.timestamps)
    if tokens.multilingual:
        kwargs |= dict(task=options.task, language=options.language)
    if options.num_beams:
        kwargs["num_beams"] = options.num_beams
    if options.prompt:
        kwargs["prompt_ids"] = torch.tensor([tokens.previous, *bundle.tokenizer.encode(options.prompt)])
    return kwargs
