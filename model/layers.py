"""Building blocks of the "Attention Is All You Need" Transformer, shared by every family.

Dimensions: B batch rows, S source length, T target length, H heads, Dh head size, D model size, F FFN size.
"""

from __future__ import annotations

import math

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


class Sublayers(nn.Module):
    """Residual sub-layers with the norm before (pre-norm: x + f(LN(x))) or after (post-norm: LN(x + f(x)))."""

    def __init__(self, pre_norm: bool, dropout: float):
        super().__init__()
        self.pre_norm = pre_norm
        self.dropout = nn.Dropout(dropout)

    def enter(self, norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
        """The input a sub-layer computes on."""
        return norm(x) if self.pre_norm else x

    def leave(self, norm: nn.LayerNorm, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The residual stream after a sub-layer whose output is `out`."""
        out = self.dropout(out)
        return x + out if self.pre_norm else norm(x + out)


class EncoderLayer(Sublayers):
    """Self-attention and feed-forward, each a residual sub-layer."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, activation: str, pre_norm: bool,
                 dropout: float = 0.0):
        super().__init__(pre_norm, dropout)
        self.self_attn = SelfAttention(d_model, num_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, activation)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        norm = self.self_attn_layer_norm
        x = self.leave(norm, x, self.self_attn(self.enter(norm, x), attn_mask))
        norm = self.final_layer_norm
        return self.leave(norm, x, self.ffn(self.enter(norm, x)))


class DecoderLayer(Sublayers):
    """Causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, activation: str, pre_norm: bool,
                 dropout: float = 0.0):
        super().__init__(pre_norm, dropout)
        self.self_attn = SelfAttention(d_model, num_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = CrossAttention(d_model, num_heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_dim, activation)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def self_attention_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.enter(self.self_attn_layer_norm, x)

    def post_self_attention(self, x, attn_out, cross_k, cross_v, cross_mask):
        """Everything after the self-attention sub-layer; shared by the cached step and the full forward."""
        x = self.leave(self.self_attn_layer_norm, x, attn_out)
        norm = self.encoder_attn_layer_norm
        x = self.leave(norm, x, self.encoder_attn(self.enter(norm, x), cross_k, cross_v, cross_mask))
        norm = self.final_layer_norm
        return self.leave(norm, x, self.ffn(self.enter(norm, x)))

    def forward(self, x, cross_k, cross_v, cross_mask):
        """Teacher-forced pass over a whole target prefix (training and the no-cache oracle)."""
        attn = self.self_attn(self.self_attention_input(x), is_causal=True)
        return self.post_self_attention(x, attn, cross_k, cross_v, cross_mask)


def embed_scale(d_model: int, scale_embedding: bool) -> float:
    return math.sqrt(d_model) if scale_embedding else 1.0
