"""Decoding speed: our engine vs transformers `generate` vs CTranslate2 on one random opus-mt-en-de, NLLB-600M
or flan-T5-base.

The random model has the shape of opus-mt-en-de (default), NLLB-200-distilled-600M (`--shape nllb-600m`) or
flan-T5-base (`--shape flan-t5-base`).

    pip install -e ".[bench]"
    python -m loadtests.bench_engine [--shape opus-mt-en-de|nllb-600m|flan-t5-base] [--batches 1,8,32]
                                     [--beams 1,4] [--out runs/bench] [--device cpu|cuda] [--rounds R]
                                     [--isa AVX2|AVX512_CORE|AVX512_CORE_VNNI|AVX512_CORE_BF16]

Builds a random checkpoint in the Hugging Face layout of the chosen model, converts it with CTranslate2's
converter, and runs one workload through every engine: 24 source tokens (with </s>) and exactly 32 generated
tokens per sequence (min = max new tokens, forced </s> off, <pad> banned), so every engine does the same work.
- opus-mt-en-de: Marian, vocab 58,101, d_model 512, 6+6 layers, 8 heads, FFN 2,048, swish, tied embeddings
  (74M parameters); the source is 23 random tokens + </s>.
- nllb-600m: M2M100 as NLLB-200-distilled-600M, vocab 256,206, d_model 1,024, 12+12 layers, 16 heads,
  FFN 4,096, ReLU, pre-norm, tied embeddings (615M parameters; init_std 0.02, the decoder's final norm weights
  random signs), with an NLLB tokenizer.json (synthetic pieces, the 202 language codes at their real ids); the
  source is eng_Latn + 22 random pieces + </s> and the first generated token is forced to fra_Latn in every
  engine (one of the 32).
- flan-t5-base: T5 v1.1 as flan-T5-base, vocab 32,128, d_model 768, 12+12 layers, 12 heads of 64, FFN 2,048
  gated-GELU, RMSNorm, relative attention bias, untied output head (248M parameters), with a T5 tokenizer.json
  (a Unigram over synthetic pieces and the 100 sentinels); the source is 23 random ids + </s>.
Each engine runs in its own process, one after the other: CTranslate2's OpenMP threads keep spinning for a
while after each call, and in one process they slowed every engine measured after them by up to 2×.
Prints a markdown table of generated tokens/s, per-batch latency (median of timed runs after warm-ups), the
speed-up over transformers and over CTranslate2 float32, and whether greedy outputs agree with transformers.

`--device cuda` runs every engine on the GPU: transformers and CTranslate2 in float16 by default, ours in float16
with its decoder step at static shapes and CUDA-graphed (graphs captured in the warm-up, one decoder per batch
capacity kept between runs as the server keeps its own), batches 1 to 128; the ratios are then to the float16
engines, and the batch-1 step to the GPU's measured read bandwidth.

`--rounds R` (R > 1) pairs the engines for a noisy machine: each cell is measured R times per engine, the engines
taking turns cell by cell (a fresh process per turn, their order reversed every other round), so the engines
compared in a round ran seconds apart. The table then shows the median over rounds, each ratio is the median of
that round's ratios, and the ratio to CTranslate2 float32 also its lowest and highest round.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from model import BatchDecoder, DecodeParams, instruction_sets, load

SOURCE_TOKENS, NEW_TOKENS = 24, 32
OPUS_MT_EN_DE = dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                     decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                     activation_function="swish", scale_embedding=True, max_position_embeddings=512)
NLLB_600M = dict(vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                 decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, activation_function="relu",
                 scale_embedding=True, max_position_embeddings=1024, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                 decoder_start_token_id=2, init_std=0.02)
FLAN_T5_BASE = dict(vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_heads=12,
                    feed_forward_proj="gated-gelu", dropout_rate=0.0, pad_token_id=0, eos_token_id=1,
                    decoder_start_token_id=0)
NLLB_PIECES = 256001  # <s> <pad> </s> <unk>, then SentencePiece pieces up to id 256000; language codes follow
NLLB_SOURCE_LANG, NLLB_TARGET_LANG = "eng_Latn", "fra_Latn"


# --tiny: the same vocabularies, tokenizers and special ids with small layers, for a dry run on any machine
TINY_BART = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                 encoder_ffn_dim=128, decoder_ffn_dim=128)
TINY_T5 = dict(d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2)


def built(path: Path) -> bool:
    """Whether an earlier process built the checkpoint at `path`: asked before importing transformers, which takes
    seconds (each engine's worker process asks)."""
    return (path / "config.json").exists()


def build_checkpoint(path: Path, sizes: dict | None = None) -> Path:
    """A random opus-mt-en-de-shaped Marian checkpoint (`sizes` override the layers') with the tokenizer files
    CTranslate2 needs."""
    if built(path):
        return path
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

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
    config = MarianConfig(**OPUS_MT_EN_DE | (sizes or {}), pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
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


def build_nllb_checkpoint(path: Path, sizes: dict | None = None) -> Path:
    """A random NLLB-200-distilled-600M-shaped M2M100 checkpoint (float32 safetensors) with NLLB's tokenizer files:
    tokenizer.json (a BPE over synthetic pieces ▁w0… at ids 4..256000, then the 202 language codes, <mask> and
    two made-up words, so that ids 0..256205 all exist as in the real model's vocabulary) and a
    tokenizer_config.json for transformers' NllbTokenizer (what CTranslate2's converter loads) that lists the
    codes in extra_special_tokens (what our loader reads)."""
    if built(path):
        return path
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    path.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials)} | {f"▁w{i}": i + 4 for i in range(NLLB_PIECES - 4)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in FAIRSEQ_LANGUAGE_CODES])
    tokenizer.add_special_tokens([AddedToken("<mask>", special=True, normalized=True, lstrip=True)])
    tokenizer.add_tokens(["madeupword0", "madeupword1"])
    assert tokenizer.get_vocab_size() == NLLB_600M["vocab_size"], tokenizer.get_vocab_size()
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(dict(
        tokenizer_class="NllbTokenizer", bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", src_lang=NLLB_SOURCE_LANG,
        tgt_lang=NLLB_TARGET_LANG, legacy_behaviour=False, model_max_length=1024,
        extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES)), indent=1))
    torch.manual_seed(0)
    config = M2M100Config(**NLLB_600M | (sizes or {}), dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                          encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True)
    model = M2M100ForConditionalGeneration(config).float()
    # With tied embeddings and the √d-scaled input embedding in the residual stream, a random pre-norm model's
    # greedy choice is its input token again and again (the column "greedy agrees" would say nothing); random
    # signs in the decoder's final norm weights break that, and cost nothing.
    signs = torch.randint(0, 2, (config.d_model,), generator=torch.Generator().manual_seed(1)) * 2 - 1
    model.model.decoder.layer_norm.weight.data.copy_(signs)
    model.generation_config = GenerationConfig(bos_token_id=0, decoder_start_token_id=2, eos_token_id=2,
                                               pad_token_id=1, max_length=200)
    model.save_pretrained(path)
    return path


