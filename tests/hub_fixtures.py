"""A Hugging Face cache built by hand, as huggingface_hub leaves it (models--ORG--NAME/{blobs,snapshots,refs}), holding
tiny checkpoints in each weight layout the Hub uses: one pickle beside other
frameworks' files, float16 safetensors beside a float16 pickle, pickle shards, safetensors shards."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save

# Files of other frameworks the Hub repos carry: never fetched, never read (their bytes are not even weights).
OTHER_FRAMEWORKS = ("tf_model.h5", "flax_model.msgpack", "rust_model.ot", "onnx/encoder_model.onnx", "model.gguf")


def pickled(tensors: dict[str, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return buffer.getvalue()


def shards(tensors: dict[str, torch.Tensor], count: int, kind: str) -> dict[str, bytes]:
    """`count` shards and their index, named as transformers names them."""
    keys = sorted(tensors)
    if kind == "safetensors":
        prefix, suffix, write = "model", "safetensors", lambda part: save(part, metadata={"format": "pt"})
    else:
        prefix, suffix, write = "pytorch_model", "bin", pickled
    files, weight_map = {}, {}
    for i in range(count):
        name = f"{prefix}-{i + 1:05d}-of-{count:05d}.{suffix}"
        part = {k: tensors[k].contiguous() for k in keys[i::count]}
        files[name] = write(part)
        weight_map.update(dict.fromkeys(part, name))
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    files[f"{prefix}.{suffix}.index.json"] = json.dumps({"metadata": {"total_size": size},
                                                          "weight_map": weight_map}).encode()
    return files


def layout(source: Path, kind: str) -> dict[str, bytes]:
    """The files of the checkpoint at `source` (model.safetensors, float32) in the layout `kind`."""
    files = {p.name: p.read_bytes() for p in source.iterdir() if p.is_file() and p.name != "model.safetensors"}
    tensors = load_file(str(source / "model.safetensors"))
    if kind == "pickle":
        files["pytorch_model.bin"] = pickled(tensors)
        files.update({name: b"not weights of ours" for name in OTHER_FRAMEWORKS})
    elif kind == "float16":
        half = {k: t.half() for k, t in tensors.items()}
        files["model.safetensors"] = save(half, metadata={"format": "pt"})
        files["pytorch_model.bin"] = pickled(half)
        config = json.loads(files["config.json"])
        files["config.json"] = json.dumps({**config, "torch_dtype": "float16"}).encode()
    elif kind in ("pickle-shards", "safetensors-shards"):
        files.update(shards(tensors, 3, kind.partition("-")[0]))
    else:
        raise ValueError(kind)
    return files


def add_repo(cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """`files` as the snapshot of `repo_id`'s main branch in `cache` (HF_HUB_CACHE); its snapshot directory."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
