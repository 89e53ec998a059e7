"""Speech: N concurrent 30-s clips through our engine against faster-whisper (CTranslate2), on random checkpoints of
the whisper-tiny and whisper-base shapes (their layers, widths and 51,865-token vocabulary; a synthetic byte-level
BPE of the real size stands in for Whisper's tokenizer).

    python -m loadtests.bench_speech [--shapes whisper-tiny,whisper-base] [--clips 8] [--new-tokens 48]
                                     [--dtypes float32,int8] [--rounds 2]

Every engine decodes greedily, English given, without timestamps, and as many tokens per clip as the other (</s> is
among the checkpoint's suppressed tokens, so no window ends early; faster-whisper stops short of its
`max_new_tokens`, 25 of 48 on these checkpoints, so ours is given the count faster-whisper produced; the table
says how many tokens each engine produced). Ours:
`model.Transcriber.transcribe_all`, the clips' windows in one continuous batch. faster-whisper as a server built on
it runs: `WhisperModel.transcribe` one clip after another, and `BatchedInferencePipeline` over the clips joined
(one batched CTranslate2 call for them all: the best case for CTranslate2, which batches no requests across
users). Both on every core; engines alternate within each round and the best round of each is shown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SHAPES = {  # d_model, layers (encoder = decoder), heads, feed-forward
    "whisper-tiny": (384, 4, 6, 1536),
    "whisper-base": (512, 6, 8, 2048),
}
TEXT_TOKENS = 50257  # Whisper's multilingual text vocabulary; 1,608 special tokens follow (51,865 in all)
WINDOW = 30 * 16000


def build_checkpoint(path: Path, shape: str) -> Path:
    """A random Whisper checkpoint of `shape` in the Hub's layout, with a byte-level BPE of the real size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    path.mkdir(parents=True, exist_ok=True)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    pairs = [(a, b) for a in alphabet for b in alphabet][:TEXT_TOKENS - len(alphabet)]
    vocab = {token: i for i, token in enumerate(alphabet + [a + b for a, b in pairs])}
    bpe = Tokenizer(models.BPE(vocab, pairs))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.model.save(str(path))  # vocab.json, merges.txt
    languages = [f"<|{code}|>" for code in LANGUAGES]
    specials = (["<|endoftext|>", "<|startoftranscript|>", *languages, "<|translate|>", "<|transcribe|>",
                 "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
                + [f"<|{i * 0.02:.2f}|>" for i in range(1501)])
    bpe.add_special_tokens([AddedToken(t, special=True) for t in specials])
    bpe.save(str(path / "tokenizer.json"))
    ids = {t: TEXT_TOKENS + i for i, t in enumerate(specials)}
    (path / "added_tokens.json").write_text(json.dumps(ids))
    WhisperFeatureExtractor().save_pretrained(path)

    d_model, layers, heads, ffn = SHAPES[shape]
    eos, start = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    # </s> suppressed too: random weights would end a window wherever their argmax first falls on it, and the two
    # engines' rules differ enough for that to be at different steps; so every window decodes --new-tokens tokens.
    # config.json carries the lists for CTranslate2's converter, generation_config.json for ours.
    suppress = [ids[t] for t in ("<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                                 "<|nocaptions|>")] + [eos]
    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=TEXT_TOKENS + len(specials), num_mel_bins=80, d_model=d_model,
                           encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                           decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
                           max_source_positions=1500, max_target_positions=448, pad_token_id=eos, bos_token_id=eos,
                           eos_token_id=eos, decoder_start_token_id=start, suppress_tokens=suppress,
                           begin_suppress_tokens=[220, eos])
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, decoder_start_token_id=start, max_length=448,
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=True, max_initial_timestamp_index=50, begin_suppress_tokens=[220, eos],
        suppress_tokens=suppress,
        lang_to_id={t: ids[t] for t in languages},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]})
    model.save_pretrained(path)
    return path


def convert(path: Path, out: Path, quantization: str) -> Path:
    from ctranslate2.converters import TransformersConverter

    TransformersConverter(str(path), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
        str(out), quantization=quantization, force=True)
    return out


def clips(count: int) -> list[np.ndarray]:
    """30-s 'speech' clips: gliding tones, noise bursts and silences (random weights make no use of real speech)."""
    out = []
    for seed in range(count):
        rng = np.random.default_rng(seed)
        t = np.arange(WINDOW) / 16000
        tone = np.sin(2 * np.pi * (200 + 150 * np.sin(2 * np.pi * 0.3 * t)) * t)
        envelope = (np.sin(2 * np.pi * 0.5 * t + rng.uniform(0, 6)) > -0.3).astype(np.float64)
        out.append((0.3 * tone * envelope + 0.05 * rng.standard_normal(WINDOW)).astype(np.float32))
    return out


