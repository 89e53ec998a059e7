"""Train the embedded speech demo from scratch: an English-only Whisper that writes spoken numbers as the text
demo's English source ('forty-two thousand, one'), so that speech goes through the text demo into any of its
languages. Seeded; bounded by a time budget.

    python -m model.demo.train_speech --out model/demo/speech_checkpoint --minutes 50

Recipe: Whisper's architecture (pre-norm, GELU, two convolutions over 80 log-mel bins, sinusoidal encoder
positions kept fixed) at d_model 192, 3 heads, 2 encoder and 2 decoder layers, FFN 768, a 6-s window (300
encoder positions: the longest number at 140 words a minute lasts 5 s); a byte-level BPE of 400 pieces over number
words with Whisper's special tokens after them, timestamps to 6.00. Clips from espeak-ng (model.demo.spoken) in
random voices, placed in the window after up to 0.9 s of silence, sometimes two numbers apart, with noise and gain
drawn per step; 60 % of the windows transcribed with timestamps, the rest with <|notimestamps|>. Adam 1e-3, 500
warm-up steps, cosine decay over the budget, label smoothing 0.1, batch 32, no dropout, bf16 autocast. Writes the
Hub layout of openai/whisper-tiny.en (config, generation config with its rules, tokenizer, preprocessor config).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from ..audio.decode import SAMPLE_RATE
from ..audio.features import HOP, log_mel
from ..loading.checkpoint import save_network
from ..loading.families import whisper
from ..network.audio_front import FRAMES_PER_POSITION
from ..network.transformer import Seq2SeqTransformer
from .data import held_out_numbers
from .train import train_within
from .spoken import say_all, spoken_text, training_requests

POSITIONS = 300  # encoder positions: a 6-s window
WINDOW_SAMPLES = POSITIONS * FRAMES_PER_POSITION * HOP  # 96,000
STAMP = 0.02  # seconds per timestamp token
MAX_INITIAL_STAMP = 50  # the first timestamp at most 1.00 s in, as Whisper's generation config says
TEXT_PIECES = 400


def special_tokens() -> list[str]:
    """Whisper's English-only special tokens in id order, then the timestamps of one window."""
    return (["<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
             "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
            + [f"<|{i * STAMP:.2f}|>" for i in range(POSITIONS + 1)])


def write_tokenizer(out: Path, seed: int) -> Tokenizer:
    """A byte-level BPE over number words (leading space, as Whisper's transcripts start), the specials after."""
    rng = random.Random(seed)
    texts = [" " + spoken_text(rng.randint(0, 999_999)) for _ in range(20_000)] + [
        " " + spoken_text(n) for n in range(1000)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=TEXT_PIECES, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    out.mkdir(parents=True, exist_ok=True)
    bpe.model.save(str(out))  # vocab.json, merges.txt
    text_tokens = bpe.get_vocab_size()
    bpe.add_special_tokens([AddedToken(t, special=True) for t in special_tokens()])
    bpe.save(str(out / "tokenizer.json"))
    (out / "added_tokens.json").write_text(json.dumps({t: text_tokens + i for i, t in enumerate(special_tokens())}))
    return bpe


def config_json(vocab_size: int, ids: dict[str, int]) -> dict:
    end = ids["<|endoftext|>"]
    return dict(model_type="whisper", architectures=["WhisperForConditionalGeneration"], vocab_size=vocab_size,
                num_mel_bins=80, d_model=192, encoder_layers=2, decoder_layers=2, encoder_attention_heads=3,
                decoder_attention_heads=3, encoder_ffn_dim=768, decoder_ffn_dim=768, activation_function="gelu",
                max_source_positions=POSITIONS, max_target_positions=128, scale_embedding=False,
                pad_token_id=end, bos_token_id=end, eos_token_id=end,
                decoder_start_token_id=ids["<|startoftranscript|>"], tie_word_embeddings=True)


def write_configs(out: Path, ids: dict[str, int]) -> None:
    end = ids["<|endoftext|>"]
    (out / "generation_config.json").write_text(json.dumps(dict(
        bos_token_id=end, eos_token_id=end, pad_token_id=end, decoder_start_token_id=ids["<|startoftranscript|>"],
        max_length=128, num_beams=1, is_multilingual=False, no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"], max_initial_timestamp_index=MAX_INITIAL_STAMP,
        begin_suppress_tokens=[ids["Ġ"], end],
        suppress_tokens=[ids[t] for t in ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                                          "<|nocaptions|>")],
        alignment_heads=[[1, head] for head in range(3)]), indent=1))
    (out / "preprocessor_config.json").write_text(json.dumps(dict(
        chunk_length=WINDOW_SAMPLES // SAMPLE_RATE, feature_extractor_type="WhisperFeatureExtractor",
        feature_size=80, hop_length=HOP, n_fft=400, n_samples=WINDOW_SAMPLES,
        nb_max_frames=WINDOW_SAMPLES // HOP, padding_side="right", padding_value=0.0,
        processor_class="WhisperProcessor", return_attention_mask=False, sampling_rate=SAMPLE_RATE), indent=1))


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's encoder positions (length, channels): sines then cosines over timescales up to 10,000."""
    increment = math.log(10_000) / (channels // 2 - 1)
    inverse = torch.exp(-increment * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, None] * inverse[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


class Windows:
    """Training windows drawn from a pool of clips: (samples of one window, the clips' numbers and their
    (start, end) seconds)."""

    ROOM = WINDOW_SAMPLES - SAMPLE_RATE // 10  # the voice ends before the window does

    def __init__(self, clips: list[tuple[int, np.ndarray]], rng: random.Random):
        self.clips, self.rng = [(n, clip) for n, clip in clips if len(clip) <= self.ROOM], rng

    def draw(self) -> tuple[np.ndarray, list[tuple[int, float, float]]]:
        rng = self.rng
        window = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        room = self.ROOM
        n, clip = rng.choice(self.clips)
        at = rng.uniform(0.0, min(0.9 * MAX_INITIAL_STAMP * STAMP * SAMPLE_RATE, room - len(clip)))
        said = []
        for _ in range(2 if rng.random() < 0.25 else 1):
            start = int(at)
            if start + len(clip) > room:
                break
            window[start:start + len(clip)] = clip * rng.uniform(0.3, 1.0) / max(1e-3, float(np.abs(clip).max()))
            said.append((n, start / SAMPLE_RATE, (start + len(clip)) / SAMPLE_RATE))
            at = start + len(clip) + rng.uniform(0.3, 1.5) * SAMPLE_RATE
            n, clip = rng.choice(self.clips)
        recorded = min(WINDOW_SAMPLES, int(at + rng.uniform(0.0, 1.5) * SAMPLE_RATE))
        noise = np.random.default_rng(rng.getrandbits(32)).standard_normal(recorded).astype(np.float32)
        window[:recorded] += 10 ** rng.uniform(-4, -2) * noise
        return window, said


def target_ids(bpe: Tokenizer, ids: dict[str, int], said: list[tuple[int, float, float]],
               timestamps: bool) -> list[int]:
    """<|startoftranscript|> [<|notimestamps|>] then each number (between its timestamps), <|endoftext|>."""
    stamp = lambda seconds: ids[f"<|{min(POSITIONS, round(seconds / STAMP)) * STAMP:.2f}|>"]  # noqa: E731
    out = [ids["<|startoftranscript|>"]]
    if not timestamps:
        return out + [ids["<|notimestamps|>"]] + bpe.encode(" " + spoken_text(said[0][0])).ids + [
            ids["<|endoftext|>"]]
    for n, start, end in said:
        out += [stamp(start)] + bpe.encode(" " + spoken_text(n)).ids + [stamp(end)]
    return out + [ids["<|endoftext|>"]]


def keep_key_biases_zero(model: Seq2SeqTransformer) -> None:
    """Whisper's key projections have no bias (the checkpoint stores none): the key thirds of the fused
    projections' biases stay zero."""
    d = model.config.d_model
    for name, param in model.named_parameters():
        part = (slice(d, 2 * d) if name.endswith("self_attn.qkv_proj.bias")
                else slice(0, d) if name.endswith("encoder_attn.kv_proj.bias") else None)
        if part is not None:
            with torch.no_grad():
                param[part] = 0
            mask = torch.ones_like(param)
            mask[part] = 0
            param.register_hook(lambda grad, mask=mask: grad * mask)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m model.demo.train_speech", description="Train the speech demo.")
    p.add_argument("--out", default=str(Path(__file__).parent / "speech_checkpoint"))
    p.add_argument("--minutes", type=float, default=40.0, help="training time budget")
    p.add_argument("--clips", type=int, default=24_000, help="clips spoken by espeak-ng before training")
    p.add_argument("--clip-cache", help="a pickle of the spoken clips: read if it exists, else written")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    out = Path(args.out)

    cache = Path(args.clip_cache) if args.clip_cache else None
    if cache is not None and cache.exists():
        spoken = pickle.loads(cache.read_bytes())
    else:
        spoken = [(n, voice, (samples * 32767).astype(np.int16))
                  for n, voice, samples in say_all(training_requests(args.clips, set(held_out_numbers()),
                                                                     args.seed))]
        if cache is not None:
            cache.write_bytes(pickle.dumps(spoken))
    clips = [(n, samples.astype(np.float32) / 32767) for n, _, samples in spoken]

    bpe = write_tokenizer(out, args.seed)
    ids = bpe.get_vocab()
    raw = config_json(bpe.get_vocab_size(), ids)
    config = whisper.model_config(raw, "speech demo config")
    model = Seq2SeqTransformer(config)  # no dropout: every window is drawn afresh
    for name, param in model.named_parameters():
        if param.dim() > 1:
            torch.nn.init.normal_(param, 0.0, 0.02)
    with torch.no_grad():
        model.audio_front.positions.copy_(sinusoids(POSITIONS, config.d_model))
    model.audio_front.positions.requires_grad_(False)
    keep_key_biases_zero(model)
    print(f"{len(clips)} clips, vocabulary {bpe.get_vocab_size()}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")

    windows = Windows(clips, rng)
    end = ids["<|endoftext|>"]

    def step_loss(step: int) -> torch.Tensor:
        drawn = [windows.draw() for _ in range(args.batch_size)]
        features = log_mel(np.stack([samples for samples, _ in drawn]))  # (B, 80, 600)
        rows = [target_ids(bpe, ids, said, timestamps=len(said) > 1 or rng.random() < 0.6) for _, said in drawn]
        target = torch.full((len(rows), max(map(len, rows))), -100, dtype=torch.long)  # (B, T)
        for i, row in enumerate(rows):
            target[i, :len(row)] = torch.tensor(row)
        inputs = target[:, :-1].masked_fill(target[:, :-1] < 0, end)  # (B, T - 1)
        labels = target[:, 1:].masked_fill(target[:, 1:] == ids["<|notimestamps|>"], -100)  # given, not learnt
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(features, torch.ones(len(rows), POSITIONS, dtype=torch.bool), inputs)  # (B, T - 1, V)
        return F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100, label_smoothing=0.1)

    start = time.monotonic()
    step = train_within(model, args.minutes, 500, step_loss, report_every=20)
    save_network(model, out, raw, whisper.FAMILY.key_map, dtype=torch.float16)
    write_configs(out, ids)
    print(f"{step} steps in {time.monotonic() - start:.0f} s; checkpoint written to {out}")


if __name__ == "__main__":
    main()
