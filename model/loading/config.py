"""Reading a checkpoint's JSON files: config values with family defaults, and errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import CheckpointError


def first_id(value):
    """transformers allows a list of ids where one is meant (eos_token_id: [2]); the first one counts."""
    return value[0] if isinstance(value, list) else value


def config_reader(raw: dict, defaults: dict, source: str):
    """key → config.json's value, else the family's default; a key in neither names the file."""
    def get(key):
        value = raw.get(key, defaults.get(key))
        if value is None:
            raise CheckpointError(f"{source}: missing key {key!r}")
        return value
    return get


def read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from None
