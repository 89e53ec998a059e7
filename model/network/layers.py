"""Building blocks of the "Attention Is All You Need" Transformer, shared by every family.

Dimensions: B batch rows, S source length, T target length, H heads, Dh head size, D model size, F FFN size.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .architecture import Architecture

ACTIVATION_FNS = {
    "swish": F.silu,
    "silu": F.silu,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
}


def _one_position(t: int) -> bool:
    """t == 1, for the shortcuts below; a trace (kernels.traced_step) takes their general paths, right for any t."""
    return not torch.jit.is_tracing() and t == 1


# No size below is computed from another (d // num_heads, h * dh): in a trace each such size is a few operators on
# every step (floor_divide, mul, their tensor conversions).
def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, t, _ = x.shape
    if _one_position(t):  # a decoder step: one view, no transpose (an op less, four times a layer)
        return x.view(b, num_heads, 1, -1)  # (B, H, 1, Dh)
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)  # (B, H, T, Dh)


def split_stacked_heads(x: torch.Tensor, parts: int, num_heads: int) -> tuple[torch.Tensor, ...]:
    """A fused projection's output (B, T, parts·H·Dh) → `parts` tensors (B, H, T, Dh), as chunk + split_heads
    gives them (the same strides), in 3 ops instead of 1 + 2 per part."""
    stacked = x.unflatten(-1, (parts, num_heads, -1))  # (B, T, parts, H, Dh)
    return stacked.permute(2, 0, 3, 1, 4).unbind(0)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    b, _, t, _ = x.shape
    if _one_position(t) and x.is_contiguous():
        return x.view(b, 1, -1)  # (B, 1, D)
    return x.transpose(1, 2).flatten(2)  # (B, T, D)


# Attention reads keys in lengths that are multiples of ATTENDED_MULTIPLE, and at least enough of them that a head's
# product is not one torch computes with its own plain loop (under SMALL_PRODUCT multiply-adds: head size × keys for
# one query) rather than BLAS; the rest masked. On the CPU, torch's kernels reduce a row of fewer than 16 scores (one
# vector of float32 lanes) another way than a longer one, and the two product kernels add in different orders, so a
# sequence's numbers would change with the longest sequence beside it; in such lengths, masked keys add exact zeros.
ATTENDED_MULTIPLE = 16
SMALL_PRODUCT = 400


def attended_length(length: int, head_dim: int) -> int:
    """The length attention reads for `length` keys of heads of `head_dim` (above)."""
    keys = max(length, -(-SMALL_PRODUCT // head_dim))
    return -(-keys // ATTENDED_MULTIPLE) * ATTENDED_MULTIPLE


def fixed_in_trace(size) -> int:
    """A size as a Python int. In a trace the size is a traced value and a choice made from it stays in the trace:
    wanted where model.kernels.traced_step keeps a trace per choice, so the tracer's warning about it is not raised."""
    if torch.jit.is_tracing():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return int(size)
    return size