def build_t5_checkpoint(path: Path, sizes: dict | None = None) -> Path:
    """A random flan-T5-base-shaped checkpoint laid out as the Hub's (config.json with tie_word_embeddings false
    and an lm_head.weight; transformers 5 would save it tied) with a T5 tokenizer.json and tokenizer_config.json
    (what CTranslate2's converter loads)."""
    if built(path):
        return path
    from safetensors.torch import load_file, save_file
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

    path.mkdir(parents=True, exist_ok=True)
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(100))]  # <extra_id_0> is the last id
    pieces = ["<pad>", "</s>", "<unk>"] + [f"▁w{i}" for i in range(FLAN_T5_BASE["vocab_size"] - 103)] + sentinels
    tokenizer = Tokenizer(models.Unigram([(p, -float(i)) for i, p in enumerate(pieces)], unk_id=2))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in pieces[:3] + sentinels])
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(dict(
        tokenizer_class="T5Tokenizer", eos_token="</s>", unk_token="<unk>", pad_token="<pad>", extra_ids=100,
        model_max_length=512)))
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(**FLAN_T5_BASE | (sizes or {}))).float()
    model.generation_config = GenerationConfig(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)
    model.save_pretrained(path)
    weights = load_file(str(path / "model.safetensors"))
    weights["lm_head.weight"] = torch.randn(weights["shared.weight"].shape, generator=torch.Generator().manual_seed(1))
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config.pop("scale_decoder_outputs", None)
    (path / "config.json").write_text(json.dumps(config | {"tie_word_embeddings": False}))
    return path


