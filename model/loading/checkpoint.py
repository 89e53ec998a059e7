"""Hugging Face checkpoints ↔ Seq2SeqTransformer, through the family's explicit key map.

Loading checks every key and shape and names the file (the shard) and key on any mismatch. Weights are read
with safetensors, or torch.load(weights_only=True) for .bin: no arbitrary unpickling; one file or shards.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections import Counter
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Callable

import safetensors
import torch
from safetensors import safe_open
from torch import nn
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..kernels.cpu_kernels import use_onednn_linears
from ..kernels.cpu_memory import forget_mapped_pages
from ..kernels.cuda_kernels import use_fixed_row_products
from ..kernels.quantize import Int8Rows, quantize_in_blocks, quantize_linears
from ..network.architecture import ModelConfig
from ..network.transformer import Seq2SeqTransformer
from .config import read_json
from .families.layout import OUTPUT_BIAS, ZEROS, Parts

# The Hub's weight layouts, in the order they are preferred: safetensors before pickles, each as one file or as
# shards named by an index (its weight_map: tensor name → shard file).
WEIGHT_LAYOUTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                  "pytorch_model.bin.index.json")
KeyMap = Callable[[ModelConfig], dict[str, Parts]]
LAYER_LISTS = ("encoder_layers", "decoder_layers")  # the network's layers, each filled whole before the next


def whole_unit(name: str, output_weight: bool) -> str | None:
    """The module a parameter belongs to that int8 quantizes once filled: its encoder or decoder layer, or the
    output projection (its bias, and its weight: its own, or the embeddings it is tied to, when `output_weight`)."""
    parts = name.split(".")
    if parts[0] in LAYER_LISTS:
        return ".".join(parts[:2])
    return "lm_head" if parts[0] == "lm_head" or output_weight else None


def weight_files(model_dir: Path) -> tuple[Path, list[Path]]:
    """(the file that names the weights: the weights file or the shards' index, the files to read)."""
    for name in WEIGHT_LAYOUTS:
        path = model_dir / name
        if not path.exists():
            continue
        if not name.endswith(".index.json"):
            return path, [path]
        weight_map = read_json(path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{path}: no weight_map")
        shards = [model_dir / shard for shard in dict.fromkeys(weight_map.values())]
        missing = next((shard for shard in shards if not shard.exists()), None)
        if missing is not None:
            raise CheckpointError(f"{path}: names the shard {missing.name}, which is not there")
        return path, shards
    raise CheckpointError(f"{model_dir}: no weights file ({', '.join(WEIGHT_LAYOUTS)})")


def tensor_shapes(files: list[Path]) -> dict[str, tuple[Path, tuple[int, ...]]]:
    """Every tensor's file and shape, from safetensors' headers or a memory-mapped pickle: no data read."""
    shapes = {}
    for path in files:
        if path.suffix == ".safetensors":
            try:
                with safe_open(str(path), "pt") as f:
                    shapes.update((key, (path, tuple(f.get_slice(key).get_shape()))) for key in f.keys())
            except (OSError, ValueError, safetensors.SafetensorError) as e:
                raise CheckpointError(f"{path}: cannot read weights ({first_line(e)})") from None
        else:
            shapes.update((key, (path, tuple(t.shape))) for key, t in read_pickle(path)[0].items())
    return shapes


def read_pickle(path: Path) -> tuple[dict[str, torch.Tensor], bool]:
    """A pickled state dict and whether it is memory-mapped (its tensors read when touched): it is unless it is in
    torch's legacy format, which cannot be; never arbitrary objects."""
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True), True
        except RuntimeError as e:
            if "_use_new_zipfile_serialization" not in str(e):
                raise
            return torch.load(path, map_location="cpu", weights_only=True), False
    except (pickle.UnpicklingError, RuntimeError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot read weights ({first_line(e)})") from None


def first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


CHUNK_BYTES = 16 * 2**20


def copy_in_blocks(destination: torch.Tensor | Int8Rows, read: Callable[[int, int], torch.Tensor],
                   done: Callable[[torch.Tensor], None] | None = None) -> None:
    """`destination` filled a block of rows at a time from `read(first row, end row)` (`done(block)` after each):
    a large tensor (an embedding matrix) is never held twice, and Int8Rows quantize each block as it comes."""
    if isinstance(destination, Int8Rows):
        write, value_bytes = destination.quantize_rows, 4  # takes float32 rows
    else:
        write, value_bytes = partial(copy_rows, destination), destination.element_size()
    rows = destination.shape[0] if len(destination.shape) else 1
    step = max(1, CHUNK_BYTES // max(1, destination.shape[1:].numel() * value_bytes))
    for first in range(0, rows, step):
        block = read(first, first + step)
        write(first, block)
        if done is not None:
            done(block)


def copy_rows(destination: torch.Tensor, first: int, block: torch.Tensor) -> None:
    """`block` into `destination`'s rows from `first` (a scalar: into the scalar)."""
    target = destination[first:first + len(block)] if destination.dim() else destination
    target.copy_(block.reshape(target.shape))


def safetensors_rows(path: Path, key: str) -> Callable[[int, int], torch.Tensor]:
    """Rows of a safetensors tensor, the file mapped only while they are read (its pages count as this process's
    memory while mapped)."""
    def read(first: int, end: int) -> torch.Tensor:
        with safe_open(str(path), "pt") as f:
            source = f.get_slice(key)
            return source[first:end] if source.get_shape() else source[:]

    return read


def fill(destinations: dict[str, tuple[torch.Tensor | Int8Rows, Path]], filled: Callable[[str], None]) -> None:
    """Each checkpoint tensor copied into its destination (a parameter, or its rows of a fused one), cast to the
    destination's dtype, in the order given; `filled(key)` after each. A safetensors tensor is mapped only while it
    is copied, a memory-mapped pickle's pages are dropped as each tensor is copied: a load holds the weights once
    plus about one tensor."""
    pickled, state, mapped = None, {}, False
    for key in list(destinations):
        destination, path = destinations.pop(key)  # held no longer than copied: int8 frees a filled layer's floats
        if path.suffix == ".safetensors":
            copy_in_blocks(destination, safetensors_rows(path, key))
        else:
            if path != pickled:
                state = {}  # the previous file's mapping goes first
                state, mapped = read_pickle(path)
                pickled = path
            source = state[key].contiguous()  # (a mapped tensor is; contiguous() copies only one that is not)
            # a mapped file's pages count as this process's once read: dropped block by block
            copy_in_blocks(destination, lambda first, end: source[first:end] if source.dim() else source,
                           forget_mapped_pages if mapped and source.data_ptr() == state[key].data_ptr() else None)
        del destination
        filled(key)


# The random initializations modules' constructors run (nn.Linear, nn.Embedding); constant ones (zeros, ones) stay.
RANDOM_INITS = ("uniform_", "normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_",
                "trunc_normal_")
_init_lock = threading.Lock()


@contextmanager
def without_random_init():
    """Modules built inside keep their parameters as allocated: a checkpoint fills every one (load_network checks
    that the key map covers them all), so drawing random values first is wasted time. Under a lock, so concurrent
    loads neither see each other's patch nor restore it."""
    with _init_lock:
        saved = {name: getattr(nn.init, name) for name in RANDOM_INITS}
        try:
            for name in RANDOM_INITS:
                setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
            yield
        finally:
            for name, init in saved.items():
                setattr(nn.init, name, init)


def load_network(model_dir: Path, config: ModelConfig, key_map: KeyMap, ignored: tuple[str, ...],
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 pack_tied_output: bool = True, int8: bool = False) -> Seq2SeqTransformer:
    """The network of a checkpoint; float32 on the CPU with oneDNN Linears (model.kernels.cpu_kernels), a tied output
    projection with its own packed copy of the embedding matrix when pack_tied_output. int8 (a
    float32 model on the CPU): the output projection first, a block of rows at a time (an untied one as its rows are
    read, a tied one from the embeddings), then each encoder and decoder layer as soon as its weights are in
    (model.kernels.quantize), so the float32 model never exists whole."""
    path, files = weight_files(model_dir)
    shapes = tensor_shapes(files)
    with without_random_init():
        model = Seq2SeqTransformer(config)
    model = model.to(device=device, dtype=dtype).eval()  # nothing loaded yet: no copy of the weights made here
    params = model.state_dict()  # views of the parameters: filling them fills the model
    destinations, unit_of, used, covered, output_rows = {}, {}, set(ignored), set(), None
    ours_parts = key_map(config)
    own_output = "lm_head.weight" in ours_parts  # untied: the output projection is filled on its own
    output_weight = model.lm_head.weight.data_ptr()  # tied: the embeddings'
    for ours, parts in ours_parts.items():
        keys = []
        for alternatives in parts:
            if alternatives == ZEROS:
                keys.append(None)
                continue
            key = next((k for k in alternatives if k in shapes), None)
            if key is None:
                if ours == OUTPUT_BIAS:  # optional, as in transformers: zero, as built
                    break
                raise CheckpointError(f"{path}: missing key {alternatives[0]!r}")
            keys.append(key)
            used.update(alternatives)
        if not keys:
            continue
        target = params[ours].reshape(1, -1) if ours == OUTPUT_BIAS else params[ours]  # stored (1, V)
        rows = [shapes[k][1][0] if shapes[k][1] else 0 for k in keys if k is not None]
        zero_rows = (target.shape[0] - sum(rows)) // max(keys.count(None), 1)  # a ZEROS part: as many as the rest
        rows = [zero_rows if k is None else shapes[k][1][0] if shapes[k][1] else 0 for k in keys]
        stored = [k for k in keys if k is not None]
        if sum(rows) != target.shape[0] or any(shapes[k][1][1:] != target.shape[1:] for k in stored):
            got = " + ".join(f"{k} {shapes[k][1]}" for k in stored)
            raise CheckpointError(f"{shapes[keys[0]][0]}: {got} does not match the expected shape "
                                  f"{tuple(params[ours].shape)} from config.json")
        if int8 and ours == "lm_head.weight":  # untied, V × D: quantized as read, never whole in float32
            output_rows = Int8Rows(*target.shape)
            pieces = [output_rows]
        else:
            pieces = target.split(rows)  # a fused projection's parts: its rows, in order
        for key, piece in zip(keys, pieces):
            if key is None:
                with torch.no_grad():
                    piece.zero_()
                continue
            destinations[key] = piece, shapes[key][0]
            unit_of[key] = whole_unit(ours, params[ours].data_ptr() == output_weight)
        covered.add(params[ours].data_ptr())
    unexpected = sorted(set(shapes) - used)
    if unexpected:
        raise CheckpointError(f"{shapes[unexpected[0]][0]}: unexpected key {unexpected[0]!r}" +
                              (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""))
    filled = {name for name, p in params.items() if p.data_ptr() in covered}
    missing = {name for name, _ in model.named_parameters()} - filled - {OUTPUT_BIAS}  # tied: listed once
    assert not missing, f"key map does not cover {sorted(missing)}"  # a bug in key_map, not in the file
    waiting = Counter(unit for unit in unit_of.values() if unit is not None)
    if int8:  # the output projection first: its transient (a block of float32 rows) before the model is in
        destinations = dict(sorted(destinations.items(), key=lambda item: unit_of[item[0]] != "lm_head"))

    def filled_one(key: str) -> None:
        unit = unit_of[key]
        if unit is None or not int8:
            return
        waiting[unit] -= 1
        if waiting[unit] == 0 and unit == "lm_head":
            model.lm_head = (output_rows.linear(model.lm_head.bias) if own_output
                             else quantize_in_blocks(model.lm_head))
        elif waiting[unit] == 0:
            quantize_linears(model.get_submodule(unit))

    del params, target, pieces, piece
    with torch.no_grad():
        fill(destinations, filled_one)
    if not int8 and model.device.type == "cpu" and dtype in (torch.float32, torch.bfloat16):
        use_onednn_linears(model, pack_shared=pack_tied_output)
    elif model.device.type == "cuda":
        use_fixed_row_products(model)
    return model


def save_network(model: Seq2SeqTransformer, model_dir: str | Path, config_json: dict, key_map: KeyMap,
                 dtype: torch.dtype = torch.float32) -> None:
    """Write config.json and model.safetensors in the family's Hugging Face layout."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    ours = model.state_dict()
    state = {}
    for key, parts in key_map(model.config).items():
        value = ours[key].detach().to(device="cpu", dtype=dtype)
        value = value.reshape(1, -1) if key == OUTPUT_BIAS else value
        for alternatives, chunk in zip(parts, value.chunk(len(parts))):
            if alternatives != ZEROS:
                state[alternatives[0]] = chunk.contiguous()
    save_file(state, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    with open(model_dir / "config.json", "w", encoding="utf-8") as f:
        json.dump(config_json, f, indent=2)
