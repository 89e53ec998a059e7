"""Batch invariance on a GPU, measured: a row alone against the same row inside other row counts, and the cost.

    python -m loadtests.gpu_invariance [--styles plain,fixed] [--dtypes float16,bfloat16] [--out DIR]

Styles of the products: plain nn.Linear (cuBLAS picks a kernel per shape), or fixed: what a GPU model runs, every
product a fixed number of rows at a time (model.kernels.cuda_kernels; `fixedN` for N rows in the products table).

1. products: each Linear shape of the opus-mt-en-de and NLLB-600M models, row r alone against row r inside M rows
   (beside rows 100× larger): for how many of the row counts it differs;
2. attention: a decoder step's (one query over the cache capacity, masked per row) and an encoder's (padded
   sources), likewise;
3. end to end: the demo model and an opus-mt-en-de-shaped random checkpoint, each source decoded alone against
   inside a running batch of up to 40 searches (sources of mixed lengths joining as rows free up), both through a
   decoder of 200 rows (CUDA graphs of 64, 128 and 200 rows), greedy, beam 4 with n-best and seeded sampling: how
   many sources' results or per-step log-probabilities differ;
4. cost: the captured decoder step per row bucket and an encoder pass (32 × 24 tokens), ms, median of 50;
5. layers: where a difference first shows, module by module: one eager decoder step over live rows inside two
   row counts, and a source encoded alone against inside a padded batch of four; then the log-softmax over the
   vocabulary that follows the step (torch's, and the model's: model.kernels.cuda_kernels.log_softmax).
`--device cpu` walks it on the CPU (the styles do not apply there: a check of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from loadtests.bench_engine import (
    SOURCE_TOKENS,
    build_checkpoint,
    build_nllb_checkpoint,
)
from model import load
from model.kernels import cuda_kernels
from model.network.layers import attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from batch_decoding import decodings, differences

ROW_COUNTS = (2, 3, 4, 5, 8, 16, 63, 64, 65, 128, 256)
LINEAR_SHAPES = {"opus-mt-en-de": [(512, 512), (512, 2048), (2048, 512), (512, 58101)],
                 "NLLB-600M": [(1024, 1024), (1024, 4096), (4096, 1024), (1024, 256206)]}


def styled(network, style: str):
    """plain: nn.Linear; fixed: model.kernels.cuda_kernels, as loaded (fixedN: N rows at a time, a lone layer)."""
    if isinstance(network, torch.nn.Linear):  # a lone layer of the products table
        network.__class__ = torch.nn.Linear if style == "plain" else cuda_kernels.FixedRowsLinear
        if style != "plain":
            network.rows_at_a_time = int(style.removeprefix("fixed") or cuda_kernels.DECODER_ROWS)
    else:
        cuda_kernels.use_fixed_row_products(network, enable=style != "plain")
    return network


def differing_row_counts(op, rows: torch.Tensor, counts=ROW_COUNTS, seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    differ = []
    for m in counts:
        r = int(torch.randint(0, len(rows), (1,), generator=generator))
        batch = rows[torch.randint(0, len(rows), (m,), generator=generator)] * 100
        at = int(torch.randint(0, m, (1,), generator=generator))
        batch[at] = rows[r]
        if not torch.equal(op(batch)[at], op(rows[r:r + 1])[0]):
            differ.append(m)
    return differ


def products(device: str, dtype: torch.dtype, styles: list[str]) -> list[str]:
    lines = []
    for shape, sizes in LINEAR_SHAPES.items():
        for d_in, d_out in sizes:
            torch.manual_seed(0)
            layer = torch.nn.Linear(d_in, d_out).to(device=device, dtype=dtype)
            rows = torch.randn(40, d_in, device=device, dtype=dtype)
            for style in styles:
                styled(layer, style)
                with torch.inference_mode():
                    differ = differing_row_counts(layer, rows, ROW_COUNTS + (1000,))
                lines.append(f"| {shape} {d_in}→{d_out} | {dtype} | {style} | {len(differ)} of "
                             f"{len(ROW_COUNTS) + 1} | {differ} |")
    return lines


def attentions(device: str, dtype: torch.dtype) -> list[str]:
    g = torch.Generator().manual_seed(0)
    heads, dh, capacity = 16, 64, 96
    lengths = torch.randint(1, capacity, (40,), generator=g)
    q = torch.randn(40, heads, 1, dh, generator=g).to(device, dtype)
    kv = torch.randn(2, 40, heads, capacity, dh, generator=g).to(device, dtype)
    mask = (torch.arange(capacity)[None, :] < lengths[:, None])[:, None, None, :].to(device)  # (40, 1, 1, capacity)

    def step(index: torch.Tensor) -> torch.Tensor:
        return attention(q[index], kv[0][index], kv[1][index], mask[index], None)

    def step_differs():
        differ = []
        for m in ROW_COUNTS:
            index = torch.randint(0, 40, (m,), generator=g)
            at = int(torch.randint(0, m, (1,), generator=g))
            if not torch.equal(step(index)[at], step(index[at:at + 1])[0]):
                differ.append(m)
        return differ

    x = torch.randn(40, heads, 64, dh, generator=g).to(device, dtype)
    source_lengths = torch.randint(1, 64, (40,), generator=g)

    def encoder(index: torch.Tensor, at: int) -> torch.Tensor:
        longest = int(source_lengths[index].max())
        pad = (torch.arange(longest)[None, :] < source_lengths[index][:, None])[:, None, None, :].to(device)
        y = x[index, :, :longest]
        return attention(y, y, y, pad, None)[at, :, :int(source_lengths[index[at]])]

    def encoder_differs():
        differ = []
        for m in ROW_COUNTS:
            index = torch.randint(0, 40, (m,), generator=g)
            at = int(torch.randint(0, m, (1,), generator=g))
            if not torch.equal(encoder(index, at), encoder(index[at:at + 1], 0)):
                differ.append(m)
        return differ

    with torch.inference_mode():
        return [f"| decoder step (1 query over {capacity}, masked) | {dtype} | {step_differs()} |",
                f"| encoder (padded sources, up to 63 tokens) | {dtype} | {encoder_differs()} |"]


MODES = decodings(12)


def random_sources(network, count: int, seed: int) -> list[list[int]]:
    """Source ids of a random checkpoint: 1 to 30 tokens and the end token."""
    rng, eos = random.Random(seed), network.config.eos_token_id
    return [[rng.randrange(2, 1000) for _ in range(rng.randint(1, 30))] + [eos] for _ in range(count)]


def end_to_end(name: str, path: Path | None, device: str, dtype: str, styles: list[str], count: int) -> list[str]:
    bundle = load(path, device=device, dtype=dtype, traced=False) if path else load(device=device, dtype=dtype)
    if path is None:
        from num2words import num2words

        from model.demo.data import LANGUAGES, held_out_numbers
        ids = [bundle.source(f">>{LANGUAGES[i % 4]}<< {num2words(n, lang='en')}").ids
               for i, n in enumerate(held_out_numbers(count, seed=5))]
    else:
        ids = random_sources(bundle.network, count, seed=0)
    lines = []
    for style in styles:
        styled(bundle.network, style)
        for mode, params in MODES.items():
            try:
                differ = len(differences(bundle.network, ids, params, static_shapes=device == "cuda",
                                         sequences_at_once=40, join_at_most=4, capacity=200))
            except RuntimeError as e:  # a failed capture, say: the other styles still measured
                differ = f"failed: {str(e).splitlines()[0]}"
            lines.append(f"| {name} | {dtype} | {style} | {mode} | {differ} of {count} |")
            print(lines[-1], flush=True)
    return lines


def recorded(network, run) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """run() with every leaf module's first input and its output recorded, in call order: (name, input, output)."""
    calls, handles = [], []
    for name, module in network.named_modules():
        if name and not any(module.children()):
            handles.append(module.register_forward_hook(
                lambda _, args, out, name=name: calls.append((name, args[0].clone(), out.clone()))))
    try:
        with torch.inference_mode():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return calls


