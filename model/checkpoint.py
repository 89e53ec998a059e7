"""Hugging Face checkpoints ↔ Seq2SeqTransformer, through the family's explicit key map.

Loading checks every key and shape and names the file (the shard) and key on any mismatch. Weights are read
with safetensors, or torch.load(weights_only=True) for .bin: no arbitrary unpickling; one file or shards.
"""

from __future__ import annotations

import json
import pickle
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from safetensors.torch import load_file, save_file

from .architecture import ModelConfig
from .config import read_json
from .cpu_kernels import use_onednn_linears
from .errors import CheckpointError
from .families.layout import OUTPUT_BIAS, Parts
from .transformer import Seq2SeqTransformer

# The Hub's weight layouts, in the order they are preferred: safetensors before pickles, each as one file or as
# shards named by an index (its weight_map: tensor name → shard file).
WEIGHT_LAYOUTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                  "pytorch_model.bin.index.json")
KeyMap = Callable[[ModelConfig], dict[str, Parts]]


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)  # never unpickle arbitrary objects
    except (pickle.UnpicklingError, RuntimeError, OSError, ValueError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: cannot read weights ({first_line})") from None


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


def read_weights(files: list[Path]) -> tuple[dict[str, torch.Tensor], dict[str, Path]]:
    """Every tensor of the files, and the file each came from (for errors)."""
    state, origin = {}, {}
    for path in files:
        shard = read_state_dict(path)
        origin.update(dict.fromkeys(shard, path))
        state.update(shard)
    return state, origin


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
                 pack_tied_output: bool = True) -> Seq2SeqTransformer:
    """The network of a checkpoint; float32 on the CPU with oneDNN Linears (model.cpu_kernels), a tied output
    projection with its own packed and transposed copies of the embedding matrix when pack_tied_output."""
    path, files = weight_files(model_dir)
    state, origin = read_weights(files)
    with without_random_init():
        model = Seq2SeqTransformer(config)
    expected = model.state_dict()
    loaded, used = {}, set(ignored)
    for ours, parts in key_map(config).items():
        tensors = []
        for alternatives in parts:
            key = next((k for k in alternatives if k in state), None)
            if key is None:
                if ours == OUTPUT_BIAS:  # optional, as in transformers
                    break
                raise CheckpointError(f"{path}: missing key {alternatives[0]!r}")
            tensors.append(state[key])
            used.update(alternatives)
        if not tensors:
            continue
        value = torch.cat(tensors) if len(tensors) > 1 else tensors[0]
        value = value.reshape(-1) if ours == OUTPUT_BIAS else value
        if value.shape != expected[ours].shape:
            keys = [next(k for k in alternatives if k in state) for alternatives in parts]
            got = " + ".join(f"{k} {tuple(t.shape)}" for k, t in zip(keys, tensors))
            raise CheckpointError(f"{origin[keys[0]]}: {got} does not match the expected shape "
                                  f"{tuple(expected[ours].shape)} from config.json")
        loaded[ours] = value
    unexpected = sorted(set(state) - used)
    if unexpected:
        raise CheckpointError(f"{origin[unexpected[0]]}: unexpected key {unexpected[0]!r}" +
                              (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""))
    model.load_state_dict(loaded, strict=False)
    missing = {name for name, _ in model.named_parameters()} - set(loaded) - {OUTPUT_BIAS}  # tied: listed once
    assert not missing, f"key map does not cover {sorted(missing)}"  # a bug in key_map, not in the file
    del state, origin, expected, loaded  # the files' tensors and views of the weights: freed before packing
    model = model.to(device=device, dtype=dtype).eval()
    if model.device.type == "cpu" and dtype == torch.float32:
        use_onednn_linears(model, pack_shared=pack_tied_output)
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
            state[alternatives[0]] = chunk.contiguous()
    save_file(state, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    with open(model_dir / "config.json", "w", encoding="utf-8") as f:
        json.dump(config_json, f, indent=2)