@dataclass
class Run:
    engine: str
    dtype: str
    seconds: float
    tokens: int
    latencies: list[float]  # per clip, from the start of the run


def ours(path: Path, dtype: str, audio: list[np.ndarray], new_tokens: int) -> Run:
    from model import SpeechOptions, Transcriber

    transcriber = Transcriber.from_pretrained(path, dtype=dtype)
    options = SpeechOptions(language="en", timestamps=False, num_beams=1, max_new_tokens=new_tokens)
    transcriber.transcribe_all(audio[:2], options, batch_size=2)  # warm-up
    start = time.perf_counter()
    transcripts = transcriber.transcribe_all(audio, options, batch_size=len(audio))
    seconds = time.perf_counter() - start
    tokens = sum(len(s.token_ids) for t in transcripts for s in t.segments)
    return Run(f"ours {dtype}", dtype, seconds, tokens, [seconds] * len(audio))  # the windows decode as one batch


def faster_whisper(path: Path, compute_type: str, audio: list[np.ndarray], new_tokens: int, batched: bool) -> Run:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(str(path), device="cpu", compute_type=compute_type, cpu_threads=os.cpu_count())
    options = dict(language="en", beam_size=1, temperature=0.0, compression_ratio_threshold=None,
                   log_prob_threshold=None, no_speech_threshold=None, condition_on_previous_text=False,
                   without_timestamps=True, max_new_tokens=new_tokens)
    if batched:
        pipeline = BatchedInferencePipeline(model)

        def decode(clips: list[np.ndarray]) -> list[list]:
            joined = np.concatenate(clips)
            spans = [{"start": i * 30.0, "end": (i + 1) * 30.0} for i in range(len(clips))]  # seconds
            segments, _ = pipeline.transcribe(joined, batch_size=len(clips), clip_timestamps=spans, vad_filter=False,
                                              **options)
            return [list(segments)]
    else:
        def decode(clips: list[np.ndarray]) -> list[list]:
            return [list(model.transcribe(clip, vad_filter=False, **options)[0]) for clip in clips]
    decode(audio[:2])  # warm-up
    start, latencies, tokens = time.perf_counter(), [], 0
    if batched:
        tokens = sum(len(s.tokens) for part in decode(audio) for s in part)
        latencies = [time.perf_counter() - start] * len(audio)
    else:
        for clip in audio:
            tokens += sum(len(s.tokens) for s in decode([clip])[0])
            latencies.append(time.perf_counter() - start)
    name = f"faster-whisper {compute_type}" + (" batched" if batched else " one at a time")
    return Run(name, compute_type, time.perf_counter() - start, tokens, latencies)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_speech", description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="whisper-tiny,whisper-base")
    p.add_argument("--clips", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--dtypes", default="float32,int8")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(os.cpu_count())
    audio = clips(args.clips)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"{args.clips} clips of 30 s, greedy, {args.new_tokens} new tokens each; best of {args.rounds} rounds\n")
    from transformers.utils import logging as transformers_logging
    transformers_logging.disable_progress_bar()
    print("| shape | engine | clips/s | tokens/s | tokens | mean latency s | tokens/s × faster-whisper one at a time |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            path = build_checkpoint(Path(tmp) / shape, shape)
            engines = []
            for dtype in args.dtypes.split(","):
                ct2 = convert(path, Path(tmp) / f"{shape}-ct2-{dtype}", dtype)
                per_clip = faster_whisper(ct2, dtype, audio[:1], args.new_tokens, batched=False).tokens
                engines += [lambda d=dtype, n=per_clip: ours(path, d, audio, n),
                            lambda c=ct2, d=dtype: faster_whisper(c, d, audio, args.new_tokens, batched=False),
                            lambda c=ct2, d=dtype: faster_whisper(c, d, audio, args.new_tokens, batched=True)]
            best: dict[str, Run] = {}
            for _ in range(args.rounds):
                for engine in engines:
                    run = engine()
                    if run.engine not in best or run.seconds < best[run.engine].seconds:
                        best[run.engine] = run
            for run in best.values():
                baseline = best[f"faster-whisper {run.dtype} one at a time"]
                print(f"| {shape} | {run.engine} | {len(audio) / run.seconds:.2f} | {run.tokens / run.seconds:.0f} "
                      f"| {run.tokens} | {np.mean(run.latencies):.1f} "
                      f"| {run.tokens / run.seconds / (baseline.tokens / baseline.seconds):.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