def first_difference(a: list, b: list, pick_a, pick_b) -> str:
    """The first module whose input (so: what ran before it, outside modules) or output differs between two
    recordings of the same rows, each read through its pick."""
    for (name, in_a, out_a), (_, in_b, out_b) in zip(a, b):
        if not torch.equal(pick_a(in_a), pick_b(in_b)):
            return f"before {name}"
        if not torch.equal(pick_a(out_a), pick_b(out_b)):
            return name
    return "none"


def log_softmaxes(device: str) -> list[str]:
    """What the step's logits go through before a search reads them, a log-softmax over the vocabulary (float32):
    a row alone against the same row at each index of an 8-row batch."""
    lines = []
    for vocab in (1000, 58101, 256206):
        logits = torch.randn(8, vocab, generator=torch.Generator().manual_seed(vocab)).to(device)
        for style, op in (("torch", partial(torch.log_softmax, dim=-1)),
                          ("model", lambda x: cuda_kernels.log_softmax(x, torch.empty_like(x)))):
            differ = [at for at in range(8) if not torch.equal(
                op(logits.roll(at, 0))[at], op(logits[:1])[0])]
            lines.append(f"| log-softmax over {vocab} ({style}) | float32 | batch indices that differ {differ} |")
    return lines


def layers(name: str, path: Path, device: str, dtype: str, pairs=((1, 16), (64, 128), (64, 200))) -> list[str]:
    from model import BatchDecoder
    from model.kernels.static_step import StaticStep

    network = load(path, device=device, dtype=dtype, traced=False).network
    ids = random_sources(network, 40, seed=1)
    decoder = BatchDecoder(network, capacity=200, max_source_len=64, max_new_tokens=12)
    decoder.admit([(i, source, MODES["greedy"]) for i, source in enumerate(ids)])
    step = StaticStep(network, decoder.cache, capture=False)  # eager: hooks see every module
    lines = []

    def at(rows: int, live: int) -> list:
        step.tokens[:live] = torch.arange(5, 5 + live)
        step.positions[:rows] = 0
        step.positions[:live] = 3
        return recorded(network, partial(step._forward, rows))

    for small, large in pairs:
        live = min(small, len(ids))
        first_rows = partial(torch.narrow, dim=0, start=0, length=live)
        where = first_difference(at(small, live), at(large, live), first_rows, first_rows)
        lines.append(f"| {name} | {dtype} | decoder step, {live} live rows in {small} vs {large} | {where} |")
    if device == "cuda":  # the CPU packs sources into rows instead (model.network.transformer.encode_sources)
        lines.append(encoder_difference(name, network, dtype, ids[:4], at=2))
    print("\n".join(lines), flush=True)
    return lines


