"""Models named as users download them: a local directory, or a Hugging Face Hub repo id (`ORG/NAME`, a revision
after `@`: `ORG/NAME@v1.0`, `ORG/NAME@<commit>`) resolved by huggingface_hub into its cache (HF_HOME or
HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN as huggingface_hub reads them). Only the files a checkpoint of a
supported family can use are fetched: configs, tokenizers and PyTorch weights, safetensors when the repository has
them; never TF, Flax, Rust, ONNX or GGUF weights."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import CheckpointError

CONFIGS = ["config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
           "added_tokens.json", "tokenizer.json", "vocab.json", "merges.txt", "*.spm", "spiece.model",
           "sentencepiece.bpe.model"]
SAFETENSORS = ["model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json"]
PICKLES = ["pytorch_model.bin", "pytorch_model-*-of-*.bin", "pytorch_model.bin.index.json"]
REPO_ID = re.compile(r"[\w.-]+/[\w.-]+(@[\w./-]+)?")


def is_repo_id(name: str | Path) -> bool:
    return isinstance(name, str) and REPO_ID.fullmatch(name) is not None


def model_dir(name: str | Path) -> Path:
    """The directory of a model: a local directory as it is (it wins over a repo id of the same spelling), or a
    repo id's snapshot, fetched into the cache if it is not there. CheckpointError naming the model and the reason
    when neither."""
    path = Path(name)
    if path.is_dir():
        return path
    if not is_repo_id(name):
        raise CheckpointError(f"{name}: not a model directory, nor a Hugging Face Hub repo id (ORG/NAME[@REVISION])")
    return snapshot(name)


def snapshot(name: str) -> Path:
    """A repo id's snapshot directory in the cache, fetched if need be: its configs and tokenizer files with the
    safetensors weights, or with the pickles where the repository has no safetensors."""
    # imported here: it takes half a second of every process's start, and most processes never resolve a repo id
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    repo_id, _, revision = name.partition("@")
    try:
        path = Path(snapshot_download(repo_id, revision=revision or None, allow_patterns=CONFIGS + SAFETENSORS))
        if not any((path / file).exists() for file in SAFETENSORS if "*" not in file):
            path = Path(snapshot_download(repo_id, revision=revision or None, allow_patterns=CONFIGS + PICKLES))
        return path
    except GatedRepoError:
        reason = "a gated repository: accept its conditions on the Hub and set HF_TOKEN"
    except RevisionNotFoundError:
        reason = f"the repository has no revision {revision!r}"
    except RepositoryNotFoundError:
        reason = "no such repository on the Hub (a private one needs HF_TOKEN)"
    except LocalEntryNotFoundError:
        reason = "not in the Hugging Face cache, and the Hub cannot be reached (offline: HF_HUB_OFFLINE, no network)"
    except (HfHubHTTPError, OSError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise CheckpointError(f"{name}: {reason}")


def download(argv: list[str] | None = None) -> int:
    """`python -m model.download ORG/NAME[@REVISION] ...`: fetch models into the cache ahead of time (images,
    cluster nodes); prints each one's snapshot directory."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m model.download", description=download.__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", metavar="ORG/NAME[@REVISION]")
    for name in p.parse_args(argv).models:
        try:
            print(f"{name}\t{snapshot(name)}")
        except CheckpointError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0