@dataclass(frozen=True)
class Shape:
    directory: str  # under --out
    build: Callable[[Path, dict | None], Path]
    model_class: str  # transformers' class
    vocab_size: int
    batches: str  # defaults for --batches, --beams, --engines
    beams: str
    engines: str
    source_lang: str | None = None  # a language token first in the source
    target_lang: str | None = None  # the token forced first in the output
    tiny: dict | None = None  # --tiny's layer sizes


SHAPES = {
    "opus-mt-en-de": Shape("opus-mt-en-de-shape", build_checkpoint, "MarianMTModel", OPUS_MT_EN_DE["vocab_size"],
                           "1,8,32", "1,4", "transformers,ct2-float32,ct2-int8,ours,ours-bf16,ours-int8",
                           tiny=TINY_BART),
    "nllb-600m": Shape("nllb-600m-shape", build_nllb_checkpoint, "M2M100ForConditionalGeneration",
                       NLLB_600M["vocab_size"], "1,8", "1,4", "transformers,ct2-float32,ours",
                       NLLB_SOURCE_LANG, NLLB_TARGET_LANG, TINY_BART),
    "flan-t5-base": Shape("flan-t5-base-shape", build_t5_checkpoint, "T5ForConditionalGeneration",
                          FLAN_T5_BASE["vocab_size"], "1,8,32", "1,4", "transformers,ct2-float32,ours",
                          tiny=TINY_T5),
}


