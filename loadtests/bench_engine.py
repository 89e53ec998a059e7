"""Decoding speed: our engine vs transformers `generate` vs CTranslate2 on the same opus-mt-en-de-shaped model.

    pip install -e ".[bench]"
    python -m loadtests.bench_engine [--batches 1,8,32] [--beams 1,4] [--out runs/bench]

Builds a random checkpoint with the shape of opus-mt-en-de (vocab 58,101, d_model 512, 6+6 layers, 8 heads,
FFN 2,048, swish, tied embeddings) in the Hugging Face Marian layout, converts it with CTranslate2's converter,
and runs one workload through every engine: 24 source tokens (with </s>) and exactly 32 generated tokens per
sequence (min = max new tokens, forced </s> off, <pad> banned), so every engine does the same work.
Each engine runs in its own process, one after the other: CTranslate2's OpenMP threads keep spinning for a
while after each call, and in one process they slowed every engine measured after them by up to 2×.
Prints a markdown table of generated tokens/s, per-batch latency (median of timed runs after warm-ups), the
speed-up over transformers and over CTranslate2 float32, and whether greedy outputs agree with transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from model import BatchDecoder, DecodeParams, load

SOURCE_TOKENS, NEW_TOKENS = 24, 32
OPUS_MT_EN_DE = dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                     decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                     activation_function="swish", scale_embedding=True, max_position_embeddings=512)


def build_checkpoint(path: Path) -> Path:
    """A random opus-mt-en-de-shaped Marian checkpoint with the tokenizer files CTranslate2 needs."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    if (path / "config.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    vocab = OPUS_MT_EN_DE["vocab_size"]
    pad = vocab - 1
    tokens = ["</s>", "<unk>"] + [f"▁w{i}" for i in range(vocab - 3)] + ["<pad>"]
    (path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    spm = _tiny_sentencepiece()
    (path / "source.spm").write_bytes(spm)
    (path / "target.spm").write_bytes(spm)
    (path / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))
    torch.manual_seed(0)
    config = MarianConfig(**OPUS_MT_EN_DE, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
                          forced_eos_token_id=0, init_std=0.1)
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(bad_words_ids=[[pad]], decoder_start_token_id=pad, eos_token_id=0,
                                               pad_token_id=pad, max_length=512, num_beams=4)
    model.save_pretrained(path)
    return path


def _tiny_sentencepiece() -> bytes:
    import io

    import sentencepiece

    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(["a b c d e f g h"] * 20), model_writer=out,
                                             vocab_size=12, minloglevel=2, hard_vocab_limit=False)
    return out.getvalue()


