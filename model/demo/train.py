"""Train the embedded demo model from scratch (seeded; bounded by a time budget).

    python -m model.demo.train --out model/demo/checkpoint --minutes 38

Recipe: post-norm encoder-decoder, d_model 256, 4 heads, 3+3 layers,
FFN 1024, dropout 0.1, shared tied embeddings; SentencePiece unigram (1,000 pieces) over both sides with the
language tags as user-defined symbols; Adam 1e-3, 600 warm-up steps, cosine decay over the time budget,
label smoothing 0.1, batch 128, bf16 autocast. Writes a Hugging Face Marian checkpoint.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import time
from pathlib import Path
from typing import Callable

import sentencepiece as spm
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..loading.checkpoint import save_network
from ..loading.families import marian
from ..loading.families.marian import MarianTokenizer
from ..network.architecture import ModelConfig
from ..network.transformer import Seq2SeqTransformer
from .data import LANGUAGES, held_out_numbers, training_pairs


def train_sentencepiece(texts: list[str], vocab_size: int, seed: int) -> bytes:
    model = io.BytesIO()
    sample = random.Random(seed).sample(texts, min(len(texts), 200_000))
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample), model_writer=model, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, user_defined_symbols=[f">>{lang}<<" for lang in LANGUAGES], minloglevel=2,
        num_threads=1)  # one thread: the same pieces on every run
    return model.getvalue()


def write_tokenizer(out: Path, spm_bytes: bytes) -> dict[str, int]:
    """source.spm = target.spm (one joint model) and a vocab.json laid out like OPUS-MT: </s>=0, <pad> last."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "source.spm").write_bytes(spm_bytes)
    (out / "target.spm").write_bytes(spm_bytes)
    sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
    pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize()) if not (sp.IsControl(i) or sp.IsUnknown(i))]
    vocab = {tok: i for i, tok in enumerate(["</s>", "<unk>"] + pieces + ["<pad>"])}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "en", "target_lang": "mul", "separate_vocabs": False, "model_max_length": 512,
         "tokenizer_class": "MarianTokenizer"}, indent=1))
    return vocab


def write_generation_config(out: Path, pad: int, eos: int) -> None:
    (out / "generation_config.json").write_text(json.dumps(
        {"bad_words_ids": [[pad]], "decoder_start_token_id": pad, "eos_token_id": eos, "forced_eos_token_id": eos,
         "max_length": 96, "num_beams": 1, "pad_token_id": pad}, indent=1))


def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def length_buckets(src: torch.Tensor, tgt: torch.Tensor, pad: int, batch_size: int) -> list[torch.Tensor]:
    """Batches of similar lengths (little padding), in random order; each pair once per epoch."""
    lengths = (src != pad).sum(1) * 1000 + (tgt != pad).sum(1)
    order = torch.argsort(lengths + torch.rand(len(lengths)))  # random order among equal lengths
    batches = list(order.split(batch_size))
    random.shuffle(batches)
    return batches


def model_config(vocab: dict[str, int]) -> ModelConfig:
    pad = vocab["<pad>"]
    return marian.model_config(dict(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=256, encoder_layers=3, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024,
        max_position_embeddings=512, activation_function="swish", scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=pad,
        eos_token_id=vocab["</s>"], decoder_start_token_id=pad, forced_eos_token_id=vocab["</s>"]), "demo config")


def learning_rate(step: int, progress: float, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def train_within(model: torch.nn.Module, minutes: float, warmup: int, step_loss: Callable[[int], torch.Tensor],
                 report_every: int = 50) -> int:
    """Adam (peak 1e-3, linear warm-up, cosine decay over the time budget, gradients clipped at 1) on the loss
    step_loss(step) computes, until `minutes` have passed; the model is left in eval mode. Returns the steps."""
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3, betas=(0.9, 0.98),
                                 eps=1e-9)
    budget = minutes * 60
    start, step = time.monotonic(), 0
    bar = tqdm(total=int(budget), unit="s", bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}s {postfix}")
    model.train()
    while (elapsed := time.monotonic() - start) < budget:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, elapsed / budget, 1e-3, warmup)
        loss = step_loss(step)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % report_every == 0:
            bar.update(int(time.monotonic() - start) - bar.n)
            bar.set_postfix(step=step, loss=f"{loss.item():.3f}")
    bar.close()
    model.eval()
    return step


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m model.demo.train", description="Train the embedded demo model.")
    p.add_argument("--out", default=str(Path(__file__).parent / "checkpoint"))
    p.add_argument("--minutes", type=float, default=38.0, help="training time budget")
    p.add_argument("--pairs", type=int, default=500_000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)

    pairs = training_pairs(args.pairs, exclude=set(held_out_numbers()), seed=args.seed)
    spm_bytes = train_sentencepiece([s.split(" ", 1)[1] for s, _ in pairs] + [t for _, t in pairs], 1000, args.seed)
    vocab = write_tokenizer(out, spm_bytes)
    tokenizer = MarianTokenizer.from_pretrained(out)
    config = model_config(vocab)
    pad = config.pad_token_id
    src = padded([tokenizer.encode(s) for s, _ in pairs], pad)  # (N, S)
    tgt = padded([[pad] + tokenizer.encode(t) for _, t in pairs], pad)  # (N, 1 + T): start token, pieces, </s>
    print(f"{len(pairs)} pairs, vocabulary {len(vocab)}, source ≤ {src.shape[1]}, "
          f"target ≤ {tgt.shape[1] - 1} tokens")

    model = Seq2SeqTransformer(config, dropout=0.1).to(device)
    for name, param in model.named_parameters():
        if param.dim() > 1:
            torch.nn.init.normal_(param, 0.0, config.d_model ** -0.5 if "embed" in name else 0.02)
    batches = length_buckets(src, tgt, pad, args.batch_size)

    def step_loss(step: int) -> torch.Tensor:
        index = batches[step % len(batches)]
        s, t = src[index], tgt[index]
        s, t = s[:, : int((s != pad).sum(1).max())].to(device), t[:, : int((t != pad).sum(1).max()) + 1].to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = model(s, s != pad, t[:, :-1])  # (B, T, V)
        return F.cross_entropy(logits.float().transpose(1, 2), t[:, 1:], ignore_index=pad, label_smoothing=0.1)

    start = time.monotonic()
    step = train_within(model, args.minutes, 600, step_loss)
    save_network(model.cpu(), out, marian.config_json(config), marian.FAMILY.key_map, dtype=torch.float16)
    write_generation_config(out, pad, config.eos_token_id)
    print(f"{step} steps in {time.monotonic() - start:.0f} s; checkpoint written to {out}")


if __name__ == "__main__":
    main()