@dataclass(frozen=True)
class Workload:
    """What every engine is given: the source ids maker and the special ids around it."""

    shape: Shape
    pad: int
    eos: int
    source_lang_id: int | None = None
    forced_bos: int | None = None  # target language id

    @classmethod
    def of(cls, shape: Shape, path: Path) -> "Workload":
        config = json.loads((path / "config.json").read_text())
        ids = {}
        if shape.source_lang:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
            ids = dict(source_lang_id=tokenizer.token_to_id(shape.source_lang),
                       forced_bos=tokenizer.token_to_id(shape.target_lang))
        return cls(shape, config["pad_token_id"], config["eos_token_id"], **ids)

    def source(self, batch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(batch)
        if self.source_lang_id is None:  # random ids past Marian's </s> (0) and T5's <pad>, </s> (0, 1), then </s>
            src = torch.randint(2, self.shape.vocab_size - 1, (batch, SOURCE_TOKENS), generator=g)
            src[:, -1] = self.eos
            return src
        pieces = torch.randint(4, NLLB_PIECES, (batch, SOURCE_TOKENS - 2), generator=g)
        return torch.cat([torch.full((batch, 1), self.source_lang_id), pieces, torch.full((batch, 1), self.eos)], 1)


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
    def __init__(self, path: Path, work: Workload, dtype: str = "float32", device: str = "cpu",
                 traced: bool = True):
        self.model = load(path, device=device, dtype=dtype, traced=traced).network
        self.dtype, self.name = dtype, f"ours {dtype}" + ("" if traced or device != "cpu" else " eager")
        self.pad, self.forced_bos = self.model.config.pad_token_id, work.forced_bos
        self.step_seconds: list[float] = []  # of the last run
        self.decoders: dict[int, BatchDecoder] = {}  # by capacity, kept between runs as the server keeps its own

    def step_weight_bytes(self) -> int | None:
        """Weight bytes one decoder step reads: decoder layers without the cross-attention K/V projection (run
        once per source) and the output projection. None for int8, whose packed weights torch does not expose."""
        if self.dtype == "int8":
            return None
        per_step = [p for name, p in self.model.named_parameters()
                    if name.startswith("decoder_layers.") and ".kv_proj." not in name]
        per_step += [self.model.lm_head.weight, self.model.lm_head.bias]
        return sum(p.numel() * p.element_size() for p in per_step)

    def graph_bytes(self, capacity: int) -> dict[int, int]:
        """The GPU memory each row bucket's CUDA graph added when the decoder of this capacity was captured."""
        step = self.decoders[capacity].static_step
        return step.graph_bytes if step else {}

    def run(self, src: torch.Tensor, beams: int) -> list[list[int]]:
        params = DecodeParams(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, num_beams=beams,
                              bad_words_ids=((self.pad,),), forced_bos_token_id=self.forced_bos)
        capacity = src.shape[0] * beams
        if capacity not in self.decoders:  # on a GPU: static shapes, CUDA graphs captured here (not timed after)
            self.decoders[capacity] = BatchDecoder(self.model, capacity, max_source_len=SOURCE_TOKENS,
                                                   max_new_tokens=NEW_TOKENS,
                                                   static_shapes=self.model.device.type == "cuda")
        decoder = self.decoders[capacity]
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
    def __init__(self, path: Path, work: Workload, dtype: str = "float32", device: str = "cpu"):
        import transformers

        model_class = getattr(transformers, work.shape.model_class)
        self.model = model_class.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
        self.name = f"transformers {dtype}"
        self.model.generation_config.forced_eos_token_id = None
        self.pad, self.forced_bos = self.model.config.pad_token_id, work.forced_bos

    @torch.inference_mode()
    def run(self, src: torch.Tensor, beams: int) -> list[list[int]]:
        src = src.to(self.model.device)
        out = self.model.generate(input_ids=src, attention_mask=torch.ones_like(src), num_beams=beams,
                                  min_new_tokens=NEW_TOKENS, max_new_tokens=NEW_TOKENS, bad_words_ids=[[self.pad]],
                                  forced_bos_token_id=self.forced_bos, do_sample=False)
        return [row[1:].tolist() for row in out]


def ct2_model(path: Path, quantization: str) -> Path:
    """The checkpoint at `path` converted by CTranslate2's converter with `quantization`, once, beside it."""
    import ctranslate2

    converted = path.parent / f"{path.name}-ct2-{quantization}"
    if not (converted / "model.bin").exists():
        ctranslate2.converters.TransformersConverter(str(path)).convert(str(converted), quantization=quantization,
                                                                       force=True)
    return converted


class CTranslate2Engine:
    def __init__(self, path: Path, work: Workload, quantization: str, device: str = "cpu"):
        import ctranslate2

        converted = ct2_model(path, quantization)
        self.translator = ctranslate2.Translator(str(converted), device=device, inter_threads=1,
                                                 intra_threads=torch.get_num_threads())
        # CTranslate2 speaks tokens: its own vocabulary (the checkpoint's, less Marian's trailing <pad>) maps ids.
        vocab_file = converted / "shared_vocabulary.json"
        tokens = (json.loads(vocab_file.read_text()) if vocab_file.exists()
                  else (converted / "shared_vocabulary.txt").read_text(encoding="utf-8").split("\n"))
        self.id_to_token = dict(enumerate(tokens))
        self.token_to_id = {t: i for i, t in enumerate(tokens)}
        # Marian's <pad> is out of CTranslate2's vocabulary; NLLB's is in it and banned as in the other engines.
        pad_token = self.id_to_token.get(work.pad)
        self.suppress = [[pad_token]] if pad_token == "<pad>" else None
        self.prefix = None if work.forced_bos is None else [self.id_to_token[work.forced_bos]]
        self.name = f"CTranslate2 {quantization}"

    def run(self, src: torch.Tensor, beams: int) -> list[list[int]]:
        batch = [[self.id_to_token[i] for i in row.tolist()] for row in src]
        prefix = None if self.prefix is None else [self.prefix] * len(batch)
        results = self.translator.translate_batch(batch, prefix, beam_size=beams, min_decoding_length=NEW_TOKENS,
                                                  max_decoding_length=NEW_TOKENS, max_batch_size=0,
                                                  suppress_sequences=self.suppress)
        return [[self.token_to_id[t] for t in r.hypotheses[0]] for r in results]


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    return f"{name or platform.machine()} ({os.cpu_count()} cores)"


def machine_name(device: str) -> str:
    return f"{torch.cuda.get_device_name()} with {cpu_name()}" if device == "cuda" else \
        f"{cpu_name()}, kernels: {instruction_sets()}"


# --isa: the environment that caps each engine's kernels at one instruction set (oneDNN and ATen for ours; oneDNN,
# CTranslate2's own dispatch and MKL for CTranslate2). MKL's AVX512_E1 is AVX-512 with VNNI.
ISA_CAPS = {"AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "CT2_FORCE_CPU_ISA": "AVX2",
                     "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
            **{cap: {"ONEDNN_MAX_CPU_ISA": cap, "ATEN_CPU_CAPABILITY": "avx512", "CT2_FORCE_CPU_ISA": "AVX512",
                     "MKL_ENABLE_INSTRUCTIONS": mkl}
               for cap, mkl in (("AVX512_CORE", "AVX512"), ("AVX512_CORE_VNNI", "AVX512_E1"),
                                ("AVX512_CORE_BF16", "AVX512_E1"))}}


# name → engine(path, workload, device)
ENGINES = {"ours": lambda path, work, device: OursEngine(path, work, "float32", device),
           "ours-fp16": lambda path, work, device: OursEngine(path, work, "float16", device),
           "ours-bf16": lambda path, work, device: OursEngine(path, work, "bfloat16", device),
           "ours-int8": lambda path, work, device: OursEngine(path, work, "int8", device),
           "ours-eager": lambda path, work, device: OursEngine(path, work, "float32", device, traced=False),
           "ours-int8-eager": lambda path, work, device: OursEngine(path, work, "int8", device, traced=False),
           "transformers": lambda path, work, device: TransformersEngine(path, work, "float32", device),
           "transformers-fp16": lambda path, work, device: TransformersEngine(path, work, "float16", device),
           "ct2-float32": lambda path, work, device: CTranslate2Engine(path, work, "float32", device),
           "ct2-float16": lambda path, work, device: CTranslate2Engine(path, work, "float16", device),
           "ct2-int8": lambda path, work, device: CTranslate2Engine(path, work, "int8", device)}
GPU_ENGINES, GPU_BATCHES = "transformers-fp16,ct2-float16,ours-fp16", "1,8,32,64,128"


def reference_names(device: str) -> tuple[str, str]:
    """The engines the others are compared with: transformers and CTranslate2 at the device's usual precision."""
    dtype = "float16" if device == "cuda" else "float32"
    return f"transformers {dtype}", f"CTranslate2 {dtype}"


def measure(engine_name: str, path: Path, work: Workload, cells: list[tuple[int, int]], warmup: int,
            runs: int, device: str) -> None:
    """Worker: time one engine on every (beams, batch) cell; one JSON line per cell on stdout."""
    engine = ENGINES[engine_name](path, work, device)
    for beams, batch in cells:
        seconds, outputs = timed(lambda: engine.run(work.source(batch), beams), warmup, runs)
        lengths = sorted({len(o) for o in outputs})
        if lengths != [NEW_TOKENS]:
            print(f"warning: {engine.name} beams {beams} batch {batch} generated {lengths} tokens, not {NEW_TOKENS}",
                  file=sys.stderr, flush=True)
        if work.forced_bos is not None and any(o[:1] != [work.forced_bos] for o in outputs):
            print(f"warning: {engine.name} beams {beams} batch {batch}: first token not the forced target language",
                  file=sys.stderr, flush=True)
        result = dict(engine=engine.name, beams=beams, batch=batch, seconds=seconds, outputs=outputs)
        if isinstance(engine, OursEngine):
            result.update(step_seconds=statistics.median(engine.step_seconds), step_bytes=engine.step_weight_bytes(),
                          graph_bytes=engine.graph_bytes(batch * beams))
        print(json.dumps(result), flush=True)


def read_bandwidth(device: str) -> float:
    """Bytes per second one sum over a 512 MiB tensor reads (median of 5), with the benchmark's threads."""
    x = torch.ones(2 ** 27, device=device)
    seconds, _ = timed(lambda: x.sum().item(), warmup=1, runs=5)
    return x.numel() * x.element_size() / seconds


def run_worker(engine_name: str, args: argparse.Namespace, batches: str, beams: str) -> list[dict]:
    command = [sys.executable, "-m", "loadtests.bench_engine", "--worker", engine_name, "--shape", args.shape,
               "--out", args.out, "--batches", batches, "--beams", beams, "--warmup", str(args.warmup),
               "--runs", str(args.runs), "--device", args.device] + (["--tiny"] if args.tiny else [])
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def measure_rounds(engines: list[str], cells: list[tuple[int, int]], args: argparse.Namespace) -> list[list[dict]]:
    """Every engine on every cell: one round with all cells in each engine's one process, or `args.rounds` rounds
    with the engines taking turns cell by cell. → a list of rounds, each a list of results."""
    if args.rounds == 1:
        results = []
        for engine_name in engines:
            print(f"measuring {engine_name} ...", file=sys.stderr, flush=True)
            results += run_worker(engine_name, args, args.batches, args.beams)
        return [results]
    rounds = [[] for _ in range(args.rounds)]
    for beams, batch in cells:
        for i, results in enumerate(rounds):
            print(f"beams {beams} batch {batch}, round {i + 1} of {args.rounds} ...", file=sys.stderr, flush=True)
            for engine_name in engines[::-1] if i % 2 else engines:
                results += run_worker(engine_name, args, str(batch), str(beams))
    return rounds


def median_of(rounds: list[dict], key: tuple, field: str) -> float:
    """The median over rounds of one result's field."""
    return statistics.median(round_[key][field] for round_ in rounds)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_engine", description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="opus-mt-en-de", help="the model shape to build")
    p.add_argument("--out", default="runs/bench", help="where the checkpoint and conversions are kept")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help=f"cuda: our step CUDA-graphed; defaults --engines {GPU_ENGINES}, --batches {GPU_BATCHES}")
    p.add_argument("--batches", help="default: 1,8,32 (opus-mt-en-de), 1,8 (nllb-600m)")
    p.add_argument("--beams", default=None, help="default: 1,4")
    p.add_argument("--engines", help="default: transformers,ct2-float32,ct2-int8,ours,ours-bf16,ours-int8 "
                                     "(nllb-600m: transformers,ct2-float32,ours); from " + ",".join(ENGINES))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1, help="> 1: the engines take turns cell by cell, this many "
                                                          "rounds (medians and paired ratios)")
    p.add_argument("--tiny", action="store_true", help="the shape's vocabulary and tokenizer with 2+2 layers of "
                                                        "width 64: a quick walk through every engine (a dry run)")
    p.add_argument("--json", help="also write the tables to this file as JSON")
    p.add_argument("--isa", choices=sorted(ISA_CAPS), help="run every engine capped at this instruction set, as a CPU "
                                                           "without the higher ones would: oneDNN's and ATen's caps, "
                                                           "CTranslate2's and MKL's")
    p.add_argument("--worker", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    os.environ.update(ISA_CAPS.get(args.isa, {}))  # before any worker starts: each reads them once
    shape = SHAPES[args.shape]
    cuda = args.device == "cuda"
    args.batches = args.batches or (GPU_BATCHES if cuda else shape.batches)
    args.beams = args.beams or shape.beams
    args.engines = args.engines or (GPU_ENGINES if cuda else shape.engines)
    path = shape.build(Path(args.out) / (shape.directory + ("-tiny" if args.tiny else "")),
                       shape.tiny if args.tiny else None)
    cells = [(beams, batch) for beams in map(int, args.beams.split(",")) for batch in map(int, args.batches.split(","))]
    if args.worker:
        measure(args.worker, path, Workload.of(shape, path), cells, args.warmup, args.runs, args.device)
        return
    rounds = [{(r["engine"], r["beams"], r["batch"]): r for r in results}  # (engine name, beams, batch) → result
              for results in measure_rounds(args.engines.split(","), cells, args)]
    report = tables(rounds, cells, args)
    forced = f" (the first forced to {shape.target_lang})" if shape.target_lang else ""
    paired = (f"; {args.rounds} rounds, the engines taking turns cell by cell: medians over rounds, ratios the "
              f"median of each round's (lowest–highest round)" if args.rounds > 1 else "")
    print(f"machine: {report['machine']}, torch {torch.__version__}, {torch.get_num_threads()} threads, each engine "
          f"in its own process; shape {args.shape}{' (tiny)' if args.tiny else ''}; {SOURCE_TOKENS} source tokens, "
          f"{NEW_TOKENS} new tokens per sequence{forced}; median of {args.runs} runs after {args.warmup} "
          f"warm-ups{paired}\n")
    transformers_name, ct2_name = reference_names(args.device)
    print(f"| engine | beams | batch | tokens/s | ms per batch | × {transformers_name} | × {ct2_name} | "
          f"greedy agrees |")
    print("|---|---|---|---|---|---|---|---|")
    for c in report["cells"]:
        versus = [f"{c[key]:.2f}" if c[key] is not None else "" for key in ("x_transformers", "x_ct2")]
        if c["x_ct2_range"]:
            versus[1] += " ({:.2f}–{:.2f})".format(*c["x_ct2_range"])
        print(f"| {c['engine']} | {c['beams']} | {c['batch']} | {c['tokens_s']:,.0f} | {c['ms']:,.0f} | "
              f"{versus[0]} | {versus[1]} | {c['greedy_agrees'] or ''} |")
    if report["floor"]:
        print(f"\nBatch-1 greedy decoder step against the weight-read floor (weight bytes per step / measured read "
              f"bandwidth {report['read_gb_s']:.1f} GB/s):\n")
        print("| engine | weight MB per step | floor ms | step ms (median) | × floor |")
        print("|---|---|---|---|---|")
        for f in report["floor"]:
            print(f"| {f['engine']} | {f['weight_mb']:,.0f} | {f['floor_ms']:.2f} | {f['step_ms']:.2f} | "
                  f"{f['x_floor']:.2f} |")
    if report["graphs"]:
        print("\nCUDA graph memory: what each row bucket's capture added to the decoder's shared pool (largest "
              "bucket captured first, the smaller ones reuse its memory):\n")
        print("| engine | decoder rows | MB by bucket (rows: MB) | total MB |")
        print("|---|---|---|---|")
        for g in report["graphs"]:
            buckets = ", ".join(f"{rows}: {mb:,.1f}" for rows, mb in g["mb_by_bucket"].items())
            print(f"| {g['engine']} | {g['rows']} | {buckets} | {sum(g['mb_by_bucket'].values()):,.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report | {"shape": args.shape, "tiny": args.tiny}, indent=1))


def tables(rounds: list[dict], cells: list[tuple[int, int]], args: argparse.Namespace) -> dict:
    """The measured rounds → the report's tables: per cell and engine (speed, ratios, agreement), the batch-1
    step against the weight-read floor, and CUDA graph memory per decoder."""
    results = rounds[0]
    names = list(dict.fromkeys(name for name, _, _ in results))  # in the order measured
    transformers_name, ct2_name = reference_names(args.device)
    out = dict(machine=machine_name(args.device), torch=torch.__version__, device=args.device, cells=[], floor=[],
               graphs=[], read_gb_s=None)
    for beams, batch in cells:
        reference_key, ct2_key = (transformers_name, beams, batch), (ct2_name, beams, batch)
        for name in names:
            key = (name, beams, batch)
            seconds = median_of(rounds, key, "seconds")
            agree = None if reference_key not in results or beams > 1 else \
                f"{sum(a == b for a, b in zip(results[key]['outputs'], results[reference_key]['outputs']))}/{batch}"
            versus = []
            for other in (reference_key, ct2_key):
                ratios = [round_[other]["seconds"] / round_[key]["seconds"] for round_ in rounds] \
                    if other in results else []
                versus.append(ratios)
            out["cells"].append(dict(
                engine=name, beams=beams, batch=batch, tokens_s=batch * NEW_TOKENS / seconds, ms=seconds * 1000,
                x_transformers=statistics.median(versus[0]) if versus[0] else None,
                x_ct2=statistics.median(versus[1]) if versus[1] else None,
                x_ct2_range=[min(versus[1]), max(versus[1])] if len(rounds) > 1 and versus[1] else None,
                greedy_agrees=agree))
    floors = [(key, r) for key, r in results.items() if r["beams"] == 1 and r["batch"] == 1 and r.get("step_bytes")]
    if floors:
        bandwidth = read_bandwidth(args.device)
        out["read_gb_s"] = bandwidth / 1e9
        for key, r in floors:
            floor, step = r["step_bytes"] / bandwidth, median_of(rounds, key, "step_seconds")
            out["floor"].append(dict(engine=r["engine"], weight_mb=r["step_bytes"] / 1e6, floor_ms=floor * 1000,
                                     step_ms=step * 1000, x_floor=step / floor))
    seen = set()
    for (name, beams, batch), r in results.items():
        rows = beams * batch
        if r.get("graph_bytes") and (name, rows) not in seen:
            seen.add((name, rows))
            out["graphs"].append(dict(engine=name, rows=rows, mb_by_bucket={
                int(bucket): size / 1e6 for bucket, size in sorted(r["graph_bytes"].items(), key=lambda x: -int(x[0]))}))
    return out


if __name__ == "__main__":
    main()
