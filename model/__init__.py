"""Encoder-decoder Transformer for Marian checkpoints: model, tokenizer, incremental decoding."""

from .config import CheckpointError, GenerationDefaults, ModelConfig
from .search import DecodeParams, Hypothesis
from .translator import Translation, Translator

__all__ = ["CheckpointError", "DecodeParams", "GenerationDefaults", "Hypothesis", "ModelConfig", "Translation",
           "Translator"]