def encoder_difference(name: str, network, dtype: str, batch: list[list[int]], at: int) -> str:
    alone = recorded(network, partial(network.encode_sources, [batch[at]]))
    together = recorded(network, partial(network.encode_sources, batch))
    length = len(batch[at])

    def tokens_of(t: torch.Tensor, row: int) -> torch.Tensor:  # (B, S, …) or a position table (S, D)
        return t[row, :length] if t.dim() == 3 or not t.is_floating_point() else t[:length]

    where = first_difference(alone, together, partial(tokens_of, row=0), partial(tokens_of, row=at))
    return f"| {name} | {dtype} | encoder, {length} tokens alone vs in {len(batch)} padded to " \
           f"{max(map(len, batch))} | {where} |"


def timed_ms(fn, device: str, runs: int = 50) -> float:
    times = []
    for _ in range(runs + 5):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:]) * 1e3


def cost(name: str, path: Path, device: str, dtype: str, styles: list[str], capacity: int) -> list[str]:
    from model import BatchDecoder

    network = load(path, device=device, dtype=dtype, traced=False).network
    src = torch.randint(4, 1000, (32, SOURCE_TOKENS), device=device)
    mask = torch.ones_like(src, dtype=torch.bool)
    lines = []
    for style in styles:
        styled(network, style)
        decoder = BatchDecoder(network, capacity=capacity, max_source_len=64, max_new_tokens=64,
                               static_shapes=True)
        cells = []
        with torch.inference_mode():
            for rows in [r for r in (1, 8, 32) if r < capacity] + [capacity]:
                tokens = torch.full((rows,), 5, device=device)
                positions = torch.full((rows,), 3, device=device)
                cells.append(timed_ms(partial(decoder.static_step, tokens, positions), device))
            cells.append(timed_ms(lambda: network.encode(src, mask), device, runs=20))
        del decoder
        lines.append(f"| {name} | {dtype} | {style} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.gpu_invariance", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--styles", default="plain,fixed")
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--sources", type=int, default=24, help="sources per end-to-end comparison")
    p.add_argument("--capacity", type=int, default=128, help="decoder rows in the cost table")
    p.add_argument("--parts", default="products,attention,end-to-end,cost,layers")
    p.add_argument("--out", default="runs/gpu-invariance", help="where the random checkpoints are built")
    args = p.parse_args(argv)
    styles, dtypes, parts = args.styles.split(","), args.dtypes.split(","), args.parts.split(",")
    out = Path(args.out)
    opus = build_checkpoint(out / "opus-mt-en-de-shape", None if args.device == "cuda" else
                            {"d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 128,
                             "decoder_ffn_dim": 128})
    report = []
    if "products" in parts:
        report += ["", "| product | dtype | style | row counts that differ | which |", "|---|---|---|---|---|"]
        for dtype in dtypes:
            report += products(args.device, getattr(torch, dtype), styles)
            print("\n".join(report[-len(styles) * 8:]), flush=True)
    if "attention" in parts:
        report += ["", "| attention | dtype | row counts that differ |", "|---|---|---|"]
        for dtype in dtypes:
            report += attentions(args.device, getattr(torch, dtype))
        print("\n".join(report[-len(dtypes) - 2:]), flush=True)
    if "end-to-end" in parts:
        report += ["", "| model | dtype | style | decoding | sources that differ |", "|---|---|---|---|---|"]
        for dtype in dtypes:
            report += end_to_end("demo", None, args.device, dtype, styles, args.sources)
            report += end_to_end("opus-mt-en-de shape", opus, args.device, dtype, styles, args.sources)
    if "cost" in parts:
        report += ["", f"| model | dtype | style | step 1 row | 8 | 32 | {args.capacity} | encoder 32×24 |",
                   "|---|---|---|---|---|---|---|---|"]
        shapes = [("opus-mt-en-de", opus)]
        if args.device == "cuda":
            shapes.append(("NLLB-600M", build_nllb_checkpoint(out / "nllb-600m-shape")))
        for name, path in shapes:
            report += cost(name, path, args.device, dtypes[0], styles, args.capacity)
    if "layers" in parts:
        report += ["", "| model | dtype | comparison | first module that differs |", "|---|---|---|---|"]
        for dtype in dtypes:
            report += layers("opus-mt-en-de shape", opus, args.device, dtype)
        report += log_softmaxes(args.device)
    print("\n".join(report))


if __name__ == "__main__":
    main()
