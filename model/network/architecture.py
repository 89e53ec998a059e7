"""What varies between encoder-decoder families, as data: one network is built from this description.

A family module (model/loading/families/) maps its config.json onto ModelConfig; nothing else in the network knows
which family it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..errors import CheckpointError

ACTIVATIONS = ("swish", "silu", "relu", "gelu", "gelu_new")


class Positions(Enum):
    MARIAN_SINUSOIDAL = "marian_sinusoidal"  # sin in the first half, cos in the second; position = index
    FAIRSEQ_SINUSOIDAL = "fairseq_sinusoidal"  # fairseq's table; positions counted over non-pad tokens, offset 2
    LEARNED = "learned"  # a trained table per side, position = index + 2
    RELATIVE = "relative"  # T5: no position embeddings; a bucketed relative bias added to self-attention scores
    AUDIO = "audio"  # Whisper: the encoder's table is its audio front's; a learned decoder table, position = index


@dataclass(frozen=True)
class Architecture:
    positions: Positions
    pre_norm: bool = False  # LayerNorm before each sub-layer (mBART, M2M100) or after the residual (Marian, BART)
    final_norms: bool = False  # a LayerNorm after the last encoder layer and after the last decoder layer
    embedding_norm: bool = False  # a LayerNorm right after token + position embeddings (mBART, BART)
    scale_embedding: bool = False  # token embeddings × √d_model
    activation: str = "gelu"
    output_bias: bool = False  # the checkpoint may hold final_logits_bias (added to the logits)
    rms_norm: bool = False  # T5's norm: x / RMS(x) × weight (no mean subtraction, no bias)
    norm_eps: float = 1e-5
    scale_attention: bool = True  # scores × 1/√Dh (T5 folds the scale into its weights: False)
    gated_ffn: bool = False  # FFN act(x·W0) ⊙ (x·W1) (T5 v1.1, flan-T5, mT5, MADLAD)
    linear_bias: bool = True  # attention and FFN projections have biases (T5: none)
    scale_output: bool = False  # decoder output × d_model^-0.5 before the output projection (T5 v1.0, tied)

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise CheckpointError(f"config.json: activation_function {self.activation!r} is not one of "
                                  f"{', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes, special token ids and architecture of one checkpoint, validated once."""

    architecture: Architecture
    vocab_size: int  # source (encoder) vocabulary
    target_vocab_size: int  # decoder input and output vocabulary
    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_position_embeddings: int
    shared_embeddings: bool  # encoder and decoder inputs use one embedding matrix
    tie_word_embeddings: bool  # the output projection is the decoder input embedding
    pad_token_id: int
    eos_token_id: int
    decoder_start_token_id: int
    forced_eos_token_id: int | None = None
    head_dim: int | None = None  # per-head size when heads × head_dim != d_model (T5's d_kv); None: d_model / heads
    relative_buckets: int = 32  # Positions.RELATIVE: buckets and the distance the last bucket starts at
    relative_max_distance: int = 128
    num_mel_bins: int | None = None  # an audio encoder (Whisper): log-mel features in, not token ids
    max_source_positions: int | None = None  # the encoder's positions when they differ from the decoder's

    @property
    def source_positions(self) -> int:
        return self.max_source_positions or self.max_position_embeddings

    def heads_dim(self, heads: int) -> int:
        return self.head_dim or self.d_model // heads

    def __post_init__(self) -> None:
        for heads_key in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.head_dim is None and self.d_model % getattr(self, heads_key):
                raise CheckpointError(f"config.json: d_model {self.d_model} is not divisible by {heads_key}")
        if self.shared_embeddings and self.vocab_size != self.target_vocab_size:
            raise CheckpointError(f"config.json: shared embeddings need one vocabulary, got {self.vocab_size} and "
                                  f"{self.target_vocab_size}")
