"""Loading a model: seconds, peak and resident memory of ours, transformers and CTranslate2, each in a fresh process.

    python -m loadtests.bench_load [--shapes flan-t5-base,nllb-3.3b] [--dtypes float32,bfloat16,int8]
                                   [--engines ours,transformers,ctranslate2] [--out DIR] [--rounds 1]

Shapes: flan-t5-base (T5 v1.1 as flan-T5-base, one float32 model.safetensors, loadtests.bench_engine's) and
nllb-3.3b (NLLB-200-3.3B's shape: d_model 2048, 24+24 layers, 16 heads, FFN 8192, vocabulary 256,206; written as
three pickle shards with pytorch_model.bin.index.json, as the Hub ships it, ~13 GB; the tokenizer of bench_engine's
NLLB shape). Checkpoints are built once under --out. "ours" is `model.load(path, dtype=...)` as the server loads it
(float32 traced with oneDNN Linears, bfloat16, int8); "transformers" is `from_pretrained(path, dtype=...)` plus one
generated token (no int8); "ctranslate2" is `ctranslate2.Translator(converted, compute_type=dtype)` plus one
generated token (the tokenizer loaded by transformers, as that engine's), on the checkpoint converted once per dtype
by CTranslate2's TransformersConverter (beside the checkpoint; converting holds the float32 model in transformers,
which NLLB-3.3B's 13 GB barely leave room for on 24 GB), for the dtypes it computes in on this CPU. Peak is the
process's high-water mark of resident memory (VmHWM) less what it held before loading, resident what it holds after
(VmRSS, same base).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from loadtests.bench_engine import NLLB_600M, build_nllb_checkpoint, build_t5_checkpoint, ct2_model

NLLB_3B = dict(NLLB_600M, d_model=2048, encoder_layers=24, decoder_layers=24, encoder_ffn_dim=8192,
               decoder_ffn_dim=8192)


def build_nllb_3b_checkpoint(path: Path) -> Path:
    """Random float32 weights of NLLB-3.3B's shape in three pickle shards and an index, written tensor by tensor
    (never a whole model in memory), beside the tokenizer files of bench_engine's NLLB shape."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    if (path / "config.json").exists():
        return path
    small = build_nllb_checkpoint(path.parent / "nllb-600m-shape")
    path.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (path / name).write_bytes((small / name).read_bytes())
    config = M2M100Config(**NLLB_3B, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                          tie_word_embeddings=True)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in M2M100ForConditionalGeneration(config).state_dict().items()}
    tied = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
    keys = [k for k in shapes if k not in tied and "embed_positions" not in k]
    generator = torch.Generator().manual_seed(0)
    weight_map, count = {}, 3
    for i in range(count):
        name = f"pytorch_model-{i + 1:05d}-of-{count:05d}.bin"
        part = keys[i * len(keys) // count:(i + 1) * len(keys) // count]
        torch.save({k: torch.randn(shapes[k], generator=generator) * 0.02 for k in part}, path / name)
        weight_map.update(dict.fromkeys(part, name))
    (path / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config.save_pretrained(path)
    return path


SHAPES = {"flan-t5-base": ("flan-t5-base-shape", build_t5_checkpoint),
          "nllb-3.3b": ("nllb-3.3b-shape", build_nllb_3b_checkpoint)}

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(2)
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))
engine, path, dtype, converted = sys.argv[1:5]
if engine == "ours":
    from model import load
else:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
if engine == "ctranslate2":
    import ctranslate2
base = status("VmRSS")
start = time.perf_counter()
if engine == "ours":
    bundle = load(path, dtype=dtype)
elif engine == "transformers":
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    batch = AutoTokenizer.from_pretrained(path)(["Hello."], return_tensors="pt")
    with torch.no_grad():
        model.generate(**batch, max_new_tokens=1)
else:
    translator = ctranslate2.Translator(converted, device="cpu", compute_type=dtype, inter_threads=1,
                                        intra_threads=2)
    tokenizer = AutoTokenizer.from_pretrained(path)
    translator.translate_batch([tokenizer.convert_ids_to_tokens(tokenizer("Hello.").input_ids)],
                               max_decoding_length=1)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "peak_mb": status("VmHWM") - base, "resident_mb": status("VmRSS") - base}))
"""


def unmeasured(engine: str, dtype: str) -> str | None:
    """Why `engine` does not load `dtype` here; None where it does."""
    if engine == "transformers" and dtype == "int8":
        return "transformers: no int8 of its own"
    if engine != "ctranslate2":
        return None
    try:
        import ctranslate2
    except ImportError:
        return "ctranslate2: not installed (pip install -e \".[bench]\")"
    computes = sorted(ctranslate2.get_supported_compute_types("cpu"))
    if dtype not in computes:
        return f"ctranslate2 {ctranslate2.__version__}: no {dtype} on this CPU (it computes in {', '.join(computes)})"
    return None


def measure(engine: str, path: Path, dtype: str, converted: Path | None) -> dict:
    """One load in a fresh process: of the checkpoint at `path`, or (ctranslate2) of its `converted` model."""
    done = subprocess.run([sys.executable, "-c", CHILD, engine, str(path), dtype, str(converted)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else str(done.returncode)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_load", description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="flan-t5-base")
    p.add_argument("--dtypes", default="float32,bfloat16,int8")
    p.add_argument("--engines", default="ours,transformers", help="from ours,transformers,ctranslate2")
    p.add_argument("--out", default="loadtests/out/checkpoints")
    p.add_argument("--rounds", type=int, default=1, help="each cell this many times, engines alternating")
    args = p.parse_args(argv)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; each load in a fresh "
          f"process, 2 threads\n")
    print("| shape | engine | dtype | load s | peak MB | resident MB | peak ÷ resident |")
    print("|---|---|---|---|---|---|---|")
    skipped = {}  # why an engine was left out, once each, in order
    for shape in args.shapes.split(","):
        directory, build = SHAPES[shape]
        path = build(Path(args.out) / directory)
        for dtype in args.dtypes.split(","):
            reasons = {engine: unmeasured(engine, dtype) for engine in args.engines.split(",")}
            skipped.update(dict.fromkeys(reason for reason in reasons.values() if reason))
            engines = [engine for engine, reason in reasons.items() if reason is None]
            converted = ct2_model(path, dtype) if "ctranslate2" in engines else None  # not part of the load
            for _ in range(args.rounds):
                for engine in engines:
                    r = measure(engine, path, dtype, converted)
                    if "error" in r:
                        print(f"| {shape} | {engine} | {dtype} | error: {r['error']} | | | |", flush=True)
                        continue
                    print(f"| {shape} | {engine} | {dtype} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | "
                          f"{r['resident_mb']:.0f} | {r['peak_mb'] / r['resident_mb']:.2f} |", flush=True)
    for reason in skipped:
        print(f"\nnot measured: {reason}")


if __name__ == "__main__":
    main()