def workload(batch: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(batch)
    src = torch.randint(2, vocab - 1, (batch, SOURCE_TOKENS), generator=g)
    src[:, -1] = 0  # </s>
    return src


def timed(fn, warmup: int, runs: int) -> tuple[float, object]:
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


class OursEngine:
    def __init__(self, path: Path, dtype: str = "float32"):
        self.model = load(path, dtype=dtype).network
        self.dtype, self.name = dtype, f"ours {dtype}"
        self.pad = self.model.config.pad_token_id
        self.step_seconds: list[float] = []  # of the last run

    def step_weight_bytes(self) -> int | None:
        """Weight bytes one decoder step reads: decoder layers without the cross-attention K/V projection (run
        once per source) and the output projection. None for int8, whose packed weights torch does not expose."""
        if self.dtype == "int8":
            return None
        per_step = [p for name, p in self.model.named_parameters()
                    if name.startswith("decoder_layers.") and ".kv_proj." not in name]
        per_step += [self.model.lm_head.weight, self.model.lm_head.bias]
        return sum(p.numel() * p.element_size() for p in per_step)

    def run(self, src: torch.Tensor, beams: int) -> list[list[int]]:
        params = DecodeParams(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, num_beams=beams,
                              bad_words_ids=((self.pad,),))
        decoder = BatchDecoder(self.model, capacity=src.shape[0] * beams, max_source_len=SOURCE_TOKENS,
                               max_target_len=NEW_TOKENS + 1)
        decoder.admit([(i, row.tolist(), params) for i, row in enumerate(src)])
        results = {}
        self.step_seconds = []
        while decoder.searches:
            start = time.perf_counter()
            events = decoder.step()
            self.step_seconds.append(time.perf_counter() - start)
            for event in events:
                if event.results:
                    results[event.key] = event.results[0].token_ids
        return [results[i] for i in range(src.shape[0])]


class TransformersEngine:
    name = "transformers float32"

    def __init__(self, path: Path):
        from transformers import MarianMTModel

        self.model = MarianMTModel.from_pretrained(path, dtype=torch.float32).eval()
        self.model.generation_config.forced_eos_token_id = None
        self.pad = self.model.config.pad_token_id

    @torch.inference_mode()
    def run(self, src: torch.Tensor, beams: int) -> list[list[int]]:
        out = self.model.generate(input_ids=src, attention_mask=torch.ones_like(src), num_beams=beams,
                                  min_new_tokens=NEW_TOKENS, max_new_tokens=NEW_TOKENS, bad_words_ids=[[self.pad]],
                                  do_sample=False)
        return [row[1:].tolist() for row in out]


class CTranslate2Engine:
    def __init__(self, path: Path, quantization: str):
        import ctranslate2

        converted = path.parent / f"{path.name}-ct2-{quantization}"
        if not (converted / "model.bin").exists():
            ctranslate2.converters.TransformersConverter(str(path)).convert(str(converted), quantization=quantization,
                                                                           force=True)
        self.translator = ctranslate2.Translator(str(converted), device="cpu", inter_threads=1,
                                                 intra_threads=torch.get_num_threads())
        vocab = json.loads((path / "vocab.json").read_text())
        self.id_to_token = {i: t for t, i in vocab.items()}
        self.token_to_id = vocab
        self.name = f"CTranslate2 {quantization}"

    def run(self, src: torch.Tensor, beams: int) -> list[list[int]]:
        batch = [[self.id_to_token[i] for i in row.tolist()] for row in src]
        results = self.translator.translate_batch(batch, beam_size=beams, min_decoding_length=NEW_TOKENS,
                                                  max_decoding_length=NEW_TOKENS, max_batch_size=0)
        return [[self.token_to_id[t] for t in r.hypotheses[0]] for r in results]


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    return f"{name or platform.machine()} ({os.cpu_count()} cores)"


ENGINES = {"ours": lambda path: OursEngine(path), "ours-bf16": lambda path: OursEngine(path, "bfloat16"),
           "ours-int8": lambda path: OursEngine(path, "int8"), "transformers": lambda path: TransformersEngine(path),
           "ct2-float32": lambda path: CTranslate2Engine(path, "float32"),
           "ct2-int8": lambda path: CTranslate2Engine(path, "int8")}


def measure(engine_name: str, path: Path, cells: list[tuple[int, int]], warmup: int, runs: int) -> None:
    """Worker: time one engine on every (beams, batch) cell; one JSON line per cell on stdout."""
    engine = ENGINES[engine_name](path)
    for beams, batch in cells:
        seconds, outputs = timed(lambda: engine.run(workload(batch, OPUS_MT_EN_DE["vocab_size"]), beams), warmup,
                                 runs)
        result = dict(engine=engine.name, beams=beams, batch=batch, seconds=seconds, outputs=outputs)
        if isinstance(engine, OursEngine):
            result.update(step_seconds=statistics.median(engine.step_seconds), step_bytes=engine.step_weight_bytes())
        print(json.dumps(result), flush=True)


def read_bandwidth() -> float:
    """Bytes per second one sum over a 512 MiB tensor reads (median of 5), with the benchmark's threads."""
    x = torch.ones(2 ** 27)
    seconds, _ = timed(x.sum, warmup=1, runs=5)
    return x.numel() * x.element_size() / seconds


def run_worker(engine_name: str, args: argparse.Namespace) -> list[dict]:
    command = [sys.executable, "-m", "loadtests.bench_engine", "--worker", engine_name, "--out", args.out,
               "--batches", args.batches, "--beams", args.beams, "--warmup", str(args.warmup), "--runs", str(args.runs)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_engine", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/bench", help="where the checkpoint and conversions are kept")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--engines", default="transformers,ct2-float32,ct2-int8,ours,ours-bf16,ours-int8")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--worker", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    path = build_checkpoint(Path(args.out) / "opus-mt-en-de-shape")
    cells = [(beams, batch) for beams in map(int, args.beams.split(",")) for batch in map(int, args.batches.split(","))]
    if args.worker:
        measure(args.worker, path, cells, args.warmup, args.runs)
        return
    results = {}  # (engine name, beams, batch) → result
    for engine_name in args.engines.split(","):
        print(f"measuring {engine_name} ...", file=sys.stderr, flush=True)
        for result in run_worker(engine_name, args):
            results[result["engine"], result["beams"], result["batch"]] = result
    names = list(dict.fromkeys(name for name, _, _ in results))  # in the order measured
    print(f"machine: {cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads, each engine in "
          f"its own process; {SOURCE_TOKENS} source tokens, {NEW_TOKENS} new tokens per sequence\n")
    print("| engine | beams | batch | tokens/s | ms per batch | × transformers | × CT2 float32 | greedy agrees |")
    print("|---|---|---|---|---|---|---|---|")
    for beams, batch in cells:
        reference = results.get((TransformersEngine.name, beams, batch))
        ct2 = results.get(("CTranslate2 float32", beams, batch))
        for name in names:
            r = results[name, beams, batch]
            agree = "" if reference is None or beams > 1 else \
                f"{sum(a == b for a, b in zip(r['outputs'], reference['outputs']))}/{batch}"
            versus = [f"{other['seconds'] / r['seconds']:.2f}" if other else "" for other in (reference, ct2)]
            print(f"| {name} | {beams} | {batch} | {batch * NEW_TOKENS / r['seconds']:,.0f} | "
                  f"{r['seconds'] * 1000:,.0f} | {versus[0]} | {versus[1]} | {agree} |")
    floors = [r for r in results.values() if r["beams"] == 1 and r["batch"] == 1 and r.get("step_bytes")]
    if floors:
        bandwidth = read_bandwidth()
        print(f"\nBatch-1 greedy decoder step against the weight-read floor (weight bytes per step / measured read "
              f"bandwidth {bandwidth / 1e9:.1f} GB/s):\n")
        print("| engine | weight MB per step | floor ms | step ms (median) | × floor |")
        print("|---|---|---|---|---|")
        for r in floors:
            floor = r["step_bytes"] / bandwidth
            print(f"| {r['engine']} | {r['step_bytes'] / 1e6:,.0f} | {floor * 1000:.2f} | "
                  f"{r['step_seconds'] * 1000:.2f} | {r['step_seconds'] / floor:.2f} |")


if __name__ == "__main__":
    main()