def attends_by_matmul(queries: int, device: torch.device) -> bool:
    """Whether attention() over `queries` queries a row, not causal, takes two matmuls instead of SDPA: a decoder
    step (one query) on the CPU, whatever its row count, since SDPA's CPU kernel reads a large KV cache at about
    half the memory bandwidth the batched matmuls reach (measurements: loadtests/README.md) and one kernel for
    every row count gives a row the same numbers in any batch."""
    return fixed_in_trace(queries) == 1 and device.type == "cpu"


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
              scale: float | None, is_causal: bool = False) -> torch.Tensor:
    """softmax(q·kᵀ·scale + mask)·v → (B, H, Tq, Dh) in q's dtype. On the CPU computed in float32 (a bfloat16
    network attends over a float32 KV cache: Seq2SeqTransformer.cache_dtype; its encoder casts): bfloat16's
    kernels block their products by the lengths, so a row's numbers would follow its neighbours'. Elsewhere in k's
    dtype. attn_mask: bool (True = attend) or additive float; scale None means 1/√Dh."""
    dtype = q.dtype
    compute = torch.float32 if q.device.type == "cpu" else k.dtype
    if dtype != compute:  # a dtype is fixed in a trace: the casts are recorded only where they happen
        q = q.to(compute)
        if attn_mask is not None and attn_mask.is_floating_point():  # T5's relative-position bias
            attn_mask = attn_mask.to(compute)
    if k.dtype != compute:
        k, v = k.to(compute), v.to(compute)
    dh = q.shape[-1]
    if is_causal or not attends_by_matmul(q.shape[2], q.device):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)
    else:
        scores = torch.matmul(q, k.transpose(-1, -2)).mul_(dh ** -0.5 if scale is None else scale)  # (B, H, 1, Tk)
        if attn_mask is not None:
            scores = (scores.masked_fill_(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                      else scores.add_(attn_mask))
        out = torch.matmul(scores.softmax(-1), v)
    return out if out.dtype == dtype else out.to(dtype)


class RMSNorm(nn.RMSNorm):
    """T5's norm, x / √(mean(x²) + eps) · weight. float32 on the CPU writes it out in six operators: the same
    numbers as torch's rms_norm, which takes ten there (two dtype copies among them), so a step with many norms is
    faster."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu":
            return super().forward(x)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(arch: Architecture, d_model: int) -> nn.Module:
    return RMSNorm(d_model, eps=arch.norm_eps) if arch.rms_norm else nn.LayerNorm(d_model, eps=arch.norm_eps)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused Q/K/V projection. attn_mask: bool (True = attend) or an additive
    float bias (T5's relative positions, -inf where masked)."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, arch: Architecture):
        super().__init__()
        self.num_heads = num_heads
        self.scale = None if arch.scale_attention else 1.0  # None: SDPA's 1/√Dh
        inner = num_heads * head_dim
        self.qkv_proj = nn.Linear(d_model, 3 * inner, bias=arch.linear_bias)
        self.out_proj = nn.Linear(inner, d_model, bias=arch.linear_bias)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_stacked_heads(self.qkv_proj(x), 3, self.num_heads)  # 3 × (B, H, T, Dh)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False):
        return self.attend(*self.project(x), attn_mask, is_causal)  # q, k, v (B, H, T, Dh)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
               is_causal: bool = False) -> torch.Tensor:
        out = attention(q, k, v, attn_mask, self.scale, is_causal)  # (B, H, T, Dh)
        return self.out_proj(merge_heads(out))


class CrossAttention(nn.Module):
    """Decoder-to-encoder attention; keys/values come from the encoder output and are computed once."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, arch: Architecture):
        super().__init__()
        self.num_heads = num_heads
        self.scale = None if arch.scale_attention else 1.0
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=arch.linear_bias)
        self.kv_proj = nn.Linear(d_model, 2 * inner, bias=arch.linear_bias)
        self.out_proj = nn.Linear(inner, d_model, bias=arch.linear_bias)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return split_stacked_heads(self.kv_proj(memory), 2, self.num_heads)  # 2 × (B, H, S, Dh)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, Dh)
        out = attention(q, k, v, attn_mask, self.scale)
        return self.out_proj(merge_heads(out))

    def weights(self, x: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor,
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """softmax(QKᵀ·scale + mask) (B, H, T, S) in `dtype`: the weights forward's SDPA applies without returning
        them, for word alignment. attn_mask: bool (B, 1, 1, S), True = attend."""
        q = split_heads(self.q_proj(x), self.num_heads)  # (B, H, T, Dh)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) * scale  # (B, H, T, S)
        return scores.masked_fill(~attn_mask, float("-inf")).softmax(-1)


class FeedForward(nn.Module):
    """fc2(act(fc1·x)), or gated (T5 v1.1): fc1 holds W0 and W1 stacked, fc2(act(x·W0) ⊙ x·W1)."""

    def __init__(self, d_model: int, ffn_dim: int, arch: Architecture):
        super().__init__()
        self.gated = arch.gated_ffn
        self.fc1 = nn.Linear(d_model, 2 * ffn_dim if self.gated else ffn_dim, bias=arch.linear_bias)
        self.fc2 = nn.Linear(ffn_dim, d_model, bias=arch.linear_bias)
        self.activation = ACTIVATION_FNS[arch.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, linear = self.fc1(x).chunk(2, dim=-1)  # 2 × (B, T, F)
            return self.fc2(self.activation(gate) * linear)
        return self.fc2(self.activation(self.fc1(x)))


class Sublayers(nn.Module):
    """Residual sub-layers with the norm before (pre-norm: x + f(LN(x))) or after (post-norm: LN(x + f(x)))."""

    def __init__(self, pre_norm: bool, dropout: float):
        super().__init__()
        self.pre_norm = pre_norm
        self.dropout = optional_dropout(dropout)

    def enter(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The input a sub-layer computes on."""
        return norm(x) if self.pre_norm else x

    def leave(self, norm: nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The residual stream after a sub-layer whose output is `out`."""
        if self.dropout is not None:
            out = self.dropout(out)
        return x + out if self.pre_norm else norm(x + out)


class EncoderLayer(Sublayers):
    """Self-attention and feed-forward, each a residual sub-layer."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, ffn_dim: int, arch: Architecture,
                 dropout: float = 0.0):
        super().__init__(arch.pre_norm, dropout)
        self.self_attn = SelfAttention(d_model, num_heads, head_dim, arch)
        self.self_attn_layer_norm = make_norm(arch, d_model)
        self.ffn = FeedForward(d_model, ffn_dim, arch)
        self.final_layer_norm = make_norm(arch, d_model)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        norm = self.self_attn_layer_norm
        x = self.leave(norm, x, self.self_attn(self.enter(norm, x), attn_mask))
        norm = self.final_layer_norm
        return self.leave(norm, x, self.ffn(self.enter(norm, x)))


class DecoderLayer(Sublayers):
    """Causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, d_model: int, num_heads: int, head_dim: int, ffn_dim: int, arch: Architecture,
                 dropout: float = 0.0):
        super().__init__(arch.pre_norm, dropout)
        self.self_attn = SelfAttention(d_model, num_heads, head_dim, arch)
        self.self_attn_layer_norm = make_norm(arch, d_model)
        self.encoder_attn = CrossAttention(d_model, num_heads, head_dim, arch)
        self.encoder_attn_layer_norm = make_norm(arch, d_model)
        self.ffn = FeedForward(d_model, ffn_dim, arch)
        self.final_layer_norm = make_norm(arch, d_model)

    def self_attention_input(self, x: torch.Tensor) -> torch.Tensor:
        return self.enter(self.self_attn_layer_norm, x)

    def post_self_attention(self, x, attn_out, cross_k, cross_v, cross_mask):
        """Everything after the self-attention sub-layer; shared by the cached step and the full forward → the
        layer's output and the cross-attention's input (what its queries project: model.alignment reads it)."""
        x = self.leave(self.self_attn_layer_norm, x, attn_out)
        norm = self.encoder_attn_layer_norm
        queried = self.enter(norm, x)
        x = self.leave(norm, x, self.encoder_attn(queried, cross_k, cross_v, cross_mask))
        norm = self.final_layer_norm
        return self.leave(norm, x, self.ffn(self.enter(norm, x))), queried

    def forward(self, x, self_mask, cross_k, cross_v, cross_mask):
        """Teacher-forced pass over a whole target prefix (training and the no-cache oracle); self_mask None
        means plain causal attention."""
        return self.teacher_forced(x, self_mask, cross_k, cross_v, cross_mask)[0]

    def teacher_forced(self, x, self_mask, cross_k, cross_v, cross_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """forward, and the cross-attention's input (what its queries project: for its weights)."""
        return self.post_self_attention(x, self._teacher_forced_self_attention(x, self_mask), cross_k, cross_v,
                                        cross_mask)

    def cross_attention_weights(self, x, self_mask, cross_k, cross_mask) -> torch.Tensor:
        """Teacher-forced, as forward: the cross-attention weights (B, H, T, S) this layer computes on input x."""
        x = self.leave(self.self_attn_layer_norm, x, self._teacher_forced_self_attention(x, self_mask))
        return self.encoder_attn.weights(self.enter(self.encoder_attn_layer_norm, x), cross_k, cross_mask)

    def _teacher_forced_self_attention(self, x: torch.Tensor, self_mask: torch.Tensor | None) -> torch.Tensor:
        return self.self_attn(self.self_attention_input(x), self_mask, is_causal=self_mask is None)


def optional_dropout(p: float) -> nn.Dropout | None:
    """None without dropout: the layers then skip the call (an op per sub-layer on every decoder step, even in
    eval mode)."""
    return nn.Dropout(p) if p > 0 else None


def embed_scale(d_model: int, scale_embedding: bool) -> float:
    return math.sqrt(d_model) if scale_embedding else 1.0
