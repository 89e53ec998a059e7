"""Building blocks of the Marian/"Attention Is All You Need" Transformer.

Dimensions: B batch rows, S source length, T target length, H heads, Dh head size, D model size, F FFN size.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ACTIVATION_FNS = {
    "swish": F.silu,
    "silu": F.silu,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
}


def sinusoidal_positions(num_positions: int, dim: int) -> torch.Tensor:
    """Marian's layout: sin of all frequencies in the first half, cos in the second (not interleaved).

    Computed in float64 like transformers, then rounded once to float32.
    """
    pos = np.arange(num_positions)[:, None]
    angles = pos / np.power(10000, 2 * (np.arange(dim) // 2) / dim)  # (P, D)
    sentinel = (dim + 1) // 2
    out = np.empty((num_positions, dim))
    out[:, :sentinel] = np.sin(angles[:, 0::2])
    out[:, sentinel:] = np.cos(angles[:, 1::2])
    return torch.tensor(out, dtype=torch.float32)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, t, d = x.shape
    return x.view(b, t, num_heads, d // num_heads).transpose(1, 2)  # (B, H, T, Dh)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, D)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused Q/K/V projection."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)  # 3 × (B, T, D)
        return split_heads(q, self.num_heads), split_heads(k, self.num_heads), split_heads(v, self.num_heads)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False):
        q, k, v = self.project(x)  # (B, H, T, Dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
        return self.out_proj(merge_heads(out))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # (B, H, 1, Dh)
        return self.out_proj(merge_heads(out))


class CrossAttention(nn.Module):
    """Decoder-to-encoder attention; keys/values come from the encoder output and are computed once."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv_proj(memory).chunk(2, dim=-1)  # 2 × (B, S, D)
        return split_heads(k, self.num_heads), split_heads(v, self.num_heads)  # (B, H, S, Dh)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, Dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out_proj(merge_heads(out))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ffn_dim: int, activation: str):
        super().__init__()
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.activation = ACTIVATION_FNS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation(self.fc1(x)))


class EncoderLayer(nn.Module):
    """Post-norm: x = LN(x + SelfAttn(x)); x = LN(x + FFN(x))."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, activation: str, dropout: float = 0.0):
        super().__init__()
        self.self_attn = SelfAttention(d_model, num_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, activation)
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        x = self.self_attn_layer_norm(x + self.dropout(self.self_attn(x, attn_mask)))
        return self.final_layer_norm(x + self.dropout(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Post-norm: causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, activation: str, dropout: float = 0.0):
        super().__init__()
        self.self_attn = SelfAttention(d_model, num_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = CrossAttention(d_model, num_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, activation)
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def post_self_attention(self, x, attn_out, cross_k, cross_v, cross_mask):
        """Everything after the self-attention sub-layer; shared by the cached step and the full forward."""
        x = self.self_attn_layer_norm(x + self.dropout(attn_out))
        x = self.encoder_attn_layer_norm(x + self.dropout(self.encoder_attn(x, cross_k, cross_v, cross_mask)))
        return self.final_layer_norm(x + self.dropout(self.ffn(x)))

    def forward(self, x, cross_k, cross_v, cross_mask):
        """Teacher-forced pass over a whole target prefix (training and the no-cache oracle)."""
        return self.post_self_attention(x, self.self_attn(x, is_causal=True), cross_k, cross_v, cross_mask)


def embed_scale(d_model: int, scale_embedding: bool) -> float:
    return math.sqrt(d_model) if scale_embedding else 1.0
